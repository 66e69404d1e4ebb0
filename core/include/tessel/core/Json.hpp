#ifndef TESSEL_CORE_JSON_HPP
#define TESSEL_CORE_JSON_HPP

/// \file Json.hpp
/// \brief JSON documents (nlohmann-json) read with errors that name the file and field, written atomically.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tessel {

/// \brief A JSON document whose objects keep their keys in insertion order (result files read as written).
/// Non-finite numbers are written as null.
using Json = nlohmann::ordered_json;

/// \brief Largest JSON file read_json() reads.
inline constexpr std::uint64_t max_json_bytes = std::uint64_t{1} << 30;

/// \brief Parses the file at \p path, a regular file of at most max_json_bytes (tessel::read_input_file); an
/// unreadable file, a syntax error or a key given twice in one object is a tessel::Exception naming the file and,
/// for syntax errors, the line and column, for a repeated key the key.
Json read_json(std::string const &path);

/// \brief Parses \p text as read_json() does; \p name (a file name, or what the text is) is used in messages.
Json parse_json(std::string const &text, std::string const &name);

/// \brief Writes \p document to \p path through an OutputFile (complete or absent), indented by \p indent spaces,
/// with a final newline.
void write_json(std::string const &path, Json const &document, int indent = 2);

/// \brief The member \p key of \p object; an error names \p where (the file, and the object's place in it) and the
/// key when \p object is not an object or has no such member.
Json const &json_member(Json const &object, std::string const &key, std::string const &where);

/// \brief The member \p key of \p object as a \p T (a number, bool, string or an array of them); an error names
/// \p where, the key and the expected type when it is missing or of another type.
template <class T> T json_get(Json const &object, std::string const &key, std::string const &where);

} // namespace tessel

#endif

#include <tessel/core/Error.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace tessel {

Json parse_json(std::string const &text, std::string const &name) {
  // A key given twice in one object is an error (nlohmann-json would keep the last silently): the keys of each open
  // object, innermost last, and the key under which each object was opened, for the message.
  std::vector<std::vector<std::string>> keys;
  std::vector<std::string> opened_under{""};
  std::string last_key;
  auto const check_keys = [&](int /*depth*/, Json::parse_event_t event, Json &parsed) {
    switch (event) {
    case Json::parse_event_t::object_start:
      keys.emplace_back();
      opened_under.push_back(last_key);
      break;
    case Json::parse_event_t::object_end:
      keys.pop_back();
      opened_under.pop_back();
      break;
    case Json::parse_event_t::key: {
      auto const &key = parsed.get_ref<std::string const &>();
      auto &seen = keys.back();
      TESSEL_REQUIRE(std::find(seen.begin(), seen.end(), key) == seen.end(), name, ": duplicate key '", key, "'",
                     opened_under.back().empty() ? std::string(" at the top level")
                                                 : " in the object '" + opened_under.back() + "'",
                     " (each key may appear once in an object)");
      seen.push_back(key);
      last_key = key;
      break;
    }
    default:
      break;
    }
    return true;
  };
  try {
    return Json::parse(text, check_keys);
  } catch (Json::parse_error const &e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: reason": the exception's id
    // means nothing to a user, the place and the reason do.
    std::string reason = e.what();
    if (auto const at = reason.find("parse error "); at != std::string::npos)
      reason = reason.substr(at + 12);
    TESSEL_THROW(name, ": not valid JSON ", reason);
  }
}

Json read_json(std::string const &path) { return parse_json(read_input_file(path, max_json_bytes), path); }

void write_json(std::string const &path, Json const &document, int indent) {
  // Invalid UTF-8 in a string (a file name in another encoding) is replaced rather than aborting the write.
  write_file(path, document.dump(indent, ' ', false, Json::error_handler_t::replace) + "\n");
}

Json const &json_member(Json const &object, std::string const &key, std::string const &where) {
  TESSEL_REQUIRE(object.is_object(), where, ": expected an object holding '", key, "', got ", object.type_name());
  auto const it = object.find(key);
  TESSEL_REQUIRE(it != object.end(), where, ": missing field '", key, "'");
  return *it;
}

namespace {
template <class T> char const *expected_type() {
  if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else
    return "an array";
}

template <class T> bool has_type(Json const &v) {
  if constexpr (std::is_same_v<T, bool>)
    return v.is_boolean();
  else if constexpr (std::is_integral_v<T>) {
    // Compared as the JSON holds them: 18446744073709551615 read through int64_t would be -1.
    if (v.is_number_unsigned())
      return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    if (!v.is_number_integer())
      return false;
    auto const i = v.get<std::int64_t>();
    if constexpr (std::is_signed_v<T>)
      return i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max();
    else
      return i >= 0 && static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  } else if constexpr (std::is_floating_point_v<T>)
    return v.is_number();
  else if constexpr (std::is_same_v<T, std::string>)
    return v.is_string();
  else
    return v.is_array() &&
           std::all_of(v.begin(), v.end(), [](Json const &e) { return has_type<typename T::value_type>(e); });
}
} // namespace

template <class T> T json_get(Json const &object, std::string const &key, std::string const &where) {
  Json const &v = json_member(object, key, where);
  TESSEL_REQUIRE(has_type<T>(v), where, ": field '", key, "' expects ", expected_type<T>(), ", got ", v.dump());
  return v.get<T>();
}

template bool json_get<bool>(Json const &, std::string const &, std::string const &);
template int json_get<int>(Json const &, std::string const &, std::string const &);
template std::int64_t json_get<std::int64_t>(Json const &, std::string const &, std::string const &);
template double json_get<double>(Json const &, std::string const &, std::string const &);
template std::string json_get<std::string>(Json const &, std::string const &, std::string const &);
template std::vector<int> json_get<std::vector<int>>(Json const &, std::string const &, std::string const &);
template std::vector<double> json_get<std::vector<double>>(Json const &, std::string const &, std::string const &);
template std::vector<std::string> json_get<std::vector<std::string>>(Json const &, std::string const &,
                                                                     std::string const &);

} // namespace tessel

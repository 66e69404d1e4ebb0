#ifndef TESSEL_SCHED_IMPL_JSON_HPP
#define TESSEL_SCHED_IMPL_JSON_HPP

// A small JSON reader for the Crius input files (dp_mem.json, sim_cluster_spec.json, device_infos.json). Values
// are kept in a tree; errors name the file and the byte offset.

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tessel::sched::Impl {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object; // file order

  JsonValue const *find(std::string const &key) const;
};

/// Parses \p text; \p name is used in messages.
JsonValue parse_json(std::string const &text, std::string const &name);
/// Reads and parses the file at \p path.
JsonValue read_json(std::string const &path);

} // namespace tessel::sched::Impl

#endif

#include <tessel/core/Csv.hpp>
#include <tessel/core/Error.hpp>

namespace tessel {

std::vector<std::string> split_csv_record(std::string_view line, std::string_view where) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char const c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(field);
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  TESSEL_REQUIRE(!quoted, where, ": unterminated quoted field");
  out.push_back(field);
  return out;
}

} // namespace tessel

#include <tessel/core/Csv.hpp>
#include <tessel/core/Error.hpp>

#include <algorithm>

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

CsvReader::CsvReader(std::string path, std::uint64_t max_bytes)
    : _path(std::move(path)), _text(read_input_file(_path, max_bytes, "CSV file")) {
  if (_text.compare(0, 3, "\xEF\xBB\xBF") == 0)
    _pos = 3;
}

bool CsvReader::next(std::vector<std::string> &fields) {
  while (_pos < _text.size()) {
    auto const end = std::min(_text.find('\n', _pos), _text.size());
    _record = std::string_view(_text).substr(_pos, end - _pos);
    _pos = end + 1;
    ++_line;
    if (_record.find_first_not_of(" \t\r") == std::string_view::npos)
      continue;
    fields = split_csv_record(_record, where());
    return true;
  }
  _record = {};
  return false;
}

std::string CsvReader::where() const { return Impl::concat("file '", _path, "' line ", _line); }

} // namespace tessel

#include "Csv.hpp"

#include <tessel/core/Csv.hpp>
#include <tessel/core/Error.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessel::sched::Impl {

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\n'))
    ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n'))
    --e;
  return std::string(s.substr(b, e - b));
}

CsvTable CsvTable::read(std::string const &path) {
  std::ifstream in(path);
  TESSEL_REQUIRE(in.good(), "cannot open CSV file '", path, "'");
  CsvTable t;
  t._path = path;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string const stripped = trim(line);
    if (stripped.empty() || stripped[0] == '#')
      continue;
    auto fields = split_csv_record(stripped, tessel::Impl::concat("CSV file '", path, "' line ", line_no));
    for (auto &f : fields)
      f = trim(f);
    if (t._header.empty()) {
      t._header = std::move(fields);
      continue;
    }
    TESSEL_REQUIRE(fields.size() == t._header.size(), path, ":", line_no, ": expected ", t._header.size(),
                   " comma-separated fields (header: ", stripped.size() ? t._header.front() : "", "...), got ",
                   fields.size());
    t._rows.push_back(std::move(fields));
    t._lines.push_back(line_no);
  }
  TESSEL_REQUIRE(!t._header.empty(), "CSV file '", path, "' is empty (no header line)");
  return t;
}

int CsvTable::column(std::string_view name) const {
  for (std::size_t i = 0; i < _header.size(); ++i)
    if (_header[i] == name)
      return static_cast<int>(i);
  return -1;
}

int CsvTable::require_column(std::string_view name) const {
  int const c = column(name);
  if (c < 0) {
    std::ostringstream cols;
    for (std::size_t i = 0; i < _header.size(); ++i)
      cols << (i ? "," : "") << _header[i];
    TESSEL_THROW(_path, ": missing column '", name, "' (header has: ", cols.str(), ")");
  }
  return c;
}

std::string const &CsvTable::cell(std::size_t r, int c) const { return _rows.at(r).at(static_cast<std::size_t>(c)); }

std::string CsvTable::where(std::size_t r, int c) const {
  std::ostringstream os;
  os << _path << ":" << _lines.at(r) << ", column '" << _header.at(static_cast<std::size_t>(c)) << "'";
  return os.str();
}

long long CsvTable::integer(std::size_t r, int c) const {
  std::string const &s = cell(r, c);
  TESSEL_REQUIRE(!s.empty(), where(r, c), ": empty field, expected an integer");
  char *end = nullptr;
  errno = 0;
  long long const v = std::strtoll(s.c_str(), &end, 10);
  if (end && *end == '\0' && errno == 0)
    return v;
  // Accept integral values written as reals ("300.0").
  double const d = std::strtod(s.c_str(), &end);
  TESSEL_REQUIRE(end && *end == '\0' && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18, where(r, c),
                 ": '", s, "' is not an integer");
  return static_cast<long long>(d);
}

double CsvTable::real(std::size_t r, int c) const {
  std::string const &s = cell(r, c);
  TESSEL_REQUIRE(!s.empty(), where(r, c), ": empty field, expected a number");
  char *end = nullptr;
  double const v = std::strtod(s.c_str(), &end);
  TESSEL_REQUIRE(end && *end == '\0', where(r, c), ": '", s, "' is not a number");
  return v;
}

} // namespace tessel::sched::Impl

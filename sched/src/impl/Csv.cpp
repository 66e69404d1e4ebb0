#include "Csv.hpp"

#include <tessel/core/Csv.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Numbers.hpp>

#include <cctype>
#include <cmath>
#include <limits>
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
  // A regular file of bounded size (a device or a named pipe is refused), a leading byte-order mark dropped.
  CsvReader reader(path);
  CsvTable t;
  t._path = path;
  std::vector<std::string> fields;
  while (reader.next(fields)) {
    std::string const stripped = trim(reader.text());
    if (stripped[0] == '#')
      continue;
    for (auto &f : fields)
      f = trim(f);
    if (t._header.empty()) {
      t._header = std::move(fields);
      continue;
    }
    TESSEL_REQUIRE(fields.size() == t._header.size(), path, ":", reader.line(), ": expected ", t._header.size(),
                   " comma-separated fields (header: ", t._header.front(), "...), got ", fields.size());
    t._rows.push_back(std::move(fields));
    t._lines.push_back(reader.line());
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
  if (auto const v = parse_decimal_int(s))
    return *v;
  // Integral values written as reals ("300.0") are integers too; hexadecimal ("0x10") is not.
  auto const d = parse_decimal(s);
  TESSEL_REQUIRE(d && *d == std::floor(*d) && std::fabs(*d) < 9e18, where(r, c), ": '", s,
                 "' is not an integer (decimal digits only)");
  return static_cast<long long>(*d);
}

double CsvTable::real(std::size_t r, int c) const {
  std::string const &s = cell(r, c);
  TESSEL_REQUIRE(!s.empty(), where(r, c), ": empty field, expected a number");
  if (auto const v = parse_decimal(s))
    return *v;
  // The profile tables mark plans that cannot run with inf and nan, as Python writes them.
  std::string lower;
  for (char ch : s)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "inf" || lower == "+inf" || lower == "infinity")
    return std::numeric_limits<double>::infinity();
  if (lower == "-inf" || lower == "-infinity")
    return -std::numeric_limits<double>::infinity();
  TESSEL_REQUIRE(lower == "nan", where(r, c), ": '", s, "' is not a number (decimal, or inf or nan)");
  return std::numeric_limits<double>::quiet_NaN();
}

} // namespace tessel::sched::Impl

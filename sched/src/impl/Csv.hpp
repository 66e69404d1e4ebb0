#ifndef TESSEL_SCHED_IMPL_CSV_HPP
#define TESSEL_SCHED_IMPL_CSV_HPP

// Minimal CSV reading for the sched package's text inputs (traces, cluster specs, profile tables). Every
// conversion error names the file, the 1-based line and the column.

#include <string>
#include <string_view>
#include <vector>

namespace tessel::sched::Impl {

class CsvTable {
public:
  /// Reads \p path (tessel::CsvReader: a bounded regular file, a byte-order mark dropped); the first non-empty line
  /// is the header. Lines starting with '#' are comments. Numbers are decimal (no hexadecimal).
  static CsvTable read(std::string const &path);

  std::string const &path() const { return _path; }
  std::vector<std::string> const &header() const { return _header; }
  std::size_t rows() const { return _rows.size(); }
  /// Column index of \p name, or -1.
  int column(std::string_view name) const;
  /// Column index of \p name; throws naming the file and the missing column when absent.
  int require_column(std::string_view name) const;
  /// Source line (1-based) of row \p r.
  int line(std::size_t r) const { return _lines[r]; }
  std::string const &cell(std::size_t r, int c) const;

  long long integer(std::size_t r, int c) const;
  double real(std::size_t r, int c) const;
  /// "file:line, column 'name'" for messages.
  std::string where(std::size_t r, int c) const;

private:
  std::string _path;
  std::vector<std::string> _header;
  std::vector<std::vector<std::string>> _rows;
  std::vector<int> _lines;
};

std::string trim(std::string_view s);

} // namespace tessel::sched::Impl

#endif

#ifndef TESSEL_CORE_CSV_HPP
#define TESSEL_CORE_CSV_HPP

/// \file Csv.hpp
/// \brief CSV records for the packages' and tools' text inputs (traces, cluster specs, profile tables, edge lists),
/// so that every reader takes quoted fields, byte-order marks and oversized or non-regular files the same way.

#include <tessel/core/InputFile.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

/// \brief The fields of one CSV record (RFC 4180: quoted fields may hold commas, quotes are doubled; a record is
/// one line, a carriage return is dropped). An unterminated quoted field throws tessel::Exception naming \p where (e.g.
/// "file 'edges.csv' line 12").
std::vector<std::string> split_csv_record(std::string_view line, std::string_view where);

/// \brief The records of a CSV file, one per line that holds more than blanks.
///
/// The file is read whole through tessel::read_input_file (a regular file of at most \p max_bytes: a device, a
/// named pipe or a folder is refused naming it). A UTF-8 byte-order mark before the first line, which spreadsheets
/// write, is dropped, so that the header's first column keeps its name.
class CsvReader {
public:
  /// Reads the file at \p path (at most \p max_bytes); errors name the file.
  explicit CsvReader(std::string path, std::uint64_t max_bytes = default_max_input_bytes);

  /// The next record's fields, or false at the end of the file. Lines holding only blanks are skipped.
  bool next(std::vector<std::string> &fields);
  /// The record's line as it is in the file (without its end of line), for readers that treat some lines apart.
  std::string_view text() const { return _record; }
  /// 1-based line of the last record returned by next().
  int line() const { return _line; }
  /// The file read.
  std::string const &path() const { return _path; }
  /// "file 'PATH' line N" for messages about the last record.
  std::string where() const;

private:
  std::string _path;
  std::string _text;
  std::size_t _pos = 0;
  int _line = 0;
  std::string_view _record;
};

} // namespace tessel

#endif

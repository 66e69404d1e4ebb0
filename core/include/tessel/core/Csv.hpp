#ifndef TESSEL_CORE_CSV_HPP
#define TESSEL_CORE_CSV_HPP

// CSV records for the converters of the packages' text inputs (traces, cluster specs, edge lists), so that every
// package reads quoted fields the same way.

#include <string>
#include <string_view>
#include <vector>

namespace tessel {

/// \brief The fields of one CSV record (RFC 4180: quoted fields may hold commas, quotes are doubled; a record is
/// one line, '\r' is dropped). An unterminated quoted field throws tessel::Exception naming \p where (e.g.
/// "file 'edges.csv' line 12").
std::vector<std::string> split_csv_record(std::string_view line, std::string_view where);

} // namespace tessel

#endif

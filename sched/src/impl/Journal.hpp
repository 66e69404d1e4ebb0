#ifndef TESSEL_SCHED_IMPL_JOURNAL_HPP
#define TESSEL_SCHED_IMPL_JOURNAL_HPP

// An append-only file of JSON records, one per line. append() returns only after the record is on the disk
// (written under an exclusive lock, then fsync), so a submit that returned is never lost and two writers never
// interleave; read() returns whole lines only, so a record being written is read next time.

#include <tessel/core/Json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::sched::Impl {

class Journal {
public:
  explicit Journal(std::string path) : _path(std::move(path)) {}
  std::string const &path() const { return _path; }
  /// Appends \p record and syncs it; throws naming the file on any failure (a full disk: nothing is appended).
  void append(Json const &record) const;
  /// Records from byte \p offset on; \p offset moves past them. A malformed line is an error naming the line.
  std::vector<Json> read(std::uint64_t &offset) const;

private:
  std::string _path;
};

} // namespace tessel::sched::Impl

#endif

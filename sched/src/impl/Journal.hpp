#ifndef TESSEL_SCHED_IMPL_JOURNAL_HPP
#define TESSEL_SCHED_IMPL_JOURNAL_HPP

// An append-only file of JSON records, one per line. append() returns only after the record is on the disk
// (written under an exclusive lock, then fsync), so a submit that returned is never lost and two writers never
// interleave; a record cut by a writer that was killed is closed with a newline by the next append, so the next
// record is never glued onto it. read() returns whole lines only, so a record being written is read next time; a
// line that is not a JSON record is skipped and reported, never stops the reader.

#include <tessel/core/Json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::sched::Impl {

class Journal {
public:
  /// The largest record a journal takes (a job spec with a command of up to 1 MiB fits).
  static constexpr std::size_t kMaxRecord = 2u << 20;

  struct Read {
    std::vector<Json> records;
    std::vector<std::string> errors; ///< each skipped line: where and why
  };

  explicit Journal(std::string path) : _path(std::move(path)) {}
  std::string const &path() const { return _path; }
  /// Appends \p record and syncs it; throws naming the file on any failure (a full disk: nothing is appended).
  void append(Json const &record) const;
  /// Records from byte \p offset on (at most \p max_bytes of them); \p offset moves past them. The journal must be a
  /// regular file (not a link, FIFO or device): anything else is an error naming it.
  Read read(std::uint64_t &offset, std::size_t max_bytes = 64u << 20) const;

private:
  std::string _path;
};

} // namespace tessel::sched::Impl

#endif

#ifndef TESSEL_CORE_OUTPUTFILE_HPP
#define TESSEL_CORE_OUTPUTFILE_HPP

/// \file OutputFile.hpp
/// \brief Files that appear complete or not at all: every write checked, synced, then renamed into place.

#include <sstream>
#include <string>

namespace tessel {

/// \brief A file written so that it appears complete or not at all.
///
/// Writes go to a temporary file beside the target (the same directory, so the final rename is atomic). commit()
/// writes the stream's text, checks that every byte reached the file, syncs it to the disk, closes it, and renames
/// it into place. Any failure (a full or read-only filesystem, a missing directory) is a tessel::Exception naming
/// the target and the system's reason, and leaves whatever was at the target untouched; a temporary that was not
/// committed is removed. A target that exists and is not a regular file (a device such as /dev/stdout, a pipe) is
/// written directly, with the same checks.
class OutputFile {
public:
  /// Creates the temporary file at once, so that an unwritable directory fails before any work is done.
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(OutputFile const &) = delete;
  OutputFile &operator=(OutputFile const &) = delete;

  /// The target.
  std::string const &path() const { return _path; }
  /// Where writers that open files themselves (HDF5) write before commit() (the target for devices and pipes).
  std::string const &temporary_path() const { return _temporary; }
  /// Text written here goes to the file in commit().
  std::ostream &stream() { return _text; }
  /// Writes, syncs, closes and renames into place; throws naming the target on any failure.
  void commit();
  /// True once commit() succeeded.
  bool committed() const { return _committed; }

private:
  std::string _path;
  std::string _temporary;
  std::ostringstream _text;
  bool _direct = false;
  bool _committed = false;
  int _slot = -1; // in the registry of live temporaries (remove_output_temporaries)
};

/// \brief Removes the temporary file of every OutputFile alive in this process (h5::File's new files included), so
/// that a process ended by a signal leaves no hidden partial file behind. Async-signal-safe: for signal handlers,
/// which then end the process (tessel::run_tool installs one for SIGINT, SIGTERM and SIGHUP); the OutputFiles must
/// not be used afterwards.
void remove_output_temporaries() noexcept;

/// \brief Fails now, naming \p path and the reason, when a file cannot be written there (a missing or read-only
/// directory), so that a tool stops before its work instead of after it. Creates nothing.
void require_writable(std::string const &path);

/// \brief Writes \p text to \p path through an OutputFile.
void write_file(std::string const &path, std::string const &text);

} // namespace tessel

#endif

#ifndef TESSEL_CORE_INPUTFILE_HPP
#define TESSEL_CORE_INPUTFILE_HPP

/// \file InputFile.hpp
/// \brief Bounded reads: every file Tessel reads is checked to be a regular file of a bounded size before a byte of
/// it is read, so that a device (/dev/zero, /dev/full), a named pipe or a directory given as an input is refused with
/// a clear error instead of filling the memory or blocking the reader.

#include <cstdint>
#include <string>

namespace tessel {

/// \brief Default bound of read_input_file(): larger text inputs are refused naming their size.
inline constexpr std::uint64_t default_max_input_bytes = std::uint64_t{16} << 30;

/// \brief What an input may be besides a regular file.
enum class InputKind {
  regular_file, ///< a regular file (after symlinks), the default
  stream        ///< also a pipe, FIFO or character device (standard input, `-`): read up to the bound, may block
};

/// \brief Checks that \p path names a regular file (after symlinks) of at most \p max_bytes bytes, without reading
/// it, and returns its size. The file is opened without blocking, so a named pipe is refused rather than waited on.
/// Errors (tessel::Exception) name the file and what it is: missing, a directory, a named pipe, a device, a socket,
/// larger than \p max_bytes, or unreadable (the system's reason). \p what ("JSON file", "tuning registry"), when
/// given, says what the file was meant to be.
std::uint64_t require_input_file(std::string const &path, std::uint64_t max_bytes = default_max_input_bytes,
                                 std::string const &what = {});

/// \brief The whole contents of the input at \p path, checked as require_input_file() checks it (for
/// InputKind::stream, any readable file, read up to \p max_bytes), and within the memory of this machine. A file
/// that grows past \p max_bytes while it is read is refused too.
std::string read_input_file(std::string const &path, std::uint64_t max_bytes = default_max_input_bytes,
                            std::string const &what = {}, InputKind kind = InputKind::regular_file);

/// \brief Whether something exists at \p path (any kind of file), without opening it: for "use the file when it is
/// there" decisions, which must not block on a named pipe; the reader then checks what it is.
bool input_exists(std::string const &path);

} // namespace tessel

#endif

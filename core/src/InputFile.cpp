#include <tessel/core/Error.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Memory.hpp>

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessel {

namespace {

// "tuning registry 'PATH'" or "'PATH'": the file as messages name it.
std::string subject(std::string const &path, std::string const &what) {
  return (what.empty() ? "" : what + " ") + "'" + path + "'";
}

char const *kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a named pipe (FIFO)";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "an unknown kind of file";
}

// Closes the descriptor on scope exit.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0)
      ::close(fd);
  }
};

struct Opened {
  bool regular;       // a regular file (else an accepted stream)
  std::uint64_t size; // of a regular file
};

// Opens \p path without blocking (a FIFO opened for reading would wait for a writer) and checks what it is and its
// size.
Opened open_checked(Descriptor &file, std::string const &path, std::uint64_t max_bytes, std::string const &what,
                    InputKind kind) {
  TESSEL_REQUIRE(!path.empty(), what.empty() ? std::string("an input") : what, " needs a path (got an empty one)");
  file.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (file.fd < 0) {
    int const error = errno;
    std::string const reason = error == ENOENT ? "file not found" : std::strerror(error);
    if (what.empty())
      TESSEL_THROW(path, ": cannot open the file for reading (", reason, ")");
    TESSEL_THROW("cannot open ", subject(path, what), ": ", reason);
  }
  struct stat st;
  TESSEL_REQUIRE(::fstat(file.fd, &st) == 0, subject(path, what), " cannot be read (", std::strerror(errno), ")");
  bool const stream = S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode);
  if (!S_ISREG(st.st_mode) && !(kind == InputKind::stream && stream))
    TESSEL_THROW(subject(path, what), " is not a regular file: it is ", kind_of(st.st_mode),
                 " (inputs are read from regular files, so that a device cannot fill the memory and a pipe cannot ",
                 "block the reader)");
  if (!S_ISREG(st.st_mode))
    return {false, 0};
  auto const size = static_cast<std::uint64_t>(st.st_size);
  TESSEL_REQUIRE(size <= max_bytes, subject(path, what), " holds ", size, " bytes (",
                 format_bytes(static_cast<double>(size)), "), more than the ", max_bytes,
                 " bytes such an input may hold");
  return {true, size};
}

} // namespace

std::uint64_t require_input_file(std::string const &path, std::uint64_t max_bytes, std::string const &what) {
  Descriptor file;
  return open_checked(file, path, max_bytes, what, InputKind::regular_file).size;
}

std::string read_input_file(std::string const &path, std::uint64_t max_bytes, std::string const &what, InputKind kind) {
  Descriptor file;
  auto const [regular, size] = open_checked(file, path, max_bytes, what, kind);
  if (regular)
    require_memory("reading " + path, static_cast<double>(size), SizeSource::input);
  // An accepted stream waits for its writer as a reader of standard input does. A regular file stays non-blocking:
  // some (/proc/kmsg) have no end and wait for data that may never come; they fail below instead (EAGAIN).
  if (!regular)
    ::fcntl(file.fd, F_SETFL, ::fcntl(file.fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  text.reserve(regular ? static_cast<std::size_t>(size) : 0);
  char buffer[1 << 16];
  while (true) {
    ssize_t const n = ::read(file.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    TESSEL_REQUIRE(n >= 0 || errno != EAGAIN, subject(path, what),
                   " has no data to read now (a file of the kernel that waits for data: read a regular file)");
    TESSEL_REQUIRE(n >= 0, subject(path, what), ": read error (", std::strerror(errno), ")");
    if (n == 0)
      break;
    TESSEL_REQUIRE(text.size() + static_cast<std::size_t>(n) <= max_bytes, subject(path, what), " holds more than the ",
                   max_bytes, " bytes such an input may hold");
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

bool input_exists(std::string const &path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

} // namespace tessel

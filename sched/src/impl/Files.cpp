#include "Files.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/OutputFile.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessel::sched::Impl {

namespace {

std::string what_is(struct stat const &st) {
  if (S_ISLNK(st.st_mode))
    return "a symbolic link";
  if (S_ISFIFO(st.st_mode))
    return "a FIFO";
  if (S_ISDIR(st.st_mode))
    return "a folder";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    return "a device";
  if (S_ISSOCK(st.st_mode))
    return "a socket";
  return "not a regular file";
}

std::string parent_of(std::string const &path) {
  auto const slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// Reads the open regular file \p fd of \p path, at most \p max_bytes.
std::string read_bounded(int fd, std::string const &path, std::size_t max_bytes) {
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  TESSEL_REQUIRE(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), path, " is ", what_is(st),
                 ", not a regular file: not read");
  TESSEL_REQUIRE(static_cast<std::size_t>(st.st_size) <= max_bytes, path, " has ", st.st_size, " bytes, more than the ",
                 max_bytes, " such a file may have: not read");
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t const n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    TESSEL_REQUIRE(n >= 0, path, ": read error: ", std::strerror(errno));
    if (n == 0)
      break;
    text.append(buffer, static_cast<std::size_t>(n));
    TESSEL_REQUIRE(text.size() <= max_bytes, path, " grew past the ", max_bytes,
                   " bytes such a file may have while it was read: not read");
  }
  return text;
}

} // namespace

StateFileText read_state_file(std::string const &path, std::size_t max_bytes) {
  StateFileText out;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    TESSEL_REQUIRE(errno == ENOENT, path, ": cannot read: ", std::strerror(errno));
    return out;
  }
  TESSEL_REQUIRE(S_ISREG(st.st_mode), path, " is ", what_is(st), ", not a regular file: not read");
  // O_NOFOLLOW and O_NONBLOCK: a link or FIFO put there since the check is neither followed nor waited on.
  int const fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  TESSEL_REQUIRE(fd >= 0, path, ": cannot read: ", std::strerror(errno));
  out.text = read_bounded(fd, path, max_bytes);
  out.exists = true;
  return out;
}

Json read_state_json(std::string const &path, std::size_t max_bytes) {
  StateFileText const f = read_state_file(path, max_bytes);
  TESSEL_REQUIRE(f.exists, path, ": no such file");
  return parse_json(f.text, path);
}

std::string not_a_folder(std::string const &path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return path + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode))
    return path + " is " + what_is(st) + ", not a folder";
  return {};
}

void remove_unless_regular(std::string const &path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode))
    return;
  TESSEL_REQUIRE(!S_ISDIR(st.st_mode), "cannot write ", path, ": it is a folder");
  // Not ours to write through: the link (or FIFO) goes, the file takes its place.
  TESSEL_REQUIRE(::unlink(path.c_str()) == 0 || errno == ENOENT, "cannot replace ", path, " (", what_is(st),
                 "): ", std::strerror(errno));
}

void write_state_text(std::string const &path, std::string const &text) {
  std::string const folder = not_a_folder(parent_of(path));
  TESSEL_REQUIRE(folder.empty(), "cannot write ", path, ": ", folder);
  remove_unless_regular(path);
  write_file(path, text);
}

void write_state_json(std::string const &path, Json const &doc) {
  write_state_text(path, doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

std::string make_state_dir(std::string const &base, std::string const &name) {
  TESSEL_REQUIRE(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                 "invalid folder name '", name, "' in ", base);
  std::string const path = base + "/" + name;
  if (::mkdir(path.c_str(), 0755) != 0)
    TESSEL_REQUIRE(errno == EEXIST, "cannot create folder ", path, ": ", std::strerror(errno));
  std::string const why = not_a_folder(path);
  TESSEL_REQUIRE(why.empty(), why, ": refusing to write through it");
  return path;
}

} // namespace tessel::sched::Impl

#include "../impl/Journal.hpp"

#include <tessel/core/Error.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessel::sched::Impl {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      close(fd);
  }
};

void sync_directory(std::string const &path) {
  auto const slash = path.find_last_of('/');
  std::string const dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  Fd d{open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
  if (d.fd >= 0)
    (void)fsync(d.fd);
}

} // namespace

void Journal::append(Json const &record) const {
  std::string const line = record.dump() + "\n";
  struct stat st {};
  bool const existed = stat(_path.c_str(), &st) == 0;
  Fd f{open(_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)};
  TESSEL_REQUIRE(f.fd >= 0, "cannot open journal ", _path, ": ", std::strerror(errno));
  TESSEL_REQUIRE(flock(f.fd, LOCK_EX) == 0, "cannot lock journal ", _path, ": ", std::strerror(errno));
  off_t const before = lseek(f.fd, 0, SEEK_END);
  std::size_t done = 0;
  while (done < line.size()) {
    ssize_t const n = write(f.fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int const err = errno;
      // Leave no partial record behind (a full disk): the journal stays as it was.
      if (before >= 0)
        (void)ftruncate(f.fd, before);
      TESSEL_REQUIRE(false, "cannot append to journal ", _path, ": ", std::strerror(err), "; nothing was recorded");
    }
    done += static_cast<std::size_t>(n);
  }
  if (fsync(f.fd) != 0) {
    int const err = errno;
    if (before >= 0)
      (void)ftruncate(f.fd, before);
    TESSEL_REQUIRE(false, "cannot sync journal ", _path, ": ", std::strerror(err), "; nothing was recorded");
  }
  if (!existed)
    sync_directory(_path);
}

std::vector<Json> Journal::read(std::uint64_t &offset) const {
  std::vector<Json> records;
  Fd f{open(_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    TESSEL_REQUIRE(errno == ENOENT, "cannot read journal ", _path, ": ", std::strerror(errno));
    return records;
  }
  struct stat st {};
  TESSEL_REQUIRE(fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), "journal ", _path,
                 " is not a regular file (a journal is a file the controller and submit append to)");
  std::string text;
  char buffer[65536];
  if (lseek(f.fd, static_cast<off_t>(offset), SEEK_SET) < 0)
    return records;
  for (;;) {
    ssize_t const n = ::read(f.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    TESSEL_REQUIRE(n >= 0, "cannot read journal ", _path, ": ", std::strerror(errno));
    if (n == 0)
      break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  std::size_t pos = 0;
  for (;;) {
    auto const end = text.find('\n', pos);
    if (end == std::string::npos)
      break;
    std::string const line = text.substr(pos, end - pos);
    if (!line.empty())
      records.push_back(parse_json(line, _path + " at byte " + std::to_string(offset + pos)));
    pos = end + 1;
  }
  offset += pos;
  return records;
}

} // namespace tessel::sched::Impl

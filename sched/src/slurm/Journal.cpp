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

// Opens the journal without following a link or waiting on a FIFO, and checks that it is a regular file.
int open_journal(std::string const &path, int flags) {
  int const fd = open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    TESSEL_REQUIRE(errno != ELOOP, "journal ", path, " is a symbolic link: not followed");
    return fd;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    TESSEL_THROW("journal ", path, " is not a regular file (a journal is a file the controller and submit append to)");
  }
  return fd;
}

bool write_all(int fd, std::string const &text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t const n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

} // namespace

void Journal::append(Json const &record) const {
  std::string line = record.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  TESSEL_REQUIRE(line.size() <= kMaxRecord, "a record of ", line.size(), " bytes is larger than journal ", _path,
                 " takes (", kMaxRecord, ")");
  struct stat st {};
  bool const existed = lstat(_path.c_str(), &st) == 0;
  Fd f{open_journal(_path, O_RDWR | O_APPEND | O_CREAT)};
  TESSEL_REQUIRE(f.fd >= 0, "cannot open journal ", _path, ": ", std::strerror(errno));
  TESSEL_REQUIRE(flock(f.fd, LOCK_EX) == 0, "cannot lock journal ", _path, ": ", std::strerror(errno));
  off_t const before = lseek(f.fd, 0, SEEK_END);
  // A record cut by a writer that was killed: closed with a newline, so that this one stands on a line of its own.
  char last = '\n';
  if (before > 0 && pread(f.fd, &last, 1, before - 1) == 1 && last != '\n')
    line.insert(line.begin(), '\n');
  int err = write_all(f.fd, line) ? 0 : errno;
  if (err == 0 && fsync(f.fd) != 0)
    err = errno;
  if (err != 0) {
    // Leave no partial record behind (a full disk): the journal stays as it was.
    if (before >= 0)
      (void)ftruncate(f.fd, before);
    TESSEL_THROW("cannot append to journal ", _path, ": ", std::strerror(err), "; nothing was recorded");
  }
  if (!existed)
    sync_directory(_path);
}

Journal::Read Journal::read(std::uint64_t &offset, std::size_t max_bytes) const {
  Read out;
  Fd f{open_journal(_path, O_RDONLY)};
  if (f.fd < 0) {
    TESSEL_REQUIRE(errno == ENOENT, "cannot read journal ", _path, ": ", std::strerror(errno));
    return out;
  }
  std::string text;
  char buffer[65536];
  if (lseek(f.fd, static_cast<off_t>(offset), SEEK_SET) < 0)
    return out;
  while (text.size() < max_bytes) {
    ssize_t const n = ::read(f.fd, buffer, std::min(sizeof buffer, max_bytes - text.size()));
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
    std::string const where = _path + " at byte " + std::to_string(offset + pos);
    if (end - pos > kMaxRecord) {
      out.errors.push_back(tessel::Impl::concat(where, ": a line of ", end - pos, " bytes, more than a record has (",
                                                kMaxRecord, "): skipped"));
    } else if (end > pos) {
      try {
        Json record = parse_json(text.substr(pos, end - pos), where);
        if (record.is_object())
          out.records.push_back(std::move(record));
        else
          out.errors.push_back(where + ": a record is a JSON object, got " + record.type_name() + ": skipped");
      } catch (tessel::Exception const &e) {
        out.errors.push_back(std::string(e.what()) + ": skipped");
      }
    }
    pos = end + 1;
  }
  // A line longer than a whole read has no end in it: skipped up to where the read stopped.
  if (pos == 0 && text.size() >= max_bytes) {
    out.errors.push_back(
        tessel::Impl::concat(_path, " at byte ", offset, ": no line end in ", text.size(), " bytes: skipped"));
    pos = text.size();
  }
  offset += pos;
  return out;
}

} // namespace tessel::sched::Impl

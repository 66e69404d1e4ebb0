#include <tessel/core/Error.hpp>
#include <tessel/core/OutputFile.hpp>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessel {

namespace {

std::atomic<unsigned> temporary_counter{0};

// The temporaries of the OutputFiles alive in this process, for remove_output_temporaries() (called from signal
// handlers): fixed slots, so that the handler reads no memory another thread may be freeing. A slot is free (0),
// being written (1) or live (2); a path that does not fit or finds no free slot is simply not registered.
constexpr int temporary_slots = 64;
constexpr std::size_t temporary_path_bytes = 4096;
std::atomic<int> slot_state[temporary_slots];
char slot_path[temporary_slots][temporary_path_bytes];

int register_temporary(std::string const &path) {
  if (path.size() >= temporary_path_bytes)
    return -1;
  for (int i = 0; i < temporary_slots; ++i) {
    int expected = 0;
    if (slot_state[i].compare_exchange_strong(expected, 1)) {
      std::memcpy(slot_path[i], path.c_str(), path.size() + 1);
      slot_state[i].store(2);
      return i;
    }
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0)
    slot_state[slot].store(0);
}

std::string reason() { return std::strerror(errno); }

std::string directory_of(std::string const &path) {
  auto const slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Writes all of [data, data + size) to \p fd, through short writes and signals.
bool write_all(int fd, char const *data, std::size_t size) {
  while (size > 0) {
    ssize_t const n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

} // namespace

OutputFile::OutputFile(std::string path) : _path(std::move(path)) {
  TESSEL_REQUIRE(!_path.empty(), "an output file needs a path");
  struct stat st;
  _direct = ::stat(_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  if (_direct) {
    TESSEL_REQUIRE(!S_ISDIR(st.st_mode), "cannot write '", _path, "': it is a directory");
    _temporary = _path;
    return;
  }
  auto const slash = _path.rfind('/');
  std::string const base = slash == std::string::npos ? _path : _path.substr(slash + 1);
  _temporary = (slash == std::string::npos ? std::string() : _path.substr(0, slash + 1)) + "." + base + ".tmp-" +
               std::to_string(::getpid()) + "-" + std::to_string(temporary_counter++);
  // Registered before it exists, so that no moment leaves it behind a signal.
  _slot = register_temporary(_temporary);
  int const fd = ::open(_temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    std::string const why = reason();
    unregister_temporary(_slot);
    TESSEL_THROW("cannot write '", _path, "': ", why);
  }
  ::close(fd);
}

OutputFile::~OutputFile() {
  if (!_committed && !_direct)
    std::remove(_temporary.c_str());
  unregister_temporary(_slot);
}

void OutputFile::commit() {
  TESSEL_REQUIRE(!_committed, "'", _path, "' was already written");
  std::string const text = _text.str();
  int const fd = ::open(_temporary.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  TESSEL_REQUIRE(fd >= 0, "cannot write '", _path, "': ", reason());
  bool ok = write_all(fd, text.data(), text.size());
  std::string why = ok ? std::string() : reason();
  // fsync reports write-back errors (ENOSPC, EIO) that write() did not; devices and pipes cannot be synced.
  if (ok && !_direct && ::fsync(fd) != 0) {
    ok = false;
    why = reason();
  }
  struct stat st;
  if (ok && !_direct && (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(text.size()))) {
    ok = false;
    why = "the file is shorter than what was written";
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = reason();
  }
  TESSEL_REQUIRE(ok, "cannot write '", _path, "': ", why, _direct ? "" : " (nothing was written in its place)");
  if (!_direct) {
    TESSEL_REQUIRE(std::rename(_temporary.c_str(), _path.c_str()) == 0, "cannot write '", _path, "': ", reason(),
                   " (nothing was written in its place)");
    // Renamed: a signal from here on must not remove what now has that name.
    unregister_temporary(_slot);
    _slot = -1;
    // The rename itself is durable only once the directory is synced.
    int const dir = ::open(directory_of(_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  _committed = true;
}

void remove_output_temporaries() noexcept {
  for (int i = 0; i < temporary_slots; ++i)
    if (slot_state[i].load() == 2)
      ::unlink(slot_path[i]);
}

void require_writable(std::string const &path) {
  if (!path.empty())
    OutputFile probe(path); // creates the temporary beside the path and removes it
}

void write_file(std::string const &path, std::string const &text) {
  OutputFile file(path);
  file.stream() << text;
  file.commit();
}

} // namespace tessel

#include <tessel/core/Error.hpp>
#include <tessel/core/ShareDirectory.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <sys/stat.h>

// Defined for this file by core/CMakeLists.txt: the data directory relative to the library and program
// directories of an installation, the absolute one of the configured prefix, and the build tree's copy.
#ifndef TESSEL_IMPL_SHARE_FROM_LIBDIR
#define TESSEL_IMPL_SHARE_FROM_LIBDIR "../share/tessel"
#endif
#ifndef TESSEL_IMPL_SHARE_FROM_BINDIR
#define TESSEL_IMPL_SHARE_FROM_BINDIR "../share/tessel"
#endif
#ifndef TESSEL_IMPL_SHARE_INSTALLED
#define TESSEL_IMPL_SHARE_INSTALLED ""
#endif
#ifndef TESSEL_IMPL_SHARE_BUILD_TREE
#define TESSEL_IMPL_SHARE_BUILD_TREE ""
#endif

namespace tessel {

namespace {

bool is_directory(std::string const &path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(std::string const &path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The directory of the file (shared library or, when linked statically, program) that holds this function.
std::string own_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void const *>(&own_directory), &info) == 0 || info.dli_fname == nullptr)
    return {};
  std::string const path = info.dli_fname;
  auto const slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (std::string const own = own_directory(); !own.empty()) {
    out.push_back(own + "/" TESSEL_IMPL_SHARE_FROM_LIBDIR);
    out.push_back(own + "/" TESSEL_IMPL_SHARE_FROM_BINDIR);
  }
  out.emplace_back(TESSEL_IMPL_SHARE_INSTALLED);
  out.emplace_back(TESSEL_IMPL_SHARE_BUILD_TREE);
  return out;
}

} // namespace

std::string share_directory() {
  if (char const *env = std::getenv("TESSEL_SHARE_DIR"); env != nullptr && *env != '\0') {
    TESSEL_REQUIRE(is_directory(env), "TESSEL_SHARE_DIR names '", env, "', which is not a directory");
    return env;
  }
  std::string tried;
  for (auto const &dir : candidates()) {
    if (dir.empty())
      continue;
    if (is_directory(dir))
      return dir;
    tried += (tried.empty() ? "" : ", ") + dir;
  }
  TESSEL_THROW("Tessel's data files were not found (looked in ", tried,
               "); install Tessel (cmake --install) or set TESSEL_SHARE_DIR to its share/tessel directory");
}

std::string share_file(std::string const &name) {
  std::string const dir = share_directory();
  std::string const path = dir + "/" + name;
  TESSEL_REQUIRE(is_file(path), "Tessel's data file '", name, "' is not in ", dir);
  return path;
}

} // namespace tessel

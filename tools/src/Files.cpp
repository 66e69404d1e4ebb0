#include <tessel/core/Error.hpp>
#include <tessel/tools/Files.hpp>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include <dirent.h>
#include <sys/stat.h>

namespace tessel {

namespace {

// What a named path is: its device and inode where it exists (after links), else its path with its folder's links
// resolved; character devices are left out.
struct Identity {
  NamedFile file;
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string resolved;
};

std::string real_path(std::string const &path) {
  char buffer[PATH_MAX];
  return ::realpath(path.c_str(), buffer) ? std::string(buffer) : std::string();
}

// The path with its folder resolved (the file itself may not exist yet).
std::string resolved_path(std::string const &path) {
  if (auto real = real_path(path); !real.empty())
    return real;
  auto const slash = path.rfind('/');
  std::string const folder = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string const name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string const real_folder = real_path(folder);
  return real_folder.empty() ? path : (real_folder == "/" ? "/" : real_folder + "/") + name;
}

std::optional<Identity> identify(NamedFile const &file) {
  Identity id;
  id.file = file;
  struct stat st;
  if (::stat(file.path.c_str(), &st) == 0) {
    if (S_ISCHR(st.st_mode))
      return std::nullopt;
    id.exists = true;
    id.device = st.st_dev;
    id.inode = st.st_ino;
  }
  id.resolved = resolved_path(file.path);
  return id;
}

bool same_file(Identity const &a, Identity const &b) {
  if (a.exists && b.exists)
    return a.device == b.device && a.inode == b.inode;
  return !a.exists && !b.exists && a.resolved == b.resolved;
}

// The inputs, with a folder replaced by the regular files directly in it.
std::vector<Identity> input_identities(std::vector<NamedFile> const &inputs) {
  std::vector<Identity> out;
  for (auto const &file : inputs) {
    if (file.path.empty())
      continue;
    struct stat st;
    if (::stat(file.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      if (DIR *dir = ::opendir(file.path.c_str())) {
        while (dirent const *entry = ::readdir(dir)) {
          std::string const name = entry->d_name;
          std::string const path = file.path + (file.path.back() == '/' ? "" : "/") + name;
          struct stat member;
          if (name != "." && name != ".." && ::stat(path.c_str(), &member) == 0 && S_ISREG(member.st_mode))
            if (auto id = identify({file.option + " (folder '" + file.path + "')", path}))
              out.push_back(*id);
        }
        ::closedir(dir);
      }
      continue;
    }
    if (auto id = identify(file))
      out.push_back(*id);
  }
  return out;
}

} // namespace

void require_distinct_files(std::vector<NamedFile> const &inputs, std::vector<NamedFile> const &outputs) {
  auto const ins = input_identities(inputs);
  std::vector<Identity> outs;
  for (auto const &file : outputs)
    if (!file.path.empty())
      if (auto id = identify(file))
        outs.push_back(*id);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    auto const &out = outs[i].file;
    for (auto const &in : ins)
      TESSEL_REQUIRE_USAGE(!same_file(outs[i], in), out.option, " '", out.path, "' is the same file as the input ",
                           in.file.option, " '", in.file.path, "': refusing to overwrite an input (write the output ",
                           "elsewhere)");
    for (std::size_t j = 0; j < i; ++j)
      TESSEL_REQUIRE_USAGE(!same_file(outs[i], outs[j]), outs[j].file.option, " '", outs[j].file.path, "' and ",
                           out.option, " '", out.path, "' are the same file: each output needs a file of its own");
  }
}

} // namespace tessel

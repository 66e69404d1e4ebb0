#ifndef TESSEL_TOOLS_FILES_HPP
#define TESSEL_TOOLS_FILES_HPP

/// \file Files.hpp
/// \brief The files a tool names on its command line, checked before any work so that no output destroys an input
/// or another output.

#include <string>
#include <vector>

namespace tessel {

/// \brief A file a tool reads or writes: the option or argument that names it (as messages show it: "--json",
/// "OUT.h5 (second argument)") and its path (empty: not given, skipped).
struct NamedFile {
  std::string option;
  std::string path;
};

/// \brief Refuses, with a tessel::UsageError naming both options and the path, an output that is the same file as
/// an input or as another output: the same file after symbolic and hard links (device and inode) where it exists,
/// the same path after resolving its folder's links where it does not yet. An input that is a folder stands for the
/// regular files directly in it. Character devices (/dev/null, a terminal) are never the same file as anything.
/// Call it after the options are read and before any work, so that `--data G.h5 --json G.h5` stops before the graph
/// is replaced by results.
void require_distinct_files(std::vector<NamedFile> const &inputs, std::vector<NamedFile> const &outputs);

} // namespace tessel

#endif

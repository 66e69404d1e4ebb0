#ifndef TESSEL_SCHED_IMPL_FILES_HPP
#define TESSEL_SCHED_IMPL_FILES_HPP

// Reading and writing the files of a controller's state folder and of its jobs' folders. They may have been put there
// by others (a job writes its progress and checkpoint; the folder may be shared), so reads are bounded, never follow a
// symbolic link and never wait on a FIFO, and writes replace whatever is at the path (a link is replaced, not
// followed) and go only into real folders. Inputs named by the user (traces, clusters, profiles, job specs) are read
// with tessel::read_input_file.

#include <tessel/core/Json.hpp>

#include <cstddef>
#include <string>

namespace tessel::sched::Impl {

/// What read_state_file found: nothing, or the text of a regular file.
struct StateFileText {
  bool exists = false;
  std::string text;
};

/// The text of the regular file at \p path, at most \p max_bytes; {false, ""} when nothing is there. A symbolic
/// link, FIFO, device or folder at \p path, or a larger file, is an error naming the file and what is there.
StateFileText read_state_file(std::string const &path, std::size_t max_bytes);

/// The JSON document of read_state_file (an error when absent).
Json read_state_json(std::string const &path, std::size_t max_bytes);

/// Writes \p doc to \p path completely or not at all; something at \p path that is not a regular file (a link, a
/// FIFO) is removed first, never written through. The folder of \p path must be a real folder.
void write_state_json(std::string const &path, Json const &doc);

/// write_state_json for a text.
void write_state_text(std::string const &path, std::string const &text);

/// Removes what is at \p path unless it is a regular file (a link planted where a file will be written).
void remove_unless_regular(std::string const &path);

/// Creates the folder \p base / \p name (one level, \p name without '/') if needed; an error when something other
/// than a real folder is there (a symbolic link to elsewhere, a file). Returns its path.
std::string make_state_dir(std::string const &base, std::string const &name);

/// Why \p path is not a real folder (empty when it is).
std::string not_a_folder(std::string const &path);

} // namespace tessel::sched::Impl

#endif

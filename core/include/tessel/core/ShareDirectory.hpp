#ifndef TESSEL_CORE_SHAREDIRECTORY_HPP
#define TESSEL_CORE_SHAREDIRECTORY_HPP

/// \file ShareDirectory.hpp
/// \brief Where the data files Tessel installs are (`<prefix>/share/tessel`: sched's cluster descriptions in
/// `sched/clusters/*.csv`, moe's tuning registry in `moe/host.registry`), for programs that use them.

#include <string>

namespace tessel {

/// \brief The directory of Tessel's installed data files.
///
/// The environment variable `TESSEL_SHARE_DIR`, when set, names it. Otherwise it is looked for, in order:
/// `share/tessel` beside the installation the running libtessel_core belongs to (found from the library's own location,
/// so an installation that was moved elsewhere still finds its files); the installation prefix Tessel was configured
/// with; the build tree, for programs that run uninstalled. The first that exists is returned.
/// \throws tessel::Exception naming the places looked in when none exists, or when `TESSEL_SHARE_DIR` names
/// something that is not a directory.
std::string share_directory();

/// \brief The path of the installed data file \p name, relative to share_directory() (for example
/// `"sched/clusters/hetero_64.csv"`).
/// \throws tessel::Exception naming the file and the directory when the file does not exist there.
std::string share_file(std::string const &name);

} // namespace tessel

#endif

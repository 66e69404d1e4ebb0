#ifndef TESSEL_TOOLS_TOOL_HPP
#define TESSEL_TOOLS_TOOL_HPP

/// \file Tool.hpp
/// \brief The one way Tessel's command-line tools start, fail and end: exit statuses, error messages and the
/// end of a job on every rank.

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/core/Memory.hpp>
#include <tessel/tools/CommandLine.hpp>

#include <functional>
#include <string>

namespace tessel {

/// \brief Runs a tool: the body of every Tessel tool's main(). tessel::run_main (same start, error messages,
/// exit statuses and end of the job on every rank) with the tools' conventions added: `--help`/`-h` reach the tool
/// rather than Kokkos, `--debug` adds source locations to error messages (debug_messages()), under MPI every rank
/// must have been given the same arguments (a usage error otherwise), SIGINT, SIGTERM and SIGHUP remove the
/// temporaries of the outputs being written before they end the process (tessel::remove_output_temporaries), and
/// \p body gets the remaining arguments as a CommandLine. Sizes derived from options are checked with
/// tessel::require_memory (Memory.hpp).
int run_tool(char const *name, int argc, char **argv, std::function<int(CommandLine &)> const &body);

/// \brief Checks that every rank of \p comm reads the same contents at \p path (a digest of its bytes), so that
/// ranks given different files of the same shape stop with one clear error instead of running on (or failing
/// later with a misleading message). A file that cannot be read is left to its loader to report.
void require_same_file(Communicator const &comm, std::string const &what, std::string const &path);

} // namespace tessel

#endif

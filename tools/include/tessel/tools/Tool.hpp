#ifndef TESSEL_TOOLS_TOOL_HPP
#define TESSEL_TOOLS_TOOL_HPP

/// \file Tool.hpp
/// \brief The one way Tessel's command-line tools start, fail and end: exit statuses, error messages and the
/// end of a job on every rank.

#include <tessel/core/Communicator.hpp>
#include <tessel/tools/CommandLine.hpp>

#include <functional>
#include <string>

namespace tessel {

/// \brief Exit statuses shared by every Tessel tool.
enum ExitStatus : int {
  exit_success = 0,
  exit_failure = 1, ///< a runtime error, a failed check of the results, or a communication fault
  exit_usage = 2    ///< a malformed or out-of-range option, argument or environment variable (UsageError)
};

/// \brief Runs a tool: the body of every Tessel tool's main().
///
/// Starts MPI and Kokkos (tessel::ScopeGuard; an error in Kokkos's own `--kokkos-*` options is a usage error),
/// takes `--debug`, checks under MPI that every rank was given the same arguments, and calls \p body with the
/// remaining arguments; its result is the exit status. An exception ends the tool with a message for people,
/// `NAME: error: MESSAGE`, where the raising source location is added only with `--debug` or `TESSEL_DEBUG=1`,
/// and status exit_usage for UsageError, exit_failure otherwise.
///
/// Under MPI every rank, failed or not, reports its outcome before the job ends, so the job ends the same way
/// everywhere: rank 0 prints each distinct message once (naming the ranks when they differ), and every rank exits
/// with the worst status. A rank that does not report (stopped, wedged, or still working) within the
/// communication timeout (TESSEL_COMM_TIMEOUT), or within a few seconds once another rank has failed, and any
/// communication fault (CommunicationError: MPI or NCCL errors, a peer that did not answer) end the job on every
/// rank with MPI_Abort, so that no rank is left blocked in MPI_Finalize.
int run_tool(char const *name, int argc, char **argv, std::function<int(CommandLine &)> const &body);

/// \brief Checks that every rank of \p comm reads the same contents at \p path (a digest of its bytes), so that
/// ranks given different files of the same shape stop with one clear error instead of running on (or failing
/// later with a misleading message). A file that cannot be read is left to its loader to report.
void require_same_file(Communicator const &comm, std::string const &what, std::string const &path);

/// \brief Refuses, before anything is allocated, a size derived from options that this machine's memory cannot
/// hold: a UsageError naming \p what, the size and the memory.
void require_memory(std::string const &what, double bytes);

/// \brief True when `--debug` or `TESSEL_DEBUG=1` asked for developers' detail (source locations) in errors.
bool debug_messages();

} // namespace tessel

#endif

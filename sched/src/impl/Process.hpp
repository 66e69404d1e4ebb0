#ifndef TESSEL_SCHED_IMPL_PROCESS_HPP
#define TESSEL_SCHED_IMPL_PROCESS_HPP

// Runs a command (no shell) with a deadline and collects its output: the Slurm CLIs are the controller's only
// interface to Slurm, and a controller that is unreachable must not hang a round.

#include <string>
#include <vector>

namespace tessel::sched::Impl {

struct ProcessResult {
  int status = -1;        ///< exit status, or 128 + signal
  bool timed_out = false; ///< killed at the deadline
  bool not_found = false; ///< the program could not be started
  std::string out, err;
};

/// Runs \p argv[0] (searched on PATH) with \p argv, kills it after \p timeout_s seconds.
ProcessResult run_process(std::vector<std::string> const &argv, double timeout_s);

/// The command line as a user would type it (for messages).
std::string command_text(std::vector<std::string> const &argv);

} // namespace tessel::sched::Impl

#endif

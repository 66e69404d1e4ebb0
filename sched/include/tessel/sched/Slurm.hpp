#ifndef TESSEL_SCHED_SLURM_HPP
#define TESSEL_SCHED_SLURM_HPP

/// \file Slurm.hpp
/// \brief Slurm through its machine interfaces: the CLIs' `--json` output (sinfo, squeue) and `--parsable`
/// submission (sbatch), with a deadline on every call.

#include <tessel/core/Error.hpp>

#include <string>
#include <utility>
#include <vector>

namespace tessel::sched {

/// \brief Slurm could not be reached or refused a request; the message names the command and Slurm's words.
class SlurmError : public Exception {
public:
  explicit SlurmError(std::string const &what) : Exception(what) {}
};

/// \brief A node of the partition with its typed GPUs (GRES `gpu:<type>:<count>`).
struct SlurmNode {
  std::string name;
  std::string gpu_type; ///< empty when the node has no typed GPU GRES
  int gpus = 0;
  std::string state; ///< Slurm's base state in lower case: idle, mixed, allocated, down, drained, ...
  std::vector<std::string> flags;
  std::string reason;
  /// False when Slurm will not start jobs there (DOWN, DRAIN, FAIL, NOT_RESPONDING, ...).
  bool usable = true;
  /// True when Slurm declared the node failed or took it out of service (DOWN, DRAINED, FAIL): its jobs are lost.
  bool failed = false;
};

/// \brief A job as squeue shows it.
struct SlurmJob {
  long id = 0;
  std::string name;
  std::string state;  ///< PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, TIMEOUT, PREEMPTED, CANCELLED, ...
  std::string reason; ///< why it is pending (Resources, Dependency, ...)
  std::vector<std::string> nodes; ///< allocated nodes (running or ended)
  int exit_code = 0;
  int restarts = 0;    ///< times Slurm requeued it
  std::string comment; ///< the submitter's note (the controller keeps the attempt number there)
};

/// \brief What one sbatch asks for: a job on exact nodes with `gpus_per_node` GPUs of one type on each.
struct SbatchRequest {
  std::string name;
  std::string partition;
  std::vector<std::string> nodes;
  std::string gpu_type;
  int gpus_per_node = 0;
  std::string script; ///< batch script text
  std::string output; ///< stdout/stderr file
  std::string workdir;
  std::vector<std::pair<std::string, std::string>> env; ///< exported in addition to the caller's environment
  std::string comment;
  /// Start only when no other job of this name (and user) runs: Slurm itself then keeps two attempts of a job from
  /// running at once, whatever the controller knew when it submitted (a moved job waits for its checkpoint).
  bool singleton = false;
  bool requeue = true;
};

/// \brief Options of the client.
struct SlurmClientOptions {
  double timeout_s = 30; ///< deadline of every CLI call (Slurm's own MessageTimeout is 10 s by default)
};

/// \brief The Slurm CLIs, parsed with nlohmann-json. Every failure is a SlurmError naming the command.
class SlurmClient {
public:
  explicit SlurmClient(SlurmClientOptions options = {}) : _opt(options) {}

  /// Nodes of \p partition (all nodes when empty), in Slurm's order.
  std::vector<SlurmNode> nodes(std::string const &partition) const;
  /// This user's jobs whose name starts with \p name_prefix (every state squeue still shows).
  std::vector<SlurmJob> jobs(std::string const &name_prefix) const;
  /// Submits; returns the job id.
  long submit(SbatchRequest const &request) const;
  /// Sends \p signal (a name such as "USR1") to every process of the job (batch script and steps).
  void signal(long job, std::string const &signal) const;
  /// Cancels the job (no error when it already ended).
  void cancel(long job) const;

  /// The argument list submit() runs (for tests and messages).
  static std::vector<std::string> sbatch_command(SbatchRequest const &request);

private:
  std::string run(std::vector<std::string> const &argv) const;
  std::string run_json(std::vector<std::string> const &argv) const;
  SlurmClientOptions _opt;
};

/// \brief Parses `sinfo --json` output (\p source names it in errors).
std::vector<SlurmNode> parse_sinfo_json(std::string const &text, std::string const &source);
/// \brief Parses `squeue --json` output, keeping jobs whose name starts with \p name_prefix.
std::vector<SlurmJob> parse_squeue_json(std::string const &text, std::string const &source,
                                        std::string const &name_prefix);

} // namespace tessel::sched

#endif

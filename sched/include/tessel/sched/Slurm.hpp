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
  /// An error with the message \p what; \p unreachable says whether Slurm did not answer at all.
  explicit SlurmError(std::string const &what, bool unreachable = true) : Exception(what), _unreachable(unreachable) {}
  /// True when Slurm did not answer (not installed, timed out, controller down); false when it answered and
  /// refused the request.
  bool unreachable() const { return _unreachable; }

private:
  bool _unreachable;
};

/// \brief A node of the partition with its typed GPUs (GRES `gpu:<type>:<count>`).
struct SlurmNode {
  std::string name;               ///< the node's name
  std::string gpu_type;           ///< empty when the node has no typed GPU GRES
  int gpus = 0;                   ///< GPUs of that type
  std::string state;              ///< Slurm's base state in lower case: idle, mixed, allocated, down, drained, ...
  std::vector<std::string> flags; ///< Slurm's state flags (DRAIN, NOT_RESPONDING, ...)
  std::string reason;             ///< why an administrator or Slurm took the node out of service
  /// False when Slurm will not start jobs there (DOWN, DRAIN, FAIL, NOT_RESPONDING, ...).
  bool usable = true;
  /// True when Slurm declared the node failed or took it out of service (DOWN, DRAINED, FAIL): its jobs are lost.
  bool failed = false;
};

/// \brief A job as squeue shows it.
struct SlurmJob {
  long id = 0;        ///< Slurm's job id
  std::string name;   ///< the job's name
  std::string state;  ///< PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, TIMEOUT, PREEMPTED, CANCELLED, ...
  std::string reason; ///< why it is pending (Resources, Dependency, ...)
  std::vector<std::string> nodes; ///< allocated nodes (running or ended)
  int exit_code = 0;              ///< the batch script's exit code (ended jobs)
  int restarts = 0;               ///< times Slurm requeued it
  std::string comment;            ///< the submitter's note (the controller keeps the attempt number there)
};

/// \brief What one sbatch asks for: a job on exact nodes with `gpus_per_node` GPUs of one type on each.
struct SbatchRequest {
  std::string name;               ///< the job's name
  std::string partition;          ///< empty: Slurm's default partition
  std::vector<std::string> nodes; ///< the exact nodes (--nodelist)
  std::string gpu_type;           ///< GRES type
  int gpus_per_node = 0;          ///< GPUs (and tasks) on each node
  std::string script_file;        ///< the batch script (a file the submitting user can read)
  std::string output;             ///< stdout/stderr file
  std::string workdir;            ///< the job's working directory
  /// Exported in addition to the caller's environment (values without commas: sbatch --export splits on them).
  std::vector<std::pair<std::string, std::string>> env;
  std::string comment; ///< kept by Slurm with the job (squeue shows it)
  /// Start only when no other job of this name (and user) runs: Slurm itself then keeps two attempts of a job from
  /// running at once, whatever the controller knew when it submitted (a moved job waits for its checkpoint).
  bool singleton = false;
  bool requeue = true; ///< let Slurm requeue the job after a node failure
};

/// \brief Options of the client.
struct SlurmClientOptions {
  double timeout_s = 30; ///< deadline of every CLI call (Slurm's own MessageTimeout is 10 s by default)
};

/// \brief The Slurm CLIs, parsed with nlohmann-json. Every failure is a SlurmError naming the command.
class SlurmClient {
public:
  /// A client whose every call has the deadline of \p options.
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

  /// Wall seconds this client has spent waiting for Slurm's commands, all calls together (a controller's own cost
  /// is its round less this).
  double waited_seconds() const { return _waited; }

private:
  std::string run(std::vector<std::string> const &argv) const;
  std::string run_json(std::vector<std::string> const &argv) const;
  SlurmClientOptions _opt;
  mutable double _waited = 0;
};

/// \brief Parses `sinfo --json` output (\p source names it in errors).
std::vector<SlurmNode> parse_sinfo_json(std::string const &text, std::string const &source);
/// \brief Parses `squeue --json` output, keeping jobs whose name starts with \p name_prefix.
std::vector<SlurmJob> parse_squeue_json(std::string const &text, std::string const &source,
                                        std::string const &name_prefix);

} // namespace tessel::sched

#endif

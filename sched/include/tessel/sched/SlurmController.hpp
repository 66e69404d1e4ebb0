#ifndef TESSEL_SCHED_SLURMCONTROLLER_HPP
#define TESSEL_SCHED_SLURMCONTROLLER_HPP

/// \file SlurmController.hpp
/// \brief The live world of the policies: a controller that, every round, reads a Slurm partition (nodes, typed
/// GPUs, node states, its own jobs), runs a policy through the same SchedContext as the simulator, and enacts the
/// decisions with sbatch / scancel; plus the durable job intake (submit) and the status it publishes.
///
/// State folder: `config.json` (cluster, options, clock origin, the controller's identity), `jobs.journal`
/// (submitted jobs, appended and synced by submit), `controller.journal` (launches, ends, failures), `status.json`
/// (rewritten every round) and `jobs/<name>/` (batch scripts, plans, checkpoint, progress and Slurm output of each
/// job). A controller restarted on the same folder recovers the queue from the journals and adopts the jobs still in
/// Slurm: nothing lost, nothing started twice (every attempt is journaled before its sbatch and carries the
/// controller's identity and its number in its Slurm comment; Slurm's singleton dependency runs one attempt of a job
/// at a time). Whatever a job writes or a file holds, the controller keeps running: an unusable progress report or
/// checkpoint is a failed attempt of that job, with the reason; a bad journal line is skipped and reported; Slurm
/// jobs without its identity are never touched.

#include <tessel/core/Json.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/SchedContext.hpp>
#include <tessel/sched/Slurm.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace tessel::sched {

/// \brief Options of a controller.
struct ControllerOptions {
  std::string state_dir;        ///< the controller's folder: journals, plans, the jobs' folders, status.json
  std::string partition;        ///< empty: every node Slurm shows
  std::string policy = "crius"; ///< crius, fcfs, gavel, sia or elasticflow
  std::string profile; ///< the profile table's path, recorded so that submit judges jobs as the controller does
  PolicyOptions policy_options; ///< the policy's settings
  double round_seconds = 10;    ///< wall-clock seconds per round
  double time_scale = 1;        ///< model seconds per wall-clock second: the policy sees rounds of round_seconds x this
  int max_failures = 3;         ///< a job failing more often is rejected with its last failure
  double checkpoint_s = 1800;   ///< model seconds of training between a job's checkpoints
  double restart_cost = 60;     ///< model seconds to restore a job from its checkpoint after a failure
  int stop_grace_rounds = 3;    ///< rounds a job asked to checkpoint may take before it is cancelled
  int max_rounds = 0;           ///< stop after this many rounds of this process (0: until stopped)
  bool until_done = false;      ///< stop once every submitted job completed or was rejected
  /// Slurm job names: `<prefix><first 8 characters of the controller's identity>.<job>`; the comment carries the
  /// whole identity and the attempt (`tessel-sched:<identity>:<n>`). Letters, digits, '.', '-' and '_', at most 32.
  std::string job_prefix = "tessel.";
  SlurmClientOptions slurm;                     ///< the deadline of every Slurm command
  std::function<void(std::string const &)> log; ///< one line per event (default: stdout)
};

/// \brief The controller (`tessel-sched serve --backend slurm`).
class SlurmController {
public:
  /// Reads the cluster from Slurm (or, on a restart, from the state folder), recovers the journals and adopts the
  /// jobs still in Slurm. \p table may be null (estimator only).
  SlurmController(ControllerOptions options, ProfileTable const *table, ThroughputSource source);
  ~SlurmController();
  SlurmController(SlurmController const &) = delete;
  SlurmController &operator=(SlurmController const &) = delete;

  /// Runs rounds until \p stop is set, max_rounds rounds ran, or (until_done) every job ended.
  void run(std::atomic<bool> const *stop = nullptr);
  /// One round; false when Slurm could not be reached (the round changed nothing and is retried).
  bool step();
  /// What status.json holds.
  Json status() const;

  struct State;

private:
  std::unique_ptr<State> _state;
};

/// \brief The job spec in \p text (a JSON object); a syntax error, a field given twice or a text larger than a
/// journal record is an error naming \p source.
Json parse_job_spec(std::string const &text, std::string const &source);

/// \brief Validates \p spec (fields: name, model [+ size], batch_size, iterations, gpus, gpu_type, optional
/// deadline and command) against the cluster and throughput source of the controller of \p state_dir and appends
/// it to its journal, synced before returning. Errors name \p source and the field; what Slurm or the file system
/// would refuse later (a name longer than 128 characters, a command over 1 MiB or with a NUL) is refused here.
/// Returns the job's name.
std::string submit_job(std::string const &state_dir, Json const &spec, std::string const &source);

/// \brief The status last published by the controller of \p state_dir, with the jobs submitted since.
Json read_status(std::string const &state_dir);

} // namespace tessel::sched

#endif

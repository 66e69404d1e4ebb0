#ifndef TESSEL_SCHED_JOBCONTEXT_HPP
#define TESSEL_SCHED_JOBCONTEXT_HPP

/// \file JobContext.hpp
/// \brief The job side of the Slurm backend: what a training script started by `tessel-sched serve` reads (its
/// Cell and parallel plan), reports (progress) and does on the controller's signal (checkpoint and exit).
///
/// Contract: the controller starts the job's command with `TESSEL_SCHED_PLAN` naming a JSON plan file (fields of
/// JobPlan) and `TESSEL_SCHED_JOB_DIR` naming the job's folder, shared by every attempt. The job resumes from
/// `checkpoint.json` there, rewrites `progress.json` as it goes, and on SIGUSR1 (the controller moves, shrinks or
/// suspends it) or SIGTERM (Slurm ends it) writes a checkpoint and exits with status 0 before its iterations are
/// done. It finishes by reporting every iteration done (JobContext::finish).

#include <tessel/sched/Cell.hpp>

#include <string>
#include <vector>

namespace tessel::sched {

/// \brief The Cell and plan of one attempt of a job, as the controller hands it over.
struct JobPlan {
  std::string job;                ///< the job's name
  int attempt = 0;                ///< the attempt's number (0 for the first)
  std::string model;              ///< model name ("bert__1.3B")
  int batch_size = 0;             ///< global batch
  long long iterations = 0;       ///< of the whole job
  std::string gpu_type;           ///< GPU type name
  std::vector<std::string> nodes; ///< the Slurm nodes of the Cell
  int gpus_per_node = 0;          ///< GPUs on each of them
  ParallelPlan plan;              ///< dp / tp per stage and micro-batches
  double throughput = 0;          ///< samples/s the scheduler expects on this Cell
  double time_scale = 1;          ///< model seconds per wall-clock second (time-compressed replays)
  double startup_s = 0;           ///< re-tuning and restore time (model seconds) the job pays before training
  double checkpoint_s = 1800;     ///< model seconds of training between checkpoints
  std::string dir;                ///< the job's folder (checkpoint.json, progress.json)
};

/// \brief Reads a plan file; errors name the file and the field.
JobPlan read_job_plan(std::string const &path);

/// \brief A running attempt of a job.
class JobContext {
public:
  /// Reads the plan named by TESSEL_SCHED_PLAN and installs the SIGUSR1 / SIGTERM handlers.
  static JobContext from_environment();
  /// The context of an attempt that runs \p plan (no signal handler installed).
  explicit JobContext(JobPlan plan);

  /// The attempt's plan.
  JobPlan const &plan() const { return _plan; }
  /// Iterations done at the last checkpoint (0 for a new job).
  long long resume_from() const;
  /// Records progress (progress.json, replaced atomically).
  void report(long long done) const;
  /// Writes a checkpoint (synced, replaced atomically) and reports it.
  void checkpoint(long long done) const;
  /// Reports the job finished (every iteration done).
  void finish() const;
  /// True once the controller asked for a checkpoint or Slurm is ending the job.
  static bool stop_requested();

private:
  void write_progress(long long done, char const *state) const;
  JobPlan _plan;
};

} // namespace tessel::sched

#endif

#ifndef TESSEL_SCHED_SCHEDCONTEXT_HPP
#define TESSEL_SCHED_SCHEDCONTEXT_HPP

/// \file SchedContext.hpp
/// \brief The decision core's interface: jobs as policies see them, the world a policy acts on (the simulator or
/// a live Slurm cluster), and the policies themselves.

#include <tessel/sched/Allocation.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Throughput.hpp>
#include <tessel/sched/Trace.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tessel::sched {

/// \brief Life of a job.
enum class JobState { waiting, pending, running, completed, rejected };
char const *state_name(JobState state);

/// \brief A job as the policies see it: its spec, where it stands and what it has accumulated.
struct JobRecord {
  JobSpec const *spec = nullptr;
  int id = 0; ///< index in the trace
  JobState state = JobState::waiting;
  int submit_round = -1;
  double submit_time = 0; ///< time the scheduler saw the job (Arena: the round's start)
  // Resource quota: the allocation while running; the request (or last allocation) while pending.
  int quota_type = -1, quota_gpus = 0, quota_hosts = 0, quota_per_host = 0;
  // Progress. Exact accounting: remaining iterations; Arena accounting: iter_num and exec_time as in Arena.
  double remaining = 0, checkpoint_remaining = 0, since_checkpoint = 0;
  double arena_iter_num = 0, arena_exec_time = 0, arena_checkpoint_exec = 0;
  double overhead = 0;   ///< re-tuning / restore seconds still to pay before making progress
  double arena_debt = 0; ///< Arena's reschedule time debt (> interval skips progress)
  // Accounting.
  double start_time = -1, finish_time = -1, queue_time = 0;
  int reschedules = 0, failures = 0, suspensions = 0;
  // Starvation watch: rounds this job has run since it last progressed, the times it was given new GPUs (and
  // re-tuned) in them, and its throughput on its current allocation.
  int stalled_rounds = 0, stalled_moves = 0;
  double throughput = 0;
  std::string reject_reason;
  // Flags for policies (Crius's decision queue).
  bool blocker = false, opportunism = false;
};

/// \brief The world a policy acts on: the simulator (the reference), or a live cluster (SlurmController). Each
/// round it presents the cluster, the allocation and the jobs, and carries out the policy's transitions.
class SchedWorld {
public:
  virtual ~SchedWorld() = default;
  virtual Cluster const &cluster() const = 0;
  virtual ThroughputOracle const &oracle() const = 0;
  virtual Allocation &alloc() = 0;
  virtual std::vector<JobRecord> &jobs() = 0;
  virtual int round() const = 0;
  virtual double now() const = 0;
  virtual double interval() const = 0;
  virtual bool arena_compat() const = 0;
  virtual std::vector<int> const &arrived() const = 0;
  virtual std::vector<int> const &ended() const = 0;
  virtual std::vector<int> const &evicted() const = 0;
  virtual std::vector<int> const &repaired() const = 0;
  virtual void start(int job) = 0;
  virtual void suspend(int job) = 0;
  virtual void reject(int job, std::string reason) = 0;
};

/// \brief What a policy sees and may change in one scheduling round (of whichever SchedWorld runs it).
class SchedContext {
public:
  explicit SchedContext(SchedWorld &world) : _world(&world) {}

  Cluster const &cluster() const { return _world->cluster(); }
  ThroughputOracle const &oracle() const { return _world->oracle(); }
  Allocation &alloc() { return _world->alloc(); }
  Allocation const &alloc() const { return _world->alloc(); }
  std::vector<JobRecord> &jobs() { return _world->jobs(); }
  JobRecord &job(int id) { return _world->jobs().at(static_cast<std::size_t>(id)); }
  int round() const { return _world->round(); }
  double now() const { return _world->now(); }
  double interval() const { return _world->interval(); }
  bool arena_compat() const { return _world->arena_compat(); }

  /// Jobs submitted this round (in submission order), running jobs that ended since the last round (completed, or
  /// rejected by the world after failing too often; their GPUs are already free), and running jobs the world moved
  /// back to pending (failed node or job).
  std::vector<int> const &arrived() const { return _world->arrived(); }
  std::vector<int> const &ended() const { return _world->ended(); }
  std::vector<int> const &evicted() const { return _world->evicted(); }
  /// Nodes that came back this round (repaired, or Slurm returned them to service): capacity a policy waiting for
  /// completions would otherwise not look at.
  std::vector<int> const &repaired() const { return _world->repaired(); }

  /// Pending job -> running; the job must already hold its GPUs in alloc().
  void start(int job) { _world->start(job); }
  /// Running job -> pending (checkpointed); frees its GPUs.
  void suspend(int job) { _world->suspend(job); }
  /// Pending job -> rejected with \p reason.
  void reject(int job, std::string reason) { _world->reject(job, std::move(reason)); }

private:
  SchedWorld *_world;
};

/// \brief Re-tuning and checkpoint-restore costs a policy pays when a job (re)starts on new GPUs (Arena's
/// RESCHED_OVERHEAD_* and CKPT_RESUME_OVERHEAD: seconds per GPU, capped).
struct ReschedCost {
  double tune_per_gpu = 150, tune_max = 600;
  double restore_per_gpu = 0, restore_max = 400;
  double of(int gpus) const;
};

/// \brief A scheduling policy, called once per round.
class Policy {
public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  /// Arena's baselines pay the default costs; a policy with cheaper restarts (Crius) overrides this.
  virtual ReschedCost resched_cost() const { return {}; }
  virtual void schedule(SchedContext &ctx) = 0;
};

/// \brief Options of policies: Crius's search bounds. Arena's behaviour where it differs from ours is
/// SimOptions::arena_compat, which policies read through SchedContext::arena_compat().
struct PolicyOptions {
  int crius_search_depth = 0; ///< 0: Arena's rule (3, or 2 with more than 150 running jobs)
  int crius_upgrade_steps = 10;
  int crius_restart_trials = 100;
};

/// Names accepted by make_policy: crius, fcfs, gavel, sia, elasticflow.
std::vector<std::string> policy_names();
std::unique_ptr<Policy> make_policy(std::string const &name, PolicyOptions const &options = {});

} // namespace tessel::sched

#endif

#ifndef TESSEL_SCHED_SCHEDCONTEXT_HPP
#define TESSEL_SCHED_SCHEDCONTEXT_HPP

/// \file SchedContext.hpp
/// \brief The decision core's interface: jobs as policies see them, the world a policy acts on (the simulator or
/// a live Slurm cluster), and the policies themselves.

#include <tessel/sched/Allocation.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/JobTable.hpp>
#include <tessel/sched/Throughput.hpp>
#include <tessel/sched/Trace.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tessel::sched {

/// \brief The world a policy acts on: the simulator (the reference), or a live cluster (SlurmController). Each
/// round it presents the cluster, the throughput source and its jobs (a JobTable: allocation, events, the life cycle
/// every transition of the policy goes through).
class SchedWorld {
public:
  virtual ~SchedWorld() = default;
  /// The cluster scheduled.
  virtual Cluster const &cluster() const = 0;
  /// The throughput of a job on a Cell, as the policies see it.
  virtual ThroughputOracle const &oracle() const = 0;
  /// The jobs and their allocation.
  virtual JobTable &table() = 0;
  /// Seconds of model time per round.
  virtual double interval() const = 0;
  /// True where the world follows Arena's accounting (SimOptions::arena_compat).
  virtual bool arena_compat() const = 0;
};

/// \brief What a policy sees and may change in one scheduling round (of whichever SchedWorld runs it).
class SchedContext {
public:
  /// The context of one round of \p world (which must outlive it).
  explicit SchedContext(SchedWorld &world) : _world(&world) {}

  /// The cluster scheduled.
  Cluster const &cluster() const { return _world->cluster(); }
  /// The throughput source.
  ThroughputOracle const &oracle() const { return _world->oracle(); }
  /// \name Who holds which GPU
  //@{
  /// Who holds which GPU (a policy assigns GPUs here before start()).
  Allocation &alloc() { return _world->table().alloc(); }
  Allocation const &alloc() const { return _world->table().alloc(); }
  //@}
  /// Every job the world knows (index = job id).
  std::vector<JobRecord> &jobs() { return _world->table().jobs(); }
  /// The job with id \p id.
  JobRecord &job(int id) { return _world->table().job(id); }
  /// This round's number.
  int round() const { return _world->table().round(); }
  /// This round's time (seconds of model time).
  double now() const { return _world->table().now(); }
  /// Seconds of model time per round.
  double interval() const { return _world->interval(); }
  /// True where the world follows Arena's accounting.
  bool arena_compat() const { return _world->arena_compat(); }

  /// Jobs submitted this round (in submission order), running jobs that ended since the last round (completed, or
  /// rejected by the world after failing too often; their GPUs are already free), and running jobs the world moved
  /// back to pending (failed node or job).
  std::vector<int> const &arrived() const { return _world->table().arrived(); }
  /// Running jobs that ended since the last round (see arrived()).
  std::vector<int> const &ended() const { return _world->table().ended(); }
  /// Running jobs moved back to pending since the last round (see arrived()).
  std::vector<int> const &evicted() const { return _world->table().evicted(); }
  /// Nodes that came back this round (repaired, or Slurm returned them to service): capacity a policy waiting for
  /// completions would otherwise not look at.
  std::vector<int> const &repaired() const { return _world->table().repaired(); }

  /// Pending job -> running; the job must already hold its GPUs in alloc().
  void start(int job) { _world->table().start(job); }
  /// Running job -> pending (checkpointed); frees its GPUs.
  void suspend(int job) { _world->table().suspend(job); }
  /// Pending job -> rejected with \p reason.
  void reject(int job, std::string reason) { _world->table().reject(job, std::move(reason)); }

private:
  SchedWorld *_world;
};

/// \brief Re-tuning and checkpoint-restore costs a policy pays when a job (re)starts on new GPUs (Arena's
/// RESCHED_OVERHEAD_* and CKPT_RESUME_OVERHEAD: seconds per GPU, capped).
struct ReschedCost {
  double tune_per_gpu = 150;  ///< re-tuning seconds per GPU
  double tune_max = 600;      ///< re-tuning seconds at most
  double restore_per_gpu = 0; ///< checkpoint-restore seconds per GPU
  double restore_max = 400;   ///< checkpoint-restore seconds at most
  /// Seconds a job pays when it (re)starts on \p gpus GPUs.
  double of(int gpus) const;
};

/// \brief A scheduling policy, called once per round.
class Policy {
public:
  virtual ~Policy() = default;
  /// "crius", "fcfs", "gavel", "sia" or "elasticflow".
  virtual std::string name() const = 0;
  /// Arena's baselines pay the default costs; a policy with cheaper restarts (Crius) overrides this.
  virtual ReschedCost resched_cost() const { return {}; }
  /// Decides this round: starts, suspends, moves (suspend and start elsewhere) and rejects jobs through \p ctx.
  virtual void schedule(SchedContext &ctx) = 0;
};

/// \brief Options of policies: Crius's search bounds. Arena's behaviour where it differs from ours is
/// SimOptions::arena_compat, which policies read through SchedContext::arena_compat().
struct PolicyOptions {
  int crius_search_depth = 0;     ///< 0: Arena's rule (3, or 2 with more than 150 running jobs)
  int crius_upgrade_steps = 10;   ///< Crius: GPU upgrades tried per round
  int crius_restart_trials = 100; ///< Crius: pending jobs tried per restart pass
};

/// Names accepted by make_policy: crius, fcfs, gavel, sia, elasticflow.
std::vector<std::string> policy_names();
/// The policy called \p name; throws naming the known policies for another name.
std::unique_ptr<Policy> make_policy(std::string const &name, PolicyOptions const &options = {});

} // namespace tessel::sched

#endif

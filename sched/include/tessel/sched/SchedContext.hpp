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
  virtual Cluster const &cluster() const = 0;
  virtual ThroughputOracle const &oracle() const = 0;
  virtual JobTable &table() = 0;
  virtual double interval() const = 0;
  virtual bool arena_compat() const = 0;
};

/// \brief What a policy sees and may change in one scheduling round (of whichever SchedWorld runs it).
class SchedContext {
public:
  explicit SchedContext(SchedWorld &world) : _world(&world) {}

  Cluster const &cluster() const { return _world->cluster(); }
  ThroughputOracle const &oracle() const { return _world->oracle(); }
  Allocation &alloc() { return _world->table().alloc(); }
  Allocation const &alloc() const { return _world->table().alloc(); }
  std::vector<JobRecord> &jobs() { return _world->table().jobs(); }
  JobRecord &job(int id) { return _world->table().job(id); }
  int round() const { return _world->table().round(); }
  double now() const { return _world->table().now(); }
  double interval() const { return _world->interval(); }
  bool arena_compat() const { return _world->arena_compat(); }

  /// Jobs submitted this round (in submission order), running jobs that ended since the last round (completed, or
  /// rejected by the world after failing too often; their GPUs are already free), and running jobs the world moved
  /// back to pending (failed node or job).
  std::vector<int> const &arrived() const { return _world->table().arrived(); }
  std::vector<int> const &ended() const { return _world->table().ended(); }
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

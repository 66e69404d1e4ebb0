#ifndef TESSEL_SCHED_SIMULATOR_HPP
#define TESSEL_SCHED_SIMULATOR_HPP

/// \file Simulator.hpp
/// \brief Trace-driven, round-based simulation of a scheduling policy on a cluster: job progress, reschedule and
/// re-tuning costs, node and job failures with checkpoint restarts, and the metrics Crius reports.

#include <tessel/sched/Allocation.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/SchedContext.hpp>
#include <tessel/sched/Throughput.hpp>
#include <tessel/sched/Trace.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessel::sched {

/// \brief Simulation options.
struct SimOptions {
  double interval = 300; ///< seconds per scheduling round (Arena: 300)
  /// Stop after this many rounds, or earlier once every job ended (0: until every job ended, or until no job made
  /// progress for no_progress_rounds rounds).
  int max_rounds = 0;
  /// With max_rounds 0, rounds in which no job progressed (every job submitted, no node down) that end the run,
  /// leaving the jobs unfinished and saying so in SimResult::end_reason (0: the stall bound of a job plus 3).
  int no_progress_rounds = 0;
  /// Arena's accounting: jobs enter at the start of the round containing their submission; progress is
  /// iter_num - floor(total exec time / current iteration time) (a GPU change re-prices past execution); Arena
  /// divides trace iterations by 5 (ITER_NUM_SCALE_FACTOR_SIM); tuning costs only stall jobs past one round.
  bool arena_compat = false;
  double iteration_divisor = 1;      ///< trace iterations are divided by this (Arena: 5)
  std::uint64_t seed = 1;            ///< seed of the failure draws (same seed, same failures)
  double node_mtbf_hours = 0;        ///< mean time between failures of a node (0: none)
  int node_repair_rounds = 6;        ///< rounds a failed node stays down
  double job_mtbf_hours = 0;         ///< mean time between failures of a running job (0: none)
  double checkpoint_interval = 1800; ///< seconds of execution between checkpoints
  double restart_cost = 60;          ///< seconds to restore a failed job from its checkpoint (exact accounting)
  /// Seconds a job makes no progress each time it starts on a new set of GPUs, moves or shrinks (exact accounting):
  /// the cluster manager's launch latency, which a live cluster pays per attempt (0: an ideal manager).
  double start_latency = 0;
  bool check_invariants = false; ///< verify conservation after every round (tests)
  std::function<void(int round, int running, int pending, int done)> progress; ///< called every round
  /// Called after every round with the allocation and the jobs (tests and tracing).
  std::function<void(int round, Allocation const &alloc, std::vector<JobRecord> const &jobs)> observer;
};

/// \brief Outcome of one job.
struct JobResult {
  std::string id;                     ///< the trace's job id
  JobState state = JobState::waiting; ///< completed, rejected, or pending/running when the run was cut
  std::string reject_reason;          ///< why a rejected job was rejected (empty otherwise)
  double submit_time = 0;             ///< when the scheduler saw the job (s)
  double start_time = -1;             ///< first start (s; -1: never started)
  double finish_time = -1;            ///< completion or rejection (s; -1: not ended)
  double jct = -1;                    ///< job completion time, finish_time - submit_time (s; -1: not completed)
  double queue_time = 0;              ///< seconds spent pending
  int gpu_type = -1;                  ///< GPU type of the last allocation (or the request)
  int num_gpus = 0;                   ///< GPUs of the last allocation (or the request)
  int reschedules = 0;                ///< starts on new GPUs after the first
  int failures = 0;                   ///< node and job failures that hit the job
};

/// \brief Metrics of a run.
struct SimMetrics {
  int submitted = 0;    ///< jobs submitted
  int completed = 0;    ///< jobs completed
  int rejected = 0;     ///< jobs rejected (each with a reason in its JobResult)
  int unfinished = 0;   ///< jobs pending or running when the run was cut
  double avg_jct = 0;   ///< mean JCT over completed jobs (s)
  double p50_jct = 0;   ///< median JCT over completed jobs (s)
  double p99_jct = 0;   ///< 99th percentile JCT over completed jobs (s)
  double makespan = 0;  ///< last completion - first submission (s)
  double avg_queue = 0; ///< queueing delay over completed and unfinished jobs (s)
  /// Cluster samples/s, mean over the rounds with a running job (Arena's accounting: the rounds above 100).
  double avg_throughput = 0;
  double peak_throughput = 0;      ///< cluster samples/s, highest round
  std::vector<double> utilization; ///< per GPU type: mean fraction of up GPUs held by jobs
  long long reschedules = 0;       ///< starts on new GPUs after each job's first, over all jobs
  long long failures = 0;          ///< node and job failures that hit a job
  int rounds = 0;                  ///< rounds simulated
  double sched_seconds = 0;        ///< wall-clock seconds the policy spent deciding, over all rounds
  double sched_ms_per_round = 0;   ///< the policy's mean milliseconds per round
  double sched_ms_max = 0;         ///< the policy's longest round (ms)
  double wall_seconds = 0;         ///< wall-clock seconds of the whole run
};

/// \brief Result of a run.
struct SimResult {
  std::string policy;                      ///< the policy's name
  std::vector<JobResult> jobs;             ///< one per trace job, in trace order
  std::vector<double> round_time;          ///< per round: its start (s)
  std::vector<double> throughput;          ///< per round: cluster samples/s
  std::vector<int> running;                ///< per round: running jobs
  std::vector<int> pending;                ///< per round: pending jobs
  std::vector<std::vector<int>> used_gpus; ///< per round, per type
  std::vector<double> sched_ms;            ///< per round
  /// Running jobs that went more rounds without progress than re-tuning, restore and restart can explain, each
  /// with why, when it passed that bound (a starved or livelocked job).
  std::vector<std::string> stalls;
  /// Why the run ended: every job ended, the round limit, jobs never placed on an idle cluster (rejected), or no
  /// job progressing (the jobs left are unfinished).
  std::string end_reason;
  SimMetrics metrics;              ///< the run's metrics
  std::size_t oracle_lookups = 0;  ///< throughput queries of the run
  std::size_t oracle_computed = 0; ///< of which computed (the others were memoized)
};

/// \brief The simulator: the reference world the policies act on (SchedWorld), round by round on a trace. Its jobs
/// live in a JobTable, to which it adds Arena's accounting (JobTable::Hooks).
class Simulator : private SchedWorld, private JobTable::Hooks {
public:
  /// A simulation of \p policy on \p trace; the cluster, trace, oracle and policy must outlive it.
  Simulator(Cluster const &cluster, Trace const &trace, ThroughputOracle const &oracle, Policy &policy,
            SimOptions options);
  /// Runs the rounds until every job completed or was rejected (or SimOptions::max_rounds), then summarizes.
  SimResult run();

private:
  // SchedWorld
  Cluster const &cluster() const override { return _cluster; }
  ThroughputOracle const &oracle() const override { return _oracle; }
  JobTable &table() override { return _table; }
  double interval() const override { return _opt.interval; }
  bool arena_compat() const override { return _opt.arena_compat; }
  // JobTable::Hooks: Arena's accounting (iter_num, executed time, time debt) follows every suspension and failure.
  void suspended(JobRecord &j) override;
  void rolled_back(JobRecord &j) override;
  void evicted(JobRecord &j) override;

  void submit_arrivals();
  void advance();
  void inject_failures();
  void account_round(std::vector<int> const &before);
  double charge_retuning(JobRecord &j, double thr, double tune, bool gained, bool lost) const;
  std::string stall_reason(JobRecord const &j) const;
  void watch_progress(JobRecord &j, bool progressed);
  void check_invariants() const;
  struct Watch {
    int idle_rounds = 0, still_rounds = 0;
    bool progressed = false; ///< some job progressed or completed this round
  };
  bool finished_or_stuck(Watch &watch);
  int next_round(int round) const;
  double iter_time_of(JobRecord const &j) const;
  int round_of(double submit_time) const;
  SimMetrics summarize(SimResult &result) const;

  Cluster const &_cluster;
  Trace const &_trace;
  ThroughputOracle const &_oracle;
  Policy &_policy;
  SimOptions _opt;
  JobTable _table;
  std::vector<int> _node_down_until;
  std::size_t _next_arrival = 0;
  int _stall_bound = 0; ///< rounds a running job may go without progress (re-tuning, restore and restart)
  double _t0 = 0;
  std::uint64_t _rng_state = 0;
  Watch _watch;
  SimResult _result;
};

/// \brief Runs \p policy_name on the trace: builds the policy and a fresh memoized oracle, simulates, summarizes.
SimResult simulate(Cluster const &cluster, Trace const &trace, ProfileTable const *table, Estimator const *estimator,
                   ThroughputSource source, std::string const &policy_name, SimOptions const &options,
                   PolicyOptions const &policy_options = {});

/// \brief Crius's JCT reduction against a baseline: raw = over each side's finished jobs; padded = the
/// baseline's finished-JCT list padded to Crius's finished count with \p pad_value (Arena's method).
struct JctReduction {
  double raw = 0;             ///< 1 - Crius's mean JCT / the baseline's, over each side's completed jobs
  double padded = 0;          ///< the same with the baseline's list padded to Crius's completed count
  bool padded_defined = true; ///< false when the baseline finished more jobs than Crius (Arena skips it)
};
/// Crius's JCT reduction against \p baseline (see JctReduction).
JctReduction jct_reduction(SimResult const &crius, SimResult const &baseline, double pad_value);

} // namespace tessel::sched

#endif

// Conservation and determinism on random traces: every policy, both accounting modes, with and without failure
// injection. The simulator checks after every round that no GPU is over-allocated or held by two jobs, that each
// running job holds a uniform power-of-two layout of one GPU type matching its quota, and that no pending,
// completed or rejected job holds a GPU, and that every running job makes progress within a bounded number of
// rounds; the tests check that every job ends completed or rejected (with a reason).

#include "SchedTestUtil.hpp"
#include "TesselTestError.hpp"

#include <tessel/sched/Synthetic.hpp>
#include <tessel/sched/TypeAssignment.hpp>

#include <functional>
#include <random>

namespace {

using namespace sched_test;

// 32 GPUs of four types.
Cluster small_cluster() {
  return Cluster(
      {Cluster::known_gpu("a100"), Cluster::known_gpu("v100"), Cluster::known_gpu("a40"), Cluster::known_gpu("a10")},
      {{0, 2, 4}, {1, 1, 8}, {2, 4, 2}, {3, 4, 2}});
}

Trace random_trace(Cluster const &c, ThroughputOracle const &oracle, std::uint64_t seed, int jobs) {
  SyntheticOptions o;
  o.jobs = jobs;
  o.jobs_per_hour = 12;
  o.median_hours = 0.5;
  o.sigma = 0.8;
  o.seed = seed;
  o.gpt_share = 0.1;
  return generate_trace(c, oracle, o);
}

struct Mode {
  bool arena;
  double node_mtbf, job_mtbf;
};

class Conservation : public ::testing::TestWithParam<std::string> {};

TEST_P(Conservation, every_job_accounted_for_and_gpus_never_shared) {
  Cluster const c = small_cluster();
  Estimator const est(c);
  ThroughputOracle const gen(c, nullptr, &est, ThroughputSource::estimator);
  std::string const policy = GetParam();
  for (Mode const mode : {Mode{false, 0, 0}, Mode{true, 0, 0}, Mode{false, 6, 3}, Mode{true, 6, 3}})
    for (std::uint64_t seed : {1u, 2u}) {
      Trace const trace = random_trace(c, gen, seed, 40);
      SimOptions opt;
      opt.arena_compat = mode.arena;
      opt.node_mtbf_hours = mode.node_mtbf;
      opt.job_mtbf_hours = mode.job_mtbf;
      opt.node_repair_rounds = 3;
      opt.seed = seed;
      opt.check_invariants = true;
      SCOPED_TRACE(policy + " arena=" + std::to_string(mode.arena) + " mtbf=" + std::to_string(mode.node_mtbf) +
                   " seed=" + std::to_string(seed));
      SimResult r;
      ASSERT_NO_THROW(r = simulate(c, trace, nullptr, &est, ThroughputSource::estimator, policy, opt));
      ASSERT_EQ(r.jobs.size(), trace.jobs.size());
      int completed = 0, rejected = 0;
      for (auto const &j : r.jobs) {
        ASSERT_TRUE(j.state == JobState::completed || j.state == JobState::rejected)
            << j.id << " ended " << state_name(j.state);
        if (j.state == JobState::rejected) {
          EXPECT_FALSE(j.reject_reason.empty()) << j.id;
          ++rejected;
        } else {
          ++completed;
          EXPECT_GT(j.jct, 0);
          EXPECT_GE(j.finish_time, j.start_time);
          EXPECT_GE(j.start_time, j.submit_time - 300);
        }
      }
      EXPECT_EQ(completed, r.metrics.completed);
      EXPECT_EQ(rejected, r.metrics.rejected);
      EXPECT_EQ(completed + rejected, static_cast<int>(trace.jobs.size()));
      EXPECT_EQ(r.metrics.unfinished, 0);
      if (mode.node_mtbf > 0) {
        EXPECT_GT(r.metrics.failures, 0);
      }
      // Used GPUs never exceed the cluster.
      for (auto const &used : r.used_gpus)
        for (int t = 0; t < c.num_types(); ++t)
          EXPECT_LE(used[static_cast<std::size_t>(t)], c.type_gpus(t));
    }
}

TEST_P(Conservation, deterministic_for_a_seed) {
  Cluster const c = small_cluster();
  Estimator const est(c);
  ThroughputOracle const gen(c, nullptr, &est, ThroughputSource::estimator);
  Trace const trace = random_trace(c, gen, 5, 30);
  SimOptions opt;
  opt.node_mtbf_hours = 30;
  opt.job_mtbf_hours = 15;
  opt.seed = 99;
  auto const a = simulate(c, trace, nullptr, &est, ThroughputSource::estimator, GetParam(), opt);
  auto const b = simulate(c, trace, nullptr, &est, ThroughputSource::estimator, GetParam(), opt);
  ASSERT_EQ(a.jobs.size(), b.jobs.size());
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].state, b.jobs[i].state);
    EXPECT_EQ(a.jobs[i].finish_time, b.jobs[i].finish_time);
    EXPECT_EQ(a.jobs[i].failures, b.jobs[i].failures);
    EXPECT_EQ(a.jobs[i].gpu_type, b.jobs[i].gpu_type);
  }
  EXPECT_EQ(a.throughput, b.throughput);
  EXPECT_EQ(a.metrics.failures, b.metrics.failures);
  // Another failure seed changes the failures (and so the run).
  opt.seed = 100;
  auto const d = simulate(c, trace, nullptr, &est, ThroughputSource::estimator, GetParam(), opt);
  bool differs = d.metrics.failures != a.metrics.failures;
  for (std::size_t i = 0; i < a.jobs.size() && !differs; ++i)
    differs = a.jobs[i].finish_time != d.jobs[i].finish_time;
  EXPECT_TRUE(differs);
}

INSTANTIATE_TEST_SUITE_P(Sched, Conservation, ::testing::Values("crius", "fcfs", "elasticflow", "gavel", "sia"));

TEST(SchedConservation, failed_jobs_restart_from_their_checkpoint) {
  // One job, 1 a100 GPU at 2 s per iteration (exact accounting, FCFS so it never moves): with a checkpoint every
  // 600 s and a job failure rate high enough to fail it, it still completes, later than without failures, and
  // every failure costs at most the work since the last checkpoint plus the restart.
  Cluster const c = two_type_cluster();
  ProfileTable const table = simple_profile();
  Trace const trace = make_trace(c, {job("F", 0, 3000, "moe__690M", 256, 1, 0)});
  SimOptions opt;
  opt.checkpoint_interval = 600;
  opt.check_invariants = true;
  auto const clean = simulate(c, trace, &table, nullptr, ThroughputSource::table, "fcfs", opt);
  opt.job_mtbf_hours = 1.5;
  opt.seed = 3;
  auto const failed = simulate(c, trace, &table, nullptr, ThroughputSource::table, "fcfs", opt);
  ASSERT_EQ(failed.jobs[0].state, JobState::completed);
  int const f = failed.jobs[0].failures;
  ASSERT_GT(f, 0);
  double const extra = failed.jobs[0].jct - clean.jobs[0].jct;
  EXPECT_GT(extra, 0);
  // Lost work per failure: under one checkpoint interval plus the interval the failure is detected in, plus the
  // restart cost.
  EXPECT_LE(extra, f * (opt.checkpoint_interval + opt.interval + opt.restart_cost) + opt.interval);
}

// A careless policy: starts each pending job on free GPUs of its type whether or not it can run there, and with
// \p move gives every running job other GPUs each round, paying \p tune seconds of re-tuning per GPU moved.
class Careless final : public Policy {
public:
  Careless(bool move, double tune) : _move(move), _tune(tune) {}
  std::string name() const override { return _move ? "mover" : "placer"; }
  ReschedCost resched_cost() const override {
    ReschedCost cost;
    cost.tune_per_gpu = _tune;
    return cost;
  }
  void schedule(SchedContext &ctx) override {
    auto &alloc = ctx.alloc();
    auto const free_gpu = [&](int type, int skip) {
      for (int g = 0; g < ctx.cluster().num_gpus(); ++g)
        if (g != skip && alloc.owner(g) == kFree && ctx.cluster().node_type(ctx.cluster().gpu_node(g)) == type)
          return g;
      return -1;
    };
    for (auto &j : ctx.jobs()) {
      if (j.state == JobState::running && _move) {
        int const held = alloc.gpus_of(j.id).front();
        int const other = free_gpu(j.spec->gpu_type, held);
        if (other >= 0) {
          alloc.release(j.id);
          alloc.assign(other, j.id);
        }
      } else if (j.state == JobState::pending) {
        int const g = free_gpu(j.spec->gpu_type, -1);
        if (g >= 0) {
          alloc.assign(g, j.id);
          ctx.start(j.id);
        }
      }
    }
  }

private:
  bool _move;
  double _tune;
};

SimResult run_careless(bool move, double tune, char const *model_name, bool check) {
  Cluster const c = two_type_cluster();
  ProfileTable const table = simple_profile();
  Trace const trace =
      make_trace(c, {job("A", 0, 3000, "moe__690M", 256, 1, 0), job("B", 0, 3000, model_name, 256, 1, 0)});
  ThroughputOracle const oracle(c, &table, nullptr, ThroughputSource::table);
  Careless policy(move, tune);
  SimOptions opt;
  opt.check_invariants = check;
  return Simulator(c, trace, oracle, policy, opt).run();
}

TEST(SchedConservation, a_job_kept_where_it_cannot_progress_is_reported) {
  // moe__2.4B has no profile entry: no throughput anywhere. A job of 3000 iterations at 2 s needs 20 rounds.
  auto const error = tessel::test::error_of([] { run_careless(false, 150, "moe__2.4B", true); });
  EXPECT_NE(error.find("running job B made no progress in"), std::string::npos) << error;
  EXPECT_NE(error.find("its throughput on 1 a100 GPUs (1 hosts x 1) is 0"), std::string::npos) << error;
  // Without the check the run ends once no job progresses, B left unfinished (not rejected: the policy did not
  // reject it), with the stall reported and the end saying why.
  auto const r = run_careless(false, 150, "moe__2.4B", false);
  EXPECT_EQ(result_of(r, "A").state, JobState::completed);
  EXPECT_EQ(result_of(r, "B").state, JobState::running);
  EXPECT_EQ(r.metrics.unfinished, 1);
  EXPECT_NE(r.end_reason.find("no job progressed in the last"), std::string::npos) << r.end_reason;
  ASSERT_EQ(r.stalls.size(), 1u);
  EXPECT_NE(r.stalls[0].find("is 0"), std::string::npos) << r.stalls[0];
  // It ends soon after A completed (20 rounds), not at any fixed round limit.
  EXPECT_LT(r.metrics.rounds, 40);
}

TEST(SchedConservation, a_job_moved_every_round_is_reported) {
  // A move of one GPU costing 150 s of a 300 s round leaves progress every round; one costing 400 s never does.
  auto const cheap = run_careless(true, 150, "moe__690M", true);
  EXPECT_EQ(result_of(cheap, "A").state, JobState::completed);
  EXPECT_EQ(result_of(cheap, "B").state, JobState::completed);
  auto const error = tessel::test::error_of([] { run_careless(true, 400, "moe__690M", true); });
  EXPECT_NE(error.find("running job A made no progress in"), std::string::npos) << error;
  EXPECT_NE(error.find("mover gave it new GPUs"), std::string::npos) << error;
}

// Runs a trace (given relative to 0) as it is and shifted by \p offset seconds.
SimResult run_shifted(std::vector<JobSpec> jobs, double offset, char const *policy, bool arena, int max_rounds = 0) {
  Cluster const c = two_type_cluster();
  ProfileTable const table = simple_profile();
  for (auto &j : jobs)
    j.submit_time += offset;
  SimOptions opt;
  opt.arena_compat = arena;
  opt.max_rounds = max_rounds;
  opt.check_invariants = true;
  return simulate(c, make_trace(c, jobs), &table, nullptr, ThroughputSource::table, policy, opt);
}

TEST(SchedConservation, a_trace_in_unix_seconds_runs_as_the_same_trace_from_zero) {
  std::vector<JobSpec> const jobs = {
      job("A", 0, 3000, "moe__690M", 256, 2, 0), job("B", 450, 6000, "moe__690M", 256, 4, 0),
      job("C", 1000, 2000, "moe__690M", 256, 1, 1), job("D", 1010, 4000, "moe__690M", 256, 2, 1)};
  for (char const *policy : {"crius", "fcfs", "gavel"})
    for (bool arena : {false, true}) {
      SimResult const zero = run_shifted(jobs, 0, policy, arena);
      SimResult const epoch = run_shifted(jobs, 1591030000, policy, arena); // 2020-06-01, as in Helios/Venus
      ASSERT_EQ(zero.jobs.size(), epoch.jobs.size());
      EXPECT_EQ(zero.metrics.rounds, epoch.metrics.rounds) << policy;
      for (std::size_t k = 0; k < zero.jobs.size(); ++k) {
        EXPECT_EQ(zero.jobs[k].state, JobState::completed) << policy << " " << zero.jobs[k].id;
        EXPECT_EQ(epoch.jobs[k].state, zero.jobs[k].state) << policy << " " << zero.jobs[k].id;
        EXPECT_NEAR(epoch.jobs[k].jct, zero.jobs[k].jct, 1e-3) << policy << " " << zero.jobs[k].id;
        EXPECT_NEAR(epoch.jobs[k].start_time - 1591030000, zero.jobs[k].start_time, 1e-3) << policy;
        EXPECT_EQ(epoch.jobs[k].reschedules, zero.jobs[k].reschedules) << policy;
      }
    }
}

TEST(SchedConservation, until_done_runs_a_long_job_to_its_end_and_stops_there) {
  // 2 s per iteration on one a100: 150 iterations per 300 s round, so 250,000 rounds (past any fixed limit).
  std::vector<JobSpec> const jobs = {job("long", 0, 37'500'000, "moe__690M", 256, 1, 0)};
  SimResult const r = run_shifted(jobs, 0, "fcfs", false);
  EXPECT_EQ(result_of(r, "long").state, JobState::completed);
  EXPECT_EQ(r.end_reason, "every job ended");
  EXPECT_GE(r.metrics.rounds, 250'000);
  EXPECT_LE(r.metrics.rounds, 250'002);
  // A round limit far beyond the end does not make the run go on after every job ended.
  SimResult const limited = run_shifted(jobs, 0, "fcfs", false, 3'000'000);
  EXPECT_EQ(limited.metrics.rounds, r.metrics.rounds);
  EXPECT_EQ(limited.end_reason, "every job ended");
}

TEST(SchedConservation, rounds_without_jobs_are_skipped_and_absurd_spans_refused) {
  // A second job submitted 3e8 s (a million rounds) after the first one ended: the rounds between are not run.
  std::vector<JobSpec> const jobs = {job("A", 0, 3000, "moe__690M", 256, 2, 0),
                                     job("B", 3e8, 3000, "moe__690M", 256, 2, 0)};
  SimResult const r = run_shifted(jobs, 0, "fcfs", false);
  EXPECT_EQ(result_of(r, "A").state, JobState::completed);
  EXPECT_EQ(result_of(r, "B").state, JobState::completed);
  EXPECT_NEAR(result_of(r, "B").jct, result_of(r, "A").jct, 1e-6);
  EXPECT_GE(r.metrics.rounds, 1'000'000);
  EXPECT_LT(r.round_time.size(), 100u);
  // Submissions 1e12 s apart are more rounds of 300 s than a run counts: refused, naming the span.
  std::vector<JobSpec> const far = {job("A", 0, 3000, "moe__690M", 256, 2, 0),
                                    job("B", 1e12, 3000, "moe__690M", 256, 2, 0)};
  expect_error([&] { run_shifted(far, 0, "fcfs", false); }, {"span 1e+12 s", "more than the 1e9 a run counts"});
}

// Brute force of the type assignment: every type for every job.
TypeAssignment brute_force(TypeAssignmentProblem const &p) {
  std::size_t const n = p.gpus.size();
  int const K = static_cast<int>(p.capacity.size());
  TypeAssignment best;
  std::vector<int> x(n + 1, 0);
  std::function<void(std::size_t)> rec = [&](std::size_t i) {
    if (i == n + 1) {
      std::vector<int> load(static_cast<std::size_t>(K), 0);
      int moves = 0;
      double obj = 0;
      for (std::size_t j = 0; j < n; ++j) {
        load[static_cast<std::size_t>(x[j])] += p.gpus[j];
        moves += x[j] != p.current[j];
        obj += p.value[j][static_cast<std::size_t>(x[j])];
      }
      load[static_cast<std::size_t>(x[n])] += p.new_gpus;
      obj += p.new_value[static_cast<std::size_t>(x[n])];
      if (moves > p.max_moves)
        return;
      for (int k = 0; k < K; ++k)
        if (load[static_cast<std::size_t>(k)] > p.capacity[static_cast<std::size_t>(k)])
          return;
      if (!best.feasible || obj > best.objective + 1e-9) {
        best.feasible = true;
        best.objective = obj;
      }
      return;
    }
    for (int k = 0; k < K; ++k) {
      x[i] = k;
      rec(i + 1);
    }
  };
  rec(0);
  return best;
}

TEST(SchedTypeAssignment, matches_brute_force_on_random_instances) {
  std::mt19937 gen(2024);
  int feasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    TypeAssignmentProblem p;
    int const K = 2 + static_cast<int>(gen() % 3);
    std::size_t const n = gen() % 7;
    int const sizes[] = {1, 2, 4, 8};
    for (int k = 0; k < K; ++k)
      p.capacity.push_back(4 + static_cast<int>(gen() % 12));
    for (std::size_t j = 0; j < n; ++j) {
      p.gpus.push_back(sizes[gen() % 4]);
      p.current.push_back(static_cast<int>(gen() % static_cast<unsigned>(K)));
      std::vector<double> row;
      for (int k = 0; k < K; ++k)
        row.push_back(gen() % 10 == 0 ? kInfeasible : double(gen() % 1000) / 7.0);
      p.value.push_back(row);
    }
    p.new_gpus = sizes[gen() % 4];
    for (int k = 0; k < K; ++k)
      p.new_value.push_back(gen() % 10 == 0 ? kInfeasible : double(gen() % 1000) / 7.0);
    p.max_moves = static_cast<int>(gen() % 4);
    TypeAssignment const got = solve_type_assignment(p);
    TypeAssignment const want = brute_force(p);
    ASSERT_EQ(got.feasible, want.feasible) << "trial " << trial;
    if (!want.feasible)
      continue;
    ++feasible;
    EXPECT_NEAR(got.objective, want.objective, 1e-6 * std::max(1.0, std::abs(want.objective))) << "trial " << trial;
    EXPECT_LE(static_cast<int>(got.moves.size()), p.max_moves);
    // The returned assignment has the objective it claims and meets the capacities.
    std::vector<int> type = p.current;
    for (auto const &[j, t] : got.moves)
      type[static_cast<std::size_t>(j)] = t;
    std::vector<int> load(static_cast<std::size_t>(K), 0);
    double obj = p.new_value[static_cast<std::size_t>(got.new_type)];
    load[static_cast<std::size_t>(got.new_type)] += p.new_gpus;
    for (std::size_t j = 0; j < n; ++j) {
      load[static_cast<std::size_t>(type[j])] += p.gpus[j];
      obj += p.value[j][static_cast<std::size_t>(type[j])];
    }
    for (int k = 0; k < K; ++k)
      EXPECT_LE(load[static_cast<std::size_t>(k)], p.capacity[static_cast<std::size_t>(k)]);
    EXPECT_NEAR(obj, got.objective, 1e-6 * std::max(1.0, std::abs(obj)));
  }
  EXPECT_GT(feasible, 200);
}

} // namespace

// Real data (label data, skipped without TESSEL_DATA_DIR): the estimator against Crius's profile tables, the
// philly trace run as Arena's README runs it, and the ElasticFlow converter against the philly trace.

#include "SchedTestUtil.hpp"

#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Synthetic.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace {

using namespace sched_test;

std::string crius_dir() {
  char const *d = data_dir();
  return d ? std::string(d) + "/traces/crius" : std::string();
}

#define REQUIRE_DATA()                                                                                                 \
  if (crius_dir().empty() || !fs::exists(crius_dir() + "/prof_database.csv"))                                          \
  GTEST_SKIP() << "TESSEL_DATA_DIR with traces/crius not available"

double median_abs(std::vector<double> v) {
  for (auto &x : v)
    x = std::fabs(x);
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double quantile_abs(std::vector<double> v, double q) {
  for (auto &x : v)
    x = std::fabs(x);
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * double(v.size() - 1))];
}

// Stated accuracy of the estimator (measured: 14.4 % median / 36.6 % p90 per plan cross-validated, 14.2 % median
// best plan vs the Alpa optimum, see sched/README.md): asserted with a margin.
TEST(SchedData, estimator_agrees_with_profile_tables) {
  REQUIRE_DATA();
  Cluster const c = Cluster::crius_simulated();
  ProfileTable const table = load_profile(crius_dir());
  ASSERT_GT(table.plans().size(), 1000u);
  // Cross-validation by model configuration: fit on one half, test on the other.
  ProfileTable half[2];
  for (auto const &p : table.plans())
    half[(p.model * 7 + p.batch_size / 128) % 2].add(p);
  std::vector<double> err;
  for (int f = 0; f < 2; ++f) {
    Estimator est(c);
    est.calibrate(half[1 - f]);
    for (auto const &p : half[f].plans()) {
      int const t = c.find_type(p.gpu);
      if (t < 0)
        continue;
      Cell const cell{p.model, p.batch_size, t, p.hosts, p.per_host, p.pp};
      ParallelPlan plan{std::vector<StageShape>(static_cast<std::size_t>(p.pp), StageShape{p.dp, p.tp}), 1};
      if (p.pp > 1) {
        int m = 1;
        while (m * 2 <= 16 && m * 2 <= p.batch_size / p.dp)
          m *= 2;
        plan.micro_batches = m;
      }
      auto const e = est.estimate(cell, plan);
      if (e.valid)
        err.push_back((e.e2e - p.e2e) / p.e2e);
    }
  }
  ASSERT_GT(err.size(), 1500u);
  EXPECT_LT(median_abs(err), 0.20);
  EXPECT_LT(quantile_abs(err, 0.9), 0.50);
  // Best plan against the Alpa-searched optimum (not used for calibration).
  Estimator est(c);
  est.calibrate(table);
  std::vector<double> opt;
  int infeasible = 0;
  for (auto const &e : table.entries()) {
    int const t = c.find_type(e.gpu);
    if (t < 0 || !(e.iter_time > 0))
      continue;
    auto const a = est.best(e.model, e.batch_size, t, e.hosts, e.per_host, PlanStrategy::uniform);
    auto const b = est.best(e.model, e.batch_size, t, e.hosts, e.per_host, PlanStrategy::greedy);
    if (!a.feasible && !b.feasible) {
      ++infeasible;
      continue;
    }
    double const v = !a.feasible   ? b.estimate.e2e
                     : !b.feasible ? a.estimate.e2e
                                   : std::min(a.estimate.e2e, b.estimate.e2e);
    opt.push_back((v - e.iter_time) / e.iter_time);
  }
  ASSERT_GT(opt.size(), 250u);
  EXPECT_LT(median_abs(opt), 0.20);
  EXPECT_LT(quantile_abs(opt, 0.9), 0.55);
  EXPECT_LT(infeasible, 10);
}

// Arena's numbers on the philly trace (2,000 rounds of 300 s, 1,280 GPUs), from shared/docs/anchors/sched.md:
// finished jobs and average JCT of finished jobs.
struct ArenaNumbers {
  char const *policy;
  int finished;
  double avg_jct;
};

TEST(SchedData, philly_trace_as_arena_runs_it) {
  REQUIRE_DATA();
  Cluster const c = Cluster::crius_simulated();
  Trace const trace = load_trace(crius_dir() + "/simulate_trace_philly.csv", c);
  ProfileTable const table = load_profile(crius_dir());
  SimOptions opt;
  opt.arena_compat = true;
  opt.iteration_divisor = 5;
  opt.max_rounds = 2000;
  std::vector<SimResult> results;
  ArenaNumbers const arena[] = {
      {"crius", 828, 41648}, {"fcfs", 590, 83192}, {"elasticflow", 565, 60220}, {"gavel", 579, 55501}};
  for (auto const &a : arena) {
    results.push_back(simulate(c, trace, &table, nullptr, ThroughputSource::table, a.policy, opt));
    auto const &m = results.back().metrics;
    EXPECT_EQ(m.submitted, 986) << a.policy;
    EXPECT_NEAR(m.completed, a.finished, 0.05 * a.finished) << a.policy;
    EXPECT_NEAR(m.avg_jct, a.avg_jct, 0.05 * a.avg_jct) << a.policy;
  }
  results.push_back(simulate(c, trace, &table, nullptr, ThroughputSource::table, "sia", opt));
  double pad = 0;
  for (auto const &r : results)
    for (auto const &j : r.jobs)
      if (j.state == JobState::completed)
        pad = std::max(pad, j.jct);
  // Crius's reductions; Arena: padded 81.3 / 81.2 / 80.2 %, raw 49.9 / 30.8 / 25.0 % (FCFS, ElasticFlow, Gavel).
  double const arena_padded[] = {0.813, 0.812, 0.802}, arena_raw[] = {0.499, 0.308, 0.250};
  for (std::size_t b = 1; b < results.size(); ++b) {
    auto const red = jct_reduction(results[0], results[b], pad);
    ASSERT_TRUE(red.padded_defined) << results[b].policy;
    EXPECT_GT(red.raw, 0) << results[b].policy;
    EXPECT_GT(red.padded, 0) << results[b].policy;
    if (b <= 3) {
      EXPECT_NEAR(red.padded, arena_padded[b - 1], 0.05) << results[b].policy;
      EXPECT_NEAR(red.raw, arena_raw[b - 1], 0.05) << results[b].policy;
    }
  }
}

TEST(SchedData, elasticflow_converter_selects_the_philly_jobs) {
  REQUIRE_DATA();
  std::string const ef = std::string(data_dir()) + "/traces/elasticflow/cluster08.csv";
  if (!fs::exists(ef))
    GTEST_SKIP() << "ElasticFlow traces not available";
  Cluster const c = Cluster::crius_simulated();
  ProfileTable const table = load_profile(crius_dir());
  ThroughputOracle const oracle(c, &table, nullptr, ThroughputSource::table);
  Trace const converted = convert_elasticflow_trace(ef, c, oracle, 3, false, 1945572, 3);
  Trace const philly = load_trace(crius_dir() + "/simulate_trace_philly.csv", c);
  std::set<std::string> a, b;
  for (auto const &j : converted.jobs)
    a.insert(j.id);
  for (auto const &j : philly.jobs)
    b.insert(j.id);
  EXPECT_EQ(a, b);
  for (auto const &j : converted.jobs) {
    int const per = std::min(j.num_gpus, c.type_capacity(j.gpu_type));
    EXPECT_GT(oracle.adaptive(j.model, j.batch_size, j.gpu_type, j.num_gpus / per, per), 0) << j.id;
  }
}

} // namespace

// Cells and parallel plans, the analytic estimator, and the throughput lookup (Arena's db_querier semantics).

#include "SchedTestUtil.hpp"

#include <tessel/sched/Cell.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Throughput.hpp>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

namespace {

using namespace sched_test;

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

TEST(SchedCells, every_enumerated_plan_is_valid_and_fits) {
  Cluster const c = Cluster::crius_simulated();
  Estimator const est(c);
  auto const &cat = ModelCatalog::builtin();
  int checked = 0;
  for (char const *name : {"bert__1.3B", "moe__2.4B", "wide_resnet__1B", "gpt__2.6B", "moe__10B"})
    for (int type = 0; type < c.num_types(); ++type)
      for (int gpus : {1, 2, 4, 8, 16}) {
        int const m = model(name);
        auto const cells = enumerate_cells(m, 256, type, gpus, c.type_capacity(type));
        // Layouts: per-host counts 1..min(gpus, capacity), stages 1..min(gpus, layers), powers of two.
        std::size_t layouts = 0, stages = 0;
        for (int p = 1; p <= std::min(gpus, c.type_capacity(type)); p *= 2)
          ++layouts;
        for (int s = 1; s <= gpus && s <= cat[m].layers; s *= 2)
          ++stages;
        ASSERT_EQ(cells.size(), layouts * stages) << name << " " << gpus;
        for (auto const &cell : cells) {
          EXPECT_EQ(cell.num_gpus(), gpus);
          std::set<std::string> uniform_keys;
          for (auto strategy : {PlanStrategy::minimal, PlanStrategy::uniform, PlanStrategy::greedy}) {
            auto const plans = est.enumerate_plans(cell, strategy);
            if (strategy == PlanStrategy::minimal) {
              EXPECT_LE(plans.size(), 2u);
            }
            if (strategy == PlanStrategy::greedy) {
              EXPECT_LE(plans.size(), 1u);
            }
            for (auto const &p : plans) {
              ++checked;
              ASSERT_EQ(p.pp(), cell.stages);
              int total = 0;
              for (auto const &s : p.stages) {
                EXPECT_EQ(s.dp * s.tp * p.pp(), gpus) << p.key();
                EXPECT_TRUE(is_power_of_two(s.dp) && is_power_of_two(s.tp)) << p.key();
                if (cat[m].heads > 0) {
                  EXPECT_EQ(cat[m].heads % s.tp, 0) << p.key();
                }
                EXPECT_LE(s.dp * p.micro_batches, 256) << p.key(); // every replica gets a sample
                total += s.dp * s.tp;
              }
              EXPECT_EQ(total, gpus);
              auto const e = est.estimate(cell, p);
              EXPECT_TRUE(e.valid) << e.why;
              EXPECT_TRUE(e.fits) << e.why;
              EXPECT_LE(1.2 * e.memory_gb, 0.8 * c.type(type).memory_gb + 1e-9);
              EXPECT_GT(e.e2e, 0);
              EXPECT_NEAR(e.e2e, e.comp + e.intra + e.inter, 1e-9 * e.e2e);
              if (strategy == PlanStrategy::uniform)
                uniform_keys.insert(p.key());
            }
          }
          // Minimal plans are uniform plans.
          for (auto const &p : est.enumerate_plans(cell, PlanStrategy::minimal))
            EXPECT_TRUE(uniform_keys.count(p.key())) << p.key();
        }
      }
  EXPECT_GT(checked, 500);
}

// Names are looked up in any case; an index that is not a model (find's -1 passed on) is an error naming it.
TEST(SchedModels, lookups_ignore_case_and_a_bad_index_is_named) {
  auto const &cat = ModelCatalog::builtin();
  int const bert = cat.find("bert__1.3B");
  ASSERT_GE(bert, 0);
  EXPECT_EQ(cat[bert].name(), "bert__1.3B");
  EXPECT_EQ(cat.find("BERT__1.3b"), bert);
  EXPECT_EQ(cat.find("Bert_1.3B"), bert);
  EXPECT_EQ(cat.find("bert", "1.3b"), bert);
  EXPECT_EQ(cat.find("Wide-ResNet__500m"), cat.find("wide_resnet__500M"));
  EXPECT_GE(cat.find("wide_resnet__500M"), 0);
  EXPECT_EQ(cat.find("bert__1.4B"), -1);
  EXPECT_EQ(cat.find("llama__1.3B"), -1);
  for (int const bad : {-1, cat.size()}) {
    try {
      (void)cat[bad];
      ADD_FAILURE() << "index " << bad << " was accepted";
    } catch (std::out_of_range const &e) {
      std::string const what = e.what();
      EXPECT_NE(what.find("model index " + std::to_string(bad) + " is not in the catalog's [0, " +
                          std::to_string(cat.size()) + ")"),
                std::string::npos)
          << what;
      EXPECT_EQ(what.find("ModelCatalog::find returns -1") != std::string::npos, bad == -1) << what;
    }
  }
  // The estimator passes the error on for a job of an unknown model.
  Estimator const est(Cluster::crius_simulated());
  EXPECT_THROW((void)est.best(cat.find("bert__1.4B"), 128, 0, 2, 4), std::out_of_range);
}

TEST(SchedCells, invalid_plans_are_reported_with_a_reason) {
  Cluster const c = Cluster::crius_simulated();
  Estimator const est(c);
  int const m = model("bert__1.3B"), a100 = c.find_type("a100");
  Cell const cell{m, 256, a100, 1, 4, 2};
  auto const wrong_stages = est.estimate(cell, ParallelPlan{{{4, 1}}, 1});
  EXPECT_FALSE(wrong_stages.valid);
  EXPECT_NE(wrong_stages.why.find("stages"), std::string::npos);
  auto const wrong_cover = est.estimate(cell, ParallelPlan{{{2, 2}, {2, 2}}, 4});
  EXPECT_FALSE(wrong_cover.valid);
  EXPECT_NE(wrong_cover.why.find("does not cover"), std::string::npos);
  auto const bad_tp = est.estimate(Cell{model("bert__15B"), 256, a100, 1, 4, 1}, ParallelPlan{{{1, 4}}, 1});
  EXPECT_TRUE(bad_tp.valid); // 40 heads / 4
  auto const heads =
      est.estimate(Cell{model("bert__15B"), 256, c.find_type("v100"), 1, 16, 1}, ParallelPlan{{{1, 16}}, 1});
  EXPECT_FALSE(heads.valid);
  EXPECT_NE(heads.why.find("heads"), std::string::npos);
  auto const big = est.estimate(Cell{model("bert__39B"), 512, c.find_type("a10"), 1, 1, 1}, ParallelPlan{{{1, 1}}, 1});
  EXPECT_TRUE(big.valid);
  EXPECT_FALSE(big.fits);
  EXPECT_NE(big.why.find("GB per GPU"), std::string::npos);
}

TEST(SchedCells, estimator_is_monotone) {
  Cluster const c({Cluster::known_gpu("a100"), Cluster::known_gpu("h100"), Cluster::known_gpu("a10")},
                  {{0, 4, 4}, {1, 2, 8}, {2, 8, 2}});
  Estimator const est(c);
  int const a100 = 0, h100 = 1, a10 = 2;
  for (char const *name : {"bert__1.3B", "moe__1.3B", "wide_resnet__1B", "gpt__760M"}) {
    int const m = model(name);
    Cell const cell{m, 256, a100, 1, 4, 2};
    ParallelPlan const plan{{{2, 1}, {2, 1}}, 8};
    // A faster GPU type runs the same plan faster; a slower one slower.
    double const t_a100 = est.estimate(cell, plan).e2e;
    Cell h = cell;
    h.gpu_type = h100;
    EXPECT_LT(est.estimate(h, plan).e2e, t_a100) << name;
    Cell s{m, 256, a10, 2, 2, 2};
    EXPECT_GT(est.estimate(s, plan).e2e, t_a100) << name;
    // A larger batch takes longer.
    Cell b = cell;
    b.batch_size = 512;
    EXPECT_GT(est.estimate(b, plan).e2e, t_a100) << name;
    // A larger model of the family takes longer.
    int const bigger = ModelCatalog::builtin().next_larger(m);
    Cell l = cell;
    l.model = bigger;
    EXPECT_GT(est.estimate(l, plan).e2e, t_a100) << name;
    // More data-parallel GPUs shrink the compute per GPU; tensor parallelism shrinks memory per GPU.
    double prev_comp = 1e30;
    for (int n = 1; n <= 4; n *= 2) {
      auto const e = est.data_parallel(m, 256, a100, 1, n);
      ASSERT_TRUE(e.valid);
      EXPECT_LT(e.comp, prev_comp) << name << " " << n;
      prev_comp = e.comp;
    }
    Cell const one{m, 256, a100, 1, 4, 1};
    auto const dp = est.estimate(one, ParallelPlan{{{4, 1}}, 1});
    auto const tp = est.estimate(one, ParallelPlan{{{1, 4}}, 1});
    EXPECT_LT(tp.memory_gb, dp.memory_gb) << name;
  }
}

TEST(SchedCells, gpipe_bubble_follows_crius_formula) {
  // Uniform stages: compute of S stages and M micro-batches = 3 x (cf x (M - 1) + S x cf) with cf = one stage's
  // forward time of one micro-batch, i.e. the single-GPU compute x (M + S - 1) / (S x M).
  Cluster const c = Cluster::crius_simulated();
  Estimator const est(c);
  int const m = model("bert__760M"), a100 = c.find_type("a100");
  double const single = est.estimate(Cell{m, 256, a100, 1, 1, 1}, ParallelPlan{{{1, 1}}, 1}).comp;
  for (int S : {2, 4})
    for (int M : {1, 4, 16}) {
      Cell const cell{m, 256, a100, 1, S, S};
      ParallelPlan const plan{std::vector<StageShape>(static_cast<std::size_t>(S), StageShape{1, 1}), M};
      auto const e = est.estimate(cell, plan);
      ASSERT_TRUE(e.valid) << e.why;
      EXPECT_NEAR(e.comp, single * (M + S - 1) / (double(S) * M), 1e-9 * single) << S << " " << M;
      EXPECT_GT(e.inter, 0);
    }
}

TEST(SchedThroughput, table_lookup_follows_arena) {
  Cluster const c = two_type_cluster();
  int const small = model("moe__690M"), mid = model("moe__1.3B");
  ProfileTable t;
  t.add(ProfileEntry{small, 256, "a100", 1, 4, 0.5});
  t.add(ProfileEntry{small, 256, "a100", 1, 1, 2.0});
  t.add(ProfileEntry{small, 256, "a100", 1, 2, -1.0}); // the source's infeasible marker
  t.add(ProfileEntry{mid, 256, "v100", 1, 2, 2.5});
  t.add(ProfileEntry{small, 512, "v100", 1, 4, 301.0}); // slower than a scheduling round
  t.add(DpMemory{small, 256, {10, 10, 30, -1, 0}});
  ThroughputOracle const o(c, &t, nullptr, ThroughputSource::table);
  int const a100 = 0, v100 = 1;
  EXPECT_DOUBLE_EQ(o.adaptive(small, 256, a100, 1, 4), 512);
  EXPECT_DOUBLE_EQ(o.adaptive(small, 256, a100, 1, 1), 128);
  // Relaxed locality: the best-locality entry scaled by 0.9 per halving of GPUs per host.
  EXPECT_DOUBLE_EQ(o.adaptive(small, 256, a100, 4, 1), 512 * 0.9 * 0.9);
  // -1 marker and iteration times above the round are infeasible.
  EXPECT_EQ(o.adaptive(small, 256, a100, 1, 2), kInfeasible);
  EXPECT_EQ(o.adaptive(small, 512, v100, 1, 4), kInfeasible);
  // Missing size: the next larger profiled size, scaled by 1.8 per step (adaptive plans only).
  EXPECT_DOUBLE_EQ(o.adaptive(small, 256, v100, 1, 2), round3(256 / 2.5) * 1.8);
  EXPECT_DOUBLE_EQ(o.data_parallel(small, 256, v100, 1, 2, false), round3(256 / 2.5));
  EXPECT_EQ(o.adaptive(small, 256, v100, 1, 1), kInfeasible);
  // DP memory rule: 1.2 x need <= 0.8 x 40 GB; -1 infeasible; 0 unknown (allowed); missing key infeasible.
  EXPECT_DOUBLE_EQ(o.data_parallel(small, 256, a100, 1, 1, true), 128);
  EXPECT_EQ(o.data_parallel(small, 256, a100, 1, 4, true), kInfeasible); // 30 GB x 1.2 > 32
  EXPECT_DOUBLE_EQ(o.data_parallel(small, 256, a100, 1, 4, false), 512);
  EXPECT_EQ(o.data_parallel(mid, 256, v100, 1, 2, true), kInfeasible); // no DP memory profile
  // Iteration time: round(batch / throughput, 3); infeasible -> 1e9.
  EXPECT_DOUBLE_EQ(o.iter_time(small, 256, a100, 4, 1), round3(256 / (512 * 0.81)));
  EXPECT_EQ(o.iter_time(small, 256, a100, 1, 2), kInfeasibleIterTime);
}

TEST(SchedThroughput, lookups_are_memoized) {
  Cluster const c = Cluster::crius_simulated();
  Estimator const est(c);
  ThroughputOracle o(c, nullptr, &est, ThroughputSource::estimator);
  int const m = model("bert__1.3B");
  double const first = o.adaptive(m, 256, 0, 1, 4);
  std::size_t const computed = o.computed();
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(o.adaptive(m, 256, 0, 1, 4), first);
  EXPECT_EQ(o.computed(), computed);
  EXPECT_EQ(o.lookups(), 101u);
  o.set_memoize(false);
  EXPECT_EQ(o.adaptive(m, 256, 0, 1, 4), first);
  EXPECT_EQ(o.computed(), computed + 1);
  // The best plan is at least as fast as pure data parallelism wherever that fits in memory.
  int compared = 0;
  for (int type = 0; type < c.num_types(); ++type)
    for (int n : {1, 2, 4}) {
      double const dp = o.data_parallel(m, 256, type, 1, n, true);
      if (dp > 0) {
        ++compared;
        EXPECT_GE(o.adaptive(m, 256, type, 1, n), dp * (1 - 1e-9)) << type << " " << n;
      }
    }
  EXPECT_GT(compared, 3);
}

TEST(SchedThroughput, table_then_estimator_fills_gaps_only) {
  Cluster const c = two_type_cluster();
  ProfileTable const t = simple_profile();
  Estimator const est(c);
  ThroughputOracle const both(c, &t, &est, ThroughputSource::table_then_estimator);
  ThroughputOracle const table(c, &t, nullptr, ThroughputSource::table);
  int const m = model("moe__690M"), other = model("bert__760M");
  EXPECT_EQ(both.adaptive(m, 256, 0, 1, 4), table.adaptive(m, 256, 0, 1, 4));
  EXPECT_EQ(table.adaptive(other, 128, 0, 1, 4), kInfeasible);
  EXPECT_GT(both.adaptive(other, 128, 0, 1, 4), 0);
}

} // namespace

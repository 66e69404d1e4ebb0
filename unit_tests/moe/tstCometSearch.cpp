// The one comet search (search_comet), under mpiexec at 1 and 2 ranks, on a stand-in for the layer whose forward
// sleeps for a known cost of its parameters: the grid, the knob-by-knob walk to the cheapest parameters, the
// rounds, the warm-up and the final run of the winner, the start against the rule, the budget, the same decisions on
// every rank when the ranks' times differ, and the argument checks.
#include "MoeTestUtils.hpp"

#include <tessel/moe/CometSearch.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace tessel::moe;
using namespace tessel::moe::test;
using tessel::Communicator;
using tessel::ReduceOp;

// Mixtral's layer at N, K / 8.
MoeConfig mixtral(std::int64_t m) { return shape(m, 512, 1792, 8, 2); }

TEST(CometSearch, the_grid_spans_the_rule_and_both_former_searches) {
  auto const large = CometSearchGrid::of(mixtral(4096)); // rule tile 512; 1024 rows per (source, expert)
  EXPECT_EQ(large.tiles, (std::vector<std::int64_t>{128, 256, 512, 1024}));
  auto const small = CometSearchGrid::of(mixtral(1024)); // rule tile 128; 256 rows per pair
  EXPECT_EQ(small.tiles, (std::vector<std::int64_t>{64, 128, 256}));
  auto tiny = mixtral(16);
  tiny.hidden = 64;
  auto const narrow = CometSearchGrid::of(tiny); // the rule's tile (128) stays the top; column blocks of >= 32
  EXPECT_EQ(narrow.tiles, (std::vector<std::int64_t>{64, 128}));
  EXPECT_EQ(narrow.splits, (std::vector<int>{1, 2}));
  EXPECT_EQ(large.splits, (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(large.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(large.ranges, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(large.policies.size(), 2u);
  EXPECT_EQ(large.in_flight, (std::vector<int>{0, 4}));
}

// The parameters the stand-in runs fastest, and its cost: 2 ms plus 8 ms per knob that differs from them (rank 1
// adds 3 ms to one candidate of its own, so that its local times disagree with rank 0's).
CometParams cheapest() {
  CometParams p;
  p.tile_m = 256;
  p.n_splits = 4;
  p.comm_workers = 1;
  p.m_splits = 2;
  p.policy = PlanPolicy::local_first;
  p.in_flight = 4;
  return p;
}

double cost_seconds(CometParams const &p, int rank) {
  auto const goal = cheapest();
  int const differ = (p.tile_m != goal.tile_m) + (p.n_splits != goal.n_splits) + (p.comm_workers != goal.comm_workers) +
                     (p.m_splits != goal.m_splits) + (p.policy != goal.policy) + (p.in_flight != goal.in_flight);
  bool const rank_one_slow = rank == 1 && p.tile_m == 128;
  return 2e-3 + 8e-3 * differ + (rank_one_slow ? 3e-3 : 0.0);
}

// The stand-in's forward: sleeps its cost and records what ran.
struct StandIn {
  int rank;
  std::vector<CometParams> ran;
  void operator()(CometParams const &p) {
    ran.push_back(p);
    std::this_thread::sleep_for(std::chrono::duration<double>(cost_seconds(p, rank)));
  }
};

void expect_same_everywhere(Communicator const &comm, CometParams const &p) {
  auto const h = static_cast<std::int64_t>(p.hash() >> 1);
  EXPECT_EQ(comm.allreduce_value(h, ReduceOp::min), comm.allreduce_value(h, ReduceOp::max)) << p.describe();
}

TEST(CometSearch, walks_knob_by_knob_to_the_cheapest_parameters) {
  auto const comm = Communicator::world();
  auto const config = mixtral(1024);
  StandIn forward{comm.rank(), {}};
  CometSearchOptions options;
  options.rounds = 3;
  int told = 0;
  options.progress = [&](std::string const &line) { told += line.rfind("tune: ", 0) == 0 ? 1 : 0; };
  auto const result = search_comet(comm, config, "host", options, [&](CometParams const &p) { forward(p); });
  EXPECT_EQ(result.best, cheapest()) << result.best.describe();
  expect_same_everywhere(comm, result.best);
  EXPECT_FALSE(result.out_of_time);
  // The warm-up runs the rule; the last forward is the winner's; every run is counted.
  ASSERT_FALSE(forward.ran.empty());
  EXPECT_EQ(forward.ran.front(), fallback_params(config));
  EXPECT_EQ(forward.ran.back(), result.best);
  EXPECT_EQ(result.runs, static_cast<int>(forward.ran.size()));
  EXPECT_EQ(told, static_cast<int>(result.measured.size()));
  // Every scored candidate ran once per round, and its score is about its cost (the slowest rank's).
  std::map<std::uint64_t, int> runs_of;
  for (auto const &p : forward.ran)
    ++runs_of[p.hash()];
  for (auto const &[p, seconds] : result.measured) {
    EXPECT_GE(runs_of[p.hash()], options.rounds) << p.describe();
    EXPECT_GE(seconds, std::max(cost_seconds(p, 0), cost_seconds(p, comm.size() > 1 ? 1 : 0)) * 0.99) << p.describe();
  }
  EXPECT_GT(result.rule_seconds, 0.0);
  EXPECT_NEAR(result.best_seconds, 2e-3, 4e-3);
  EXPECT_GE(result.seconds, result.best_seconds * result.runs);
}

TEST(CometSearch, a_start_worse_than_the_rule_loses_to_it_at_once) {
  auto const comm = Communicator::world();
  auto const config = mixtral(1024);
  StandIn forward{comm.rank(), {}};
  CometSearchOptions options;
  options.rounds = 1;
  auto start = fallback_params(config);
  start.tile_m = 1024; // one knob further from the cheapest than the rule
  options.start = start;
  auto const result = search_comet(comm, config, "host", options, [&](CometParams const &p) { forward(p); });
  EXPECT_EQ(forward.ran.front(), start); // the warm-up runs the start
  ASSERT_GE(result.measured.size(), 2u);
  EXPECT_EQ(result.measured[0].first, start); // the first stage: the start against the rule
  EXPECT_EQ(result.measured[1].first, fallback_params(config));
  EXPECT_EQ(result.best, cheapest());
}

TEST(CometSearch, the_budget_bounds_it) {
  auto const comm = Communicator::world();
  auto const config = mixtral(1024);
  // Below one forward: the warm-up only, nothing measured, the start stays.
  StandIn few{comm.rank(), {}};
  CometSearchOptions options;
  options.budget = 1e-6;
  auto const none = search_comet(comm, config, "host", options, [&](CometParams const &p) { few(p); });
  EXPECT_EQ(none.runs, 1);
  EXPECT_TRUE(none.measured.empty());
  EXPECT_TRUE(none.out_of_time);
  EXPECT_EQ(none.best, fallback_params(config));
  // A budget of six forwards of the rule (50 ms here): kept within one forward and the noise.
  StandIn some{comm.rank(), {}};
  options.budget = 0.3;
  auto const bounded = search_comet(comm, config, "host", options, [&](CometParams const &p) { some(p); });
  EXPECT_TRUE(bounded.out_of_time);
  EXPECT_FALSE(bounded.measured.empty());
  EXPECT_LE(bounded.seconds, options.budget + 0.05 + 0.04) << bounded.runs << " runs";
  EXPECT_EQ(some.ran.back(), bounded.best);
  expect_same_everywhere(comm, bounded.best);
}

template <class F> void expect_error(F &&f, std::string const &text) {
  auto const message = tessel::test::error_of(f);
  EXPECT_NE(message.find(text), std::string::npos)
      << "expected an error naming '" << text << "', got '" << message << "'";
}

TEST(CometSearch, refuses_what_it_cannot_run) {
  auto const comm = Communicator::world();
  auto const config = mixtral(1024);
  auto const nothing = [](CometParams const &) {};
  CometSearchOptions options;
  options.rounds = 0;
  expect_error([&] { search_comet(comm, config, "host", options, nothing); }, "rounds must be >= 1, got 0");
  options.rounds = 3;
  options.budget = -1;
  expect_error([&] { search_comet(comm, config, "host", options, nothing); }, "budget must be");
  options.budget = 0;
  CometParams bad;
  bad.n_splits = 0;
  options.start = bad;
  expect_error([&] { search_comet(comm, config, "host", options, nothing); }, "n_splits must be in [1, N=512]");
  options.start.reset();
  expect_error([&] { search_comet(comm, config, "host", options, {}); }, "no forward to run");
}

} // namespace

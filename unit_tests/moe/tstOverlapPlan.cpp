// The backend-neutral overlap plan: every tile exactly once, local-first order, no tile before its data. The
// executor is simulated with random message arrival times and tile durations.
#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <queue>
#include <random>
#include <set>

namespace {

using namespace tessel::moe;

PlanShape random_shape(std::mt19937_64 &rng, int world, PlanPolicy policy) {
  PlanShape shape;
  shape.world = world;
  shape.rank = std::uniform_int_distribution<int>(0, world - 1)(rng);
  shape.hidden = std::uniform_int_distribution<std::int64_t>(1, 300)(rng);
  shape.tile_m = std::uniform_int_distribution<std::int64_t>(1, 40)(rng);
  shape.n_splits =
      std::uniform_int_distribution<int>(1, static_cast<int>(std::min<std::int64_t>(9, shape.hidden)))(rng);
  shape.policy = policy;
  shape.experts = std::uniform_int_distribution<int>(1, 6)(rng);
  shape.chunks = std::uniform_int_distribution<int>(1, 3)(rng);
  std::uniform_int_distribution<std::int64_t> rows(0, 100);
  for (int s = 0; s < world; ++s) {
    std::vector<std::int64_t> r(static_cast<std::size_t>(shape.experts * shape.chunks));
    for (auto &x : r)
      x = rng() % 4 == 0 ? 0 : rows(rng); // some (source, chunk, expert) have no rows
    if (rng() % 5 == 0)
      std::fill(r.begin(), r.end(), 0); // and some sources send nothing
    shape.rows.push_back(r);
  }
  return shape;
}

void check_coverage(OverlapPlan const &plan) {
  auto const &shape = plan.shape();
  // Layer0: every row of every (source, chunk, expert) exactly once; tiles no larger than tile_m.
  for (int s = 0; s < shape.world; ++s)
    for (int c = 0; c < shape.chunks; ++c)
      for (int e = 0; e < shape.experts; ++e) {
        auto const n = shape.rows[static_cast<std::size_t>(s)][static_cast<std::size_t>(c * shape.experts + e)];
        std::vector<int> hits(static_cast<std::size_t>(n), 0);
        for (auto const &t : plan.tiles())
          if (t.kind == PlanTile::Kind::layer0 && t.source == s && t.chunk == c && t.expert == e) {
            ASSERT_LE(t.row_end - t.row_begin, shape.tile_m);
            ASSERT_GT(t.row_end, t.row_begin);
            for (auto r = t.row_begin; r < t.row_end; ++r)
              hits[static_cast<std::size_t>(r)] += 1;
          }
        for (int h : hits)
          ASSERT_EQ(h, 1) << "source " << s << " chunk " << c << " expert " << e;
      }
  // Layer1: every column of every (source, chunk, expert) with rows exactly once; none for those without rows;
  // exactly one tile per (source, chunk, block) completes the block.
  for (int s = 0; s < shape.world; ++s)
    for (int c = 0; c < shape.chunks; ++c) {
      for (int e = 0; e < shape.experts; ++e) {
        std::vector<int> hits(static_cast<std::size_t>(shape.hidden), 0);
        for (auto const &t : plan.tiles())
          if (t.kind == PlanTile::Kind::layer1 && t.source == s && t.chunk == c && t.expert == e)
            for (auto col = t.col_begin; col < t.col_end; ++col)
              hits[static_cast<std::size_t>(col)] += 1;
        int const expected =
            shape.rows[static_cast<std::size_t>(s)][static_cast<std::size_t>(c * shape.experts + e)] > 0 ? 1 : 0;
        for (int h : hits)
          ASSERT_EQ(h, expected) << "source " << s << " chunk " << c << " expert " << e;
      }
      for (int b = 0; b < shape.n_splits; ++b) {
        int completing = 0;
        for (auto const &t : plan.tiles())
          completing +=
              t.kind == PlanTile::Kind::layer1 && t.source == s && t.chunk == c && t.split == b && t.completes_block;
        ASSERT_EQ(completing, plan.chunk_rows(s, c) > 0 ? 1 : 0);
      }
    }
  // Remote layer0 tiles and messages correspond one to one, in the sender's numbering.
  for (int s = 0; s < shape.world; ++s) {
    auto const messages =
        OverlapPlan::messages_for(shape.rows[static_cast<std::size_t>(s)], shape.experts, shape.tile_m);
    if (s == shape.rank) {
      EXPECT_EQ(plan.messages_from(s), 0);
      continue;
    }
    ASSERT_EQ(plan.messages_from(s), static_cast<int>(messages.size()));
    for (int m = 0; m < plan.messages_from(s); ++m) {
      auto const &t = plan.tiles()[static_cast<std::size_t>(plan.tile_of_message(s, m))];
      EXPECT_EQ(t.message, m);
      EXPECT_EQ(t.chunk, messages[static_cast<std::size_t>(m)].chunk);
      EXPECT_EQ(t.expert, messages[static_cast<std::size_t>(m)].expert);
      EXPECT_EQ(t.row_begin, messages[static_cast<std::size_t>(m)].row_begin);
    }
  }
}

// Simulates one compute thread running the scheduler; returns per tile (start, end) and the message arrivals.
struct Simulation {
  std::vector<double> start, end;
  std::vector<std::vector<double>> arrival;
  std::vector<int> order;
  double idle_with_local_left = 0.0;
};

Simulation simulate(OverlapPlan const &plan, std::mt19937_64 &rng, std::int64_t batch_rows = 0) {
  auto const &shape = plan.shape();
  Simulation sim;
  sim.start.assign(plan.tiles().size(), -1.0);
  sim.end.assign(plan.tiles().size(), -1.0);
  std::uniform_real_distribution<double> when(0.0, 10.0), cost(0.1, 1.0);
  using Event = std::pair<double, std::pair<int, int>>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  for (int s = 0; s < shape.world; ++s) {
    sim.arrival.emplace_back(static_cast<std::size_t>(plan.messages_from(s)));
    double t = when(rng) * 0.2;
    for (int m = 0; m < plan.messages_from(s); ++m) {
      t += when(rng) * 0.1; // messages of one source arrive in order
      sim.arrival[static_cast<std::size_t>(s)][static_cast<std::size_t>(m)] = t;
      events.push({t, {s, m}});
    }
  }
  PlanScheduler scheduler(plan);
  scheduler.set_min_batch_rows(batch_rows);
  double now = 0.0;
  while (!scheduler.all_finished()) {
    while (!events.empty() && events.top().first <= now) {
      scheduler.landed(events.top().second.first, events.top().second.second);
      events.pop();
    }
    int const i = scheduler.next();
    if (i < 0) {
      EXPECT_FALSE(events.empty()) << "scheduler stalled with nothing left to land";
      if (events.empty())
        break;
      // Idle: only allowed when no local layer0 tile is left.
      for (std::size_t j = 0; j < plan.tiles().size(); ++j) {
        auto const &t = plan.tiles()[j];
        if (sim.start[j] < 0 && t.kind == PlanTile::Kind::layer0 && t.source == shape.rank)
          sim.idle_with_local_left += events.top().first - now;
      }
      now = events.top().first;
      continue;
    }
    sim.start[static_cast<std::size_t>(i)] = now;
    now += cost(rng);
    sim.end[static_cast<std::size_t>(i)] = now;
    sim.order.push_back(i);
    scheduler.finish(i);
  }
  return sim;
}

void check_dependencies(OverlapPlan const &plan, Simulation const &sim) {
  auto const &tiles = plan.tiles();
  ASSERT_EQ(sim.order.size(), tiles.size()) << "every tile runs exactly once";
  std::set<int> seen(sim.order.begin(), sim.order.end());
  ASSERT_EQ(seen.size(), tiles.size());
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    auto const &t = tiles[i];
    if (t.kind == PlanTile::Kind::layer0 && t.message >= 0) {
      EXPECT_GE(sim.start[i], sim.arrival[static_cast<std::size_t>(t.source)][static_cast<std::size_t>(t.message)])
          << "layer0 tile started before its data landed";
    }
    if (t.kind == PlanTile::Kind::layer1) {
      for (std::size_t j = 0; j < tiles.size(); ++j) {
        auto const &u = tiles[j];
        if (u.source != t.source || u.chunk != t.chunk)
          continue;
        if (u.kind == PlanTile::Kind::layer0 && u.expert == t.expert) {
          EXPECT_GE(sim.start[i], sim.end[j]) << "layer1 tile started before its expert's layer0 rows finished";
        }
        if (u.kind == PlanTile::Kind::layer1 && u.split == t.split && u.position < t.position) {
          EXPECT_GE(sim.start[i], sim.end[j]) << "experts of a block added out of order";
        }
      }
    }
  }
  EXPECT_EQ(sim.idle_with_local_left, 0.0) << "the executor idled while local tiles were left";
}

TEST(OverlapPlan, every_tile_once_and_no_tile_before_its_data) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial)
    for (auto policy : {PlanPolicy::local_first, PlanPolicy::critical_path}) {
      int const world = 1 + static_cast<int>(rng() % 8);
      auto const plan = OverlapPlan::build(random_shape(rng, world, policy));
      SCOPED_TRACE("trial " + std::to_string(trial) + " policy " + name_of(policy));
      check_coverage(plan);
      std::int64_t const batch = std::vector<std::int64_t>{0, 20, 60}[rng() % 3];
      SCOPED_TRACE("batch rows " + std::to_string(batch));
      auto const sim = simulate(plan, rng, batch);
      check_dependencies(plan, sim);
      // Before any remote message has landed, only local layer0 tiles can run.
      double first_landing = 1e300;
      for (auto const &a : sim.arrival)
        for (double t : a)
          first_landing = std::min(first_landing, t);
      for (std::size_t i = 0; i < plan.tiles().size(); ++i) {
        if (sim.start[i] < first_landing && plan.tiles()[i].kind == PlanTile::Kind::layer0) {
          EXPECT_EQ(plan.tiles()[i].source, plan.shape().rank);
        }
      }
      if (::testing::Test::HasFailure())
        return;
    }
}

TEST(OverlapPlan, local_first_policy_runs_all_local_tiles_first) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 100; ++trial) {
    auto const plan = OverlapPlan::build(random_shape(rng, 2 + static_cast<int>(rng() % 6), PlanPolicy::local_first));
    auto const &tiles = plan.tiles();
    int const me = plan.shape().rank;
    // Static order: local layer0, remote layer0, then layer1 column-major (split index never decreases across
    // the remote sources), the local source's layer1 last.
    bool remote_seen = false, layer1_seen = false, local_layer1_seen = false;
    int last_split = -1;
    for (auto const &t : tiles) {
      if (t.kind == PlanTile::Kind::layer0) {
        EXPECT_FALSE(layer1_seen);
        if (t.source == me) {
          EXPECT_FALSE(remote_seen) << "a local tile after a remote one";
        } else {
          remote_seen = true;
        }
      } else {
        layer1_seen = true;
        if (t.source == me) {
          local_layer1_seen = true;
        } else {
          EXPECT_FALSE(local_layer1_seen);
          // Column-major across sources and experts: (chunk, block) never decreases.
          int const key = t.chunk * 1000 + t.split;
          EXPECT_GE(key, last_split) << "layer1 blocks are column-major across sources";
          last_split = key;
        }
      }
    }
    // Executed: every local layer0 tile finishes before the first remote layer0 tile starts.
    auto const sim = simulate(plan, rng);
    double last_local = -1.0, first_remote = 1e300;
    for (std::size_t i = 0; i < tiles.size(); ++i)
      if (tiles[i].kind == PlanTile::Kind::layer0) {
        if (tiles[i].source == me) {
          last_local = std::max(last_local, sim.end[i]);
        } else {
          first_remote = std::min(first_remote, sim.start[i]);
        }
      }
    EXPECT_LE(last_local, first_remote);
  }
}

TEST(OverlapPlan, critical_path_runs_a_sources_layer1_before_remaining_layer0) {
  // Two ranks; the remote source's data lands at once: its layer1 blocks run as soon as its layer0 is done,
  // ahead of the local layer0 tiles still pending.
  PlanShape shape;
  shape.world = 2;
  shape.rank = 0;
  shape.hidden = 64;
  shape.tile_m = 10;
  shape.n_splits = 4;
  shape.experts = 2;
  shape.rows = {{40, 40}, {20, 0}};
  shape.policy = PlanPolicy::critical_path;
  auto const plan = OverlapPlan::build(shape);
  PlanScheduler scheduler(plan);
  std::vector<PlanTile> run;
  // Nothing landed: local tiles only.
  int i = scheduler.next();
  ASSERT_GE(i, 0);
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].source, 0);
  scheduler.finish(i);
  scheduler.landed(1, 0);
  scheduler.landed(1, 1);
  while ((i = scheduler.next()) >= 0) {
    run.push_back(plan.tiles()[static_cast<std::size_t>(i)]);
    scheduler.finish(i);
  }
  ASSERT_EQ(run.size(), plan.tiles().size() - 1);
  EXPECT_EQ(run[0].source, 1); // the landed remote tiles
  EXPECT_EQ(run[1].source, 1);
  for (int b = 0; b < 4; ++b) { // then its layer1, column block by column block
    EXPECT_EQ(run[static_cast<std::size_t>(2 + b)].kind, PlanTile::Kind::layer1);
    EXPECT_EQ(run[static_cast<std::size_t>(2 + b)].split, b);
  }
  EXPECT_EQ(run[6].kind, PlanTile::Kind::layer0); // the remaining local tiles
  EXPECT_EQ(run[6].source, 0);
  EXPECT_EQ(run.back().kind, PlanTile::Kind::layer1);
  EXPECT_EQ(run.back().source, 0);
  EXPECT_TRUE(scheduler.all_finished());
}

TEST(OverlapPlan, batching_defers_partial_remote_runs_but_never_idles) {
  // One remote source, one expert of 40 rows in tiles of 10; batches of 30 rows.
  PlanShape shape;
  shape.world = 2;
  shape.rank = 0;
  shape.hidden = 16;
  shape.tile_m = 10;
  shape.rows = {{20}, {40}};
  auto const plan = OverlapPlan::build(shape);
  PlanScheduler scheduler(plan);
  scheduler.set_min_batch_rows(30);
  scheduler.landed(1, 0);
  // Only 10 remote rows landed: the local tiles go first ...
  int i = scheduler.next();
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].source, 0);
  scheduler.finish(i);
  i = scheduler.next();
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].source, 0);
  scheduler.finish(i);
  // ... then the local layer1 (ready now) ...
  i = scheduler.next();
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].kind, PlanTile::Kind::layer1);
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].source, 0);
  scheduler.finish(i);
  // ... and with no local work left, the partial run runs rather than idling.
  i = scheduler.next();
  ASSERT_GE(i, 0);
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].source, 1);
  EXPECT_EQ(scheduler.next_contiguous(i), -1); // message 1 has not landed
  scheduler.finish(i);
  EXPECT_EQ(scheduler.next(), -1);
  // Three more land: one run of 30 rows, merged.
  scheduler.landed(1, 1);
  scheduler.landed(1, 2);
  scheduler.landed(1, 3);
  i = scheduler.next();
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].row_begin, 10);
  int j = scheduler.next_contiguous(i);
  int k = scheduler.next_contiguous(j);
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(k)].row_end, 40);
  EXPECT_EQ(scheduler.next_contiguous(k), -1);
}

TEST(OverlapPlan, a_tile_that_lands_after_the_next_one_is_not_left_behind_the_local_work) {
  // One remote source, one expert of 148 rows in tiles of 128 and 20; batches of 512 rows. The small second message
  // completes first (eager) and runs; when the first lands, nothing can join its run any more: it must run next,
  // before the local tiles, not after all of them.
  PlanShape shape;
  shape.world = 2;
  shape.rank = 0;
  shape.hidden = 16;
  shape.tile_m = 128;
  shape.rows = {{300}, {148}};
  auto const plan = OverlapPlan::build(shape);
  PlanScheduler scheduler(plan);
  scheduler.set_min_batch_rows(512);
  scheduler.landed(1, 1);
  int i = scheduler.next();
  ASSERT_GE(i, 0);
  while (plan.tiles()[static_cast<std::size_t>(i)].source != 1) { // local filler until then
    scheduler.finish(i);
    i = scheduler.next();
    ASSERT_GE(i, 0);
  }
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].row_begin, 128);
  scheduler.finish(i);
  scheduler.landed(1, 0);
  i = scheduler.next();
  ASSERT_GE(i, 0);
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].source, 1);
  EXPECT_EQ(plan.tiles()[static_cast<std::size_t>(i)].row_begin, 0);
}

TEST(OverlapPlan, token_chunks_let_layer1_start_before_a_source_has_fully_landed) {
  // Two chunks of one remote source: chunk 0's layer1 is ready once chunk 0's rows are done.
  PlanShape shape;
  shape.world = 2;
  shape.rank = 1;
  shape.hidden = 8;
  shape.experts = 2;
  shape.chunks = 2;
  shape.tile_m = 100;
  shape.n_splits = 2;
  shape.rows = {{10, 5, 7, 3}, {0, 0, 0, 0}};
  auto const plan = OverlapPlan::build(shape);
  EXPECT_EQ(plan.messages_from(0), 4);
  EXPECT_EQ(plan.layer0_tiles_of(0, 0), 2);
  EXPECT_EQ(plan.row_offset(0, 1, 1), 22);
  EXPECT_EQ(plan.chunk_rows(0, 1), 10);
  PlanScheduler scheduler(plan);
  scheduler.landed(0, 0);
  scheduler.landed(0, 1);
  std::vector<PlanTile> run;
  for (int i; (i = scheduler.next()) >= 0;) {
    run.push_back(plan.tiles()[static_cast<std::size_t>(i)]);
    scheduler.finish(i);
  }
  // Chunk 0 only: expert 0's rows, its two slices of the blocks, expert 1's rows, its slices (completing them).
  ASSERT_EQ(run.size(), 6u);
  EXPECT_EQ(run[0].kind, PlanTile::Kind::layer0);
  EXPECT_EQ(run[1].kind, PlanTile::Kind::layer1);
  EXPECT_EQ(run[1].expert, 0);
  EXPECT_FALSE(run[1].completes_block);
  EXPECT_EQ(run[3].kind, PlanTile::Kind::layer0);
  EXPECT_EQ(run[3].expert, 1);
  EXPECT_TRUE(run[4].completes_block);
  EXPECT_TRUE(run[5].completes_block);
  for (auto const &t : run)
    EXPECT_EQ(t.chunk, 0);
  EXPECT_FALSE(scheduler.all_finished());
}

TEST(OverlapPlan, source_order_follows_the_senders_ring) {
  PlanShape shape;
  shape.world = 5;
  shape.rank = 2;
  shape.hidden = 8;
  shape.rows.assign(5, {3});
  auto const plan = OverlapPlan::build(shape);
  EXPECT_EQ(plan.layer0_tiles_of(0, 0), 1);
  // Senders go to rank+1, rank+2, ...: rank 1 reaches rank 2 first, then rank 0, 4, 3.
  EXPECT_EQ(plan.source_order(), (std::vector<int>{1, 0, 4, 3}));
}

TEST(OverlapPlan, uneven_column_splits) {
  auto const cols = OverlapPlan::split_columns(10, 4);
  EXPECT_EQ(cols, (std::vector<std::int64_t>{0, 3, 6, 8, 10}));
  EXPECT_THROW(OverlapPlan::split_columns(3, 4), tessel::Exception);
  EXPECT_EQ(parse_plan_policy("local_first"), PlanPolicy::local_first);
  EXPECT_THROW(parse_plan_policy("greedy"), tessel::Exception);
}

} // namespace

TEST(OverlapPlan, claim_starts_only_ready_tiles_once) {
  // Rank 0 of 3: sources 2 and 1 each send expert 0's rows as one message (the host runs such tiles of one
  // expert from consecutive sources as one GEMM by claiming them).
  PlanShape shape;
  shape.world = 3;
  shape.rank = 0;
  shape.hidden = 8;
  shape.experts = 1;
  shape.tile_m = 100;
  shape.rows = {{4}, {6}, {5}};
  auto const plan = OverlapPlan::build(shape);
  auto const tile_of = [&](int source) { return plan.tile_of_message(source, 0); };
  PlanScheduler scheduler(plan);
  EXPECT_FALSE(scheduler.claim(tile_of(1))); // not landed
  scheduler.landed(2, 0);
  scheduler.landed(1, 0);
  int const first = scheduler.next();
  ASSERT_GE(first, 0);
  int const other = plan.tiles()[static_cast<std::size_t>(first)].source == 2 ? tile_of(1) : tile_of(2);
  EXPECT_TRUE(scheduler.claim(other));
  EXPECT_FALSE(scheduler.claim(other)); // started already
  EXPECT_FALSE(scheduler.claim(first));
  scheduler.finish(first);
  scheduler.finish(other);
  // Both sources' layer1 tiles and the local work remain; no layer0 tile of a remote source runs twice.
  for (int i; (i = scheduler.next()) >= 0;) {
    auto const &t = plan.tiles()[static_cast<std::size_t>(i)];
    EXPECT_FALSE(t.kind == PlanTile::Kind::layer0 && t.source != 0) << "remote layer0 tile " << i << " ran twice";
    scheduler.finish(i);
  }
  EXPECT_TRUE(scheduler.all_finished());
}

// First-use tuning of the host layer's comet parameters: where no registry entry gives them, the first comet forward
// looks in the per-user cache (rank 0 reads it and broadcasts), else measures a few candidates derived from the shape
// within a time budget, runs the winner last (its output is the forward's) and caches it (rank 0 writes).
#include "impl/LayerState.hpp"

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessel::moe {

using namespace Impl;

namespace {

// Rank 0 reports what went wrong with the cache; a cache must never stop a job.
void warn(std::string const &text) {
  std::fflush(stdout);
  std::fprintf(stderr, "tessel moe: warning: %s\n", text.c_str());
  std::fflush(stderr);
}

constexpr std::size_t packed_size = 7;

std::array<std::int64_t, packed_size> pack(bool found, CometParams const &p) {
  return {found ? 1 : 0,
          p.comm_workers,
          p.in_flight,
          p.n_splits,
          p.m_splits,
          p.tile_m,
          static_cast<std::int64_t>(p.policy)};
}

CometParams unpack(std::array<std::int64_t, packed_size> const &v) {
  CometParams p;
  p.comm_workers = static_cast<int>(v[1]);
  p.in_flight = static_cast<int>(v[2]);
  p.n_splits = static_cast<int>(v[3]);
  p.m_splits = static_cast<int>(v[4]);
  p.tile_m = v[5];
  p.policy = static_cast<PlanPolicy>(v[6]);
  return p;
}

// The values tried per knob, in the order the search walks the knobs. The M tile matters most on the host (each
// GEMM call packs the expert's weights), then the column blocks; a communication thread, token ranges and the
// policy are second-order. Tiles beyond the rows of one (source, expert) pair change nothing, so they stop there.
struct Knobs {
  std::vector<std::int64_t> tiles;
  std::vector<int> splits, workers{0, 1}, ranges{1, 2};
  std::vector<PlanPolicy> policies{PlanPolicy::critical_path, PlanPolicy::local_first};
};

Knobs knobs_for(MoeConfig const &config, CometParams const &start) {
  Knobs k;
  std::int64_t const per_pair =
      std::max<std::int64_t>(1, config.tokens * config.topk / std::max<std::int64_t>(config.experts, 1));
  std::int64_t const top = std::min<std::int64_t>(1024, std::max(start.tile_m, m_bucket(per_pair)));
  for (std::int64_t t = std::max<std::int64_t>(32, start.tile_m / 2); t <= top; t *= 2)
    k.tiles.push_back(t);
  for (int s : {1, 2, 4})
    if (config.hidden / s >= 32 || s == 1)
      k.splits.push_back(s);
  return k;
}

} // namespace

bool MoeLayer::State::first_use_enabled(LayerOptions const &options) {
  if (!options.tune_on_first_use)
    return false;
  char const *env = std::getenv("TESSEL_MOE_TUNE");
  std::string const value = env ? env : "";
  if (value.empty() || value == "on" || value == "1")
    return true;
  TESSEL_REQUIRE_USAGE(value == "off" || value == "0",
                       "environment variable TESSEL_MOE_TUNE expects on or off (1 or 0), got '", value, "'");
  return false;
}

template <class ExecSpace>
bool MoeLayer::State::comet_first_use(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate,
                                      HostMatrix out) {
  auto const t_start = Clock::now();
  first_use = FirstUseTuning{};
  first_use.cache = options.tuning_cache.empty() ? default_tuning_cache_path() : options.tuning_cache;
  auto key = TuningKey::of(config, options.backend);
  auto const machine = MachineKey::of(comm);
  key.machine = machine.token();
  CometParams const fallback = comet;

  // Rank 0 reads the cache and tells the others: every rank must run the same parameters, and the ranks need not
  // share a home directory.
  auto found = pack(false, fallback);
  if (rank() == 0) {
    std::string warning;
    auto const cache = load_tuning_cache(first_use.cache, &warning);
    if (!warning.empty())
      warn(warning);
    if (auto const *entry = cache.find(key, machine)) {
      try {
        entry->params.validate(config, backend);
        found = pack(true, entry->params);
      } catch (Exception const &e) {
        warn("ignoring the tuning cache entry '" + entry->key.describe() + "' of '" + first_use.cache +
             "': " + e.what());
      }
    }
  }
  comm.broadcast(found.data(), packed_size, DataType::int64, 0);
  tune_pending = false;
  comet_checked = false;
  if (found[0] != 0) {
    comet = unpack(found);
    comet_source = "cache";
    return false;
  }

  // The search: one knob at a time, the current best against the knob's other values. A stage measures its
  // candidates in rounds, one run of each per round, so that a machine whose load changes during the search
  // slows them alike; a candidate's score is its median over the rounds (the slowest rank's time), so that one
  // disturbed run does not decide. All ranks decide on the same numbers.
  int const rounds = 3;
  double const budget = options.tune_budget;
  double slowest = 0.0, elapsed = 0.0;
  CometParams last = fallback;
  auto const run_once = [&](CometParams const &p) {
    comet = p;
    last = p;
    comm.barrier();
    auto const t0 = Clock::now();
    forward_comet(space, tokens, gate, out);
    double const mine[2] = {since(t0), since(t_start)};
    double all[2] = {0.0, 0.0};
    comm.allreduce(mine, all, 2, ReduceOp::max);
    ++first_use.forwards;
    slowest = std::max(slowest, all[0]);
    elapsed = all[1];
    return all[0];
  };
  auto const median = [](std::vector<double> t) {
    std::sort(t.begin(), t.end());
    auto const h = t.size() / 2;
    return t.size() % 2 ? t[h] : 0.5 * (t[h - 1] + t[h]);
  };
  CometParams best = fallback;
  double best_time = 0.0, fallback_time = 0.0;
  bool out_of_time = false;
  // Returns the stage's winner (the current best unless another value is faster).
  auto const stage = [&](auto set, auto const &values) {
    std::vector<CometParams> candidates{best};
    for (auto v : values) {
      auto p = best;
      set(p, v);
      if (std::find(candidates.begin(), candidates.end(), p) != candidates.end())
        continue;
      try {
        p.validate(config, backend);
      } catch (Exception const &) {
        continue;
      }
      candidates.push_back(p);
    }
    if (candidates.size() < 2 || out_of_time)
      return;
    std::vector<std::vector<double>> times(candidates.size());
    for (int r = 0; r < rounds; ++r) {
      // A round starts only if it and the final run fit in what is left of the budget.
      if (elapsed + static_cast<double>(candidates.size() + 1) * slowest > budget) {
        out_of_time = true;
        break;
      }
      for (std::size_t c = 0; c < candidates.size(); ++c)
        times[c].push_back(run_once(candidates[c]));
    }
    if (times[0].empty())
      return;
    std::size_t win = 0;
    std::vector<double> score(candidates.size());
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      score[c] = median(times[c]);
      first_use.measured.emplace_back(candidates[c], score[c]);
      if (candidates[c] == fallback)
        fallback_time = score[c];
      if (score[c] < score[win])
        win = c;
    }
    best = candidates[win];
    best_time = score[win];
  };
  try {
    run_once(fallback); // the first comet forward pays for first touches: a warm-up, not a measurement
    auto const knobs = knobs_for(config, fallback);
    stage([](CometParams &p, std::int64_t v) { p.tile_m = v; }, knobs.tiles);
    stage([](CometParams &p, int v) { p.n_splits = v; }, knobs.splits);
    stage([](CometParams &p, int v) { p.comm_workers = v; }, knobs.workers);
    stage([](CometParams &p, int v) { p.m_splits = v; }, knobs.ranges);
    stage([](CometParams &p, PlanPolicy v) { p.policy = v; }, knobs.policies);
    // Each stage compared its candidates under the same load, but the load may have changed between stages: the
    // winner must beat the rule once more, side by side.
    stage([](CometParams &p, CometParams const &v) { p = v; }, std::vector<CometParams>{fallback});
    // The forward's output is the winner's.
    if (!(last == best))
      run_once(best);
    comet = best;
  } catch (...) {
    comet = fallback;
    tune_pending = true;
    throw;
  }
  first_use.ran = true;
  first_use.seconds = comm.allreduce_value(since(t_start), ReduceOp::max);
  // Nothing to compare within the budget: the rule stays, and is not cached, so that a later job with more time
  // (or a larger budget) still tunes.
  if (first_use.measured.empty()) {
    char why[96];
    std::snprintf(why, sizeof(why), "fallback rule (a tuning budget of %g s allows no comparison)", budget);
    comet_source = why;
    return true;
  }
  comet_source = "tuned on first use";
  if (rank() == 0) {
    char note[160];
    std::snprintf(note, sizeof(note), "first-use tuning: comet %.3g ms (fallback rule %.3g ms), %d runs in %.3g s",
                  1e3 * best_time, 1e3 * fallback_time, first_use.forwards, first_use.seconds);
    std::string warning;
    first_use.stored = store_tuning_cache(first_use.cache, TuningEntry{key, comet, note}, &warning);
    if (!first_use.stored)
      warn(warning);
  }
  return true;
}

#define TESSEL_MOE_INSTANTIATE_FIRST_USE(SPACE)                                                                        \
  template bool MoeLayer::State::comet_first_use(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_FIRST_USE)

} // namespace tessel::moe

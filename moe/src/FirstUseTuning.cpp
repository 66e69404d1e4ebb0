// First-use tuning of the host layer's comet parameters: where no registry entry gives them, the first comet forward
// looks in the per-user cache (rank 0 reads it and broadcasts), else runs the comet search of the tools' --tune
// (CometSearch.hpp) within a time budget, the winner last (its output is the forward's), and caches it (rank 0 writes).
#include "impl/LayerState.hpp"

#include <tessel/moe/CometSearch.hpp>

#include <tessel/core/Execution.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>
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

// Rank 0 reads the cache and tells the others: every rank must run the same parameters, and the ranks need not share
// a home directory. Returns the cached parameters of \p key on this machine, if any.
std::optional<CometParams> MoeLayer::State::cached_comet(TuningKey const &key, MachineKey const &machine) {
  auto found = pack(false, comet);
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
  if (found[0] == 0)
    return std::nullopt;
  return unpack(found);
}

// Rank 0 writes the winner into the cache (a cache that cannot be written is a warning, never an error).
void MoeLayer::State::store_comet(TuningKey const &key, CometSearchResult const &search) {
  if (rank() != 0)
    return;
  char note[160];
  std::snprintf(note, sizeof(note), "first-use tuning: comet %.3g ms (fallback rule %.3g ms), %d runs in %.3g s",
                1e3 * search.best_seconds, 1e3 * search.rule_seconds, search.runs, search.seconds);
  std::string warning;
  first_use.stored = store_tuning_cache(first_use.cache, TuningEntry{key, comet, note}, &warning);
  if (!first_use.stored)
    warn(warning);
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
  tune_pending = false;
  comet_checked = false;
  if (auto const cached = cached_comet(key, machine)) {
    comet = *cached;
    comet_source = "cache";
    return false;
  }
  // The search of the tools' --tune, within the budget; its last forward, the winner's, is this forward.
  CometParams const fallback = comet;
  CometSearchOptions search_options;
  search_options.budget = options.tune_budget;
  search_options.start = fallback;
  CometSearchResult search;
  try {
    search = search_comet(comm, config, backend, search_options, [&](CometParams const &params) {
      comet = params;
      forward_comet(space, tokens, gate, out);
    });
  } catch (...) {
    comet = fallback;
    tune_pending = true;
    throw;
  }
  comet = search.best;
  first_use.ran = true;
  first_use.forwards = search.runs;
  first_use.measured = search.measured;
  first_use.seconds = comm.allreduce_value(since(t_start), ReduceOp::max);
  // Nothing to compare within the budget: the rule stays, and is not cached, so that a later job with more time
  // (or a larger budget) still tunes.
  if (first_use.measured.empty()) {
    char why[96];
    std::snprintf(why, sizeof(why), "fallback rule (a tuning budget of %g s allows no comparison)",
                  options.tune_budget);
    comet_source = why;
    return true;
  }
  comet_source = "tuned on first use";
  store_comet(key, search);
  return true;
}

#define TESSEL_MOE_INSTANTIATE_FIRST_USE(SPACE)                                                                        \
  template bool MoeLayer::State::comet_first_use(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_FIRST_USE)

} // namespace tessel::moe

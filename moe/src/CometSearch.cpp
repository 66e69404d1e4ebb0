// The one comet search (CometSearch.hpp): the knob grid, and the protocol that runs its stages.
#include <tessel/moe/CometSearch.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

namespace tessel::moe {

CometSearchGrid CometSearchGrid::of(MoeConfig const &config) {
  CometSearchGrid grid;
  auto const rule = fallback_params(config);
  std::int64_t const per_pair =
      std::max<std::int64_t>(1, config.tokens * config.topk / std::max<std::int64_t>(config.experts, 1));
  std::int64_t const top = std::min<std::int64_t>(1024, std::max(rule.tile_m, m_bucket(per_pair)));
  for (std::int64_t tile = std::max<std::int64_t>(32, std::min<std::int64_t>(128, rule.tile_m / 2)); tile <= top;
       tile *= 2)
    grid.tiles.push_back(tile);
  for (int splits : {1, 2, 4, 8})
    if (splits == 1 || config.hidden / splits >= 32)
      grid.splits.push_back(splits);
  grid.workers = {0, 1, 2};
  grid.ranges = {1, 2, 4};
  grid.policies = {PlanPolicy::critical_path, PlanPolicy::local_first};
  grid.in_flight = {0, 4};
  return grid;
}

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  auto const half = times.size() / 2;
  return times.size() % 2 ? times[half] : 0.5 * (times[half - 1] + times[half]);
}

// One search: its state between the stages.
class Search {
public:
  Search(Communicator const &comm, MoeConfig const &config, std::string const &backend,
         CometSearchOptions const &options, std::function<void(CometParams const &)> const &run_forward)
      : _comm(comm), _config(config), _backend(backend), _options(options), _run_forward(run_forward),
        _rule(fallback_params(config, backend)), _start(Clock::now()) {
    _result.best = options.start.value_or(_rule);
  }

  CometSearchResult run() {
    run_once(_result.best); // the warm-up: a layer's first comet forward pays for first touches
    stage({_result.best, _rule});
    auto const grid = CometSearchGrid::of(_config);
    walk([](CometParams &p, std::int64_t v) { p.tile_m = v; }, grid.tiles);
    walk([](CometParams &p, int v) { p.n_splits = v; }, grid.splits);
    walk([](CometParams &p, int v) { p.comm_workers = v; }, grid.workers);
    walk([](CometParams &p, int v) { p.m_splits = v; }, grid.ranges);
    walk([](CometParams &p, PlanPolicy v) { p.policy = v; }, grid.policies);
    walk([](CometParams &p, int v) { p.in_flight = v; }, grid.in_flight);
    // Each stage compared its candidates under one load, but the load may have changed between stages: the winner
    // meets the rule once more, side by side.
    stage({_result.best, _rule});
    if (!(_last == _result.best))
      run_once(_result.best); // the layer's last output is the winner's
    _result.seconds = _elapsed;
    return _result;
  }

private:
  // One forward with \p params: after a barrier, until the slowest rank is done. Returns its time; keeps the
  // slowest time seen and the search's elapsed time (both maxima over the ranks, so every rank decides alike).
  double run_once(CometParams const &params) {
    _last = params;
    _comm.barrier();
    auto const t0 = Clock::now();
    _run_forward(params);
    auto const t1 = Clock::now();
    double const mine[2] = {std::chrono::duration<double>(t1 - t0).count(),
                            std::chrono::duration<double>(t1 - _start).count()};
    double all[2] = {0.0, 0.0};
    _comm.allreduce(mine, all, 2, ReduceOp::max);
    ++_result.runs;
    _slowest = std::max(_slowest, all[0]);
    _elapsed = all[1];
    return all[0];
  }

  // The current best against each value of one knob.
  template <class Set, class Value> void walk(Set set, std::vector<Value> const &values) {
    std::vector<CometParams> candidates{_result.best};
    for (auto const &value : values) {
      auto params = _result.best;
      set(params, value);
      candidates.push_back(params);
    }
    stage(candidates);
  }

  bool valid(CometParams const &params) const {
    try {
      params.validate(_config, _backend);
      return true;
    } catch (Exception const &) {
      return false;
    }
  }

  // Runs the distinct valid \p proposed candidates (the current best first) in interleaved rounds while the budget
  // allows; the lowest median becomes the best.
  void stage(std::vector<CometParams> const &proposed) {
    std::vector<CometParams> candidates;
    for (auto const &params : proposed)
      if (std::find(candidates.begin(), candidates.end(), params) == candidates.end() && valid(params))
        candidates.push_back(params);
    if (candidates.size() < 2 || _result.out_of_time)
      return;
    std::vector<std::vector<double>> times(candidates.size());
    for (int round = 0; round < _options.rounds; ++round) {
      double const needed = _elapsed + static_cast<double>(candidates.size() + 1) * _slowest;
      if (_options.budget > 0.0 && needed > _options.budget) {
        _result.out_of_time = true;
        break;
      }
      for (std::size_t c = 0; c < candidates.size(); ++c)
        times[c].push_back(run_once(candidates[c]));
    }
    if (times[0].empty())
      return;
    score(candidates, times);
  }

  void score(std::vector<CometParams> const &candidates, std::vector<std::vector<double>> const &times) {
    std::size_t winner = 0;
    std::vector<double> scores(candidates.size());
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      scores[c] = median(times[c]);
      _result.measured.emplace_back(candidates[c], scores[c]);
      if (candidates[c] == _rule)
        _result.rule_seconds = scores[c];
      if (scores[c] < scores[winner])
        winner = c;
      if (_options.progress) {
        std::ostringstream os;
        os << "tune: " << candidates[c].describe() << " -> " << 1e3 * scores[c] << " ms";
        _options.progress(os.str());
      }
    }
    _result.best = candidates[winner];
    _result.best_seconds = scores[winner];
  }

  Communicator const &_comm;
  MoeConfig const &_config;
  std::string const &_backend;
  CometSearchOptions const &_options;
  std::function<void(CometParams const &)> const &_run_forward;
  CometParams const _rule;
  Clock::time_point const _start;
  CometParams _last;
  double _slowest = 0.0, _elapsed = 0.0;
  CometSearchResult _result;
};

} // namespace

CometSearchResult search_comet(Communicator const &comm, MoeConfig const &config, std::string const &backend,
                               CometSearchOptions const &options,
                               std::function<void(CometParams const &)> const &run_forward) {
  TESSEL_REQUIRE(options.rounds >= 1, "search_comet: rounds must be >= 1, got ", options.rounds);
  TESSEL_REQUIRE(std::isfinite(options.budget) && options.budget >= 0.0,
                 "search_comet: budget must be a finite number of seconds >= 0 (0: no limit), got ", options.budget);
  TESSEL_REQUIRE(static_cast<bool>(run_forward), "search_comet: no forward to run");
  if (options.start)
    options.start->validate(config, backend);
  return Search(comm, config, backend, options, run_forward).run();
}

} // namespace tessel::moe

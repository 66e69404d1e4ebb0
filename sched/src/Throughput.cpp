#include <tessel/sched/Throughput.hpp>

#include <tessel/sched/Model.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cmath>

namespace tessel::sched {

namespace {
constexpr double kLocalityScale = 0.9; // Arena's LOCALITY_SCALE_FACTOR
constexpr double kSizeScale = 1.8;     // Arena's PARAM_NUM_SCALE_FACTOR
constexpr double kDpMemoryMargin = 1.2, kDpMemoryFraction = 0.8;

enum Kind { kAdaptive = 0, kDpChecked = 1, kDpUnchecked = 2 };

int log2_exact(int n) {
  int l = 0;
  while ((1 << l) < n)
    ++l;
  return (1 << l) == n ? l : -1;
}
} // namespace

char const *source_name(ThroughputSource source) {
  switch (source) {
  case ThroughputSource::table:
    return "table";
  case ThroughputSource::estimator:
    return "estimator";
  case ThroughputSource::table_then_estimator:
    return "table+estimator";
  }
  return "?";
}

bool parse_source(std::string_view name, ThroughputSource &source) {
  for (auto s : {ThroughputSource::table, ThroughputSource::estimator, ThroughputSource::table_then_estimator})
    if (name == source_name(s)) {
      source = s;
      return true;
    }
  return false;
}

double round3(double x) { return std::round(x * 1000.0) / 1000.0; }

ThroughputOracle::ThroughputOracle(Cluster const &cluster, ProfileTable const *table, Estimator const *estimator,
                                   ThroughputSource source, double interval_s)
    : _cluster(&cluster), _table(table), _estimator(estimator), _source(source), _interval(interval_s) {
  TESSEL_REQUIRE(source == ThroughputSource::estimator || table != nullptr, "throughput source '", source_name(source),
                 "' needs a profile table");
  TESSEL_REQUIRE(source == ThroughputSource::table || estimator != nullptr, "throughput source '", source_name(source),
                 "' needs an estimator");
  TESSEL_REQUIRE(interval_s > 0, "scheduling interval must be positive, got ", interval_s);
  _cache.reserve(1 << 14);
}

ThroughputOracle::Found ThroughputOracle::find(int model, int batch, int type, int hosts, int per_host) const {
  Found f;
  if (!_table)
    return f;
  std::string const &gpu = _cluster->type(type).name;
  if (auto const t = _table->iter_time(model, batch, gpu, hosts, per_host)) {
    f.ok = true;
    f.iter_time = *t;
    return f;
  }
  // A relaxed locality is estimated from the same GPU count on its best locality.
  int const cap = _cluster->type_capacity(type);
  int const n = hosts * per_host;
  int const best_per_host = cap > 0 && n > cap ? cap : n;
  int const best_hosts = n / best_per_host;
  if (auto const t = _table->iter_time(model, batch, gpu, best_hosts, best_per_host)) {
    f.ok = true;
    f.iter_time = *t;
    f.locality_steps = std::max(0, log2_exact(best_per_host / per_host));
    return f;
  }
  // A missing size is estimated from the next larger profiled size of the family (same devices).
  auto const &cat = ModelCatalog::builtin();
  int steps = 0;
  for (int m = cat.next_larger(model); m >= 0; m = cat.next_larger(m)) {
    ++steps;
    if (auto const t = _table->iter_time(m, batch, gpu, hosts, per_host)) {
      f.ok = true;
      f.iter_time = *t;
      f.size_steps = steps;
      return f;
    }
  }
  return f;
}

double ThroughputOracle::compute(int kind, int model, int batch, int type, int hosts, int per_host) const {
  ++_computed;
  bool const use_table = _source != ThroughputSource::estimator;
  bool const use_est = _source != ThroughputSource::table;
  if (kind == kDpChecked) {
    bool decided = false;
    if (use_table) {
      if (DpMemory const *mem = _table->dp_memory(model, batch)) {
        int const idx = log2_exact(hosts * per_host);
        if (idx < 0 || idx > 4)
          return kInfeasible;
        double const need = mem->gb[static_cast<std::size_t>(idx)];
        double const cap = _cluster->type(type).memory_gb;
        if (need != 0 && (need == -1 || need * kDpMemoryMargin > cap * kDpMemoryFraction))
          return kInfeasible;
        decided = true;
      } else if (_source == ThroughputSource::table) {
        return kInfeasible; // Arena: no DP memory profile means too large for DP
      }
    }
    if (!decided && use_est) {
      auto const e = _estimator->data_parallel(model, batch, type, hosts, per_host);
      if (!e.valid || !e.fits)
        return kInfeasible;
    }
  }
  if (use_table) {
    Found const f = find(model, batch, type, hosts, per_host);
    if (f.ok) {
      double const it = f.iter_time;
      if (it == 0 || it > _interval)
        return kInfeasible;
      double thr = round3(batch / it);
      if (kind == kAdaptive) {
        if (f.locality_steps)
          thr *= std::pow(kLocalityScale, f.locality_steps);
        if (f.size_steps)
          thr *= std::pow(kSizeScale, f.size_steps);
      }
      return thr > 0 ? thr : kInfeasible;
    }
    if (!use_est)
      return kInfeasible;
  }
  // Estimator: adaptive = best of the uniform and greedy plans over all Cells of the allocation; DP = one stage.
  double e2e;
  if (kind == kAdaptive) {
    auto const a = _estimator->best(model, batch, type, hosts, per_host, PlanStrategy::uniform);
    auto const b = _estimator->best(model, batch, type, hosts, per_host, PlanStrategy::greedy);
    if (!a.feasible && !b.feasible)
      return kInfeasible;
    e2e = !a.feasible ? b.estimate.e2e : !b.feasible ? a.estimate.e2e : std::min(a.estimate.e2e, b.estimate.e2e);
  } else {
    auto const e = _estimator->data_parallel(model, batch, type, hosts, per_host);
    if (!e.valid)
      return kInfeasible;
    e2e = e.e2e;
  }
  if (!(e2e > 0) || e2e > _interval)
    return kInfeasible;
  double const thr = round3(batch / e2e);
  return thr > 0 ? thr : kInfeasible;
}

double ThroughputOracle::cached(int kind, int model, int batch, int type, int hosts, int per_host) const {
  ++_lookups;
  if (!_memoize)
    return compute(kind, model, batch, type, hosts, per_host);
  std::uint64_t const key = (std::uint64_t(kind) << 62) | (std::uint64_t(model & 0x3FF) << 52) |
                            (std::uint64_t(batch & 0xFFFFF) << 32) | (std::uint64_t(type & 0xFF) << 24) |
                            (std::uint64_t(hosts & 0xFFF) << 12) | std::uint64_t(per_host & 0xFFF);
  auto const it = _cache.find(key);
  if (it != _cache.end())
    return it->second;
  double const v = compute(kind, model, batch, type, hosts, per_host);
  _cache.emplace(key, v);
  return v;
}

double ThroughputOracle::adaptive(int model, int batch, int type, int hosts, int per_host) const {
  return cached(kAdaptive, model, batch, type, hosts, per_host);
}

double ThroughputOracle::data_parallel(int model, int batch, int type, int hosts, int per_host,
                                       bool check_memory) const {
  return cached(check_memory ? kDpChecked : kDpUnchecked, model, batch, type, hosts, per_host);
}

double ThroughputOracle::iter_time(int model, int batch, int type, int hosts, int per_host) const {
  double const thr = adaptive(model, batch, type, hosts, per_host);
  return thr > 0 ? round3(batch / thr) : kInfeasibleIterTime;
}

} // namespace tessel::sched

#ifndef TESSEL_SCHED_THROUGHPUT_HPP
#define TESSEL_SCHED_THROUGHPUT_HPP

/// \file Throughput.hpp
/// \brief The throughput lookup every policy uses: samples/s of a job on `hosts x per_host` GPUs of one type,
/// keyed by (model, size, batch, GPU type, hosts, GPUs per host) exactly as Arena's `db_querier.py`, memoized.

#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Profile.hpp>

#include <cstdint>
#include <string_view>
#include <unordered_map>

namespace tessel::sched {

/// Arena's INFEASIBLE_THR: the throughput of an allocation a job cannot run on.
inline constexpr double kInfeasible = -1e9;
/// Arena's INFEASIBLE_ITER_TIME.
inline constexpr double kInfeasibleIterTime = 1e9;

/// \brief Where throughputs come from.
enum class ThroughputSource {
  table,               ///< the profile table only, with Arena's fallbacks; anything else is infeasible
  estimator,           ///< the analytic estimator only (calibrated by the table when one is given)
  table_then_estimator ///< the table (with fallbacks) first, the estimator for what it lacks
};

/// "table", "estimator" or "table+estimator".
char const *source_name(ThroughputSource source);
/// \brief The source named \p name (as source_name writes it); false when there is none of that name.
bool parse_source(std::string_view name, ThroughputSource &source);

/// \brief Memoized throughput oracle. Not thread-safe (one per simulation).
///
/// Table semantics follow Arena: a missing (hosts, per_host) entry falls back to the best-locality entry scaled by
/// 0.9 per halving of the per-host GPUs; a missing size falls back to the next larger size of the family scaled by
/// 1.8 per size step (adaptive plans only); iteration times above the scheduling interval, the -1 marker and
/// non-positive throughputs are infeasible; throughputs are rounded to 3 decimals. The data-parallel query uses
/// the best-plan times and, when asked, Arena's memory rule (1.2 x the DP replica memory <= 0.8 x GPU memory).
class ThroughputOracle {
public:
  /// An oracle over \p table and/or \p estimator (either may be null when \p source does not use it; both must
  /// outlive the oracle), for rounds of \p interval_s seconds.
  ThroughputOracle(Cluster const &cluster, ProfileTable const *table, Estimator const *estimator,
                   ThroughputSource source, double interval_s = 300);

  /// Best-plan (adaptive parallelism) throughput in samples/s, or kInfeasible.
  double adaptive(int model, int batch, int type, int hosts, int per_host) const;
  /// Data-parallel throughput in samples/s, or kInfeasible; \p check_memory applies the DP memory rule.
  double data_parallel(int model, int batch, int type, int hosts, int per_host, bool check_memory) const;
  /// round(batch / adaptive, 3) seconds, or kInfeasibleIterTime.
  double iter_time(int model, int batch, int type, int hosts, int per_host) const;

  /// The cluster.
  Cluster const &cluster() const { return *_cluster; }
  /// What answers.
  ThroughputSource source() const { return _source; }
  /// The scheduling interval (s): longer iterations are infeasible.
  double interval() const { return _interval; }

  /// Switches memoization off (for measuring what it saves).
  void set_memoize(bool on) { _memoize = on; }
  /// Queries answered so far.
  std::size_t lookups() const { return _lookups; }
  /// Queries that were computed (not found in the memo).
  std::size_t computed() const { return _computed; }

private:
  struct Found {
    bool ok = false;
    double iter_time = 0;
    int locality_steps = 0; // halvings of per-host GPUs between the query and the entry found
    int size_steps = 0;     // sizes between the query and the entry found
  };
  Found find(int model, int batch, int type, int hosts, int per_host) const;
  double compute(int kind, int model, int batch, int type, int hosts, int per_host) const;
  double cached(int kind, int model, int batch, int type, int hosts, int per_host) const;

  Cluster const *_cluster;
  ProfileTable const *_table;
  Estimator const *_estimator;
  ThroughputSource _source;
  double _interval;
  bool _memoize = true;
  mutable std::unordered_map<std::uint64_t, double> _cache;
  mutable std::size_t _lookups = 0, _computed = 0;
};

/// Rounds to 3 decimals (Arena's PREC).
double round3(double x);

} // namespace tessel::sched

#endif

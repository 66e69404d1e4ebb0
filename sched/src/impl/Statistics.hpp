#ifndef TESSEL_SCHED_IMPL_STATISTICS_HPP
#define TESSEL_SCHED_IMPL_STATISTICS_HPP

// Percentiles of a sample (the simulator's JCT metrics, the controller's per-round costs).

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessel::sched::Impl {

/// The \p q-th percentile (0-100) with linear interpolation between ranks; 0 for an empty sample.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  double const pos = q / 100.0 * double(v.size() - 1);
  std::size_t const lo = static_cast<std::size_t>(std::floor(pos));
  std::size_t const hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

} // namespace tessel::sched::Impl

#endif

#ifndef TESSEL_BENCHMARKS_GNN_ROOFLINE_HPP
#define TESSEL_BENCHMARKS_GNN_ROOFLINE_HPP

// The host's own limits for Y = A X, measured once per run of tessel-gnn-bench (src: Roofline.cpp): the roofline
// time max(bytes / bandwidth, flops / peak) of an aggregation, with bytes the compulsory traffic (A, X and Y once),
// and the rate at which one core gathers rows of X in random order (the floor of a graph whose X rows are not
// reused from cache).
#include <tessel/core/Json.hpp>
#include <tessel/gnn/Graph.hpp>

#include <Kokkos_Core.hpp>

#include <map>
#include <vector>

namespace tessel::gnn::bench {

/// Sustained limits of the cores the host execution space runs on.
struct HostLimits {
  int threads = 1;
  double triad_gbs = 0;  ///< STREAM-like triad a = b + s c on arrays far larger than the caches, best of 5
  double fma_gflops = 0; ///< fp32 fused multiply-adds on independent chains (2 flops each), best of 5
  /// Per feature width: GB/s of rows of that width gathered in uniform random order from a 64 MiB table and summed
  /// 16 to an output row (the access of CSR on a graph without locality), best of 5
  std::map<int, double> gather_gbs;
  Json json() const;
};

HostLimits measure_host_limits(Kokkos::DefaultHostExecutionSpace const &space, std::vector<int> const &widths);

/// Seconds of Y = A X on \p a if every entry gathered its row of X from memory at the random-gather rate.
double no_reuse_seconds(HostLimits const &limits, Graph<std::int32_t> const &a, int f);

/// Compulsory bytes of Y = A X on \p a with \p f feature columns: A's offsets, columns and values, X and Y once each.
double compulsory_bytes(Graph<std::int32_t> const &a, int f);

/// Seconds of the roofline: the larger of the memory floor and the compute floor.
double roofline_seconds(HostLimits const &limits, double bytes, double flops);

} // namespace tessel::gnn::bench

#endif

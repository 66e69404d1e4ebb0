#ifndef TESSEL_BENCHMARKS_GNN_ROOFLINE_HPP
#define TESSEL_BENCHMARKS_GNN_ROOFLINE_HPP

// The host's own limits for Y = A X, measured once per run of tessel-gnn-bench (src: Roofline.cpp): the roofline
// time max(bytes / bandwidth, flops / peak) of an aggregation, with bytes the compulsory traffic (A, X and Y once).
#include <tessel/core/Json.hpp>
#include <tessel/gnn/Graph.hpp>

#include <Kokkos_Core.hpp>

namespace tessel::gnn::bench {

/// Sustained limits of the cores the host execution space runs on.
struct HostLimits {
  int threads = 1;
  double triad_gbs = 0;  ///< STREAM-like triad a = b + s c on arrays far larger than the caches, best of 5
  double fma_gflops = 0; ///< fp32 fused multiply-adds on independent chains (2 flops each), best of 5
  Json json() const;
};

HostLimits measure_host_limits(Kokkos::DefaultHostExecutionSpace const &space);

/// Compulsory bytes of Y = A X on \p a with \p f feature columns: A's offsets, columns and values, X and Y once each.
double compulsory_bytes(Graph<std::int32_t> const &a, int f);

/// Seconds of the roofline: the larger of the memory floor and the compute floor.
double roofline_seconds(HostLimits const &limits, double bytes, double flops);

} // namespace tessel::gnn::bench

#endif

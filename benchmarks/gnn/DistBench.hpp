#ifndef TESSEL_BENCHMARKS_GNN_DISTBENCH_HPP
#define TESSEL_BENCHMARKS_GNN_DISTBENCH_HPP

// `tessel-gnn-bench --backend dist` under mpiexec: distributed Y = A X (DistSpmm) with the sequential and the
// overlapped schedule side by side, optionally over an emulated link (src: DistBench.cpp).
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <string>
#include <vector>

namespace tessel::gnn::bench {

struct DistBenchConfig {
  std::string data, op_name = "gcn", json;
  std::vector<int> widths;
  SpmmOptions options; ///< the local block's handle
  DistPartitionMethod partition = DistPartitionMethod::automatic;
  double bandwidth_mbps = 0; ///< emulated link (PacedCommunicator): MB/s per direction, 0 = not emulated
  double latency_us = 0;
  int reps = 15, warmup = 3;
};

/// Runs the distributed benchmark; returns 3 when a rank's result differs from the single-process one.
int bench_dist(DistBenchConfig const &config);

} // namespace tessel::gnn::bench

#endif

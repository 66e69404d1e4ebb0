#ifndef TESSEL_BENCHMARKS_GNN_CUDABENCH_HPP
#define TESSEL_BENCHMARKS_GNN_CUDABENCH_HPP

// `tessel-gnn-bench --backend cuda`: every device kernel side by side (src: CudaBench.cpp, built with CUDA).
#include <tessel/gnn/Spmm.hpp>

#include <string>
#include <vector>

namespace tessel::gnn::bench {

struct CudaBenchConfig {
  std::string data, op_name = "gcn", json;
  std::vector<int> widths;
  std::vector<std::string> kernels; ///< empty: every device kernel
  int reps = 20, warmup = 3;
  SpmmOptions options; ///< timing, partition, part size (host options; the device cost model replaces its rates)
  bool allow_tf32 = true;
  std::string dense_engine = "automatic";
};

/// Runs the device benchmark; prints a skip message and returns 0 where no CUDA device is visible. Returns 3 when
/// a kernel's result is wrong.
int bench_cuda(CudaBenchConfig const &config);

} // namespace tessel::gnn::bench

#endif

#ifndef TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP
#define TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP

#include <tessel/core/CommandLine.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::moe::bench {

/// Options both MoE benchmarks take (host and --backend cuda); each sets its own defaults and --smoke sizes first.
struct SweepOptions {
  std::vector<std::string> models{"mixtral", "qwen2", "phi35"};
  std::vector<std::int64_t> tokens;
  double scale = 1.0;
  int tp = 1;
  double imbalance = 0.04;
  std::vector<int> chunks{2, 4};
  int iters = 1, warmup = 0;
  std::string json;
  std::uint64_t seed = 2025;

  /// Overrides the defaults with the options given on \p cl.
  void read(tessel::CommandLine &cl) {
    models = cl.get_list("models", models);
    tokens = cl.get_int_list("tokens", tokens);
    scale = cl.get_double("scale", scale);
    tp = static_cast<int>(cl.get_int("tp", tp));
    imbalance = cl.get_double("imbalance", imbalance);
    auto const counts = cl.get_int_list("chunks", {});
    if (!counts.empty())
      chunks.assign(counts.begin(), counts.end());
    iters = static_cast<int>(cl.get_int("iters", iters));
    warmup = static_cast<int>(cl.get_int("warmup", warmup));
    json = cl.get("json", json);
    seed = static_cast<std::uint64_t>(cl.get_int("seed", static_cast<std::int64_t>(seed)));
  }
};

/// tessel-moe-bench --backend cuda (CudaBench.cpp): the schedules on the GPU in the one-process multi-rank mode.
/// Reads its options from \p cl (--backend already taken). Prints a message and returns 0 where the build has no
/// CUDA or no device is visible; 1 when a result is wrong.
int run_cuda_bench(tessel::CommandLine &cl);

} // namespace tessel::moe::bench

#endif

#ifndef TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP
#define TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP

#include <tessel/tools/CommandLine.hpp>

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

  /// The sizes --smoke sets (models: mixtral and qwen2) before the options given with it.
  struct Smoke {
    std::int64_t tokens = 64;
    double scale = 64;
    int iters = 1, warmup = 0;
  };

  /// Overrides the defaults with \p smoke under --smoke, then with the options given on \p cl.
  void read(tessel::CommandLine &cl, Smoke const &smoke) {
    if (cl.flag("smoke")) {
      models = {"mixtral", "qwen2"};
      tokens = {smoke.tokens};
      scale = smoke.scale;
      iters = smoke.iters;
      warmup = smoke.warmup;
    }
    models = cl.get_list("models", models);
    tokens = cl.get_int_list<std::int64_t>("tokens", tokens, 1, std::int64_t{1} << 24);
    scale = cl.get_double("scale", scale, tessel::Range::closed(1, 4096));
    tp = cl.get_int("tp", tp, 1, 1 << 16);
    imbalance = cl.get_double("imbalance", imbalance, tessel::Range::closed(0, 1));
    chunks = cl.get_int_list("chunks", chunks, 1, 1 << 16);
    iters = cl.get_int("iters", iters, 1, 1000000);
    warmup = cl.get_int("warmup", warmup, 0, 1000000);
    json = cl.get("json", json);
    seed = cl.get_int<std::uint64_t>("seed", seed, 0, UINT64_MAX);
  }
};

/// tessel-moe-bench --backend cuda (CudaBench.cpp): the schedules on the GPU in the one-process multi-rank mode.
/// Reads its options from \p cl (--backend already taken). Prints a message and returns 0 where the build has no
/// CUDA or no device is visible; 1 when a result is wrong.
int run_cuda_bench(tessel::CommandLine &cl);

} // namespace tessel::moe::bench

#endif

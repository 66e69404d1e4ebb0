#ifndef TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP
#define TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP

#include <tessel/moe/Synthetic.hpp>

#include <tessel/core/Error.hpp>
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

  /// A usage error when --models, --tokens or --chunks names one point twice (a point measured twice would print
  /// two rows of one point and keep one in the JSON), or names an unknown model. After the tool's other options, so
  /// that each option's own error comes first.
  void require_distinct_points() const {
    std::vector<std::string> canonical;
    for (auto const &name : models)
      canonical.push_back(tessel::CommandLine::parse_value("--models", name, find_model).name);
    require_distinct("--models", models, canonical);
    require_distinct("--tokens", tokens, tokens);
    require_distinct("--chunks", chunks, chunks);
  }

  /// A usage error naming \p option when two of \p given stand for the same value of \p values.
  template <class Given, class Value>
  static void require_distinct(char const *option, std::vector<Given> const &given, std::vector<Value> const &values) {
    for (std::size_t i = 0; i < values.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        TESSEL_REQUIRE_USAGE(!(values[i] == values[j]), "option ", option, " names ", given[j], " and ", given[i],
                             ": the same point twice");
  }
};

/// tessel-moe-bench --backend cuda (CudaBench.cpp): the schedules on the GPU in the one-process multi-rank mode.
/// Reads its options from \p cl (--backend already taken). Prints a message and returns 0 where the build has no
/// CUDA or no device is visible; 1 when a result is wrong.
int run_cuda_bench(tessel::CommandLine &cl);

} // namespace tessel::moe::bench

#endif

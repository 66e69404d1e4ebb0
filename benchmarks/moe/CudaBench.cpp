// tessel-moe-bench --backend cuda: sequential vs pipelined vs comet on the GPU, in the one-process multi-rank mode
// (W virtual ranks on one device, tessel::moe::cuda::VirtualRanksLayer), side by side in one run.
//
//   tessel-moe-bench --backend cuda --virtual-ranks 4 --models mixtral,qwen2,phi35 --tokens 4096 --dtype bfloat16
//
// Shapes: COMET's Table 2 models with N and K divided by --scale (default 4), Zipf-skewed routing tuned to
// --imbalance as in the host benchmark. Every schedule is timed with CUDA events (device time from the first rank's
// packing to the last rank's final sum; routing and uploads are on the host and excluded) --iters times in an order
// rotated every iteration; medians are reported, with the ratios sequential / comet and pipelined / comet. Results
// are checked after the timing: one forward per schedule, each on tokens of its own and from device buffers filled
// with NaN (DeviceDebug::poison_buffers, outside the timed region), so that no schedule can pass on what another left
// behind; the first and the last rank's first tokens against the dense double-precision reference. A point fails
// when an error exceeds the dtype's bound (a NaN is an infinite error).
#include "CudaBench.hpp"

#include <tessel/core/Config.hpp>

#ifdef TESSEL_ENABLE_CUDA
#include <tessel/core/Json.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Synthetic.hpp>
#include <tessel/moe/cuda/VirtualRanksLayer.hpp>

#include <tessel/core/cuda/Cuda.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#endif

#include <cstdio>
#include <string>
#include <vector>

namespace tessel::moe::bench {

#ifndef TESSEL_ENABLE_CUDA

int run_cuda_bench(tessel::CommandLine &) {
  std::printf(
      "tessel-moe-bench --backend cuda: skipped: this Tessel was built without CUDA (Tessel_ENABLE_CUDA=OFF)\n");
  return 0;
}

#else

namespace {

struct CudaOptions : SweepOptions {
  CudaOptions() {
    tokens = {4096};
    scale = 4.0;
    iters = 10;
    warmup = 2;
  }
  int world = 4;
  DataType dtype = DataType::bfloat16;
  std::int64_t check_tokens = 32;
};

DataType parse_dtype(std::string const &s) {
  if (s == "float32" || s == "fp32")
    return DataType::float32;
  if (s == "float16" || s == "fp16")
    return DataType::float16;
  if (s == "bfloat16" || s == "bf16")
    return DataType::bfloat16;
  TESSEL_REQUIRE_USAGE(false, "option --dtype expects float32, float16 or bfloat16, got '", s, "'");
  return DataType::float32;
}

/// Bound of max |y - ref| / max |ref| per dtype (the GPU test's bounds, tstCudaMoe.cpp).
double bound(DataType dtype) { return dtype == DataType::float32 ? 1e-4 : dtype == DataType::float16 ? 1e-2 : 6e-2; }

CudaOptions parse(tessel::CommandLine &cl) {
  if (cl.flag({"help", 'h'})) {
    std::printf("usage: tessel-moe-bench --backend cuda [options]\n"
                "  --virtual-ranks W  virtual ranks in this process on the current GPU (default 4)\n"
                "  --tp T             tensor-parallel size; EP = W / T (default 1)\n"
                "  --models LIST      mixtral, qwen2, phi35 (default all three)\n"
                "  --tokens LIST      tokens per rank M (default 4096)\n"
                "  --scale F          divide N and K by F (default 4)\n"
                "  --dtype D          float32, float16 or bfloat16 (default bfloat16)\n"
                "  --imbalance STD    routing imbalance (default 0.04)\n"
                "  --chunks LIST      pipelined chunk counts; the fastest is reported (default 2,4)\n"
                "  --iters N          timed runs per schedule (default 10), --warmup N (default 2)\n"
                "  --check-tokens T   every schedule: the first and last rank's first T tokens against the dense\n"
                "                     reference, on inputs of its own (default 32)\n"
                "  --json FILE        write the results as JSON\n"
                "  --smoke            tiny sizes, two iterations\n");
  }
  CudaOptions o;
  o.read(cl, {256, 16, 2, 1});
  o.world = cl.get_int("virtual-ranks", o.world, 1, 64);
  o.dtype = parse_dtype(cl.get("dtype", "bfloat16"));
  o.check_tokens = cl.get_int<decltype(o.check_tokens)>("check-tokens", o.check_tokens, 0, std::int64_t{1} << 24);
  cl.finish();
  o.require_distinct_points();
  TESSEL_REQUIRE_USAGE(o.world % o.tp == 0, "--tp ", o.tp, " must divide --virtual-ranks ", o.world);
  return o;
}

struct Point {
  std::string model;
  MoeConfig config;
  CometParams comet;
  std::string comet_source;
  double seq_ms = 0, pipe_ms = 0, comet_ms = 0;
  int best_chunks = 0;
  double err_seq = 0, err_pipe = 0, err_comet = 0; ///< against the dense reference, each on its own inputs
  int comm_blocks = 0, grid0 = 0, grid1 = 0;
  bool ok = true;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Json results_json(CudaOptions const &o, int device, std::vector<Point> const &points) {
  Json doc{{"benchmark", "tessel-moe-bench --backend cuda"},
           {"build", build_summary()},
           {"device", tessel::cuda::device_name(device)},
           {"virtual_ranks", o.world},
           {"dtype", name_of(o.dtype)},
           {"iters", o.iters}};
  auto &list = doc["points"] = Json::array();
  for (auto const &p : points)
    list.push_back({{"model", p.model},
                    {"config", p.config.describe()},
                    {"M", p.config.tokens},
                    {"comet", p.comet.describe()},
                    {"comet_source", p.comet_source},
                    {"sequential_ms", p.seq_ms},
                    {"pipelined_ms", p.pipe_ms},
                    {"pipelined_chunks", p.best_chunks},
                    {"comet_ms", p.comet_ms},
                    {"comm_blocks", p.comm_blocks},
                    {"grid0", p.grid0},
                    {"grid1", p.grid1},
                    {"err_sequential", p.err_seq},
                    {"err_pipelined", p.err_pipe},
                    {"err_comet", p.err_comet},
                    {"ok", p.ok}});
  return doc;
}

/// What one model shares across its token counts: the configuration, the gate and the dense weights.
struct ModelInputs {
  MoeConfig base;
  GateInput gate;
  DenseWeights dense;
};

ModelInputs model_inputs(CudaOptions const &o, std::string const &name) {
  auto const &model = find_model(name);
  auto base = scaled_config(model, o.scale, 1);
  base.ep = o.world / o.tp;
  base.tp = o.tp;
  auto const sample = make_tokens(base, 4096, o.seed + 7);
  double const alpha = zipf_alpha_for(base, sample, o.seed + 11, o.imbalance);
  auto const gate = make_gate(base, alpha, o.seed + 11);
  return {base, GateInput::from_weight(gate.weight, gate.bias), make_weights(base, o.seed + 13)};
}

/// Every virtual rank's shard, tokens and gate for one point, and an output per schedule.
struct RankInputs {
  std::vector<ExpertWeights> shards;
  std::vector<HostMatrix> tokens;
  std::vector<ConstHostMatrix> const_tokens;
  std::vector<GateInput> gates;
  std::vector<HostMatrix> out_seq, out_pipe, out_comet;

  std::vector<HostMatrix> const &out(Schedule s) const {
    return s == Schedule::sequential ? out_seq : s == Schedule::pipelined ? out_pipe : out_comet;
  }
};

/// Every rank's tokens; \p salt gives each checked forward tokens of its own.
void fresh_tokens(CudaOptions const &o, MoeConfig const &config, std::uint64_t salt, RankInputs &in) {
  in.tokens.clear();
  in.const_tokens.clear();
  for (int r = 0; r < o.world; ++r) {
    in.tokens.push_back(make_tokens(config, config.tokens, o.seed + 100 + salt + static_cast<std::uint64_t>(r)));
    in.const_tokens.push_back(in.tokens.back());
  }
}

RankInputs rank_inputs(CudaOptions const &o, ModelInputs const &mi, MoeConfig const &config) {
  RankInputs in;
  auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden);
  fresh_tokens(o, config, 0, in);
  for (int r = 0; r < o.world; ++r) {
    in.shards.push_back(shard_weights(config, r, mi.dense));
    in.gates.push_back(mi.gate);
    in.out_seq.emplace_back("Tessel::bench::out_seq", m, n);
    in.out_pipe.emplace_back("Tessel::bench::out_pipe", m, n);
    in.out_comet.emplace_back("Tessel::bench::out_comet", m, n);
  }
  return in;
}

/// Warm-up, then the schedules interleaved (pipelined at every chunk count): medians into \p p.
void time_schedules(CudaOptions const &o, cuda::VirtualRanksLayer &layer, RankInputs const &in, Point &p) {
  for (int i = 0; i < o.warmup; ++i)
    for (Schedule s : {Schedule::sequential, Schedule::pipelined, Schedule::comet})
      layer.forward(in.const_tokens, in.gates, in.out(s), s);
  int const variants = 2 + static_cast<int>(o.chunks.size());
  std::vector<std::vector<double>> times(static_cast<std::size_t>(variants));
  for (int i = 0; i < o.iters; ++i)
    for (int j = 0; j < variants; ++j) {
      int const what = (i + j) % variants;
      Schedule const s = what == 0              ? Schedule::sequential
                         : what == variants - 1 ? Schedule::comet
                                                : Schedule::pipelined;
      if (s == Schedule::pipelined)
        layer.set_pipeline_chunks(o.chunks[static_cast<std::size_t>(what - 1)]);
      layer.forward(in.const_tokens, in.gates, in.out(s), s);
      times[static_cast<std::size_t>(what)].push_back(layer.stats().device_ms);
      if (s == Schedule::comet) {
        p.comm_blocks = layer.stats().comm_blocks;
        p.grid0 = layer.stats().grid0;
        p.grid1 = layer.stats().grid1;
      }
    }
  p.seq_ms = median(times[0]);
  p.comet_ms = median(times[static_cast<std::size_t>(variants - 1)]);
  p.pipe_ms = 1e300;
  for (std::size_t c = 0; c < o.chunks.size(); ++c) {
    double const t = median(times[c + 1]);
    if (t < p.pipe_ms) {
      p.pipe_ms = t;
      p.best_chunks = o.chunks[c];
    }
  }
}

/// The error of rank \p r's first \p t tokens against the dense reference (NaN: infinity).
double reference_error(ModelInputs const &mi, cuda::VirtualRanksLayer const &layer, RankInputs const &in,
                       MoeConfig const &config, Schedule s, int r, std::int64_t t) {
  auto const &base = mi.base;
  auto const rank = static_cast<std::size_t>(r);
  HostMatrix head("Tessel::bench::head", static_cast<std::size_t>(t), static_cast<std::size_t>(base.hidden));
  HostIndexMatrix chosen("Tessel::bench::chosen", static_cast<std::size_t>(t), static_cast<std::size_t>(base.topk));
  HostMatrix got("Tessel::bench::got", static_cast<std::size_t>(t), static_cast<std::size_t>(base.hidden));
  for (std::size_t i = 0; i < static_cast<std::size_t>(t); ++i) {
    for (std::size_t j = 0; j < static_cast<std::size_t>(base.hidden); ++j) {
      head(i, j) = in.tokens[rank](i, j);
      got(i, j) = in.out(s)[rank](i, j);
    }
    for (std::size_t k = 0; k < static_cast<std::size_t>(base.topk); ++k)
      chosen(i, k) = layer.routing(r).experts(i, k);
  }
  auto config_t = config;
  config_t.tokens = t;
  return max_relative_error(got, reference_forward(config_t, head, mi.gate, chosen, mi.dense).out);
}

/// Checks, after the timing: one forward per schedule on tokens of its own, from NaN-filled device buffers; the
/// first and the last rank's first tokens against the dense reference.
void check_point(CudaOptions const &o, ModelInputs const &mi, cuda::VirtualRanksLayer &layer, RankInputs &in,
                 Point &p) {
  std::int64_t const t = std::min<std::int64_t>(o.check_tokens, p.config.tokens);
  layer.set_pipeline_chunks(p.best_chunks);
  std::uint64_t salt = 0;
  for (Schedule s : {Schedule::sequential, Schedule::pipelined, Schedule::comet}) {
    fresh_tokens(o, p.config, 1000 * ++salt, in);
    layer.forward(in.const_tokens, in.gates, in.out(s), s);
    double err = 0.0;
    if (t > 0)
      for (int r : {0, o.world - 1})
        err = std::max(err, reference_error(mi, layer, in, p.config, s, r, t));
    (s == Schedule::sequential ? p.err_seq : s == Schedule::pipelined ? p.err_pipe : p.err_comet) = err;
  }
  double const b = bound(o.dtype);
  p.ok = p.err_seq <= b && p.err_pipe <= b && p.err_comet <= b;
  std::printf("   sequential %.3f ms | pipelined %.3f ms (chunks %d) | comet %.3f ms (n_c %d, grids %d/%d) | "
              "seq/comet %.2fx pipe/comet %.2fx | error vs reference: seq %.1e pipe %.1e comet %.1e (bound %.0e) %s\n",
              p.seq_ms, p.pipe_ms, p.best_chunks, p.comet_ms, p.comm_blocks, p.grid0, p.grid1, p.seq_ms / p.comet_ms,
              p.pipe_ms / p.comet_ms, p.err_seq, p.err_pipe, p.err_comet, b, p.ok ? "ok" : "WRONG");
  std::fflush(stdout);
}

/// One model at \p m tokens per rank: the layer, its timings and its checks.
Point bench_point(CudaOptions const &o, std::string const &model, ModelInputs const &mi, std::int64_t m) {
  Point p;
  p.model = model;
  p.config = mi.base;
  p.config.tokens = m;
  auto in = rank_inputs(o, mi, p.config);
  MoeConfig device_config = p.config;
  device_config.dtype = o.dtype;
  cuda::DeviceOptions options;
  options.pipeline_chunks = o.chunks.front();
  options.debug.poison_buffers = true; // before the timed region of each forward: the timings do not see it
  cuda::VirtualRanksLayer layer(device_config, in.shards, options);
  p.comet = layer.comet_params();
  p.comet_source = layer.comet_params_source();
  std::printf("## %s %s: comet [%s] (%s)\n", model.c_str(), device_config.describe().c_str(),
              p.comet.describe().c_str(), p.comet_source.c_str());
  std::fflush(stdout);
  time_schedules(o, layer, in, p);
  check_point(o, mi, layer, in, p);
  return p;
}

} // namespace

int run_cuda_bench(tessel::CommandLine &cl) {
  if (cl.has("help") || cl.has("h")) {
    parse(cl); // prints the usage
    return 0;
  }
  auto const o = parse(cl);
  if (!cuda::device_available()) {
    std::printf("tessel-moe-bench --backend cuda: skipped: no CUDA device visible\n");
    return 0;
  }
  int device = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  std::printf("# tessel-moe-bench --backend cuda: %s\n# device %s, %d virtual ranks (EP %d x TP %d), %s, scale 1/%g, "
              "imbalance std %g, %d timed runs (median of CUDA-event device times)\n",
              build_summary().c_str(), tessel::cuda::device_name(device).c_str(), o.world, o.world / o.tp, o.tp,
              name_of(o.dtype), o.scale, o.imbalance, o.iters);
  std::vector<Point> points;
  bool all_ok = true;
  for (auto const &name : o.models) {
    auto const mi = model_inputs(o, name);
    for (auto m : o.tokens) {
      points.push_back(bench_point(o, find_model(name).name, mi, m));
      all_ok = all_ok && points.back().ok;
    }
  }
  std::printf(
      "\n| model | M | W | dtype | sequential ms | pipelined ms | comet ms | seq/comet | pipe/comet | error seq | "
      "error pipe | error comet | checked |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto const &p : points)
    std::printf("| %s | %lld | %d | %s | %.3f | %.3f | %.3f | %.2f | %.2f | %.1e | %.1e | %.1e | %s |\n",
                p.model.c_str(), static_cast<long long>(p.config.tokens), o.world, name_of(o.dtype), p.seq_ms,
                p.pipe_ms, p.comet_ms, p.seq_ms / p.comet_ms, p.pipe_ms / p.comet_ms, p.err_seq, p.err_pipe,
                p.err_comet, p.ok ? "ok" : "WRONG");
  if (!o.json.empty()) {
    write_json(o.json, results_json(o, device, points));
    std::printf("# results written to %s\n", o.json.c_str());
  }
  return all_ok ? 0 : 1;
}

#endif

} // namespace tessel::moe::bench

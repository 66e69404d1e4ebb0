// Every CUDA schedule of the moe package (sequential and pipelined on cuBLAS, comet on the fused kernels) against the
// host's double-precision dense reference, on fresh random inputs, in the one-process multi-rank mode with W in
// {1, 2, 4} virtual ranks (EP and EP x TP layouts), topk in {1, 2}, an expert that receives no token, M, N and K/TP
// not multiples of the 64 x 64 tile, SiLU and GeLU, gated and plain FFNs, and repeated forwards that mix schedules
// (the device flags are epoch counters that must stay consistent across forwards). Every test is skipped (and
// reported as skipped) where no CUDA device is visible; where one is, it asserts.
//
// Tests that can fail: every layer runs with DeviceDebug::poison_buffers (each forward starts from buffers full of
// NaN) and every forward gets inputs of its own (fresh tokens and gates), so a premature read, a missed pull or a
// skipped reduction cannot pass on data a previous schedule left behind. CudaMoe.a_skipped_wait_fails proves it:
// with one kind of comet wait skipped (the test-only DeviceDebug::skip_wait) the check fails.
//
// Error bound: max |y - ref| / max |ref| over a rank's output (Reference.hpp's max_relative_error), per dtype:
//  * float32: 1e-4. Inputs and weights are exact; fp32 GEMMs (cuBLAS CUBLAS_COMPUTE_32F, no TF32; the fused
//    tiles on CUDA cores) and an fp32 top-k reduction leave relative errors of a few u32 = 2^-24 times the
//    reduction lengths (N, K/TP <= 128 here), far below 1e-4.
//  * float16: 1e-2. Tokens, weights and the activated hidden layer are rounded to fp16 (unit roundoff 2^-11 =
//    4.9e-4): four roundings per product chain give ~2e-3 relative per term; sums of terms of both signs lose up
//    to a few times that against max |ref|.
//  * bfloat16: 6e-2. The same with unit roundoff 2^-8 = 3.9e-3 (four roundings: ~1.6e-2 per term).
#include <tessel/core/Config.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/cuda/VirtualRanksLayer.hpp>

#include <MoeTestUtils.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <sstream>

namespace {

using namespace tessel;
using namespace tessel::moe;
namespace mc = tessel::moe::cuda;

#define TESSEL_REQUIRE_DEVICE()                                                                                        \
  if (!mc::device_available())                                                                                         \
  GTEST_SKIP() << "no CUDA device visible"

std::uint64_t seed_now() {
  return static_cast<std::uint64_t>(std::random_device{}()) ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

double tolerance(DataType dtype) {
  switch (dtype) {
  case DataType::float16:
    return 1e-2;
  case DataType::bfloat16:
    return 6e-2;
  default:
    return 1e-4;
  }
}

struct Problem {
  MoeConfig config;
  DenseWeights dense;
  std::vector<ExpertWeights> shards;
  std::vector<HostMatrix> tokens, logits, out;
  std::vector<ConstHostMatrix> const_tokens;
  std::vector<GateInput> gates;
};

/// Fresh tokens and gates for every rank (the weights stay): every forward of a test calls this first, so that no
/// forward can pass on the outputs of another. When \p starve >= 0 no token of any rank picks expert \p starve.
void fresh_inputs(Problem &p, std::uint64_t seed, int starve = -1) {
  auto const m = static_cast<std::size_t>(p.config.tokens), n = static_cast<std::size_t>(p.config.hidden),
             e = static_cast<std::size_t>(p.config.experts);
  p.tokens.clear();
  p.logits.clear();
  p.out.clear();
  p.const_tokens.clear();
  p.gates.clear();
  for (int r = 0; r < p.config.world(); ++r) {
    p.tokens.push_back(test::random_matrix("tokens", m, n, seed + 1000 + static_cast<std::uint64_t>(r)));
    auto logits = test::random_matrix("logits", m, e, seed + 2000 + static_cast<std::uint64_t>(r), 2.0f);
    if (starve >= 0)
      for (std::size_t t = 0; t < m; ++t)
        logits(t, static_cast<std::size_t>(starve)) = -40.0f;
    p.logits.push_back(logits);
    p.out.push_back(HostMatrix("out", m, n));
    std::fill(p.out.back().data(), p.out.back().data() + p.out.back().size(), std::nanf(""));
    p.const_tokens.push_back(p.tokens.back());
    p.gates.push_back(GateInput::from_logits(p.logits.back()));
  }
}

/// Random weights and inputs (see fresh_inputs).
Problem make_problem(MoeConfig const &config, std::uint64_t seed, int starve = -1) {
  Problem p;
  p.config = config;
  MoeConfig host = config;
  host.dtype = DataType::float32;
  p.dense = test::random_weights(host, seed);
  for (int r = 0; r < config.world(); ++r)
    p.shards.push_back(shard_weights(host, r, p.dense));
  fresh_inputs(p, seed, starve);
  return p;
}

/// The options of every layer under test: NaN-filled buffers before each forward.
mc::DeviceOptions test_options() {
  mc::DeviceOptions o;
  o.timeout_seconds = 30;
  o.debug.poison_buffers = true;
  return o;
}

/// The largest error over the ranks of the last forward's outputs against the dense reference (NaN: infinity).
double error_of(Problem const &p, mc::VirtualRanksLayer const &layer, std::string const &what) {
  MoeConfig host = p.config;
  host.dtype = DataType::float32;
  double worst = 0.0;
  for (int r = 0; r < p.config.world(); ++r) {
    auto const ref = reference_forward(host, p.tokens[static_cast<std::size_t>(r)],
                                       p.gates[static_cast<std::size_t>(r)], layer.routing(r).experts, p.dense);
    EXPECT_EQ(ref.routing_violations, 0) << what << " rank " << r << ": " << ref.first_violation;
    double max_ref = 0.0;
    for (std::size_t i = 0; i < ref.out.size(); ++i)
      max_ref = std::max(max_ref, std::abs(ref.out.data()[i]));
    EXPECT_GT(max_ref, 0.0) << what << " rank " << r << ": the reference is zero (the check would be vacuous)";
    worst = std::max(worst, max_relative_error(p.out[static_cast<std::size_t>(r)], ref.out));
  }
  return worst;
}

/// Checks every rank's output of the last forward against the dense reference; returns the largest error.
double check(Problem const &p, mc::VirtualRanksLayer const &layer, std::string const &what) {
  double const err = error_of(p, layer, what);
  EXPECT_LE(err, tolerance(p.config.dtype)) << what << " (" << name_of(p.config.dtype) << ")";
  return err;
}

MoeConfig small_config(int ep, int tp, int topk, DataType dtype) {
  MoeConfig c;
  c.tokens = 100;  // not a multiple of the 64-row tile
  c.hidden = 72;   // N: neither a multiple of the 64-column tile nor of the N-splits below
  c.ffn = 80 * tp; // K/TP = 80: a full and a partial 64-column block of h
  c.experts = 4 * ep;
  c.topk = topk;
  c.ep = ep;
  c.tp = tp;
  c.dtype = dtype;
  return c;
}

std::vector<std::pair<int, int>> layouts() { return {{1, 1}, {2, 1}, {4, 1}, {2, 2}}; }

using tessel::moe::test::Variant;

std::vector<Variant> variants() {
  auto v = test::device_variants();
  CometParams p;
  p.comm_workers = 28; // more than the device share allows at small sizes: capped, still correct
  p.tile_m = 40;
  p.n_splits = 5;
  p.policy = PlanPolicy::critical_path;
  v.push_back({Schedule::comet, p, 1});
  return v;
}

void run_all(DataType dtype, int topk) {
  auto const seed = seed_now();
  for (auto [ep, tp] : layouts()) {
    auto const config = small_config(ep, tp, topk, dtype);
    auto p = make_problem(config, seed);
    mc::VirtualRanksLayer layer(config, p.shards, test_options());
    std::uint64_t input = 0;
    for (auto const &v : variants()) {
      std::ostringstream what;
      what << config.describe() << " W=" << config.world() << " " << v.describe() << " seed " << seed;
      fresh_inputs(p, seed + 7919 * ++input);
      if (v.schedule == Schedule::comet)
        layer.set_comet_params(v.comet);
      layer.set_pipeline_chunks(v.chunks);
      layer.forward(p.const_tokens, p.gates, p.out, v.schedule);
      EXPECT_GT(layer.stats().rows, 0) << what.str();
      check(p, layer, what.str());
    }
  }
}

TEST(CudaMoe, float32_top1) {
  TESSEL_REQUIRE_DEVICE();
  run_all(DataType::float32, 1);
}
TEST(CudaMoe, float32_top2) {
  TESSEL_REQUIRE_DEVICE();
  run_all(DataType::float32, 2);
}
TEST(CudaMoe, float16_top2) {
  TESSEL_REQUIRE_DEVICE();
  run_all(DataType::float16, 2);
}
TEST(CudaMoe, bfloat16_top1) {
  TESSEL_REQUIRE_DEVICE();
  run_all(DataType::bfloat16, 1);
}
TEST(CudaMoe, bfloat16_top2) {
  TESSEL_REQUIRE_DEVICE();
  run_all(DataType::bfloat16, 2);
}

// An expert no token picks (its GEMM problems are empty on every source; with TP > 1 on every rank of its group),
// GeLU, and a plain (non-gated) FFN.
TEST(CudaMoe, starved_expert_gelu_plain) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  for (auto [ep, tp] : layouts())
    for (bool gated : {true, false}) {
      auto config = small_config(ep, tp, 2, DataType::float32);
      config.activation = Activation::gelu;
      config.gated = gated;
      auto p = make_problem(config, seed, /*starve=*/1);
      mc::VirtualRanksLayer layer(config, p.shards, test_options());
      std::uint64_t input = 0;
      for (auto const &v : variants()) {
        fresh_inputs(p, seed + 7919 * ++input, /*starve=*/1);
        if (v.schedule == Schedule::comet)
          layer.set_comet_params(v.comet);
        layer.set_pipeline_chunks(v.chunks);
        layer.forward(p.const_tokens, p.gates, p.out, v.schedule);
        for (int r = 0; r < config.world(); ++r)
          EXPECT_EQ(layer.routing(r).tokens_per_expert[1], 0);
        check(p, layer, config.describe() + " " + v.describe() + " starved expert 1, seed " + std::to_string(seed));
      }
    }
}

// Tokens fewer than a rank's experts, and one token per rank: most GEMM problems are empty, and most slots unused.
TEST(CudaMoe, tiny_token_counts) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  for (std::int64_t m : {1, 3}) {
    auto config = small_config(4, 1, 2, DataType::float32);
    config.tokens = m;
    auto p = make_problem(config, seed);
    mc::VirtualRanksLayer layer(config, p.shards, test_options());
    std::uint64_t input = 0;
    for (auto const &v : variants()) {
      fresh_inputs(p, seed + 7919 * ++input);
      if (v.schedule == Schedule::comet)
        layer.set_comet_params(v.comet);
      layer.set_pipeline_chunks(std::min<int>(v.chunks, static_cast<int>(m)));
      layer.forward(p.const_tokens, p.gates, p.out, v.schedule);
      check(p, layer, "M=" + std::to_string(m) + " " + v.describe() + " seed " + std::to_string(seed));
    }
  }
}

// Larger shapes with several 64 x 64 tiles per problem and the registry's parameters (backend "cuda").
TEST(CudaMoe, registry_parameters_larger_shape) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  for (DataType dtype : {DataType::float32, DataType::bfloat16}) {
    MoeConfig c;
    c.tokens = 515;
    c.hidden = 384;
    c.ffn = 320;
    c.experts = 8;
    c.topk = 2;
    c.ep = 4;
    c.dtype = dtype;
    auto p = make_problem(c, seed);
    mc::VirtualRanksLayer layer(c, p.shards, test_options());
    EXPECT_EQ(layer.comet_params_source(), "fallback rule");
    EXPECT_EQ(layer.comet_params(), fallback_params(c, "cuda"));
    for (Schedule s : {Schedule::sequential, Schedule::pipelined, Schedule::comet}) {
      fresh_inputs(p, seed + 7919 * (1 + static_cast<std::uint64_t>(s)));
      layer.forward(p.const_tokens, p.gates, p.out, s);
      check(p, layer, c.describe() + " " + name_of(s) + " seed " + std::to_string(seed));
      EXPECT_GT(layer.stats().device_ms, 0.0);
      if (s == Schedule::comet) {
        EXPECT_GE(layer.stats().comm_blocks, 1);
        EXPECT_GT(layer.stats().grid1, layer.stats().comm_blocks);
      }
    }
  }
}

// Schedules agree with each other forward after forward (fresh tokens each time): the epoch-valued packed flags
// and the growing combine counts must stay in step across forwards and across schedules.
TEST(CudaMoe, repeated_forwards_mixing_schedules) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  auto const config = small_config(2, 1, 2, DataType::float32);
  auto p = make_problem(config, seed);
  mc::VirtualRanksLayer layer(config, p.shards, test_options());
  Schedule const order[] = {Schedule::comet, Schedule::sequential, Schedule::comet,
                            Schedule::comet, Schedule::pipelined,  Schedule::comet};
  int i = 0;
  for (Schedule s : order) {
    fresh_inputs(p, seed + 77 * static_cast<std::uint64_t>(++i));
    layer.forward(p.const_tokens, p.gates, p.out, s);
    check(p, layer, std::string("forward ") + std::to_string(i) + " " + name_of(s) + " seed " + std::to_string(seed));
  }
}

TEST(CudaMoe, errors) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  auto config = small_config(2, 1, 2, DataType::float32);
  auto p = make_problem(config, seed);
  auto bad = config;
  bad.dtype = DataType::float64;
  EXPECT_THROW(mc::VirtualRanksLayer(bad, p.shards), tessel::Exception);
  std::vector<ExpertWeights> one(p.shards.begin(), p.shards.begin() + 1);
  EXPECT_THROW(mc::VirtualRanksLayer(config, one), tessel::Exception);
  mc::VirtualRanksLayer layer(config, p.shards, test_options());
  CometParams q;
  q.m_splits = 2;
  EXPECT_THROW(layer.set_comet_params(q), tessel::Exception);
  p.tokens[1](7, 3) = std::nanf("");
  try {
    layer.forward(p.const_tokens, p.gates, p.out, Schedule::comet);
    ADD_FAILURE() << "a NaN token was accepted";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row 7, column 3"), std::string::npos) << e.what();
  }
  std::vector<HostMatrix> short_out(p.out.begin(), p.out.begin() + 1);
  EXPECT_THROW(layer.forward(p.const_tokens, p.gates, short_out, Schedule::sequential), tessel::Exception);
}

// The tests above can fail: with one kind of comet wait skipped (the test-only switch), a layer0 GEMM block reads
// rows before they are pulled, or a reduction reads expert outputs before they are computed, and the NaN the
// buffers were filled with (or a stale value) reaches the output. The race is real, so one forward may still win
// it: of several forwards on fresh inputs, at least one must fail the check.
TEST(CudaMoe, a_skipped_wait_fails) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  // Messages of 16 rows x 512 columns, three quarters of the rows remote, one block to pull them all: the GEMM
  // blocks that skip their wait run far ahead of it.
  auto config = small_config(4, 1, 2, DataType::float32);
  config.tokens = 512;
  config.hidden = 512;
  config.ffn = 256;
  for (auto skip : {mc::DeviceWait::message, mc::DeviceWait::split}) {
    auto p = make_problem(config, seed);
    auto options = test_options();
    options.debug.skip_wait = skip;
    mc::VirtualRanksLayer layer(config, p.shards, options);
    CometParams q;
    q.comm_workers = 1; // one block pulls every message: the GEMM blocks run ahead of it
    q.tile_m = 16;
    q.n_splits = 3;
    layer.set_comet_params(q);
    int failed = 0;
    for (int i = 0; i < 8 && failed == 0; ++i) {
      fresh_inputs(p, seed + 31 * static_cast<std::uint64_t>(i + 1));
      layer.forward(p.const_tokens, p.gates, p.out, Schedule::comet);
      failed += !(error_of(p, layer, "skipped wait") <= tolerance(config.dtype));
    }
    EXPECT_GT(failed, 0) << "with the " << (skip == mc::DeviceWait::message ? "message" : "split")
                         << " waits skipped, 8 comet forwards still passed the check (seed " << seed << ")";
  }
}

// A device wait that gives up stops every rank's kernels (the abort word) and is reported once, naming the rank
// and what it waited for; the host waits longer than the device, so this is the message the user sees; the layer
// then refuses further forwards. A 100 ns timeout makes some wait give up at once.
TEST(CudaMoe, a_device_timeout_stops_every_rank) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  auto const config = small_config(4, 1, 2, DataType::float32);
  auto p = make_problem(config, seed);
  auto options = test_options();
  options.timeout_seconds = 1e-7;
  mc::VirtualRanksLayer layer(config, p.shards, options);
  CometParams q;
  q.comm_workers = 1;
  q.tile_m = 16;
  layer.set_comet_params(q);
  std::string message;
  for (int i = 0; i < 20 && message.empty(); ++i) {
    fresh_inputs(p, seed + static_cast<std::uint64_t>(i));
    try {
      layer.forward(p.const_tokens, p.gates, p.out, Schedule::comet);
    } catch (tessel::TimeoutError const &e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(message.empty()) << "no wait of 20 forwards gave up after 100 ns";
  EXPECT_NE(message.find("device wait for"), std::string::npos) << message;
  EXPECT_NE(message.find("every rank's kernels stopped"), std::string::npos) << message;
  EXPECT_EQ(message.find("did not complete"), std::string::npos) << "the host gave up first: " << message;
  try {
    layer.forward(p.const_tokens, p.gates, p.out, Schedule::sequential);
    ADD_FAILURE() << "a layer stopped by a device timeout ran another forward";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("stopped on an earlier error"), std::string::npos) << e.what();
  }
}

} // namespace

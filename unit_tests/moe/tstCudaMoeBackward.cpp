// VirtualRanksLayer::backward (float32) of every schedule against the dense reference's analytic gradients
// (reference_backward, double precision), in the one-process multi-rank mode: W in {1, 2, 4} virtual ranks (EP and
// EP x TP layouts), topk 1, 2 and 8, M, N and K/TP not multiples of 64, gate logits, a gate weight with and without a
// bias, the load-balancing loss, GeLU and ungated experts, unnormalized top-k weights, an expert no token picks, a
// larger shape, and a backward under another schedule than its forward. Every test is skipped (and reported as skipped)
// where no CUDA device is visible; where one is, it asserts.
//
// Tests that can fail: every layer runs with DeviceDebug::poison_buffers (each forward and each backward start from
// buffers full of NaN), every forward/backward pair gets inputs and output gradients of its own, and the gradients
// handed to the backward are NaN-filled, so a missed wait or an unwritten element cannot pass on an earlier pair's
// data. Bound: max |g - ref| / max |ref| < 1e-5 per gradient, as the host backward's test (fp32 GEMMs through
// cuBLAS with CUBLAS_COMPUTE_32F, no TF32; fp32 kernels).
#include <tessel/core/Config.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/cuda/VirtualRanksLayer.hpp>

#include <MoeTestUtils.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <sstream>
#include <tuple>

namespace {

using namespace tessel;
using namespace tessel::moe;
namespace mc = tessel::moe::cuda;
using tessel::moe::test::relative_error;
using tessel::moe::test::Variant;

#define TESSEL_REQUIRE_DEVICE()                                                                                        \
  if (!mc::device_available())                                                                                         \
  GTEST_SKIP() << "no CUDA device visible"

constexpr double tolerance = 1e-5;
constexpr double aux_coef = 0.01;

enum class Gate { logits, weight, weight_bias };

std::uint64_t seed_now() {
  return static_cast<std::uint64_t>(std::random_device{}()) ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

mc::DeviceOptions test_options() {
  mc::DeviceOptions o;
  o.timeout_seconds = 30;
  o.debug.poison_buffers = true;
  return o;
}

MoeConfig small_config(int ep, int tp, int topk) {
  MoeConfig c;
  c.tokens = 100;  // not a multiple of 64
  c.hidden = 72;   // N
  c.ffn = 80 * tp; // K/TP = 80
  c.experts = (topk > 4 ? 8 : 4) * ep;
  c.topk = topk;
  c.ep = ep;
  c.tp = tp;
  c.dtype = DataType::float32;
  return c;
}

std::vector<Variant> variants() { return test::device_variants(); }

/// One forward and its backward on inputs and output gradients of their own, checked against reference_backward.
struct Pair {
  MoeConfig config;
  Gate gate = Gate::logits;
  DenseWeights dense;
  std::vector<ExpertWeights> shards;
  int starve = -1;

  Pair(MoeConfig const &c, Gate g, std::uint64_t seed, int starve_ = -1) : config(c), gate(g), starve(starve_) {
    dense = test::random_weights(config, seed);
    for (int r = 0; r < config.world(); ++r)
      shards.push_back(shard_weights(config, r, dense));
  }

  void run(mc::VirtualRanksLayer &layer, Schedule forward, Schedule backward, std::uint64_t seed,
           std::string const &what) const {
    int const w = config.world();
    auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden),
               e = static_cast<std::size_t>(config.experts), topk = static_cast<std::size_t>(config.topk);
    std::vector<HostMatrix> tokens, logits, d_out, out;
    std::vector<ConstHostMatrix> const_tokens, const_d_out;
    std::vector<GateInput> gates;
    auto const gate_weight = test::random_matrix("gate_weight", n, e, seed + 3000, 0.3f);
    auto const gate_bias = Kokkos::subview(test::random_matrix("gate_bias", 1, e, seed + 3001, 0.5f), 0, Kokkos::ALL);
    HostVector bias("bias", e);
    Kokkos::deep_copy(bias, gate_bias);
    for (int r = 0; r < w; ++r) {
      tokens.push_back(test::random_matrix("tokens", m, n, seed + 1000 + static_cast<std::uint64_t>(r)));
      logits.push_back(test::random_matrix("logits", m, e, seed + 2000 + static_cast<std::uint64_t>(r), 2.0f));
      if (starve >= 0)
        for (std::size_t t = 0; t < m; ++t)
          logits.back()(t, static_cast<std::size_t>(starve)) = -40.0f;
      d_out.push_back(test::random_matrix("d_out", m, n, seed + 4000 + static_cast<std::uint64_t>(r)));
      out.push_back(HostMatrix("out", m, n));
      const_tokens.push_back(tokens.back());
      const_d_out.push_back(d_out.back());
      gates.push_back(gate == Gate::logits        ? GateInput::from_logits(logits.back())
                      : gate == Gate::weight_bias ? GateInput::from_weight(gate_weight, bias)
                                                  : GateInput::from_weight(gate_weight));
    }
    layer.forward(const_tokens, gates, out, forward);
    std::vector<MoeGradients> grads(static_cast<std::size_t>(w));
    for (auto &g : grads) {
      // Filled with NaN: every gradient must be written.
      g.tokens = HostMatrix("grad_tokens", m, n);
      Kokkos::deep_copy(g.tokens, std::nanf(""));
      g.logits = HostMatrix("grad_logits", m, e);
      Kokkos::deep_copy(g.logits, std::nanf(""));
    }
    layer.backward(const_d_out, grads, backward, aux_coef);
    EXPECT_EQ(layer.backward_stats().schedule, backward) << what;

    // The reference over all ranks' tokens, with the layer's expert choice.
    HostMatrix all_tokens("all_tokens", m * w, n), all_logits("all_logits", m * w, e), all_d_out("all_d_out", m * w, n);
    HostIndexMatrix chosen("chosen", m * w, topk);
    for (int r = 0; r < w; ++r)
      for (std::size_t t = 0; t < m; ++t) {
        auto const row = static_cast<std::size_t>(r) * m + t;
        for (std::size_t j = 0; j < n; ++j) {
          all_tokens(row, j) = tokens[static_cast<std::size_t>(r)](t, j);
          all_d_out(row, j) = d_out[static_cast<std::size_t>(r)](t, j);
        }
        for (std::size_t j = 0; j < e; ++j)
          all_logits(row, j) = logits[static_cast<std::size_t>(r)](t, j);
        for (std::size_t k = 0; k < topk; ++k)
          chosen(row, k) = layer.routing(r).experts(t, k);
      }
    auto const all_gate = gate == Gate::logits        ? GateInput::from_logits(all_logits)
                          : gate == Gate::weight_bias ? GateInput::from_weight(gate_weight, bias)
                                                      : GateInput::from_weight(gate_weight);
    auto const ref = reference_backward(config, all_tokens, all_gate, chosen, dense, all_d_out, aux_coef);
    auto grad = allocate_dense_weights(config);
    for (std::size_t i = 0; i < grad.w0.size(); ++i)
      grad.w0.data()[i] = static_cast<float>(ref.w0[i]);
    for (std::size_t i = 0; i < grad.w1.size(); ++i)
      grad.w1.data()[i] = static_cast<float>(ref.w1[i]);
    for (int r = 0; r < w; ++r) {
      auto const &g = grads[static_cast<std::size_t>(r)];
      std::string const at = what + " rank " + std::to_string(r);
      auto const row0 = static_cast<std::size_t>(r) * m;
      EXPECT_LT(relative_error(g.tokens.data(), &ref.tokens(row0, 0), m * n), tolerance) << at << ": token gradients";
      EXPECT_LT(relative_error(g.logits.data(), &ref.logits(row0, 0), m * e,
                               test::logit_gradient_floor(layer.routing(r).weights, ref, row0)),
                tolerance)
          << at << ": logit gradients";
      auto const shard = shard_weights(config, r, grad);
      for (auto [name, got, expected] :
           {std::tuple{"W0", g.experts.w0, shard.w0}, std::tuple{"W1", g.experts.w1, shard.w1}}) {
        ASSERT_EQ(got.size(), expected.size()) << at << ": " << name;
        std::vector<double> expect(expected.data(), expected.data() + expected.size());
        EXPECT_LT(relative_error(got.data(), expect.data(), expect.size()), tolerance)
            << at << ": " << name << " gradient";
      }
      if (gate != Gate::logits) {
        EXPECT_LT(relative_error(g.gate_weight.data(), ref.gate_weight.data(), ref.gate_weight.size()), tolerance)
            << at << ": gate weight gradient";
        if (gate == Gate::weight_bias) {
          EXPECT_LT(relative_error(g.gate_bias.data(), ref.bias.data(), ref.bias.size()), tolerance)
              << at << ": gate bias gradient";
        }
      }
    }
  }
};

std::vector<std::pair<int, int>> layouts() { return {{1, 1}, {2, 1}, {4, 1}, {2, 2}}; }

void run_all(int topk, Gate gate) {
  auto const seed = seed_now();
  for (auto [ep, tp] : layouts()) {
    auto const config = small_config(ep, tp, topk);
    Pair const pair(config, gate, seed);
    mc::VirtualRanksLayer layer(config, pair.shards, test_options());
    std::uint64_t input = 0;
    for (auto const &v : variants()) {
      std::ostringstream what;
      what << config.describe() << " W=" << config.world() << " " << v.describe() << " seed " << seed;
      if (v.schedule == Schedule::comet)
        layer.set_comet_params(v.comet);
      layer.set_pipeline_chunks(v.chunks);
      pair.run(layer, v.schedule, v.schedule, seed + 7919 * ++input, what.str());
    }
  }
}

TEST(CudaMoeBackward, top1_logits) {
  TESSEL_REQUIRE_DEVICE();
  run_all(1, Gate::logits);
}
TEST(CudaMoeBackward, top2_gate_weight_and_bias) {
  TESSEL_REQUIRE_DEVICE();
  run_all(2, Gate::weight_bias);
}
TEST(CudaMoeBackward, top8_gate_weight) {
  TESSEL_REQUIRE_DEVICE();
  run_all(8, Gate::weight);
}

// GeLU, ungated experts, unnormalized top-k weights, an expert no token picks.
TEST(CudaMoeBackward, gelu_ungated_unnormalized_starved_expert) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  for (auto [ep, tp] : layouts())
    for (bool gated : {true, false}) {
      auto config = small_config(ep, tp, 2);
      config.activation = Activation::gelu;
      config.gated = gated;
      config.normalize_topk = !gated;
      Pair const pair(config, Gate::weight_bias, seed, /*starve=*/1);
      mc::VirtualRanksLayer layer(config, pair.shards, test_options());
      std::uint64_t input = 0;
      for (auto const &v : variants()) {
        if (v.schedule == Schedule::comet)
          layer.set_comet_params(v.comet);
        layer.set_pipeline_chunks(v.chunks);
        pair.run(layer, v.schedule, v.schedule, seed + 7919 * ++input,
                 config.describe() + " " + v.describe() + " starved expert 1, seed " + std::to_string(seed));
      }
    }
}

// A backward under another schedule than its forward (pipelined forwards leave three token chunks), and repeated
// pairs on one layer.
TEST(CudaMoeBackward, backward_schedule_differs_from_forward) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  auto const config = small_config(2, 2, 2);
  Pair const pair(config, Gate::weight, seed);
  mc::VirtualRanksLayer layer(config, pair.shards, test_options());
  layer.set_pipeline_chunks(3);
  Schedule const all[] = {Schedule::sequential, Schedule::pipelined, Schedule::comet};
  std::uint64_t input = 0;
  for (Schedule f : all)
    for (Schedule b : all)
      pair.run(layer, f, b, seed + 31 * ++input,
               std::string("forward ") + name_of(f) + ", backward " + name_of(b) + " seed " + std::to_string(seed));
}

// Several cuBLAS tiles per problem and the registry's comet parameters.
TEST(CudaMoeBackward, larger_shape) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  MoeConfig config;
  config.tokens = 515;
  config.hidden = 384;
  config.ffn = 320;
  config.experts = 8;
  config.topk = 2;
  config.ep = 4;
  Pair const pair(config, Gate::weight_bias, seed);
  mc::VirtualRanksLayer layer(config, pair.shards, test_options());
  std::uint64_t input = 0;
  for (Schedule s : {Schedule::sequential, Schedule::pipelined, Schedule::comet})
    pair.run(layer, s, s, seed + 13 * ++input, config.describe() + " " + name_of(s) + " seed " + std::to_string(seed));
}

TEST(CudaMoeBackward, errors) {
  TESSEL_REQUIRE_DEVICE();
  auto const seed = seed_now();
  auto const config = small_config(2, 1, 2);
  Pair const pair(config, Gate::logits, seed);
  mc::VirtualRanksLayer layer(config, pair.shards, test_options());
  std::vector<MoeGradients> grads;
  HostMatrix d("d_out", 100, 72), wrong("wrong", 99, 72);
  std::vector<ConstHostMatrix> d_out{d, d}, bad{d, wrong};
  EXPECT_THROW(layer.backward(d_out, grads), tessel::Exception); // no forward yet
  pair.run(layer, Schedule::sequential, Schedule::sequential, seed, "errors");
  EXPECT_THROW(layer.backward(bad, grads), tessel::Exception);
  EXPECT_THROW(layer.backward(d_out, grads, Schedule::comet, -1.0), tessel::Exception);
  EXPECT_THROW(layer.backward({d}, grads), tessel::Exception);
  auto half = config;
  half.dtype = DataType::bfloat16;
  mc::VirtualRanksLayer bf16(half, pair.shards, test_options());
  EXPECT_THROW(bf16.backward(d_out, grads), tessel::Exception); // float32 only
}

} // namespace

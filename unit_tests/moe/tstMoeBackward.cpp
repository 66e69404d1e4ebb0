// MoeLayer::backward of every schedule against the dense reference's analytic gradients (double precision), under
// mpiexec at 1, 2 and 4 ranks: the three model shapes (scaled down), topk 1/2/4/8, an expert with no tokens, all
// tokens on one expert, odd M, every EP x TP layout of the rank count, gate weight (+ bias) and logits, the
// load-balancing loss; and the reference itself against finite differences.
#include "MoeTestUtils.hpp"

#include <tessel/moe/MoeLayer.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace tessel::moe;
using namespace tessel::moe::test;
using tessel::Communicator;

constexpr double tolerance = 1e-5;
constexpr double aux_coef = 0.01;

Communicator fresh_comm() {
  auto world = Communicator::world();
  return world.split(0, world.rank());
}

// The reference gradients of all ranks' tokens, and this rank's shard of its expert-weight gradients.
struct Expected {
  ReferenceGradients ref;
  ExpertWeights shard;
};

Expected reference_for(Case const &c, MoeConfig const &config, Communicator const &comm, std::uint64_t seed,
                       DenseWeights const &dense) {
  int const w = comm.size();
  auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden),
             e = static_cast<std::size_t>(config.experts), topk = static_cast<std::size_t>(config.topk);
  HostMatrix tokens("all_tokens", m * w, n), logits("all_logits", c.gate == GateKind::logits ? m * w : 0, e),
      d_out("all_d_out", m * w, n);
  HostIndexMatrix chosen("all_chosen", m * w, topk);
  Inputs first;
  HostExecSpace space;
  for (int r = 0; r < w; ++r) {
    auto const in = make_inputs(c, config, r, seed);
    auto const dr = random_matrix("d_out", m, n, seed + 4000 + static_cast<std::uint64_t>(r));
    Routing routing;
    route(space, config, in.tokens, in.gate(), routing); // the same choice the layer's router makes on rank r
    for (std::size_t t = 0; t < m; ++t) {
      for (std::size_t j = 0; j < n; ++j) {
        tokens(r * m + t, j) = in.tokens(t, j);
        d_out(r * m + t, j) = dr(t, j);
      }
      for (std::size_t j = 0; j < e && c.gate == GateKind::logits; ++j)
        logits(r * m + t, j) = in.logits(t, j);
      for (std::size_t k = 0; k < topk; ++k)
        chosen(r * m + t, k) = routing.experts(t, k);
    }
    if (r == 0)
      first = in;
  }
  auto const gate = c.gate == GateKind::logits ? GateInput::from_logits(logits)
                                               : GateInput::from_weight(first.gate_weight, first.gate_bias);
  Expected x;
  x.ref = reference_backward(config, tokens, gate, chosen, dense, d_out, aux_coef);
  // This rank's shard of the expert gradients, through the same sharding as the weights (rounded to float).
  auto grad = allocate_dense_weights(config);
  for (std::size_t i = 0; i < grad.w0.size(); ++i)
    grad.w0.data()[i] = static_cast<float>(x.ref.w0[i]);
  for (std::size_t i = 0; i < grad.w1.size(); ++i)
    grad.w1.data()[i] = static_cast<float>(x.ref.w1[i]);
  x.shard = shard_weights(config, comm.rank(), grad);
  return x;
}

void check_shard(char const *what, HostTensor got, HostTensor expected) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  std::vector<double> ref(expected.size());
  for (std::size_t i = 0; i < ref.size(); ++i)
    ref[i] = expected.data()[i];
  EXPECT_LT(relative_error(got.data(), ref.data(), ref.size()), tolerance) << what;
}

// Every layout and variant of one case: forward, then backward under the same schedule; each rank checks its own
// gradients.
void check_backward(Case const &c, Communicator const &comm, bool all_variants = true) {
  auto const seed = fresh_seed(comm);
  SCOPED_TRACE("case " + c.name + ", seed " + std::to_string(seed) + ", rank " + std::to_string(comm.rank()));
  HostExecSpace space;
  for (auto const &config : layouts_of(c.config, comm.size())) {
    SCOPED_TRACE("EP=" + std::to_string(config.ep) + " TP=" + std::to_string(config.tp));
    auto const in = make_inputs(c, config, comm.rank(), seed);
    auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden),
               e = static_cast<std::size_t>(config.experts);
    auto const d_out = random_matrix("d_out", m, n, seed + 4000 + static_cast<std::uint64_t>(comm.rank()));
    auto const expected = reference_for(c, config, comm, seed, in.dense);
    auto const &ref = expected.ref;
    auto const row0 = static_cast<std::size_t>(comm.rank()) * m;
    MoeLayer layer(config, comm, shard_weights(config, comm.rank(), in.dense));
    HostMatrix out("out", m, n);
    auto const all = variants();
    for (std::size_t v = 0; v < (all_variants ? all.size() : 1); ++v) {
      auto const &variant = all[v];
      SCOPED_TRACE(variant.describe());
      variant.apply(layer);
      layer.forward(space, in.tokens, in.gate(), out, variant.schedule);
      MoeGradients grads;
      // Filled with NaN: every gradient must be written, not left from an earlier run.
      grads.tokens = HostMatrix("grad_tokens", m, n);
      Kokkos::deep_copy(grads.tokens, std::nanf(""));
      layer.backward(space, d_out, grads, variant.schedule, aux_coef);
      EXPECT_LT(relative_error(grads.tokens.data(), &ref.tokens(row0, 0), m * n), tolerance) << "token gradients";
      auto const wdw = logit_gradient_floor(layer.routing().weights, ref, row0);
      EXPECT_LT(relative_error(grads.logits.data(), &ref.logits(row0, 0), m * e, wdw), tolerance) << "logit gradients";
      check_shard("W0 gradient", grads.experts.w0, expected.shard.w0);
      check_shard("W1 gradient", grads.experts.w1, expected.shard.w1);
      if (c.gate != GateKind::logits) {
        EXPECT_LT(relative_error(grads.gate_weight.data(), ref.gate_weight.data(), ref.gate_weight.size()), tolerance)
            << "gate weight gradient";
        if (in.gate_bias.data() != nullptr) {
          EXPECT_LT(relative_error(grads.gate_bias.data(), ref.bias.data(), ref.bias.size()), tolerance)
              << "gate bias gradient";
        }
      }
      EXPECT_EQ(layer.backward_stats().schedule, variant.schedule);
    }
  }
}

TEST(MoeBackward, mixtral_shape_topk_1_2_4_8) {
  auto const comm = fresh_comm();
  for (int topk : {1, 2, 4, 8})
    check_backward({"mixtral topk " + std::to_string(topk), shape(37, 64, 96, 8, topk), GateKind::weight, {}}, comm);
}

TEST(MoeBackward, qwen2_shape_unnormalized_topk_8) {
  auto const comm = fresh_comm();
  check_backward({"qwen2 topk 4", shape(29, 32, 24, 64, 4, false), GateKind::weight_bias, {}}, comm);
  check_backward({"qwen3-like topk 8", shape(23, 32, 16, 32, 8, true), GateKind::weight_bias, {}}, comm);
}

TEST(MoeBackward, phi35_shape_with_logits) {
  auto const comm = fresh_comm();
  check_backward({"phi3.5", shape(33, 64, 80, 16, 2), GateKind::logits, {}}, comm);
}

TEST(MoeBackward, gelu_and_ungated_experts) {
  auto const comm = fresh_comm();
  check_backward({"gelu gated", shape(21, 48, 40, 8, 2, true, Activation::gelu, true), GateKind::weight, {}}, comm);
  check_backward({"silu ungated", shape(21, 48, 40, 8, 2, false, Activation::silu, false), GateKind::weight, {}}, comm);
}

TEST(MoeBackward, expert_with_no_tokens_and_all_tokens_on_one) {
  auto const comm = fresh_comm();
  std::vector<float> skew(8, 0.0f);
  skew[3] = -60.0f;
  skew[6] = -60.0f;
  check_backward({"zero-token experts", shape(26, 32, 48, 8, 2), GateKind::logits, skew}, comm);
  std::vector<float> one(8, 0.0f);
  one[5] = 60.0f;
  check_backward({"all to expert 5", shape(31, 32, 48, 8, 1), GateKind::logits, one}, comm);
}

TEST(MoeBackward, odd_and_tiny_m) {
  auto const comm = fresh_comm();
  check_backward({"odd M", shape(19, 32, 32, 8, 2), GateKind::weight_bias, {}}, comm);
  check_backward({"one token", shape(1, 16, 16, 4, 2), GateKind::weight, {}}, comm);
  check_backward({"no token", shape(0, 16, 16, 4, 2), GateKind::weight, {}}, comm);
}

TEST(MoeBackward, many_tiles_per_source) {
  // Enough tokens that comet's backward cuts a source's slots into several tiles (about 256 rows per expert GEMM),
  // and merges those that have landed.
  auto const comm = fresh_comm();
  check_backward({"many tiles, topk 1", shape(1201, 16, 16, 4, 1), GateKind::weight_bias, {}}, comm);
  check_backward({"many tiles, topk 2", shape(801, 16, 8, 8, 2), GateKind::logits, {}}, comm);
}

TEST(MoeBackward, needs_a_forward_and_a_matching_gradient) {
  auto const comm = fresh_comm();
  auto config = shape(8, 16, 16, 4, 2);
  config.ep = 4 % comm.size() == 0 ? comm.size() : 1;
  config.tp = comm.size() / config.ep;
  Case c{"errors", config, GateKind::weight, {}};
  auto const in = make_inputs(c, config, comm.rank(), 5);
  HostExecSpace space;
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), in.dense));
  MoeGradients grads;
  HostMatrix d_out("d_out", 8, 16), wrong("wrong", 7, 16), out("out", 8, 16);
  EXPECT_THROW(layer.backward(space, d_out, grads), tessel::Exception); // no forward yet
  layer.forward(space, in.tokens, in.gate(), out, Schedule::sequential);
  EXPECT_THROW(layer.backward(space, wrong, grads), tessel::Exception);
  EXPECT_THROW(layer.backward(space, d_out, grads, Schedule::comet, -1.0), tessel::Exception);
}

TEST(MoeBackward, alone_times_leave_the_forward_differentiable) {
  auto const comm = fresh_comm();
  auto config = shape(40, 32, 32, 8, 2);
  config.ep = 8 % comm.size() == 0 ? comm.size() : 1;
  config.tp = comm.size() / config.ep;
  Case c{"alone", config, GateKind::weight, {}};
  auto const seed = fresh_seed(comm);
  auto const in = make_inputs(c, config, comm.rank(), seed);
  auto const d_out = random_matrix("d_out", 40, 32, seed + 4000 + static_cast<std::uint64_t>(comm.rank()));
  HostExecSpace space;
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), in.dense));
  HostMatrix out("out", 40, 32);
  EXPECT_THROW(layer.measure_backward_alone(space, d_out), tessel::Exception); // no forward yet
  layer.forward(space, in.tokens, in.gate(), out, Schedule::comet);
  auto const alone = layer.measure_backward_alone(space, d_out, 2);
  EXPECT_GT(alone.comp, 0.0);
  if (comm.size() > 1) {
    EXPECT_GT(alone.comm, 0.0);
  }
  EXPECT_LE(alone.comp_min, alone.comp);
  MoeGradients grads;
  layer.backward(space, d_out, grads, Schedule::comet, aux_coef);
  auto const expected = reference_for(c, config, comm, seed, in.dense);
  EXPECT_LT(
      relative_error(grads.tokens.data(), &expected.ref.tokens(static_cast<std::size_t>(comm.rank()) * 40, 0), 40 * 32),
      tolerance);
  check_shard("W0 gradient", grads.experts.w0, expected.shard.w0);
}

// The reference's analytic gradients against central differences of the reference forward (double), on a small
// shape, with the expert choice held fixed (it is piecewise constant).
TEST(MoeBackward, reference_matches_finite_differences) {
  for (bool normalize : {true, false}) {
    SCOPED_TRACE(normalize ? "normalized top-k" : "softmax weights");
    auto config = shape(6, 5, 4, 4, 2, normalize);
    Case c{"fd", config, GateKind::weight_bias, {}};
    auto in = make_inputs(c, config, 0, 99);
    auto d_out = random_matrix("d_out", 6, 5, 77);
    HostExecSpace space;
    Routing routing;
    route(space, config, in.tokens, in.gate(), routing);
    auto const chosen = routing.experts;
    auto const grads = reference_backward(config, in.tokens, in.gate(), chosen, in.dense, d_out, aux_coef);
    // L = <d_out, out> + aux_coef * E * sum_e f_e P_e (f fixed by the choice).
    auto const loss = [&] {
      auto const r = reference_forward(config, in.tokens, in.gate(), chosen, in.dense);
      double l = 0.0;
      for (std::size_t t = 0; t < 6; ++t)
        for (std::size_t j = 0; j < 5; ++j)
          l += static_cast<double>(d_out(t, j)) * r.out(t, j);
      for (int e = 0; e < 4; ++e) {
        double count = 0.0, p = 0.0;
        for (std::size_t t = 0; t < 6; ++t) {
          double logit[4], top = -1e300, sum = 0.0;
          for (int q = 0; q < 4; ++q) {
            logit[q] = in.gate_bias(q);
            for (std::size_t i = 0; i < 5; ++i)
              logit[q] += static_cast<double>(in.tokens(t, i)) * in.gate_weight(i, q);
            top = std::max(top, logit[q]);
          }
          for (int q = 0; q < 4; ++q)
            sum += std::exp(logit[q] - top);
          p += std::exp(logit[e] - top) / sum / 6.0;
          for (int k = 0; k < 2; ++k)
            count += chosen(t, k) == e ? 1.0 : 0.0;
        }
        l += aux_coef * 4 * (count / 12.0) * p;
      }
      return l;
    };
    // Central difference of one float input (the step actually taken, after rounding to float).
    double worst = 0.0, scale = 0.0;
    auto const probe = [&](float &x, double analytic) {
      float const saved = x;
      x = saved + 1e-2f;
      double const up = loss();
      float const hi = x;
      x = saved - 1e-2f;
      double const down = loss();
      double const step = static_cast<double>(hi) - static_cast<double>(x);
      x = saved;
      double const numeric = (up - down) / step;
      worst = std::max(worst, std::abs(numeric - analytic));
      scale = std::max(scale, std::abs(analytic));
    };
    for (std::size_t t = 0; t < 6; ++t)
      for (std::size_t i = 0; i < 5; ++i)
        probe(in.tokens(t, i), grads.tokens(t, i));
    for (std::size_t i = 0; i < in.dense.w0.size(); i += 3)
      probe(in.dense.w0.data()[i], grads.w0[i]);
    for (std::size_t i = 0; i < in.dense.w1.size(); i += 3)
      probe(in.dense.w1.data()[i], grads.w1[i]);
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t e = 0; e < 4; ++e)
        probe(in.gate_weight(i, e), grads.gate_weight[i * 4 + e]);
    for (std::size_t e = 0; e < 4; ++e)
      probe(in.gate_bias(e), grads.bias[e]);
    EXPECT_GT(scale, 0.0);
    EXPECT_LT(worst / scale, 1e-4) << "worst difference " << worst << " at gradient scale " << scale;
  }
}

} // namespace

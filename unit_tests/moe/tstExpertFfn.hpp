// Grouped expert FFN against a per-row double-precision evaluation, for gated and plain experts, SiLU and GeLU,
// an expert with no rows, and TP sharding (the shards' partial outputs sum to the full FFN).
#include "MoeTestUtils.hpp"

#include <impl/Kernels.hpp> // moe/src/impl: the layer0 tile in column panels

#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/Reference.hpp>

#include <TesselToolsRecorder.hpp>
#include <tessel/core/Execution.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace {

using namespace tessel::moe;

std::vector<double> ffn_row(MoeConfig const &c, DenseWeights const &w, int e, float const *x) {
  std::int64_t const n = c.hidden, k = c.ffn, k0 = (c.gated ? 2 : 1) * k;
  std::vector<double> pre(static_cast<std::size_t>(k0), 0.0), y(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t j = 0; j < k0; ++j)
    for (std::int64_t i = 0; i < n; ++i)
      pre[static_cast<std::size_t>(j)] += static_cast<double>(x[i]) * w.w0(e, i, j);
  for (std::int64_t j = 0; j < k; ++j) {
    double const g = pre[static_cast<std::size_t>(j)];
    double const a =
        c.activation == Activation::silu ? g / (1 + std::exp(-g)) : 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
    double const h = c.gated ? a * pre[static_cast<std::size_t>(k + j)] : a;
    for (std::int64_t i = 0; i < n; ++i)
      y[static_cast<std::size_t>(i)] += h * w.w1(e, j, i);
  }
  return y;
}

TEST(TEST_CATEGORY, expert_ffn_grouped_ffn_matches_per_row_evaluation_and_tp_shards_sum_up) {
  std::mt19937_64 rng(std::random_device{}());
  TEST_EXECSPACE space;
  for (auto act : {Activation::silu, Activation::gelu})
    for (bool gated : {true, false})
      for (int tp : {1, 2, 3}) {
        MoeConfig c;
        c.tokens = 1;
        c.hidden = 20;
        c.ffn = 18;
        c.experts = 4;
        c.topk = 1;
        c.ep = 2;
        c.tp = tp;
        c.activation = act;
        c.gated = gated;
        auto const seed = rng();
        SCOPED_TRACE("seed " + std::to_string(seed) + " tp " + std::to_string(tp));
        auto const dense = test::random_weights(c, seed);
        // Rows for the two local experts of EP group 1 (experts 2 and 3); expert 2 gets none.
        std::vector<std::int64_t> offsets{0, 0, 7};
        auto const x = test::random_matrix("x", 7, 20, seed + 1);
        std::vector<double> sum(7 * 20, 0.0);
        for (int t = 0; t < tp; ++t) {
          int const rank = 1 * tp + t;
          auto const shard = shard_weights(c, rank, dense);
          HostMatrix y("y", 7, 20);
          grouped_ffn(space, c, shard, x, offsets, y);
          for (std::size_t i = 0; i < sum.size(); ++i)
            sum[i] += y.data()[i];
        }
        double diff = 0, scale = 0;
        for (int r = 0; r < 7; ++r) {
          auto const ref = ffn_row(c, dense, 3, &x(r, 0));
          for (int i = 0; i < 20; ++i) {
            diff =
                std::max(diff, std::abs(sum[static_cast<std::size_t>(r * 20 + i)] - ref[static_cast<std::size_t>(i)]));
            scale = std::max(scale, std::abs(ref[static_cast<std::size_t>(i)]));
          }
        }
        EXPECT_LT(diff / scale, 1e-5);
      }
}

TEST(TEST_CATEGORY, expert_ffn_weights_of_other_groups_are_not_copied_and_shapes_are_checked) {
  MoeConfig c;
  c.tokens = 1;
  c.hidden = 4;
  c.ffn = 6;
  c.experts = 4;
  c.topk = 1;
  c.ep = 2;
  c.tp = 1;
  auto w = allocate_expert_weights(c);
  Kokkos::deep_copy(w.w0, -7.0f);
  std::vector<float> w0(4 * 12, 1.0f), w1(6 * 4, 2.0f);
  set_expert_weights(c, 0, 3, w0.data(), w1.data(), w); // expert 3 lives in group 1, not rank 0's
  EXPECT_EQ(w.w0(0, 0, 0), -7.0f);
  set_expert_weights(c, 0, 1, w0.data(), w1.data(), w);
  EXPECT_EQ(w.w0(1, 0, 0), 1.0f);
  EXPECT_EQ(w.w1(1, 5, 3), 2.0f);
  TEST_EXECSPACE space;
  HostMatrix x("x", 3, 4), y("y", 3, 4);
  EXPECT_THROW(grouped_ffn(space, c, w, x, {0, 1}, y), tessel::Exception);
  EXPECT_THROW(grouped_ffn(space, c, w, x, {0, 1, 2}, y), tessel::Exception);
}

TEST(TEST_CATEGORY, expert_ffn_layer0_in_column_panels_equals_one_gemm) {
  // The compute thread of a schedule without communication threads splits long layer0 GEMMs into column panels
  // and progresses messages in between; the panels must compute the same tile.
  std::mt19937_64 rng(std::random_device{}());
  TEST_EXECSPACE space;
  for (bool gated : {true, false}) {
    MoeConfig c;
    c.tokens = 1;
    c.hidden = 24;
    c.ffn = 70; // gated: 140 GEMM0 columns, not a multiple of the panel
    c.experts = 2;
    c.topk = 1;
    c.ep = 1;
    c.gated = gated;
    auto const seed = rng();
    SCOPED_TRACE("seed " + std::to_string(seed) + (gated ? " gated" : " plain"));
    auto const weights = shard_weights(c, 0, test::random_weights(c, seed));
    auto const x = test::random_matrix("x", 13, 24, seed + 1);
    HostMatrix whole("whole", 13, 70), panels("panels", 13, 70);
    Impl::Layer0Scratch scratch;
    Impl::layer0_tile(space, c, weights, 1, {x.data(), 13, 24, 24}, {whole.data(), 13, 70, 70}, scratch);
    int calls = 0;
    Impl::layer0_tile(space, c, weights, 1, {x.data(), 13, 24, 24}, {panels.data(), 13, 70, 70}, scratch, 32,
                      [&] { ++calls; });
    EXPECT_EQ(calls, (c.gemm0_cols() + 31) / 32 - 1);
    for (std::size_t i = 0; i < 13; ++i)
      for (std::size_t j = 0; j < 70; ++j)
        EXPECT_NEAR(panels(i, j), whole(i, j), 1e-5f * (1.0f + std::fabs(whole(i, j)))) << i << ", " << j;
  }
}

TEST(TEST_CATEGORY, expert_ffn_and_router_run_on_the_given_instance) {
  // Every kernel of route() and grouped_ffn() carries the Kokkos Tools device id of the instance given (on a
  // Kokkos whose default host space is another backend, work on the default instance shows that backend's id).
  using Space = TEST_EXECSPACE;
  Space const space = tessel::make_instances(Space(), 2)[1];
  MoeConfig c;
  c.tokens = 40;
  c.hidden = 24;
  c.ffn = 16;
  c.experts = 4;
  c.topk = 2;
  auto const dense = test::random_weights(c, 3);
  auto const shard = shard_weights(c, 0, dense);
  auto const x = test::random_matrix("x", 40, 24, 4);
  auto const logits = test::random_matrix("logits", 40, 4, 5);
  HostMatrix y("y", 40, 24);
  std::vector<std::int64_t> offsets{0, 10, 10, 25, 40};
  tessel::test::ToolsRecorder recorder;
  Routing r;
  route(space, c, x, GateInput::from_logits(logits), r);
  grouped_ffn(space, c, shard, x, offsets, y);
  auto const want = Kokkos::Tools::Experimental::device_id(space);
  ASSERT_FALSE(recorder.kernels.empty());
  for (std::size_t k = 0; k < recorder.kernels.size(); ++k)
    EXPECT_EQ(recorder.kernel_devices[k], want) << "kernel '" << recorder.kernels[k] << "'";
}

} // namespace

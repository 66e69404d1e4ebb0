// Router: top-k softmax gating against a brute-force check, tie-breaking, weights, the gate-weight path, and
// the dispatch plan's permutation (sorted by chunk, group, expert, token) and slots.
#include "MoeTestUtils.hpp"

#include <tessel/moe/Router.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace {

using namespace tessel::moe;

MoeConfig config_of(std::int64_t m, std::int64_t n, int e, int topk, int ep = 1, bool normalize = true) {
  MoeConfig c;
  c.tokens = m;
  c.hidden = n;
  c.ffn = 8;
  c.experts = e;
  c.topk = topk;
  c.ep = ep;
  c.normalize_topk = normalize;
  return c;
}

TEST(TEST_CATEGORY, router_topk_of_softmax_matches_brute_force) {
  std::mt19937_64 rng(std::random_device{}());
  TEST_EXECSPACE space;
  for (int trial = 0; trial < 20; ++trial) {
    int const e = 1 + static_cast<int>(rng() % 64);
    int const topk = 1 + static_cast<int>(rng() % std::min(e, 8));
    bool const normalize = rng() % 2 == 0;
    auto const config = config_of(50, 8, e, topk, 1, normalize);
    auto const logits = test::random_matrix("logits", 50, static_cast<std::size_t>(e), rng(), 3.0f);
    HostMatrix tokens("tokens", 50, 8);
    Routing r;
    route(space, config, tokens, GateInput::from_logits(logits), r);
    for (int t = 0; t < 50; ++t) {
      std::vector<double> p(static_cast<std::size_t>(e));
      double mx = -1e300, sum = 0;
      for (int j = 0; j < e; ++j)
        mx = std::max(mx, static_cast<double>(logits(t, j)));
      for (int j = 0; j < e; ++j)
        sum += (p[static_cast<std::size_t>(j)] = std::exp(logits(t, j) - mx));
      std::vector<int> order(static_cast<std::size_t>(e));
      for (int j = 0; j < e; ++j)
        order[static_cast<std::size_t>(j)] = j;
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)]; });
      double chosen = 0;
      for (int k = 0; k < topk; ++k)
        chosen += p[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] / sum;
      for (int k = 0; k < topk; ++k) {
        int const x = order[static_cast<std::size_t>(k)];
        ASSERT_EQ(r.experts(t, k), x) << "token " << t << " k " << k;
        double const w = p[static_cast<std::size_t>(x)] / sum / (normalize ? chosen : 1.0);
        EXPECT_NEAR(r.weights(t, k), w, 1e-6);
      }
      double psum = 0;
      for (int j = 0; j < e; ++j)
        psum += r.probabilities(t, j);
      EXPECT_NEAR(psum, 1.0, 1e-5);
    }
    std::int64_t total = 0;
    for (auto c : r.tokens_per_expert)
      total += c;
    EXPECT_EQ(total, 50 * topk);
  }
}

TEST(TEST_CATEGORY, router_ties_go_to_the_lower_expert) {
  TEST_EXECSPACE space;
  auto const config = config_of(2, 4, 6, 3);
  HostMatrix logits("logits", 2, 6), tokens("tokens", 2, 4);
  Kokkos::deep_copy(logits, 1.0f);
  logits(1, 4) = 2.0f;
  Routing r;
  route(space, config, tokens, GateInput::from_logits(logits), r);
  EXPECT_EQ(r.experts(0, 0), 0);
  EXPECT_EQ(r.experts(0, 1), 1);
  EXPECT_EQ(r.experts(0, 2), 2);
  EXPECT_EQ(r.experts(1, 0), 4);
  EXPECT_EQ(r.experts(1, 1), 0);
  EXPECT_NEAR(r.weights(0, 0), 1.0 / 3.0, 1e-7);
}

TEST(TEST_CATEGORY, router_gate_weight_and_bias_give_tokens_times_weight_plus_bias) {
  TEST_EXECSPACE space;
  auto const config = config_of(40, 24, 10, 2);
  auto const tokens = test::random_matrix("tokens", 40, 24, 1);
  auto const weight = test::random_matrix("gate", 24, 10, 2);
  HostVector bias("bias", 10);
  for (int j = 0; j < 10; ++j)
    bias(j) = 0.3f * static_cast<float>(j);
  Routing r;
  route(space, config, tokens, GateInput::from_weight(weight, bias), r);
  for (int t = 0; t < 40; ++t)
    for (int j = 0; j < 10; ++j) {
      double acc = bias(j);
      for (int i = 0; i < 24; ++i)
        acc += static_cast<double>(tokens(t, i)) * weight(i, j);
      EXPECT_NEAR(r.logits(t, j), acc, 1e-4);
    }
  HostMatrix wrong("gate", 23, 10);
  EXPECT_THROW(route(space, config, tokens, GateInput::from_weight(wrong), r), tessel::Exception);
}

TEST(TEST_CATEGORY, router_dispatch_plan_sorts_by_chunk_group_expert_token) {
  std::mt19937_64 rng(std::random_device{}());
  TEST_EXECSPACE space;
  for (int trial = 0; trial < 20; ++trial) {
    int const ep = 1 << (rng() % 3);
    int const e = ep * (1 + static_cast<int>(rng() % 6));
    int const topk = 1 + static_cast<int>(rng() % std::min(e, 4));
    std::int64_t const m = static_cast<std::int64_t>(rng() % 60);
    int const chunks = 1 + static_cast<int>(rng() % 5);
    auto const config = config_of(m, 4, e, topk, ep);
    auto const logits = test::random_matrix("logits", static_cast<std::size_t>(m), static_cast<std::size_t>(e), rng());
    HostMatrix tokens("tokens", static_cast<std::size_t>(m), 4);
    Routing r;
    route(space, config, tokens, GateInput::from_logits(logits), r);
    auto const plan = make_dispatch_plan(config, r, chunks);
    ASSERT_EQ(plan.rows(), m * topk);
    int const local_experts = e / ep;
    auto const chunk_of = [&](std::int64_t t) {
      for (int c = 0; c < chunks; ++c)
        if (t < plan.chunk_tokens[static_cast<std::size_t>(c) + 1])
          return c;
      return chunks;
    };
    // Rows are sorted by (chunk, expert, token) and every (token, k) appears once.
    std::map<std::pair<std::int64_t, int>, int> seen;
    for (int c = 0; c < chunks; ++c)
      for (int x = 0; x < e; ++x) {
        auto const b = plan.block_offsets[static_cast<std::size_t>(c * e + x)];
        auto const end = plan.block_offsets[static_cast<std::size_t>(c * e + x) + 1];
        for (auto row = b; row < end; ++row) {
          auto const t = plan.row_token[static_cast<std::size_t>(row)];
          EXPECT_EQ(chunk_of(t), c);
          if (row > b) {
            EXPECT_LT(plan.row_token[static_cast<std::size_t>(row) - 1], t);
          }
          int k = -1;
          for (int j = 0; j < topk; ++j)
            if (r.experts(t, j) == x)
              k = j;
          ASSERT_GE(k, 0);
          EXPECT_EQ(plan.row_weight[static_cast<std::size_t>(row)], r.weights(t, k));
          seen[{t, x}] += 1;
          // The slot names this token in the group.
          int const g = x / local_experts;
          EXPECT_EQ(plan.row_slot[static_cast<std::size_t>(row)], plan.token_slot[static_cast<std::size_t>(g * m + t)]);
        }
      }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), m * topk);
    // Slots: the distinct tokens of each group in increasing token order, contiguous per chunk.
    for (int g = 0; g < ep; ++g) {
      std::int64_t next = 0;
      for (std::int64_t t = 0; t < m; ++t) {
        bool in_group = false;
        for (int j = 0; j < topk; ++j)
          in_group = in_group || r.experts(t, j) / local_experts == g;
        auto const slot = plan.token_slot[static_cast<std::size_t>(g * m + t)];
        if (in_group) {
          EXPECT_EQ(slot, next++);
        } else {
          EXPECT_EQ(slot, -1);
        }
      }
      EXPECT_EQ(plan.group_slots[static_cast<std::size_t>(g)], next);
      std::int64_t sum = 0;
      for (int c = 0; c < chunks; ++c) {
        EXPECT_EQ(plan.slot_begin(c, g), sum);
        sum += plan.slot_count(c, g);
      }
      EXPECT_EQ(sum, next);
    }
  }
}

} // namespace

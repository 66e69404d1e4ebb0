// The device backward's host half (WorkPlanner::backward_work in src/cuda/WorkPlan.cpp, with the forward's work lists
// and slot tables) on any machine, without a GPU: the lists VirtualRanksLayer::backward hands to its copies, kernels
// and cuBLAS calls are executed here by a host emulation of the same steps, with the same index arithmetic (every
// owner packs its output gradient per slot, every expert side copies each (source, chunk) block of slots into its
// grad_in, gathers them per row through row_slot (from the source's block of grad_in), runs each (source, chunk,
// expert) problem's backward, sums dx per slot through the source's slot table with the forward's reduction items,
// stores the sums into the owner's combine region and the rows' combine-weight gradients into the owner's dw_recv; the
// owner adds the ranks in rank order and runs the gate's backward as gate_backward_kernel does), and compared with the
// dense reference's gradients (reference_backward, double). Every buffer starts NaN, so an element read before anything
// wrote it shows.
//
// The same lists with NcclMoeLayer's messages: the all-to-alls of WorkPlanner::backward_exchange (every count
// matched by its peer's, every range inside its buffer), the rows' slots and combine weights received from the
// sources rather than read from their plans.
//
// Bound: 1e-5 relative per gradient (the emulation accumulates in double from float inputs and rounds each stored
// intermediate to float, as the device does).
#include "cuda/WorkPlan.hpp"

#include <tessel/moe/Reference.hpp>

#include <MoeTestUtils.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>

namespace {

using namespace tessel;
using namespace tessel::moe;
using namespace tessel::moe::cuda::Impl;
using tessel::moe::test::relative_error;

constexpr double tolerance = 1e-5;
constexpr double aux_coef = 0.01;
float const nan_value = std::numeric_limits<float>::quiet_NaN();

std::size_t z(std::int64_t v) { return static_cast<std::size_t>(v); }

std::uint64_t seed_now() {
  return static_cast<std::uint64_t>(std::random_device{}()) ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

double act(MoeConfig const &c, double x) {
  return c.activation == Activation::silu ? x / (1.0 + std::exp(-x)) : 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double slope(MoeConfig const &c, double x) {
  if (c.activation == Activation::silu) {
    double const s = 1.0 / (1.0 + std::exp(-x));
    return s * (1.0 + x * (1.0 - s));
  }
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * 0.39894228040143268 * std::exp(-0.5 * x * x);
}

struct Case {
  int ep, tp, topk;
  std::int64_t m, n, k;
  int experts_per_group;
  int chunks;
  bool gate_weight, normalize, gated;
  Activation activation;
  int starve;
};

// \p nccl: NcclMoeLayer's messages (WorkPlanner::backward_exchange all-to-alls, the rows' slots and weights from
// the sources) instead of VirtualRanksLayer's copies and row lists.
void run_case(Case const &c, std::uint64_t seed, bool nccl) {
  MoeConfig config;
  config.tokens = c.m;
  config.hidden = c.n;
  config.ffn = c.k * c.tp;
  config.experts = c.experts_per_group * c.ep;
  config.topk = c.topk;
  config.ep = c.ep;
  config.tp = c.tp;
  config.gated = c.gated;
  config.activation = c.activation;
  config.normalize_topk = c.normalize;
  int const world = config.world(), local_experts = c.experts_per_group, topk = c.topk;
  std::int64_t const m = c.m, n = c.n, ffn_per_rank = c.k, c0 = config.gemm0_cols(), e_all = config.experts;
  std::string const what = config.describe() + " chunks " + std::to_string(c.chunks) + " seed " + std::to_string(seed) +
                           (nccl ? " (NcclMoeLayer's messages)" : " (VirtualRanksLayer's copies)");
  SCOPED_TRACE(what);

  auto const dense = test::random_weights(config, seed);
  auto const gate_w = test::random_matrix("gate_weight", z(n), z(e_all), seed + 5, 0.3f);
  HostVector bias("bias", z(e_all));
  for (std::int64_t e = 0; e < e_all; ++e)
    bias(z(e)) = 0.1f * static_cast<float>(e % 3);
  std::vector<ExpertWeights> shards;
  std::vector<HostMatrix> tokens, logits, d_out;
  std::vector<GateInput> gates;
  std::vector<Routing> routings(z(world));
  std::vector<DispatchPlan> plans;
  HostExecSpace space;
  for (int r = 0; r < world; ++r) {
    shards.push_back(shard_weights(config, r, dense));
    tokens.push_back(test::random_matrix("tokens", z(m), z(n), seed + 10 + static_cast<std::uint64_t>(r)));
    logits.push_back(test::random_matrix("logits", z(m), z(e_all), seed + 20 + static_cast<std::uint64_t>(r), 2.0f));
    if (c.starve >= 0)
      for (std::int64_t t = 0; t < m; ++t)
        logits.back()(z(t), z(c.starve)) = -40.0f;
    d_out.push_back(test::random_matrix("d_out", z(m), z(n), seed + 30 + static_cast<std::uint64_t>(r)));
    gates.push_back(c.gate_weight ? GateInput::from_weight(gate_w, bias) : GateInput::from_logits(logits.back()));
    route(space, config, tokens.back(), gates.back(), routings[z(r)]);
    plans.push_back(make_dispatch_plan(config, routings[z(r)], c.chunks));
  }

  // The forward's lists (as VirtualRanksLayer::forward makes them) and the backward's.
  CometParams const unused;
  WorkPlanner const planner(config, plans, unused);
  std::vector<std::vector<std::int32_t>> table_rows(z(world));
  std::vector<std::vector<float>> table_weights(z(world));
  std::vector<std::vector<std::int64_t>> table_bases(z(world));
  for (int s = 0; s < world; ++s)
    planner.slot_table(s, table_rows[z(s)], table_weights[z(s)], table_bases[z(s)]);
  std::vector<RankWork> work;
  std::vector<BackwardWork> bw;
  for (int d = 0; d < world; ++d) {
    work.push_back(planner.work_of(d, c.chunks, table_bases));
    bw.push_back(planner.backward_work(d, work.back(), routings[z(d)].experts, /*row_lists=*/!nccl));
  }

  std::int64_t stale = 0;
  auto read = [&stale](std::vector<float> const &v, std::int64_t i) {
    EXPECT_GE(i, 0);
    EXPECT_LT(z(i), v.size());
    float const x = v[z(i)];
    stale += std::isnan(x);
    return static_cast<double>(x);
  };

  // Owners: send rows (the forward's packing) and the output gradient per slot.
  std::vector<std::vector<float>> send_rows(z(world)), g_out(z(world)), combine(z(world)), dw_recv(z(world));
  for (int s = 0; s < world; ++s) {
    auto const &plan = plans[z(s)];
    send_rows[z(s)].assign(z(m * topk * n), nan_value);
    for (std::int64_t i = 0; i < plan.rows(); ++i)
      for (std::int64_t j = 0; j < n; ++j)
        send_rows[z(s)][z(i * n + j)] = tokens[z(s)](z(plan.row_token[z(i)]), z(j));
    auto const &lists = bw[z(s)];
    ASSERT_EQ(lists.slot_token.size(), z(lists.out_off.back()));
    g_out[z(s)].assign(z(lists.out_off.back() * n), nan_value);
    for (std::size_t j = 0; j < lists.slot_token.size(); ++j) {
      auto const t = lists.slot_token[j];
      ASSERT_GE(t, 0);
      ASSERT_LT(t, m);
      for (std::int64_t col = 0; col < n; ++col)
        g_out[z(s)][j * z(n) + z(col)] = d_out[z(s)](z(t), z(col));
    }
    combine[z(s)].assign(z(world * m * n), nan_value);
    dw_recv[z(s)].assign(z(world * m * topk), nan_value);
  }

  // Expert sides: what arrives from the sources (output gradients per slot; the rows' slots and weights).
  constexpr std::int32_t unwritten = std::numeric_limits<std::int32_t>::min();
  std::vector<std::vector<float>> g_in(z(world)), row_weight(z(world)), dw_all(z(world));
  std::vector<std::vector<std::int32_t>> row_slot(z(world));
  std::vector<std::vector<BackwardExchange>> exchange(z(world));
  for (int d = 0; d < world; ++d) {
    g_in[z(d)].assign(z(bw[z(d)].in_off.back() * n), nan_value);
    dw_all[z(d)].assign(z(work[z(d)].rows), nan_value);
    if (nccl) {
      EXPECT_TRUE(bw[z(d)].row_slot.empty());
      row_slot[z(d)].assign(z(work[z(d)].rows), unwritten);
      row_weight[z(d)].assign(z(work[z(d)].rows), nan_value);
      for (int ch = 0; ch < c.chunks; ++ch)
        exchange[z(d)].push_back(planner.backward_exchange(d, ch, work[z(d)], bw[z(d)]));
    } else {
      ASSERT_EQ(bw[z(d)].row_slot.size(), z(work[z(d)].rows));
      row_slot[z(d)] = bw[z(d)].row_slot;
      row_weight[z(d)] = bw[z(d)].row_weight;
    }
  }
  auto exchange_of = [&](int ch, Alltoall BackwardExchange::*which) {
    std::vector<Alltoall> x;
    for (int d = 0; d < world; ++d)
      x.push_back(exchange[z(d)][z(ch)].*which);
    return x;
  };
  if (nccl) {
    std::vector<std::vector<std::int32_t>> send_slot;
    std::vector<std::vector<float>> send_weight;
    for (auto const &plan : plans) {
      send_slot.push_back(plan.row_slot);
      send_weight.push_back(plan.row_weight);
    }
    for (int ch = 0; ch < c.chunks; ++ch) {
      test::emulate_alltoallv(g_out, g_in, exchange_of(ch, &BackwardExchange::slots));
      test::emulate_alltoallv(send_slot, row_slot, exchange_of(ch, &BackwardExchange::rows));
      test::emulate_alltoallv(send_weight, row_weight, exchange_of(ch, &BackwardExchange::rows));
    }
  }
  std::vector<std::vector<double>> grad_w0(z(world)), grad_w1(z(world));
  for (int d = 0; d < world; ++d) {
    auto const &w = work[z(d)];
    auto const &lists = bw[z(d)];
    int const g = config.group_of_rank(d);
    auto const &sh = shards[z(d)];
    auto &dw = dw_all[z(d)];
    std::vector<float> x(z(w.rows * n), nan_value), gr(z(w.rows * n), nan_value),
        aw(z(w.rows * ffn_per_rank), nan_value), dpre(z(w.rows * c0), nan_value), dx(z(w.rows * n), nan_value),
        combine_send(z(world * m * n), nan_value);
    grad_w0[z(d)].assign(z(local_experts * n * c0), 0.0);
    grad_w1[z(d)].assign(z(local_experts * ffn_per_rank * n), 0.0);
    for (int ch = 0; ch < c.chunks; ++ch)
      for (int s = 0; s < world; ++s) {
        auto const &b = w.blocks[z(s)][z(ch)];
        auto const row0 = w.row[z(s)][z(ch)];
        // x_recv (the forward's pull, or the backward's copy of the own rows) and the copy-in of the slots.
        for (std::int64_t i = 0; i < b.rows * n; ++i)
          x[z(row0 * n + i)] = static_cast<float>(read(send_rows[z(s)], b.send_row * n + i));
        for (std::int64_t i = 0; i < b.slots * n && !nccl; ++i)
          g_in[z(d)][z((lists.in_off[z(s)] + b.slot_begin) * n + i)] =
              static_cast<float>(read(g_out[z(s)], (bw[z(s)].out_off[z(g)] + b.slot_begin) * n + i));
      }
    for (int ch = 0; ch < c.chunks; ++ch)
      for (int s = 0; s < world; ++s) {
        auto const &b = w.blocks[z(s)][z(ch)];
        auto const row0 = w.row[z(s)][z(ch)];
        for (std::int64_t i = row0; i < row0 + b.rows; ++i) {
          ASSERT_NE(row_slot[z(d)][z(i)], unwritten) << "rank " << d << "'s row " << i << " got no slot";
          for (std::int64_t col = 0; col < n; ++col)
            gr[z(i * n + col)] =
                static_cast<float>(read(g_in[z(d)], (lists.in_off[z(s)] + row_slot[z(d)][z(i)]) * n + col));
        }
        for (int e = 0; e < local_experts; ++e)
          for (auto i = row0 + b.expert_offset[z(e)]; i < row0 + b.expert_offset[z(e) + 1]; ++i) {
            std::vector<float> pre(z(c0)), q(z(ffn_per_rank));
            for (std::int64_t j = 0; j < c0; ++j) {
              double acc = 0.0;
              for (std::int64_t k = 0; k < n; ++k)
                acc += read(x, i * n + k) * sh.w0(z(e), z(k), z(j));
              pre[z(j)] = static_cast<float>(acc);
            }
            for (std::int64_t j = 0; j < ffn_per_rank; ++j) {
              double acc = 0.0;
              for (std::int64_t k = 0; k < n; ++k)
                acc += read(gr, i * n + k) * sh.w1(z(e), z(j), z(k));
              q[z(j)] = static_cast<float>(acc);
            }
            double const wt = read(row_weight[z(d)], i), dot = [&] {
              double sum = 0.0;
              for (std::int64_t j = 0; j < ffn_per_rank; ++j) {
                double const a = act(config, pre[z(j)]), up = c.gated ? pre[z(ffn_per_rank + j)] : 1.0;
                sum += q[z(j)] * a * up;
                double const dh = wt * q[z(j)];
                aw[z(i * ffn_per_rank + j)] = static_cast<float>(wt * a * up);
                dpre[z(i * c0 + j)] = static_cast<float>(dh * up * slope(config, pre[z(j)]));
                if (c.gated)
                  dpre[z(i * c0 + ffn_per_rank + j)] = static_cast<float>(dh * a);
              }
              return sum;
            }();
            dw[z(i)] = static_cast<float>(dot);
            for (std::int64_t col = 0; col < n; ++col) {
              double acc = 0.0;
              for (std::int64_t j = 0; j < c0; ++j)
                acc += read(dpre, i * c0 + j) * sh.w0(z(e), z(col), z(j));
              dx[z(i * n + col)] = static_cast<float>(acc);
            }
            // Weight gradients.
            for (std::int64_t j = 0; j < ffn_per_rank; ++j)
              for (std::int64_t col = 0; col < n; ++col)
                grad_w1[z(d)][z((e * ffn_per_rank + j) * n + col)] +=
                    read(aw, i * ffn_per_rank + j) * read(gr, i * n + col);
            for (std::int64_t k = 0; k < n; ++k)
              for (std::int64_t j = 0; j < c0; ++j)
                grad_w0[z(d)][z((e * n + k) * c0 + j)] += read(x, i * n + k) * read(dpre, i * c0 + j);
          }
        // The sum per slot through the forward's reduction items of (s, ch), weight 1.
        auto const &all = w.chunk_reduces[z(ch)];
        std::int64_t first_of_chunk = 0;
        for (int q = 0; q < ch; ++q)
          first_of_chunk += static_cast<std::int64_t>(w.chunk_reduces[z(q)].size());
        auto const first = lists.reduce_at[z(ch)][z(s)] - first_of_chunk,
                   last = lists.reduce_at[z(ch)][z(s) + 1] - first_of_chunk;
        ASSERT_GE(first, 0);
        ASSERT_LE(z(last), all.size());
        std::int64_t covered = 0;
        for (auto it_at = first; it_at < last; ++it_at) {
          auto const &it = all[z(it_at)];
          ASSERT_EQ(it.source, s);
          covered += it.slot_end - it.slot_begin;
          for (int slot = it.slot_begin; slot < it.slot_end; ++slot)
            for (int col = it.col_begin; col < it.col_end; ++col) {
              float acc = 0.0f;
              for (int k = 0; k < topk; ++k) {
                int const r = table_rows[z(s)][z((it.table_base + slot) * topk + k)];
                if (r >= 0)
                  acc += static_cast<float>(read(dx, (it.row_base + r) * n + col));
              }
              combine_send[z((s * m + slot) * n + col)] = acc;
            }
        }
        EXPECT_EQ(covered, b.slots) << "rank " << d << ", source " << s << ", chunk " << ch;
        // Replies: the token gradients per slot into the owner's combine region d, the rows' dw into its dw_recv.
        for (std::int64_t i = 0; i < b.slots * n; ++i)
          combine[z(s)][z((d * m + b.slot_begin) * n + i)] =
              static_cast<float>(read(combine_send, (s * m + b.slot_begin) * n + i));
        for (std::int64_t j = 0; j < b.rows && !nccl; ++j)
          dw_recv[z(s)][z(d * m * topk + b.send_row + j)] = static_cast<float>(read(dw, row0 + j));
      }
  }
  if (nccl)
    for (int ch = 0; ch < c.chunks; ++ch)
      test::emulate_alltoallv(dw_all, dw_recv, exchange_of(ch, &BackwardExchange::dw));

  // Owners: the final sum in rank order, the gate's backward (gate_backward_kernel), the gate's GEMMs.
  auto aux_grad = std::vector<double>(z(e_all), 0.0);
  {
    double const all_tokens = static_cast<double>(m) * world;
    for (std::int64_t e = 0; e < e_all; ++e) {
      double count = 0.0;
      for (auto const &routing : routings)
        count += static_cast<double>(routing.tokens_per_expert[z(e)]);
      if (all_tokens > 0)
        aux_grad[z(e)] = aux_coef * static_cast<double>(e_all) * (count / (all_tokens * topk)) / all_tokens;
    }
  }
  std::vector<std::vector<float>> grad_x(z(world)), dlogits(z(world));
  std::vector<double> grad_gate(z(n * e_all), 0.0), grad_bias(z(e_all), 0.0);
  for (int s = 0; s < world; ++s) {
    auto const &plan = plans[z(s)];
    auto const &routing = routings[z(s)];
    grad_x[z(s)].assign(z(m * n), 0.0f);
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t col = 0; col < n; ++col) {
        float acc = 0.0f;
        for (int r = 0; r < world; ++r) {
          auto const slot = plan.token_slot[z(config.group_of_rank(r) * m + t)];
          if (slot >= 0)
            acc += static_cast<float>(read(combine[z(s)], (r * m + slot) * n + col));
        }
        grad_x[z(s)][z(t * n + col)] = acc;
      }
    auto dwk = [&](std::int64_t t, int k) {
      auto const at = z(t * topk + k);
      int const group = routing.experts(z(t), z(k)) / local_experts;
      float sum = 0.0f;
      for (int r = 0; r < world; ++r)
        if (config.group_of_rank(r) == group)
          sum += static_cast<float>(read(dw_recv[z(s)], r * m * topk + bw[z(s)].choice_row[at]));
      return sum;
    };
    dlogits[z(s)].assign(z(m * e_all), nan_value);
    for (std::int64_t t = 0; t < m; ++t) {
      double mean_w = 0.0;
      if (c.normalize)
        for (int k = 0; k < topk; ++k)
          mean_w += static_cast<double>(routing.weights(z(t), z(k))) * dwk(t, k);
      auto dp_of = [&](std::int64_t e) {
        double dp = aux_grad[z(e)];
        if (!c.normalize)
          for (int k = 0; k < topk; ++k)
            if (routing.experts(z(t), z(k)) == e)
              dp += dwk(t, k);
        return dp;
      };
      double mean = 0.0;
      for (std::int64_t e = 0; e < e_all; ++e)
        mean += static_cast<double>(routing.probabilities(z(t), z(e))) * dp_of(e);
      for (std::int64_t e = 0; e < e_all; ++e) {
        float v = 0.0f;
        if (c.normalize)
          for (int k = 0; k < topk; ++k)
            if (routing.experts(z(t), z(k)) == e)
              v = static_cast<float>(static_cast<double>(routing.weights(z(t), z(k))) * (dwk(t, k) - mean_w));
        v += static_cast<float>(static_cast<double>(routing.probabilities(z(t), z(e))) * (dp_of(e) - mean));
        dlogits[z(s)][z(t * e_all + e)] = v;
      }
    }
    if (c.gate_weight)
      for (std::int64_t t = 0; t < m; ++t) {
        for (std::int64_t col = 0; col < n; ++col) {
          double acc = grad_x[z(s)][z(t * n + col)];
          for (std::int64_t e = 0; e < e_all; ++e)
            acc += static_cast<double>(dlogits[z(s)][z(t * e_all + e)]) * gate_w(z(col), z(e));
          grad_x[z(s)][z(t * n + col)] = static_cast<float>(acc);
        }
        for (std::int64_t e = 0; e < e_all; ++e) {
          grad_bias[z(e)] += dlogits[z(s)][z(t * e_all + e)];
          for (std::int64_t col = 0; col < n; ++col)
            grad_gate[z(col * e_all + e)] +=
                static_cast<double>(tokens[z(s)](z(t), z(col))) * dlogits[z(s)][z(t * e_all + e)];
        }
      }
  }
  EXPECT_EQ(stale, 0) << "reads of elements no step had written";

  // The reference over all ranks' tokens, with the router's choice.
  HostMatrix all_tokens("all_tokens", z(m * world), z(n)), all_logits("all_logits", z(m * world), z(e_all)),
      all_d_out("all_d_out", z(m * world), z(n));
  HostIndexMatrix chosen("chosen", z(m * world), z(topk));
  for (int r = 0; r < world; ++r)
    for (std::int64_t t = 0; t < m; ++t) {
      auto const row = z(r * m + t);
      for (std::int64_t j = 0; j < n; ++j) {
        all_tokens(row, z(j)) = tokens[z(r)](z(t), z(j));
        all_d_out(row, z(j)) = d_out[z(r)](z(t), z(j));
      }
      for (std::int64_t j = 0; j < e_all; ++j)
        all_logits(row, z(j)) = logits[z(r)](z(t), z(j));
      for (int k = 0; k < topk; ++k)
        chosen(row, z(k)) = routings[z(r)].experts(z(t), z(k));
    }
  auto const gate = c.gate_weight ? GateInput::from_weight(gate_w, bias) : GateInput::from_logits(all_logits);
  auto const ref = reference_backward(config, all_tokens, gate, chosen, dense, all_d_out, aux_coef);
  auto dense_grad = allocate_dense_weights(config);
  for (std::size_t i = 0; i < dense_grad.w0.size(); ++i)
    dense_grad.w0.data()[i] = static_cast<float>(ref.w0[i]);
  for (std::size_t i = 0; i < dense_grad.w1.size(); ++i)
    dense_grad.w1.data()[i] = static_cast<float>(ref.w1[i]);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_LT(relative_error(grad_x[z(r)].data(), &ref.tokens(z(r * m), 0), z(m * n)), tolerance) << "tokens";
    EXPECT_LT(relative_error(dlogits[z(r)].data(), &ref.logits(z(r * m), 0), z(m * e_all),
                             test::logit_gradient_floor(routings[z(r)].weights, ref, z(r * m))),
              tolerance)
        << "logits";
    auto const shard = shard_weights(config, r, dense_grad);
    std::vector<float> w0(grad_w0[z(r)].begin(), grad_w0[z(r)].end()), w1(grad_w1[z(r)].begin(), grad_w1[z(r)].end());
    std::vector<double> e0(shard.w0.data(), shard.w0.data() + shard.w0.size()),
        e1(shard.w1.data(), shard.w1.data() + shard.w1.size());
    ASSERT_EQ(w0.size(), e0.size());
    ASSERT_EQ(w1.size(), e1.size());
    EXPECT_LT(relative_error(w0.data(), e0.data(), e0.size()), tolerance) << "W0";
    EXPECT_LT(relative_error(w1.data(), e1.data(), e1.size()), tolerance) << "W1";
  }
  if (c.gate_weight) {
    std::vector<float> gw(grad_gate.begin(), grad_gate.end()), gb(grad_bias.begin(), grad_bias.end());
    EXPECT_LT(relative_error(gw.data(), ref.gate_weight.data(), gw.size()), tolerance) << "gate weight";
    EXPECT_LT(relative_error(gb.data(), ref.bias.data(), gb.size()), tolerance) << "gate bias";
  }
}

TEST(CudaBackwardPlan, layouts_topk_chunks_and_edge_cases) {
  auto const seed = seed_now();
  // ep, tp, topk, M, N, K/TP, experts per group, chunks, gate weight, normalize, gated, activation, starved expert
  std::vector<Case> const cases{
      {1, 1, 1, 37, 24, 20, 4, 1, false, true, true, Activation::silu, -1},
      {2, 1, 2, 41, 24, 20, 4, 1, true, true, true, Activation::silu, -1},
      {2, 1, 2, 41, 24, 20, 4, 3, true, true, true, Activation::silu, 1},
      {4, 1, 8, 29, 16, 12, 2, 1, true, true, true, Activation::gelu, -1},
      {2, 2, 2, 33, 20, 12, 3, 3, true, false, false, Activation::silu, 2},
      {1, 4, 2, 23, 20, 8, 4, 2, false, false, true, Activation::gelu, 0},
      {4, 1, 2, 3, 8, 8, 2, 1, true, true, true, Activation::silu, -1},
  };
  for (auto const &c : cases)
    for (bool nccl : {false, true})
      run_case(c, seed, nccl);
}

} // namespace

// The device layer's host half (src/cuda/WorkPlan.cpp) on any machine, without a GPU: the slot tables and work
// lists the kernels consume are executed here by a host emulation of the kernels' semantics (the same index
// arithmetic: symmetric buffers per rank addressed by rank, pulls of messages, 64 x 64 GEMM items, top-k reduction
// items storing into the owner's combine region, the final sum over ranks), and the result is compared with the
// dense double-precision reference. Besides the result, every list is checked structurally: each h and y element
// and each combine element is written exactly once, every remote layer0 item lies inside the message it waits for,
// the per-split item counts match the items, and every read stays inside the buffers the device layer allocates.
// comet's lists run in the most adversarial order their waits allow (a reader as early as its wait lets it, every
// buffer NaN until written), so that a missing wait shows as a wrong result: the second test skips each kind of
// wait in turn, as the device layers' test-only switch does, and checks that the result then fails.
//
// The baselines run twice: with VirtualRanksLayer's copies and with NcclMoeLayer's all-to-alls (WorkPlanner::
// forward_exchange, every rank's lists built from its own plan and the others' summaries, as the layer exchanges
// them).
//
// Bound: max |y - ref| / max |ref| <= 1e-5 (the emulation accumulates in double from float inputs and weights; the
// only float roundings are h, y and the combine rows, a few u32 = 6e-8 each).
#include "cuda/WorkPlan.hpp"

#include <tessel/moe/Reference.hpp>

#include <MoeTestUtils.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace {

using namespace tessel;
using namespace tessel::moe;
using namespace tessel::moe::cuda::Impl;

std::uint64_t seed_now() {
  return static_cast<std::uint64_t>(std::random_device{}()) ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

float const nan_value = std::numeric_limits<float>::quiet_NaN();

double act(MoeConfig const &c, double x) {
  return c.activation == Activation::silu ? x / (1.0 + std::exp(-x)) : 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

struct Emulator {
  MoeConfig config;
  std::vector<ExpertWeights> shards;
  std::vector<DispatchPlan> plans;
  std::vector<std::vector<float>> send_rows, combine; // per rank: the symmetric buffers
  std::vector<std::vector<std::int32_t>> table_rows;
  std::vector<std::vector<float>> table_weights;
  std::vector<std::vector<std::int64_t>> table_bases;
  std::int64_t m = 0, n = 0, ffn_per_rank = 0, cols0 = 0;
  int world = 1;
  /// Reads of an element that no work item had written (yet): NaN flows on, and the count tells where it came from.
  std::int64_t stale_reads = 0;

  Emulator(MoeConfig const &c, std::vector<ExpertWeights> const &s, std::vector<DispatchPlan> const &p,
           std::vector<HostMatrix> const &tokens)
      : config(c), shards(s), plans(p), m(c.tokens), n(c.hidden), ffn_per_rank(c.ffn_per_rank()), cols0(c.gemm0_cols()),
        world(c.world()) {
    CometParams unused;
    WorkPlanner const planner(config, plans, unused);
    send_rows.resize(static_cast<std::size_t>(world));
    combine.assign(static_cast<std::size_t>(world),
                   std::vector<float>(static_cast<std::size_t>(world * m * n), nan_value));
    table_rows.resize(static_cast<std::size_t>(world));
    table_weights.resize(static_cast<std::size_t>(world));
    table_bases.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      auto const &plan = plans[static_cast<std::size_t>(r)];
      // The symmetric send rows hold M topk rows; the plan must fit.
      EXPECT_LE(plan.rows(), m * c.topk);
      auto &rows = send_rows[static_cast<std::size_t>(r)];
      rows.assign(static_cast<std::size_t>(m * c.topk * n), nan_value);
      for (std::int64_t i = 0; i < plan.rows(); ++i)
        for (std::int64_t j = 0; j < n; ++j)
          rows[static_cast<std::size_t>(i * n + j)] = tokens[static_cast<std::size_t>(r)](
              static_cast<std::size_t>(plan.row_token[static_cast<std::size_t>(i)]), static_cast<std::size_t>(j));
      planner.slot_table(r, table_rows[static_cast<std::size_t>(r)], table_weights[static_cast<std::size_t>(r)],
                         table_bases[static_cast<std::size_t>(r)]);
      EXPECT_LE(table_rows[static_cast<std::size_t>(r)].size(), static_cast<std::size_t>(m * c.topk * c.topk));
    }
  }

  // GEMM0 + activation of one row of A for local expert e and column j of h.
  float h_value(int d, float const *a, int e, std::int64_t j) const {
    auto const &w0 = shards[static_cast<std::size_t>(d)].w0;
    double g = 0.0, u = 0.0;
    for (std::int64_t k = 0; k < n; ++k) {
      g += static_cast<double>(a[k]) *
           w0(static_cast<std::size_t>(e), static_cast<std::size_t>(k), static_cast<std::size_t>(j));
      if (config.gated)
        u += static_cast<double>(a[k]) *
             w0(static_cast<std::size_t>(e), static_cast<std::size_t>(k), static_cast<std::size_t>(ffn_per_rank + j));
    }
    return static_cast<float>(config.gated ? act(config, g) * u : act(config, g));
  }
  float y_value(int d, float const *h, int e, std::int64_t col) const {
    auto const &w1 = shards[static_cast<std::size_t>(d)].w1;
    double acc = 0.0;
    for (std::int64_t k = 0; k < ffn_per_rank; ++k)
      acc += static_cast<double>(h[k]) *
             w1(static_cast<std::size_t>(e), static_cast<std::size_t>(k), static_cast<std::size_t>(col));
    return static_cast<float>(acc);
  }

  // reduce_item(): rows through the source's slot table, fp32 accumulation, stored into the owner's region d.
  // \p local: the rank's combine_send ([world, M, N] by source) instead of the owners' regions (NcclMoeLayer's
  // baselines, whose combine all-to-all moves it).
  void reduce(int d, ReduceItem const &it, std::vector<float> const &y, std::vector<int> &written,
              std::vector<float> *local = nullptr) {
    auto const &rows = table_rows[static_cast<std::size_t>(it.source)];
    auto const &weights = table_weights[static_cast<std::size_t>(it.source)];
    for (int slot = it.slot_begin; slot < it.slot_end; ++slot) {
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, m);
      for (int col = it.col_begin; col < it.col_end; ++col) {
        float acc = 0.0f;
        for (int k = 0; k < config.topk; ++k) {
          auto const entry = static_cast<std::size_t>((it.table_base + slot) * config.topk + k);
          ASSERT_LT(entry, rows.size());
          int const r = rows[entry];
          if (r >= 0) {
            auto const at = static_cast<std::size_t>((it.row_base + r) * n + col);
            ASSERT_LT(at, y.size());
            stale_reads += std::isnan(y[at]);
            acc = std::fma(weights[entry], y[at], acc);
          }
        }
        if (local != nullptr) {
          (*local)[static_cast<std::size_t>((it.source * m + slot) * n + col)] = acc;
          continue;
        }
        auto const at = static_cast<std::size_t>((d * m + slot) * n + col);
        combine[static_cast<std::size_t>(it.source)][at] = acc;
        ++written[static_cast<std::size_t>(it.source * world * m * n) + at];
      }
    }
  }

  void final_sum(std::vector<HostMatrix> &out) {
    for (int s = 0; s < world; ++s) {
      auto const &plan = plans[static_cast<std::size_t>(s)];
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t col = 0; col < n; ++col) {
          float acc = 0.0f;
          for (int r = 0; r < world; ++r) {
            int const slot = plan.token_slot[static_cast<std::size_t>(config.group_of_rank(r) * m + t)];
            if (slot >= 0) {
              float const v = combine[static_cast<std::size_t>(s)][static_cast<std::size_t>((r * m + slot) * n + col)];
              acc += v;
              stale_reads += std::isnan(v);
            }
          }
          out[static_cast<std::size_t>(s)](static_cast<std::size_t>(t), static_cast<std::size_t>(col)) = acc;
        }
    }
  }

  /// The comet schedule's lists, executed in the most adversarial order the kernels' waits allow: a message's rows are
  /// pulled only when the first GEMM item that waits for them runs, a reduction runs as soon as the GEMM items of its
  /// column block are done, and no rank's final sum runs before every rank's reductions. \p skip (a KernelError code,
  /// the device layers' test-only DeviceDebug::skip_wait) drops one kind of wait, as the kernels then do: the reader
  /// runs first and finds what the buffers held before (NaN).
  void comet(CometParams const &params, std::vector<HostMatrix> &out, std::string const &what, int skip = no_error) {
    WorkPlanner const planner(config, plans, params);
    std::vector<int> written(static_cast<std::size_t>(world * world * m * n), 0);
    if (skip == timeout_combine)
      final_sum(out); // before any rank's reductions stored into the combine buffers
    for (int d = 0; d < world; ++d) {
      RankWork w = planner.work_of(d, 1, table_bases);
      planner.comet_work(d, w);
      std::vector<float> x(static_cast<std::size_t>(w.rows * n), nan_value),
          h(static_cast<std::size_t>(w.rows * ffn_per_rank), nan_value),
          y(static_cast<std::size_t>(w.rows * n), nan_value);
      std::vector<int> h_count(h.size(), 0), y_count(y.size(), 0);
      for (auto const &msg : w.messages) {
        ASSERT_NE(msg.source, d) << what;
        ASSERT_GT(msg.rows, 0) << what;
        ASSERT_LE(msg.src_row + msg.rows, plans[static_cast<std::size_t>(msg.source)].rows()) << what;
        ASSERT_LE(msg.dst_row + msg.rows, w.rows) << what;
      }
      // A pull before the source's packed flag reads the send rows as they were before the packing.
      std::vector<float> const unpacked(static_cast<std::size_t>(m * config.topk * n), nan_value);
      std::vector<bool> pulled(w.messages.size(), false);
      auto pull = [&](std::size_t i) {
        auto const &msg = w.messages[i];
        auto const &src = skip == timeout_packed ? unpacked : send_rows[static_cast<std::size_t>(msg.source)];
        std::copy(src.begin() + msg.src_row * n, src.begin() + (msg.src_row + msg.rows) * n,
                  x.begin() + msg.dst_row * n);
        pulled[i] = true;
      };
      bool seen_remote = false;
      for (auto const &it : w.items0) {
        ASSERT_GT(it.rows, 0) << what;
        ASSERT_LE(it.rows, item_rows) << what;
        ASSERT_LE(it.h_row + it.rows, w.rows) << what;
        float const *a = nullptr;
        if (it.message >= 0) {
          seen_remote = true;
          ASSERT_LT(it.message, static_cast<int>(w.messages.size())) << what;
          auto const &msg = w.messages[static_cast<std::size_t>(it.message)];
          ASSERT_GE(it.a_row, msg.dst_row) << what;
          ASSERT_LE(it.a_row + it.rows, msg.dst_row + msg.rows) << what << ": a layer0 item outside its message";
          if (skip != timeout_message && !pulled[static_cast<std::size_t>(it.message)])
            pull(static_cast<std::size_t>(it.message));
          a = x.data() + it.a_row * n;
        } else {
          ASSERT_LE(it.a_row + it.rows, plans[static_cast<std::size_t>(d)].rows()) << what;
          a = send_rows[static_cast<std::size_t>(d)].data() + it.a_row * n;
        }
        for (int r = 0; r < it.rows; ++r)
          for (std::int64_t c = it.col0; c < std::min<std::int64_t>(it.col0 + item_cols, ffn_per_rank); ++c) {
            auto const at = static_cast<std::size_t>((it.h_row + r) * ffn_per_rank + c);
            h[at] = h_value(d, a + r * n, it.expert, c);
            ++h_count[at];
          }
      }
      (void)seen_remote;
      for (std::size_t i = 0; i < w.messages.size(); ++i)
        if (!pulled[i])
          pull(i); // the communication blocks end after the GEMM blocks that skipped their wait
      for (std::size_t i = 0; i < h_count.size(); ++i)
        ASSERT_EQ(h_count[i], 1) << what << ": h element " << i << " of rank " << d;
      ASSERT_EQ(static_cast<int>(w.split_tiles.size()), params.n_splits) << what;
      std::vector<int> per_split(static_cast<std::size_t>(params.n_splits), 0);
      auto const cols = OverlapPlan::split_columns(n, params.n_splits);
      // A reduction item's split must be the one whose columns it reads.
      for (auto const &it : w.reduces) {
        ASSERT_EQ(it.col_begin, cols[static_cast<std::size_t>(it.split)]) << what;
        ASSERT_EQ(it.col_end, cols[static_cast<std::size_t>(it.split) + 1]) << what;
      }
      // Reductions of column block `split` as soon as its count is reached (every block's at once without the wait).
      auto reduce_split = [&](int split) {
        for (auto const &it : w.reduces)
          if (split < 0 || it.split == split)
            reduce(d, it, y, written);
      };
      if (skip == timeout_split)
        reduce_split(-1);
      else
        for (int split = 0; split < params.n_splits; ++split)
          if (w.split_tiles[static_cast<std::size_t>(split)] == 0)
            reduce_split(split);
      for (auto const &it : w.items1) {
        ASSERT_GT(it.rows, 0) << what;
        ASSERT_GT(it.cols, 0) << what;
        ASSERT_LE(it.cols, item_cols) << what;
        ASSERT_GE(it.col0, cols[static_cast<std::size_t>(it.split)]) << what;
        ASSERT_LE(it.col0 + it.cols, cols[static_cast<std::size_t>(it.split) + 1]) << what;
        ASSERT_LE(per_split[static_cast<std::size_t>(it.split)], w.split_tiles[static_cast<std::size_t>(it.split)])
            << what;
        for (int r = 0; r < it.rows; ++r)
          for (int c = it.col0; c < it.col0 + it.cols; ++c) {
            auto const at = static_cast<std::size_t>((it.row + r) * n + c);
            y[at] = y_value(d, h.data() + (it.row + r) * ffn_per_rank, it.expert, c);
            ++y_count[at];
          }
        if (++per_split[static_cast<std::size_t>(it.split)] == w.split_tiles[static_cast<std::size_t>(it.split)] &&
            skip != timeout_split)
          reduce_split(it.split);
      }
      EXPECT_EQ(per_split, w.split_tiles) << what;
      for (std::size_t i = 0; i < y_count.size(); ++i)
        ASSERT_EQ(y_count[i], 1) << what << ": y element " << i << " of rank " << d;
    }
    check_written(written, what);
    if (skip != timeout_combine)
      final_sum(out);
  }

  /// NcclMoeLayer's view of the plans on rank \p d: its own plan, the others' summaries (plan_summary), as the
  /// layer exchanges them.
  std::vector<DispatchPlan> exchanged_plans(int d, int chunks) const {
    std::vector<DispatchPlan> seen;
    for (int s = 0; s < world; ++s) {
      auto const words = plan_summary(plans[static_cast<std::size_t>(s)]);
      EXPECT_EQ(words.size(), plan_summary_words(config, chunks));
      seen.push_back(s == d ? plans[static_cast<std::size_t>(s)] : plan_from_summary(config, chunks, words.data()));
    }
    return seen;
  }

  /// NcclMoeLayer's dispatch: every chunk's WorkPlanner::forward_exchange all-to-all of the send rows, each rank's
  /// lists built from its exchanged plans (which must give the same work as the full plans); returns every rank's
  /// x_recv.
  std::vector<std::vector<float>> nccl_dispatch(int chunks, std::vector<RankWork> const &full,
                                                std::string const &what) const {
    CometParams unused;
    std::vector<std::vector<float>> x_recv;
    std::vector<std::vector<Alltoall>> rows(static_cast<std::size_t>(chunks));
    for (int d = 0; d < world; ++d) {
      auto const seen = exchanged_plans(d, chunks);
      WorkPlanner const planner(config, seen, unused);
      RankWork const w = planner.work_of(d, chunks, table_bases);
      auto const &f = full[static_cast<std::size_t>(d)];
      EXPECT_EQ(w.rows, f.rows) << what;
      EXPECT_EQ(w.row, f.row) << what;
      for (int s = 0; s < world; ++s)
        for (int ch = 0; ch < chunks; ++ch) {
          auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          auto const &fb = f.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          EXPECT_TRUE(b.send_row == fb.send_row && b.rows == fb.rows && b.expert_offset == fb.expert_offset &&
                      b.slot_begin == fb.slot_begin && b.slots == fb.slots)
              << what << ": rank " << d << "'s block of (source " << s << ", chunk " << ch << ")";
        }
      x_recv.emplace_back(static_cast<std::size_t>(w.rows * n), nan_value);
      for (int ch = 0; ch < chunks; ++ch) {
        auto x = planner.forward_exchange(d, ch, w).rows;
        for (auto *v : {&x.send_counts, &x.send_displs, &x.recv_counts, &x.recv_displs})
          for (auto &e : *v)
            e *= static_cast<std::size_t>(n); // rows of N elements
        rows[static_cast<std::size_t>(ch)].push_back(x);
      }
    }
    for (auto const &x : rows)
      test::emulate_alltoallv(send_rows, x_recv, x);
    return x_recv;
  }

  /// NcclMoeLayer's combine: every chunk's forward_exchange all-to-all of the ranks' combine_send ([world, M, N] by
  /// source) into the owners' combine regions.
  void nccl_combine(int chunks, std::vector<RankWork> const &work, std::vector<std::vector<float>> const &send) {
    CometParams unused;
    for (int ch = 0; ch < chunks; ++ch) {
      std::vector<Alltoall> slots;
      for (int d = 0; d < world; ++d) {
        auto const seen = exchanged_plans(d, chunks);
        auto x = WorkPlanner(config, seen, unused).forward_exchange(d, ch, work[static_cast<std::size_t>(d)]).slots;
        for (auto *v : {&x.send_counts, &x.send_displs, &x.recv_counts, &x.recv_displs})
          for (auto &e : *v)
            e *= static_cast<std::size_t>(n); // rows of N floats
        slots.push_back(x);
      }
      test::emulate_alltoallv(send, combine, slots);
    }
  }

  /// The baselines' lists (sequential: chunks = 1; pipelined: chunks > 1): dispatch copies per (source, chunk),
  /// the expert GEMMs of each chunk (ChunkGemms, the problems of the grouped cuBLAS calls), reductions into the local
  /// combine_send, combine copies into the owners. \p nccl: NcclMoeLayer's messages (forward_exchange all-to-alls
  /// from the exchanged plans) instead of VirtualRanksLayer's copies.
  void baseline(int chunks, std::vector<HostMatrix> &out, std::string const &what, bool nccl = false) {
    CometParams unused;
    WorkPlanner const planner(config, plans, unused);
    std::vector<int> written(static_cast<std::size_t>(world * world * m * n), 0);
    std::vector<RankWork> work;
    for (int d = 0; d < world; ++d)
      work.push_back(planner.work_of(d, chunks, table_bases));
    std::vector<std::vector<float>> x_recv, combine_send(static_cast<std::size_t>(world));
    if (nccl)
      x_recv = nccl_dispatch(chunks, work, what);
    for (int d = 0; d < world; ++d) {
      RankWork const &w = work[static_cast<std::size_t>(d)];
      std::vector<float> x(static_cast<std::size_t>(w.rows * n), nan_value),
          h(static_cast<std::size_t>(w.rows * ffn_per_rank), nan_value),
          y(static_cast<std::size_t>(w.rows * n), nan_value);
      if (nccl)
        x = x_recv[static_cast<std::size_t>(d)];
      for (int ch = 0; ch < chunks && !nccl; ++ch)
        for (int s = 0; s < world; ++s) {
          auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          std::int64_t const row = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          ASSERT_LE(b.send_row + b.rows, plans[static_cast<std::size_t>(s)].rows()) << what;
          ASSERT_LE(row + b.rows, w.rows) << what;
          ASSERT_EQ(b.expert_offset.back(), b.rows) << what;
          auto const &src = send_rows[static_cast<std::size_t>(s)];
          std::copy(src.begin() + b.send_row * n, src.begin() + (b.send_row + b.rows) * n, x.begin() + row * n);
        }
      // The expert GEMMs as the device runs them: the chunk's problems (one grouped cuBLAS call per layer), which
      // must be every (source, expert) row range with rows, each once, in groups of equal row counts.
      ASSERT_EQ(w.gemms.size(), static_cast<std::size_t>(chunks)) << what;
      for (int ch = 0; ch < chunks; ++ch) {
        auto const &g = w.gemms[static_cast<std::size_t>(ch)];
        std::vector<int> covered(static_cast<std::size_t>(w.rows), 0);
        std::int64_t expected_rows = 0;
        std::size_t expected_problems = 0;
        for (int s = 0; s < world; ++s) {
          auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          expected_rows += b.rows;
          for (int e = 0; e < config.experts_per_group(); ++e)
            expected_problems +=
                b.expert_offset[static_cast<std::size_t>(e) + 1] > b.expert_offset[static_cast<std::size_t>(e)];
        }
        ASSERT_EQ(g.problems.size(), expected_problems) << what << ", chunk " << ch;
        ASSERT_EQ(g.group_rows.size(), g.group_size.size()) << what;
        std::size_t next = 0;
        for (std::size_t q = 0; q < g.group_rows.size(); ++q) {
          ASSERT_GT(g.group_size[q], 0) << what;
          ASSERT_TRUE(q == 0 || g.group_rows[q] > g.group_rows[q - 1]) << what << ": groups not by distinct rows";
          for (int i = 0; i < g.group_size[q]; ++i, ++next) {
            ASSERT_LT(next, g.problems.size()) << what;
            ASSERT_EQ(g.problems[next].rows, g.group_rows[q]) << what << ", chunk " << ch << ", problem " << next;
          }
        }
        ASSERT_EQ(next, g.problems.size()) << what;
        std::int64_t rows = 0;
        for (auto const &p : g.problems) {
          ASSERT_GT(p.rows, 0) << what;
          ASSERT_TRUE(p.expert >= 0 && p.expert < config.experts_per_group()) << what;
          ASSERT_TRUE(p.row >= 0 && p.row + p.rows <= w.rows) << what;
          rows += p.rows;
          for (auto r = p.row; r < p.row + p.rows; ++r) {
            ++covered[static_cast<std::size_t>(r)];
            for (std::int64_t j = 0; j < ffn_per_rank; ++j)
              h[static_cast<std::size_t>(r * ffn_per_rank + j)] = h_value(d, x.data() + r * n, p.expert, j);
            for (std::int64_t c = 0; c < n; ++c)
              y[static_cast<std::size_t>(r * n + c)] = y_value(d, h.data() + r * ffn_per_rank, p.expert, c);
          }
        }
        ASSERT_EQ(rows, expected_rows) << what << ", chunk " << ch;
        for (int s = 0; s < world; ++s) {
          auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          std::int64_t const row = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
          for (auto r = row; r < row + b.rows; ++r)
            ASSERT_EQ(covered[static_cast<std::size_t>(r)], 1) << what << ", chunk " << ch << ", row " << r;
        }
      }
      if (nccl)
        combine_send[static_cast<std::size_t>(d)].assign(static_cast<std::size_t>(world * m * n), nan_value);
      for (auto const &list : w.chunk_reduces)
        for (auto const &it : list)
          reduce(d, it, y, written, nccl ? &combine_send[static_cast<std::size_t>(d)] : nullptr);
    }
    if (nccl)
      nccl_combine(chunks, work, combine_send);
    else
      check_written(written, what);
    final_sum(out);
  }

  // Every slot a source sends to a group is written exactly once by every rank of that group, and nothing else.
  void check_written(std::vector<int> const &written, std::string const &what) const {
    for (int s = 0; s < world; ++s)
      for (int r = 0; r < world; ++r) {
        auto const slots =
            plans[static_cast<std::size_t>(s)].group_slots[static_cast<std::size_t>(config.group_of_rank(r))];
        for (std::int64_t q = 0; q < m; ++q)
          for (std::int64_t col = 0; col < n; ++col) {
            int const count = written[static_cast<std::size_t>(s * world * m * n + (r * m + q) * n + col)];
            ASSERT_EQ(count, q < slots ? 1 : 0) << what << ": combine element (owner " << s << ", from " << r
                                                << ", slot " << q << ", col " << col << ")";
          }
      }
  }
};

struct Case {
  int ep, tp, topk;
  std::int64_t m, n, k;
  int experts_per_group;
  int starve;
  Activation activation;
  bool gated;
};

/// One forward's inputs on every rank, their routing and the dense reference's outputs.
struct Inputs {
  MoeConfig config;
  int world = 1;
  std::vector<ExpertWeights> shards;
  std::vector<HostMatrix> tokens, out;
  std::vector<Routing> routings;
  std::vector<ReferenceResult> refs;

  std::vector<DispatchPlan> plans(int chunks) const {
    std::vector<DispatchPlan> p;
    for (auto const &routing : routings)
      p.push_back(make_dispatch_plan(config, routing, chunks));
    return p;
  }
  /// The largest error of the emulated outputs over the ranks (NaN: infinity); the outputs are reset to NaN.
  double error() {
    double worst = 0.0;
    for (int r = 0; r < world; ++r) {
      worst =
          std::max(worst, max_relative_error(out[static_cast<std::size_t>(r)], refs[static_cast<std::size_t>(r)].out));
      for (std::size_t i = 0; i < out[static_cast<std::size_t>(r)].size(); ++i)
        out[static_cast<std::size_t>(r)].data()[i] = nan_value;
    }
    return worst;
  }
};

Inputs make_inputs(Case const &c, std::uint64_t seed) {
  Inputs in;
  auto &config = in.config;
  config.tokens = c.m;
  config.hidden = c.n;
  config.ffn = c.k * c.tp;
  config.experts = c.experts_per_group * c.ep;
  config.topk = c.topk;
  config.ep = c.ep;
  config.tp = c.tp;
  config.activation = c.activation;
  config.gated = c.gated;
  auto const dense = test::random_weights(config, seed);
  in.world = config.world();
  HostExecSpace space;
  for (int r = 0; r < in.world; ++r) {
    in.shards.push_back(shard_weights(config, r, dense));
    in.tokens.push_back(test::random_matrix("tokens", static_cast<std::size_t>(c.m), static_cast<std::size_t>(c.n),
                                            seed + 10 + static_cast<std::uint64_t>(r)));
    auto l = test::random_matrix("logits", static_cast<std::size_t>(c.m), static_cast<std::size_t>(config.experts),
                                 seed + 20 + static_cast<std::uint64_t>(r), 2.0f);
    if (c.starve >= 0)
      for (std::size_t t = 0; t < l.extent(0); ++t)
        l(t, static_cast<std::size_t>(c.starve)) = -40.0f;
    auto const gate = GateInput::from_logits(l);
    in.out.push_back(HostMatrix("out", static_cast<std::size_t>(c.m), static_cast<std::size_t>(c.n)));
    in.routings.emplace_back();
    route(space, config, in.tokens.back(), gate, in.routings.back());
    in.refs.push_back(reference_forward(config, in.tokens.back(), gate, in.routings.back().experts, dense));
  }
  return in;
}

void run_case(Case const &c, std::uint64_t seed) {
  auto in = make_inputs(c, seed);
  auto verify = [&](Emulator const &emu, std::string const &what) {
    EXPECT_EQ(emu.stale_reads, 0) << what << ": reads of elements no work item had written";
    EXPECT_LE(in.error(), 1e-5) << what;
  };
  std::ostringstream base;
  base << in.config.describe() << " seed " << seed;
  for (int chunks : {1, 3}) {
    auto const plans = in.plans(chunks);
    Emulator emu(in.config, in.shards, plans, in.tokens);
    emu.baseline(chunks, in.out, base.str() + (chunks == 1 ? " sequential" : " pipelined"));
    verify(emu, base.str() + (chunks == 1 ? " sequential" : " pipelined"));
    // The same with NcclMoeLayer's messages.
    Emulator over_nccl(in.config, in.shards, plans, in.tokens);
    over_nccl.baseline(chunks, in.out, base.str() + (chunks == 1 ? " sequential" : " pipelined") + " (NCCL)", true);
    verify(over_nccl, base.str() + (chunks == 1 ? " sequential" : " pipelined") + " (NCCL)");
    if (chunks != 1)
      continue;
    std::vector<CometParams> params(4);
    params[0].tile_m = 16;
    params[0].n_splits = 3;
    params[1].tile_m = 128;
    params[1].n_splits = 1;
    params[1].policy = PlanPolicy::local_first;
    params[2].tile_m = 40;
    params[2].n_splits = 5;
    params[3] = fallback_params(in.config, "cuda");
    for (auto const &p : params) {
      Emulator fresh(in.config, in.shards, plans, in.tokens);
      fresh.comet(p, in.out, base.str() + " comet [" + p.describe() + "]");
      verify(fresh, base.str() + " comet [" + p.describe() + "]");
    }
  }
}

TEST(CudaWorkPlan, layouts_topk_and_edge_cases) {
  auto const seed = seed_now();
  // ep, tp, topk, M, N, K/TP, experts per group, starved expert, activation, gated
  std::vector<Case> const cases{
      {1, 1, 1, 100, 72, 80, 4, -1, Activation::silu, true}, {2, 1, 2, 100, 72, 80, 4, -1, Activation::silu, true},
      {4, 1, 2, 100, 72, 80, 2, 1, Activation::gelu, true},  {2, 2, 2, 77, 72, 40, 3, 2, Activation::silu, false},
      {4, 1, 1, 3, 16, 8, 2, -1, Activation::silu, true},    {1, 4, 2, 65, 130, 70, 4, 0, Activation::gelu, true},
  };
  for (auto const &c : cases)
    run_case(c, seed);
}

// The point of the adversarial order: with any one kind of wait skipped (the device layers' test-only switch
// DeviceDebug::skip_wait), the emulated forward reads data before it is written and the check fails; with every
// wait kept, the same lists on the same inputs pass.
TEST(CudaWorkPlan, a_skipped_wait_fails_the_check) {
  auto const seed = seed_now();
  for (Case const &c : {Case{2, 1, 2, 100, 72, 80, 4, -1, Activation::silu, true},
                        Case{4, 1, 1, 40, 40, 24, 2, -1, Activation::gelu, false}}) {
    auto in = make_inputs(c, seed);
    auto const plans = in.plans(1);
    CometParams params;
    params.tile_m = 16;
    params.n_splits = 3;
    std::string const base = in.config.describe() + " seed " + std::to_string(seed);
    Emulator kept(in.config, in.shards, plans, in.tokens);
    kept.comet(params, in.out, base);
    EXPECT_EQ(kept.stale_reads, 0) << base;
    EXPECT_LE(in.error(), 1e-5) << base << ": every wait kept";
    for (int skip : {timeout_packed, timeout_message, timeout_split, timeout_combine}) {
      Emulator emu(in.config, in.shards, plans, in.tokens);
      emu.comet(params, in.out, base, skip);
      EXPECT_GT(emu.stale_reads, 0) << base << ": wait " << skip << " skipped, yet nothing read early";
      EXPECT_GT(in.error(), 1e-5) << base << ": wait " << skip << " skipped, yet the result passed the check";
    }
  }
}

} // namespace

#ifndef TESSEL_MOE_SRC_IMPL_KERNELS_HPP
#define TESSEL_MOE_SRC_IMPL_KERNELS_HPP

// Host kernels shared by the schedules: GEMM0 + activation on a row tile, GEMM1 on a column block, the top-k
// reduction per slot, row gathers and the final sum over contributing ranks. Every kernel is labelled
// Tessel::moe:: and runs on the given execution space instance (any enabled host space: instantiated in
// Kernels.cpp for each).

#include <tessel/core/Gemm.hpp>

#include <tessel/moe/ExpertFfn.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace tessel::moe::Impl {

/// Scratch of one layer0 tile: [rows, gemm0_cols] before the activation (gated layers only).
struct Layer0Scratch {
  HostMatrix pre;
};

/// h[rows] = act(x[rows] W0_e) (gated: act(x Wg) * (x Wu)); x is [rows, N], h is [rows, K/TP]. With
/// \p panel_cols > 0 the GEMM runs in column panels of that width and \p between runs after each but the last
/// (a compute thread that also progresses communication calls into MPI there).
template <class ExecSpace>
void layer0_tile(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, int expert,
                 MatrixRef<float const> x, MatrixRef<float> h, Layer0Scratch &scratch, std::int64_t panel_cols = 0,
                 std::function<void()> const &between = {});

/// y[rows, cols) = h[rows] W1_e[:, cols) (h: [rows, K/TP], y: [rows, col_end - col_begin]).
template <class ExecSpace>
void layer1_block(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, int expert,
                  MatrixRef<float const> h, std::int64_t col_begin, std::int64_t col_end, MatrixRef<float> y);

/// The activation's backward on rows of one expert: from pre = x W0_e ([rows, gemm0_cols]) and q = g W1_e^T (g the
/// rows' output gradient, unweighted), with w the rows' combine weights: aw = w act(pre) (what dW1 = aw^T g needs),
/// dpre = dL/d pre for dL/dh = w q, and dw[i] = q_i . act(pre_i) (dL/d w_i; this rank's K-shard: a partial sum when
/// TP > 1).
template <class ExecSpace>
void activation_backward(ExecSpace const &space, MoeConfig const &config, MatrixRef<float const> pre,
                         MatrixRef<float const> q, float const *weight, MatrixRef<float> aw, MatrixRef<float> dpre,
                         float *dw);

/// Slots of one source with the rows to reduce: rows of slot u are row_index[ptr[u], ptr[u+1]) with weights.
struct SlotRows {
  std::vector<std::int64_t> ptr;
  std::vector<std::int64_t> row;
  std::vector<float> weight;
  std::int64_t slots() const { return static_cast<std::int64_t>(ptr.size()) - 1; }
};
/// Groups rows by slot (counting sort), \p row_slot being relative to the first slot.
SlotRows make_slot_rows(std::int64_t slots, std::vector<std::int32_t> const &row_slot, std::vector<float> const &weight,
                        std::int64_t row_offset = 0);

/// out[u, :] = sum over the rows r of slot u of w_r y[map(r), :] (map = identity when \p row_map is empty).
template <class ExecSpace>
void topk_reduce(ExecSpace const &space, SlotRows const &slots, std::vector<std::int64_t> const &row_map,
                 MatrixRef<float const> y, MatrixRef<float> out);

/// out[slot[j] - slot_base, :] += weight[j] y[j, :] for the \p rows rows of one expert (its rows name distinct
/// slots, so rows never collide); \p weight null: weights of 1.
template <class ExecSpace>
void scatter_add(ExecSpace const &space, std::int64_t rows, std::int32_t const *slot, std::int64_t slot_base,
                 float const *weight, MatrixRef<float const> y, MatrixRef<float> out);

/// dst = 0.
template <class ExecSpace> void zero(ExecSpace const &space, float *dst, std::int64_t count);

/// dst = src (same shape).
template <class ExecSpace> void copy_rows(ExecSpace const &space, MatrixRef<float const> src, MatrixRef<float> dst);

/// dst[i, :] = src[index[i], :].
template <class ExecSpace>
void gather_rows(ExecSpace const &space, MatrixRef<float const> src, std::int64_t const *index, std::int64_t count,
                 MatrixRef<float> dst);
template <class ExecSpace>
void gather_rows(ExecSpace const &space, MatrixRef<float const> src, std::int32_t const *index, std::int64_t count,
                 MatrixRef<float> dst);

/// One rank's contribution to this rank's tokens: slot-indexed rows stored block-major by column split
/// (block b holds [slots, col_end_b - col_begin_b] at offset slots * col_begin_b).
struct Contribution {
  float const *data = nullptr;
  std::int64_t slots = 0;
  std::int32_t const *token_slot = nullptr; // [M] slot of each token, -1 when absent
};
/// out[t, :] = sum over contributions (in the given order) of their rows for token t.
template <class ExecSpace>
void combine_sum(ExecSpace const &space, std::vector<Contribution> const &parts,
                 std::vector<std::int64_t> const &split_cols, MatrixRef<float> out);

} // namespace tessel::moe::Impl

#endif

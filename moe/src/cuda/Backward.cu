// The moe device layer's backward kernels (float32): the expert FFN's activation backward, the token gradients'
// sum per slot and the gate's backward through the top-k softmax. The GEMMs (GEMM0 recomputed, q = g W1^T,
// dx = dpre W0^T and the weight gradients) are cuBLAS calls of the host driver (Backward.cpp). Hot:
// activation_backward_kernel and slot_sum_kernel are in the moe.CudaSpills check.
#include "Common.cuh"

#include <algorithm>

namespace tessel::moe::cuda::Impl {

namespace {

constexpr int threads = 256, warps_per_block = threads / 32;

/// The host path's derivatives (Kernels.cpp): d silu / dx = s (1 + x (1 - s)), s = sigmoid(x);
/// d gelu / dx = Phi(x) + x phi(x).
__device__ __forceinline__ float activation_slope(int activation, float x) {
  if (activation == 0) {
    float const sig = 1.0f / (1.0f + expf(-x));
    return sig * (1.0f + x * (1.0f - sig));
  }
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
}

unsigned blocks_for(std::int64_t work, std::int64_t per_block) {
  return static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>((work + per_block - 1) / per_block, 65535 * 8)));
}

// One warp per row (grid-stride over rows): lanes over the K/TP columns, the row's dw reduced by shuffles.
__global__ void __launch_bounds__(threads)
    activation_backward_kernel(int activation, bool gated, float const *__restrict__ pre, float const *__restrict__ q,
                               float const *__restrict__ weight, std::int64_t rows, std::int64_t ffn_per_rank,
                               float *__restrict__ aw, float *__restrict__ dpre, float *__restrict__ dw) {
  int const lane = static_cast<int>(threadIdx.x % 32);
  std::int64_t const cols0 = gated ? 2 * ffn_per_rank : ffn_per_rank;
  std::int64_t const step = static_cast<std::int64_t>(gridDim.x) * warps_per_block;
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(warps_per_block) + threadIdx.x / 32; row < rows;
       row += step) {
    float const *p = pre + row * cols0;
    float const *qi = q + row * ffn_per_rank;
    float *a = aw + row * ffn_per_rank;
    float *d = dpre + row * cols0;
    float const w = weight[row];
    float dot = 0.0f;
    for (std::int64_t j = lane; j < ffn_per_rank; j += 32) {
      float const x = p[j];
      float const act = activate_value(activation, x);
      float const slope = activation_slope(activation, x);
      float const up = gated ? p[ffn_per_rank + j] : 1.0f;
      float const h = act * up;
      dot = fmaf(qi[j], h, dot);
      float const dh = w * qi[j]; // dL/dh of the row: its combine weight times the output gradient's W1^T
      a[j] = w * h;
      d[j] = dh * up * slope;
      if (gated)
        d[ffn_per_rank + j] = dh * act;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0)
      dw[row] = dot;
  }
}

// One block per item, a warp per slot, lanes over columns: the slot's rows from the source's slot table (loaded by
// lanes < topk, broadcast by shuffles), added in the table's order (by expert) with weight 1.
__global__ void __launch_bounds__(threads)
    slot_sum_kernel(RankView const view, float const *__restrict__ dx, ReduceItem const *__restrict__ items,
                    float *__restrict__ out) {
  ReduceItem const it = items[blockIdx.x];
  int const warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  std::int32_t const *table = sym<std::int32_t const>(view, it.source, view.layout.slot_rows);
  std::int64_t const n = view.n;
  for (int slot = it.slot_begin + warp; slot < it.slot_end; slot += warps_per_block) {
    std::int64_t const entry = (it.table_base + slot) * view.topk;
    int const my_row = lane < view.topk ? table[entry + lane] : -1;
    float *dst = out + (static_cast<std::int64_t>(it.source) * view.m + slot) * n;
    for (int base = it.col_begin; base < it.col_end; base += 32) {
      int const col = base + lane;
      float acc = 0.0f;
      for (int k = 0; k < view.topk; ++k) {
        int const r = __shfl_sync(0xffffffffu, my_row, k);
        if (r >= 0 && col < it.col_end)
          acc += dx[(it.row_base + r) * n + col];
      }
      if (col < it.col_end)
        dst[col] = acc;
    }
  }
}

// dL/d w_tk: the partial sums of the ranks of the expert's group (one per K-shard), in rank order.
__device__ __forceinline__ float choice_gradient(GateBackwardArgs const &a, std::int64_t t, int k) {
  std::int64_t const at = t * a.topk + k;
  int const group = a.chosen[at] / a.experts_per_group;
  std::int64_t const row = a.choice_row[at];
  float sum = 0.0f;
  for (int r = 0; r < a.world; ++r)
    if (a.rank_group[r] == group)
      sum += a.dw_recv[static_cast<std::int64_t>(r) * a.stride + row];
  return sum;
}

__global__ void __launch_bounds__(threads) gate_backward_kernel(GateBackwardArgs const a) {
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < a.m;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float const *p = a.probs + t * a.experts;
    float const *w = a.weights + t * a.topk;
    std::int32_t const *chosen = a.chosen + t * a.topk;
    float *out = a.dlogits + t * a.experts;
    // Renormalized: w_k = the softmax of the chosen logits, whose logit gradient is w_k (dw_k - sum_j w_j dw_j).
    double mean_w = 0.0;
    if (a.normalize)
      for (int k = 0; k < a.topk; ++k)
        mean_w += static_cast<double>(w[k]) * choice_gradient(a, t, k);
    // dL/dp_e of the full softmax: the load-balancing loss's, and (not renormalized) the combine weights'.
    auto const dp_of = [&](int e) {
      double dp = a.aux[e];
      if (!a.normalize)
        for (int k = 0; k < a.topk; ++k)
          if (chosen[k] == e)
            dp += choice_gradient(a, t, k);
      return dp;
    };
    double mean = 0.0;
    for (int e = 0; e < a.experts; ++e)
      mean += static_cast<double>(p[e]) * dp_of(e);
    for (int e = 0; e < a.experts; ++e) {
      float v = 0.0f;
      if (a.normalize)
        for (int k = 0; k < a.topk; ++k)
          if (chosen[k] == e)
            v = static_cast<float>(static_cast<double>(w[k]) * (choice_gradient(a, t, k) - mean_w));
      v += static_cast<float>(static_cast<double>(p[e]) * (dp_of(e) - mean));
      out[e] = v;
    }
  }
}

} // namespace

cudaError_t activation_backward(cudaStream_t stream, int activation, bool gated, float const *pre, float const *q,
                                float const *weight, std::int64_t rows, std::int64_t ffn_per_rank, float *aw,
                                float *dpre, float *dw) {
  if (rows == 0)
    return cudaSuccess;
  activation_backward_kernel<<<blocks_for(rows, warps_per_block), threads, 0, stream>>>(
      activation, gated, pre, q, weight, rows, ffn_per_rank, aw, dpre, dw);
  return cudaGetLastError();
}

cudaError_t slot_sum(cudaStream_t stream, RankView const &view, float const *dx, int items, ReduceItem const *item,
                     float *out) {
  if (items == 0)
    return cudaSuccess;
  slot_sum_kernel<<<static_cast<unsigned>(items), threads, 0, stream>>>(view, dx, item, out);
  return cudaGetLastError();
}

cudaError_t gate_backward(cudaStream_t stream, GateBackwardArgs const &args) {
  if (args.m == 0)
    return cudaSuccess;
  gate_backward_kernel<<<blocks_for(args.m, threads), threads, 0, stream>>>(args);
  return cudaGetLastError();
}

} // namespace tessel::moe::cuda::Impl

#ifndef TESSEL_MOE_CUDA_BACKWARD_HPP
#define TESSEL_MOE_CUDA_BACKWARD_HPP

// One rank's backward state on the device (float32) and its cuBLAS steps: the expert side's backward of one
// (source, chunk, expert) problem (GEMM0 recomputed, q = g W1^T, the activation's backward, dx = dpre W0^T) and its
// weight gradients (dW1 += (w act)^T g, dW0 += x^T dpre), and the gate's GEMMs. Host code; the kernels are in
// Backward.cu (declared in Device.hpp).
#include "Rank.hpp"

#include <tessel/moe/MoeConfig.hpp>

#include <vector>

namespace tessel::moe::cuda::Impl {

struct RankBackward {
  Stream wgrad; ///< the weight-gradient GEMMs (comet: beside the token-gradient work)
  tessel::cuda::CublasHandle wgrad_blas{wgrad.get()};
  // Owner side.
  DeviceBuffer<float> d_out;                     ///< [M, N] dL/d out
  DeviceBuffer<float> g_out;                     ///< [slots of all groups, N] d_out per slot, group-major
  DeviceBuffer<std::int32_t> slot_token;         ///< [slots of all groups]
  DeviceBuffer<float> dw_recv;                   ///< [world, M topk] every rank's combine-weight gradients (plan rows)
  DeviceBuffer<std::int32_t> choice_row, chosen; ///< [M, topk]
  DeviceBuffer<float> probs, weights, dlogits;   ///< [M, E], [M, topk], [M, E]
  DeviceBuffer<double> aux;                      ///< [E]
  DeviceBuffer<float> gate_w, grad_gate_w;       ///< [N, E]
  DeviceBuffer<float> grad_x;                    ///< [M, N]
  // Expert side (rows of the forward's index space).
  DeviceBuffer<float> g_in;             ///< [sum of the sources' slots, N]
  DeviceBuffer<std::int32_t> row_slot;  ///< [rows]
  DeviceBuffer<float> row_weight, dw;   ///< [rows]
  DeviceBuffer<float> g, dx;            ///< [rows, N]
  DeviceBuffer<float> pre, dpre;        ///< [rows, cols0]
  DeviceBuffer<float> q, aw;            ///< [rows, K/TP]
  DeviceBuffer<ReduceItem> reduces;     ///< the forward's per-chunk reduction items, chunk-major
  DeviceBuffer<float> grad_w0, grad_w1; ///< [E/EP, N, cols0], [E/EP, K/TP, N]
  Event packed, replied, wgrad_done;
  std::vector<Event> tile_in, tile_out;
};

/// Sizes the expert-side buffers for \p rows rows and the owner-side ones.
void ensure_backward(RankBackward &rb, MoeConfig const &config, std::int64_t rows, std::int64_t slots_in,
                     std::int64_t slots_out);

/// With DeviceDebug::poison_buffers: fills every buffer the backward writes with NaN on \p stream.
void poison_backward(RankBackward &rb, cudaStream_t stream);

/// The expert side's backward of \p p on rs's stream (its cuBLAS handle): pre = x W0_e, q = g W1_e^T, the
/// activation's backward (aw, dpre, dw), dx = dpre W0_e^T. x: the forward's x_recv (float32).
void expert_backward(RankState &rs, RankBackward &rb, MoeConfig const &config, ExpertGemm const &p);

/// dW1_e += aw^T g and dW0_e += x^T dpre over the rows of \p p, on \p handle's stream.
void weight_gradients(RankState const &rs, RankBackward &rb, MoeConfig const &config, ExpertGemm const &p,
                      cublasHandle_t handle);

/// The gate's GEMMs of an owner with \p m tokens: grad_x += dlogits Wg^T and grad_gate_w = tokens^T dlogits.
void gate_gemms(RankState &rs, RankBackward &rb, MoeConfig const &config);

} // namespace tessel::moe::cuda::Impl

#endif

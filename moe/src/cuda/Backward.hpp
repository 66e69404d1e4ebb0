#ifndef TESSEL_MOE_CUDA_BACKWARD_HPP
#define TESSEL_MOE_CUDA_BACKWARD_HPP

// One rank's backward state on the device (float32) and its cuBLAS steps: the expert side's backward of one
// (source, chunk, expert) problem (GEMM0 recomputed, q = g W1^T, the activation's backward, dx = dpre W0^T) and its
// weight gradients (dW1 += (w act)^T g, dW0 += x^T dpre), and the gate's GEMMs. Host code; the kernels are in
// Backward.cu (declared in KernelApi.hpp).
#include "Rank.hpp"

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/MoeLayer.hpp>

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
  // NcclMoeLayer: the owner's plan rows' slots and combine weights, sent to the expert sides (whose peers' plans
  // hold no rows).
  DeviceBuffer<std::int32_t> send_slot;
  DeviceBuffer<float> send_weight;
  Event packed, replied, wgrad_done;
  std::vector<Event> tile_in, tile_out; ///< per tile (comet) or per chunk (pipelined)
};

/// Sizes the expert-side buffers for \p rows rows and the owner-side ones.
void ensure_backward(RankBackward &rb, MoeConfig const &config, std::int64_t rows, std::int64_t slots_in,
                     std::int64_t slots_out);

/// With DeviceDebug::poison_buffers: fills every buffer the backward writes with NaN on \p stream.
void poison_backward(RankBackward &rb, cudaStream_t stream);

/// What one rank's backward takes from the host.
struct BackwardInputs {
  ConstHostMatrix d_out;                    ///< [M, N]
  Routing const *routing = nullptr;         ///< the rank's routing of the forward
  BackwardWork const *lists = nullptr;      ///< WorkPlanner::backward_work
  RankWork const *work = nullptr;           ///< the forward's work lists
  std::vector<double> const *aux = nullptr; ///< [E] dL/dp of the load-balancing loss
  ConstHostMatrix gate_weight;              ///< [N, E] when the forward was given a gate weight
  bool poison = false;                      ///< DeviceDebug::poison_buffers
  char *sym_base = nullptr;                 ///< the rank's symmetric allocation (its combine region is reused)
  SymmetricLayout const *layout = nullptr;
};

/// Sizes the buffers, uploads the lists and inputs, zeroes the weight gradients and (poison) fills the rest with
/// NaN, on rank_state's stream; synchronizes it (the host vectors may die after).
void prepare_backward(RankState &rank_state, RankBackward &rb, MoeConfig const &config, BackwardInputs const &in,
                      Timeout timeout);

/// The owner's output gradient per slot of every group (g_out) on rank_state's stream.
void pack_output_gradient(RankState &rank_state, RankBackward &rb, MoeConfig const &config, BackwardWork const &lists);

/// The expert side's token-gradient work of (source \p s, chunk \p ch) on rank_state's stream: gather the rows' output
/// gradients from g_in (source s's block, its slot numbering), each local expert's expert_backward, the sum of dx
/// per slot (the forward's reduction items of (s, ch)) into combine_send (source-major, as the forward's).
void backward_tile(RankState &rank_state, RankBackward &rb, MoeConfig const &config, RankView const &view,
                   RankWork const &w, BackwardWork const &lists, int s, int ch);

/// The weight gradients of (source \p s, chunk \p ch) through \p handle (on its stream).
void backward_weights(RankState const &rank_state, RankBackward &rb, MoeConfig const &config, RankWork const &w, int s,
                      int ch, cublasHandle_t handle);

/// The owner's end on rank_state's stream, once every rank's replies are in: the token gradients summed over the ranks
/// in rank order (final_sum into grad_x), the gate's backward (dlogits), and with a gate weight its GEMMs.
void owner_backward(RankState &rank_state, RankBackward &rb, MoeConfig const &config, RankView const &view,
                    std::int32_t const *rank_group, bool gate_weight, int final_sum_blocks);

/// Sizes \p grads (MoeLayer::backward's shapes) and enqueues the copies of this rank's gradients to it on rank_state's
/// stream (the gate weight's partial gradient into \p gate_partial, [N, E]); the caller synchronizes.
void copy_gradients(RankState &rank_state, RankBackward &rb, MoeConfig const &config, MoeGradients &grads,
                    bool gate_weight, bool gate_bias, std::vector<float> &gate_partial);

/// dL/dp_e of the load-balancing loss E sum_e f_e P_e for \p counts, every expert's assignments over all ranks'
/// \p tokens tokens: coef E f_e / T (the host's gate_backward).
std::vector<double> aux_gradient(MoeConfig const &config, std::vector<double> const &counts, double tokens,
                                 double aux_loss_coef);

/// One rank's share of the gate's gradients: its gate-weight gradient [N, E] followed by the column sums of its
/// logit gradients [E] (the bias's).
std::vector<float> gate_share(std::vector<float> const &gate_partial, ConstHostMatrix logits);

/// Sums the \p world ranks' shares (concatenated, rank order) into \p grads's gate weight (and bias).
void set_gate_gradients(std::vector<float> const &shares, int world, MoeGradients &grads, bool gate_bias);

} // namespace tessel::moe::cuda::Impl

#endif

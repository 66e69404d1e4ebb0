#ifndef TESSEL_MOE_CUDA_VIRTUALRANKSLAYER_HPP
#define TESSEL_MOE_CUDA_VIRTUALRANKSLAYER_HPP

/// \file cuda/VirtualRanksLayer.hpp
/// \brief The moe package's CUDA path: the three schedules (sequential, pipelined, comet) on the device, run by W
/// virtual ranks in one process on one GPU.
///
/// Each virtual rank has its own stream and its own "symmetric" allocation (dispatch rows, slot tables, combine
/// buffer, flags; identical layout on every rank) on the same device; a rank addresses a peer's copy through a
/// table of peer base pointers with the shape of the LSA peer-pointer table of NCCL 2.28's device API
/// (ncclGetLsaPointer(window, 0, peer)). The fused COMET kernels see only that table, so they are the code a
/// multi-GPU run on an NCCL symmetric window executes (see NcclMoeLayer.hpp).
///
/// Routing and the dispatch plans are computed on the host (the host package's route() and make_dispatch_plan());
/// comet's tile order is the host OverlapPlan's; its knobs (communication blocks n_c = CometParams::comm_workers,
/// N-split count) come from the tuning registry under backend "cuda" (see fallback_params()).
///
/// Built only with Tessel_ENABLE_CUDA; needs the CUDA runtime and cuBLAS, not a CUDA-enabled Kokkos.

#include <tessel/core/Config.hpp>

#ifndef TESSEL_ENABLE_CUDA
#error "tessel/moe/cuda/VirtualRanksLayer.hpp needs a Tessel built with Tessel_ENABLE_CUDA=ON"
#endif

#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/LayerControls.hpp>
#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Tuning.hpp>
#include <tessel/moe/cuda/DeviceOptions.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tessel::moe::cuda {

/// \brief An MoE layer of W = EP x TP virtual ranks in one process on the current CUDA device.
///
/// MoeConfig::dtype selects the device precision: float32 (CUDA-core fused tiles, strict fp32 cuBLAS), float16
/// or bfloat16 (inputs and weights rounded to 16 bits, tensor cores, fp32 accumulation, fp32 top-k reduction and
/// output). Every schedule computes the same function as the host MoeLayer.
class VirtualRanksLayer : public LayerControls {
public:
  /// \p weights: the shard of every rank (W entries, as ExpertWeights of rank r under \p config).
  VirtualRanksLayer(MoeConfig const &config, std::vector<ExpertWeights> const &weights, DeviceOptions options = {});
  ~VirtualRanksLayer();
  /// \name Move-only
  //@{
  /// Move-only.
  VirtualRanksLayer(VirtualRanksLayer &&) noexcept;
  VirtualRanksLayer &operator=(VirtualRanksLayer &&) noexcept;
  //@}

  /// \brief out[r] = the layer's output for rank r's \p tokens[r] [M, N] and gate \p gates[r]; \p out[r] is
  /// [M, N]. Throws TimeoutError when a device wait gives up (naming the rank and what it waited for).
  void forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
               std::vector<HostMatrix> const &out, Schedule schedule = Schedule::comet);

  /// \brief Gradients of the last forward's loss L = sum over ranks r of <d_out[r], out[r]> + aux_loss_coef x
  /// aux_loss (the host MoeLayer::backward's function, with the same MoeGradients): \p grads[r] receives rank r's
  /// token and logit gradients, its expert shards' gradients and, when the forward was given a gate weight, the
  /// gate weight's (and bias's) gradient summed over all ranks. float32 layers only (throws otherwise). The forward
  /// keeps what the backward needs (the expert input rows on the device, the routing and plans, the tokens on the
  /// device, the gates it was given, whose values must not change in between); GEMM0 is recomputed. \p schedule
  /// need not be the forward's; pipelined runs the forward's token chunks (one unless the forward was pipelined).
  /// \note Compiled for sm_90 and linked, not yet run on a GPU (see the moe README).
  void backward(std::vector<ConstHostMatrix> const &d_out, std::vector<MoeGradients> &grads,
                Schedule schedule = Schedule::comet, double aux_loss_coef = 0.0);

  /// The virtual ranks (EP x TP).
  int world() const;
  /// Routing of rank \p rank in the last forward.
  Routing const &routing(int rank) const;
  /// What the last forward did.
  DeviceStats const &stats() const;
  /// What the last backward did (device_ms: from the first rank's packing to the last rank's gate backward).
  DeviceStats const &backward_stats() const;

  struct State;

private:
  std::unique_ptr<State> _state;
};

} // namespace tessel::moe::cuda

#endif

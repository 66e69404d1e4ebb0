#ifndef TESSEL_MOE_CUDA_NCCLMOELAYER_HPP
#define TESSEL_MOE_CUDA_NCCLMOELAYER_HPP

/// \file cuda/NcclMoeLayer.hpp
/// \brief The moe CUDA path across GPUs: one rank per process and GPU, on an NCCL communicator
/// (tessel::cuda::make_nccl_communicator), every rank in one NVLink (LSA) domain.
///
/// comet runs the fused kernels of the one-process mode on an NCCL 2.28 symmetric window (ncclMemAlloc +
/// ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) + ncclDevCommCreate): peers are addressed through the window's
/// LSA peer pointers, and ordered by system-scope release/acquire flags in the window (a source's "packed" epoch,
/// the count of a peer's communication blocks that finished storing). sequential and pipelined run the same
/// device steps with NCCL's collectives (grouped ncclSend / ncclRecv all-to-alls) as the baselines.
///
/// Built with Tessel_ENABLE_NCCL and the NCCL device API (TESSEL_MOE_NCCL_DEVICE_API; the configure step pins NCCL
/// 2.28). Not yet run on GPUs (see moe/README.md).

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/LayerControls.hpp>
#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Tuning.hpp>
#include <tessel/moe/cuda/DeviceOptions.hpp>

#if !defined(TESSEL_ENABLE_NCCL) || !defined(TESSEL_MOE_NCCL_DEVICE_API)
#error "tessel/moe/cuda/NcclMoeLayer.hpp needs a Tessel built with Tessel_ENABLE_NCCL and the NCCL 2.28 device API"
#endif

#include <memory>
#include <string>

namespace tessel::moe::cuda {

/// \brief An MoE layer with one rank per process and GPU on an NCCL communicator.
class NcclMoeLayer : public LayerControls {
public:
  /// Collective. \p comm: an NCCL communicator (make_nccl_communicator); \p weights: this rank's shard.
  NcclMoeLayer(MoeConfig const &config, Communicator const &comm, ExpertWeights const &weights,
               DeviceOptions options = {});
  ~NcclMoeLayer();
  /// \name Move-only
  //@{
  /// Move-only.
  NcclMoeLayer(NcclMoeLayer &&) noexcept;
  NcclMoeLayer &operator=(NcclMoeLayer &&) noexcept;
  //@}

  /// \brief Collective: this rank's \p tokens [M, N] through the layer into \p out [M, N] (host memory).
  void forward(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out, Schedule schedule = Schedule::comet);

  /// \brief Collective: the gradients of the last forward's loss L = sum over ranks of <d_out, out> + aux_loss_coef
  /// x aux_loss, as MoeLayer::backward (same MoeGradients; the gate weight's gradient summed over all ranks).
  /// float32 layers only. The messages are NCCL all-to-alls per token chunk of the forward (output gradients per
  /// slot with the rows' slots and combine weights to the expert sides; token gradients per slot and the combine
  /// weights' gradients back); comet computes each chunk's tiles local source first and runs the weight-gradient
  /// GEMMs on a stream of their own. The forward's gate and tokens must not change in between.
  /// \note Compiled for sm_90 and linked, not yet run on a GPU (see the moe README).
  void backward(ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule = Schedule::comet,
                double aux_loss_coef = 0.0);

  /// Routing of this rank's tokens in the last forward.
  Routing const &routing() const;
  /// This rank's view of the last forward (device_ms: this rank's CUDA events).
  DeviceStats const &stats() const;
  /// This rank's view of the last backward.
  DeviceStats const &backward_stats() const;

  struct State;

private:
  std::unique_ptr<State> _state;
};

} // namespace tessel::moe::cuda

#endif

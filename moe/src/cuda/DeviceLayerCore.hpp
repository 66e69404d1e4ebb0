#ifndef TESSEL_MOE_CUDA_DEVICELAYERCORE_HPP
#define TESSEL_MOE_CUDA_DEVICELAYERCORE_HPP

// What the two device layers (VirtualRanksLayer: W virtual ranks in one process; NcclMoeLayer: one rank per process
// and GPU) keep alike beyond the layer core that the host layer shares too (impl/LayerCore.hpp: configuration, comet
// parameters, chunks): the configuration as the host router sees it, the symmetric layout, the rank-to-group table
// on the device, the epochs of the flags, the timed events and the stats. Host code.
#include "../impl/LayerCore.hpp"
#include "Rank.hpp"

#include <tessel/moe/cuda/DeviceOptions.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::moe::cuda::Impl {

// config (from the core): as given (dtype: the device precision).
struct DeviceLayerCore : moe::Impl::LayerCore {
  MoeConfig host_config; // float32 (the host router's view)
  DeviceOptions options; // as given (comet and pipeline_chunks: the core's)
  int world = 1, groups = 1, experts_per_group = 1;
  std::size_t element_bytes = 4; // bytes per element of the device precision
  SymmetricLayout layout;
  std::vector<std::int32_t> rank_group;
  DeviceBuffer<std::int32_t> rank_group_device;
  DeviceStats stats;
  std::uint64_t epoch = 0, combine_expected = 0;
  Event start{true}, stop{true};

  /// Checks \p c for a device layer of \p world_size ranks and looks the comet parameters up (backend "cuda").
  DeviceLayerCore(MoeConfig const &c, int world_size, DeviceOptions o, std::string layer_name);

  /// The host's waits: the device's timeout plus a margin, so that a device wait reports first.
  Timeout timeout() const;
  /// What the kernels of rank \p rank see: its peers through \p peer_base, its control words at \p control.
  RankView view(int rank, char *const *peer_base, Control *control) const;
  /// Fills rank_group (every rank's expert group) and its device copy on \p stream.
  void upload_rank_group(cudaStream_t stream);

  /// Throws when an earlier forward stopped on a timeout: the flags and windows of the ranks are then out of step.
  void require_usable() const;
  /// check_control() for rank state \p rank_state whose symmetric allocation is at \p sym_base; a failure also marks
  /// the layer unusable.
  void check_device(RankState &rank_state, char const *sym_base, std::string const &context);
  /// Runs \p wait (host synchronizations); a TimeoutError marks the layer unusable and is rethrown.
  template <class F> void host_wait(F &&wait) {
    try {
      wait();
    } catch (TimeoutError const &e) {
      stopped = e.what();
      throw;
    }
  }
  /// With DeviceDebug::poison_buffers: fills the buffers rank state \p rank_state's forward writes (its symmetric send
  /// rows and combine buffer at \p sym_base too) with NaN on its stream (every byte 0xff: NaN in fp32, fp16 and bf16).
  void poison(RankState &rank_state, char *sym_base) const;

  std::string stopped; ///< the error that stopped the layer (empty: usable)
};

} // namespace tessel::moe::cuda::Impl

#endif

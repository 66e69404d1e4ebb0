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
  int world = 1, groups = 1, eg = 1;
  std::size_t es = 4; // bytes per element of the device precision
  SymmetricLayout layout;
  std::vector<std::int32_t> rank_group;
  DeviceBuffer<std::int32_t> rank_group_device;
  DeviceStats stats;
  std::uint64_t epoch = 0, combine_expected = 0;
  Event start{true}, stop{true};

  /// Checks \p c for a device layer of \p world_size ranks and looks the comet parameters up (backend "cuda").
  DeviceLayerCore(MoeConfig const &c, int world_size, DeviceOptions o, std::string layer_name);

  Timeout timeout() const { return Timeout(static_cast<std::int64_t>(options.timeout_seconds * 1000.0)); }
  /// What the kernels of rank \p rank see: its peers through \p peer_base, its control words at \p control.
  RankView view(int rank, char *const *peer_base, Control *control) const;
  /// Fills rank_group (every rank's expert group) and its device copy on \p stream.
  void upload_rank_group(cudaStream_t stream);
};

} // namespace tessel::moe::cuda::Impl

#endif

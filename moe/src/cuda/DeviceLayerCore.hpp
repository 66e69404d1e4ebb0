#ifndef TESSEL_MOE_CUDA_DEVICELAYERCORE_HPP
#define TESSEL_MOE_CUDA_DEVICELAYERCORE_HPP

// What the two device layers (VirtualRanksLayer: W virtual ranks in one process; NcclMoeLayer: one rank per process
// and GPU) keep alike: the configuration in the device precision and as the host router sees it, the comet
// parameters and where they came from, the symmetric layout, the rank-to-group table on the device, the epochs of
// the flags, the timed events and the stats. Host code.
#include "Rank.hpp"

#include <tessel/moe/Tuning.hpp>
#include <tessel/moe/cuda/DeviceOptions.hpp>

#include <tessel/core/Communicator.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::moe::cuda::Impl {

struct DeviceLayerCore {
  MoeConfig config;      // as given (dtype: the device precision)
  MoeConfig host_config; // float32 (the host router's view)
  DeviceOptions options;
  std::string name; // the layer in messages ("tessel::moe::cuda::VirtualRanksLayer")
  CometParams comet;
  std::string comet_source;
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
  /// Validates and sets the comet parameters; with \p comm, every rank must pass the same (collective).
  void set_comet_params(CometParams const &params, Communicator const *comm = nullptr);
  void set_pipeline_chunks(int chunks);
};

} // namespace tessel::moe::cuda::Impl

#endif

#include "DeviceLayerCore.hpp"

#include <tessel/core/Error.hpp>

#include <utility>

namespace tessel::moe::cuda::Impl {

DeviceLayerCore::DeviceLayerCore(MoeConfig const &c, int world_size, DeviceOptions o, std::string layer_name)
    : LayerCore(c, std::move(layer_name), "cuda"), host_config(c), options(std::move(o)) {
  TESSEL_REQUIRE(c.dtype == DataType::float32 || c.dtype == DataType::float16 || c.dtype == DataType::bfloat16, name,
                 ": MoeConfig.dtype must be float32, float16 or bfloat16, got ", name_of(c.dtype));
  host_config.dtype = DataType::float32;
  host_config.validate(world_size);
  TESSEL_REQUIRE(c.topk <= 32, name, ": topk must be <= 32 (a warp reduces a slot), got ", c.topk);
  // Both device layers take the same options: one check for either.
  TESSEL_REQUIRE(options.pipeline_chunks >= 1, "DeviceOptions.pipeline_chunks must be >= 1, got ",
                 options.pipeline_chunks);
  TESSEL_REQUIRE(options.timeout_seconds > 0, "DeviceOptions.timeout_seconds must be positive");
  world = world_size;
  groups = c.ep;
  eg = c.experts_per_group();
  es = size_of(c.dtype);
  resolve_comet(host_config, options.comet, options.registry, "cuda");
  pipeline_chunks = options.pipeline_chunks;
  layout = symmetric_layout(c);
}

RankView DeviceLayerCore::view(int rank, char *const *peer_base, Control *control) const {
  RankView v;
  v.rank = rank;
  v.world = world;
  v.peer_base = peer_base;
  v.layout = layout;
  v.m = config.tokens;
  v.n = config.hidden;
  v.kp = config.ffn_per_rank();
  v.topk = config.topk;
  v.timeout_ns = static_cast<long long>(options.timeout_seconds * 1e9);
  v.control = control;
  return v;
}

void DeviceLayerCore::upload_rank_group(cudaStream_t stream) {
  rank_group.clear();
  for (int r = 0; r < world; ++r)
    rank_group.push_back(config.group_of_rank(r));
  rank_group_device = DeviceBuffer<std::int32_t>(rank_group.size(), "Tessel::moe::cuda::rank_group");
  rank_group_device.copy_from_host(rank_group.data(), rank_group.size(), stream);
}

} // namespace tessel::moe::cuda::Impl

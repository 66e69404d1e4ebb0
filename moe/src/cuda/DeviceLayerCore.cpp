#include "DeviceLayerCore.hpp"

#include <tessel/core/Error.hpp>

#include <utility>

namespace tessel::moe::cuda::Impl {

DeviceLayerCore::DeviceLayerCore(MoeConfig const &c, int world_size, DeviceOptions o, std::string layer_name)
    : config(c), host_config(c), options(std::move(o)), name(std::move(layer_name)) {
  TESSEL_REQUIRE(c.dtype == DataType::float32 || c.dtype == DataType::float16 || c.dtype == DataType::bfloat16, name,
                 ": MoeConfig.dtype must be float32, float16 or bfloat16, got ", name_of(c.dtype));
  host_config.dtype = DataType::float32;
  host_config.validate(world_size);
  TESSEL_REQUIRE(c.topk <= 32, name, ": topk must be <= 32 (a warp reduces a slot), got ", c.topk);
  world = world_size;
  groups = c.ep;
  eg = c.experts_per_group();
  es = size_of(c.dtype);
  comet = resolve_comet_params(host_config, options.comet, options.registry, "cuda", &comet_source);
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

void DeviceLayerCore::set_comet_params(CometParams const &params, Communicator const *comm) {
  params.validate(host_config, "cuda");
  if (comm != nullptr)
    comm->require_same("CometParams", params.hash());
  comet = params;
  comet_source = "given";
}

void DeviceLayerCore::set_pipeline_chunks(int chunks) {
  TESSEL_REQUIRE(chunks >= 1, name.substr(name.rfind(':') + 1), "::set_pipeline_chunks: chunks must be >= 1, got ",
                 chunks);
  options.pipeline_chunks = chunks;
}

} // namespace tessel::moe::cuda::Impl

#include "DeviceLayerCore.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
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
  experts_per_group = c.experts_per_group();
  element_bytes = size_of(c.dtype);
  resolve_comet(host_config, options.comet, options.registry, "cuda");
  pipeline_chunks = options.pipeline_chunks;
  layout = symmetric_layout(c);
}

Timeout DeviceLayerCore::timeout() const {
  double const host = options.timeout_seconds + std::max(1.0, 0.25 * options.timeout_seconds);
  return Timeout(static_cast<std::int64_t>(host * 1000.0));
}

// A skipped wait is named by the error code its timeout would leave (RankView::skip_wait).
static_assert(static_cast<int>(DeviceWait::none) == no_error &&
              static_cast<int>(DeviceWait::packed) == timeout_packed &&
              static_cast<int>(DeviceWait::message) == timeout_message &&
              static_cast<int>(DeviceWait::split) == timeout_split &&
              static_cast<int>(DeviceWait::combine) == timeout_combine);

void DeviceLayerCore::require_usable() const {
  TESSEL_REQUIRE(stopped.empty(), name, ": the layer stopped on an earlier error (", stopped,
                 "); its ranks' flags are out of step: create a new layer");
}

void DeviceLayerCore::check_device(RankState &rank_state, char const *sym_base, std::string const &context) {
  host_wait([&] { check_control(rank_state, sym_base, layout, timeout(), context, options.timeout_seconds); });
}

void DeviceLayerCore::poison(RankState &rank_state, char *sym_base) const {
  if (!options.debug.poison_buffers)
    return;
  cudaStream_t const s = rank_state.stream.get();
  auto fill = [s](void *p, std::size_t bytes) {
    if (p != nullptr && bytes > 0)
      TESSEL_CUDA_CHECK(cudaMemsetAsync(p, 0xff, bytes, s));
  };
  fill(sym_base + layout.send_rows, layout.slot_rows - layout.send_rows);
  fill(sym_base + layout.combine, layout.packed_flag - layout.combine);
  fill(rank_state.x_recv.data(), rank_state.x_recv.bytes());
  fill(rank_state.h.data(), rank_state.h.bytes());
  fill(rank_state.y.data(), rank_state.y.bytes());
  fill(rank_state.c0.data(), rank_state.c0.bytes());
  fill(rank_state.combine_send.data(), rank_state.combine_send.bytes());
  fill(rank_state.out.data(), rank_state.out.bytes());
}

RankView DeviceLayerCore::view(int rank, char *const *peer_base, Control *control) const {
  RankView v;
  v.rank = rank;
  v.world = world;
  v.peer_base = peer_base;
  v.layout = layout;
  v.m = config.tokens;
  v.n = config.hidden;
  v.ffn_per_rank = config.ffn_per_rank();
  v.topk = config.topk;
  v.timeout_ns = static_cast<long long>(options.timeout_seconds * 1e9);
  v.control = control;
  v.skip_wait = static_cast<int>(options.debug.skip_wait);
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

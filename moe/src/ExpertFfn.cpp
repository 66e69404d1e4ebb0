#include <tessel/moe/ExpertFfn.hpp>

#include "impl/Kernels.hpp"

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <cstring>

namespace tessel::moe {

template <class ExecSpace, class Check>
void grouped_ffn(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, ConstHostMatrix x,
                 std::vector<std::int64_t> const &offsets, HostMatrix y) {
  ScopedRegion region("Tessel::moe::grouped_ffn");
  int const local_experts = config.experts_per_group();
  std::int64_t const n = config.hidden, ffn_per_rank = config.ffn_per_rank();
  TESSEL_REQUIRE(static_cast<int>(offsets.size()) == local_experts + 1, "grouped_ffn: ", offsets.size(),
                 " offsets for ", local_experts, " local experts (need E/EP + 1)");
  TESSEL_REQUIRE(offsets.front() == 0 && offsets.back() == static_cast<std::int64_t>(x.extent(0)),
                 "grouped_ffn: offsets must span the ", x.extent(0), " rows of x");
  TESSEL_REQUIRE(static_cast<std::int64_t>(x.extent(1)) == n && y.extent(0) == x.extent(0) &&
                     static_cast<std::int64_t>(y.extent(1)) == n,
                 "grouped_ffn: x and y must be [rows, N=", n, "]");
  std::int64_t const panel = 2048;
  Impl::Layer0Scratch scratch;
  HostMatrix h(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::ffn_hidden"),
               static_cast<std::size_t>(std::min<std::int64_t>(panel, std::max<std::int64_t>(x.extent(0), 1))),
               static_cast<std::size_t>(ffn_per_rank));
  for (int e = 0; e < local_experts; ++e) {
    TESSEL_REQUIRE(offsets[static_cast<std::size_t>(e)] <= offsets[static_cast<std::size_t>(e) + 1],
                   "grouped_ffn: offsets must not decrease");
    for (auto r = offsets[static_cast<std::size_t>(e)]; r < offsets[static_cast<std::size_t>(e) + 1]; r += panel) {
      auto const end = std::min(r + panel, offsets[static_cast<std::size_t>(e) + 1]);
      MatrixRef<float> const hp{h.data(), end - r, ffn_per_rank, ffn_per_rank};
      Impl::layer0_tile(space, config, weights, e, {x.data() + r * n, end - r, n, n}, hp, scratch);
      compat::fence(space, "Tessel::moe::grouped_ffn");
      Impl::layer1_block(space, config, weights, e, {hp.data, hp.rows, ffn_per_rank, ffn_per_rank}, 0, n,
                         {y.data() + r * n, end - r, n, n});
    }
  }
}

#define TESSEL_MOE_INSTANTIATE_FFN(SPACE)                                                                              \
  template void grouped_ffn(SPACE const &, MoeConfig const &, ExpertWeights const &, ConstHostMatrix,                  \
                            std::vector<std::int64_t> const &, HostMatrix);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_FFN)

} // namespace tessel::moe

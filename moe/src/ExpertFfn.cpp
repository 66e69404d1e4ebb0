#include <tessel/moe/ExpertFfn.hpp>

#include "impl/Kernels.hpp"

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <cstring>

namespace tessel::moe {

ExpertWeights allocate_expert_weights(MoeConfig const &config) {
  config.validate();
  auto const local_experts = static_cast<std::size_t>(config.experts_per_group());
  ExpertWeights w;
  w.w0 = HostTensor(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::w0"), local_experts,
                    static_cast<std::size_t>(config.hidden), static_cast<std::size_t>(config.gemm0_cols()));
  w.w1 = HostTensor(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::w1"), local_experts,
                    static_cast<std::size_t>(config.ffn_per_rank()), static_cast<std::size_t>(config.hidden));
  return w;
}

void set_expert_weights(MoeConfig const &config, int rank, int expert, float const *w0_full, float const *w1_full,
                        ExpertWeights &weights) {
  TESSEL_REQUIRE(expert >= 0 && expert < config.experts, "expert ", expert, " outside [0, ", config.experts, ")");
  TESSEL_REQUIRE(rank >= 0 && rank < config.world(), "rank ", rank, " outside [0, ", config.world(), ")");
  if (config.group_of_expert(expert) != config.group_of_rank(rank))
    return;
  int const e = expert - config.first_expert_of_rank(rank);
  std::int64_t const n = config.hidden, k = config.ffn, ffn_per_rank = config.ffn_per_rank();
  std::int64_t const k0 = ffn_per_rank * config.tp_rank(rank);
  std::int64_t const full_cols = (config.gated ? 2 : 1) * k;
  TESSEL_REQUIRE(static_cast<std::int64_t>(weights.w0.extent(1)) == n &&
                     static_cast<std::int64_t>(weights.w0.extent(2)) == config.gemm0_cols() &&
                     static_cast<std::int64_t>(weights.w1.extent(1)) == ffn_per_rank,
                 "expert weights were allocated for another configuration");
  for (std::int64_t i = 0; i < n; ++i) {
    float const *src = w0_full + i * full_cols;
    std::memcpy(&weights.w0(e, i, 0), src + k0, static_cast<std::size_t>(ffn_per_rank) * sizeof(float));
    if (config.gated)
      std::memcpy(&weights.w0(e, i, ffn_per_rank), src + k + k0,
                  static_cast<std::size_t>(ffn_per_rank) * sizeof(float));
  }
  for (std::int64_t i = 0; i < ffn_per_rank; ++i)
    std::memcpy(&weights.w1(e, i, 0), w1_full + (k0 + i) * n, static_cast<std::size_t>(n) * sizeof(float));
}

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

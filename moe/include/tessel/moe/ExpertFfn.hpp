#ifndef TESSEL_MOE_EXPERTFFN_HPP
#define TESSEL_MOE_EXPERTFFN_HPP

/// \file ExpertFfn.hpp
/// \brief Expert weights of one rank and the grouped expert FFN (GEMM0 -> activation -> GEMM1).

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Types.hpp>

#include <cstdint>
#include <vector>

namespace tessel::moe {

/// \brief The experts one rank holds: E/EP experts, each sharded to K/TP along K.
///
/// w0 is [E/EP, N, gemm0_cols]: gated, its columns are [gate shard | up shard] (K/TP each); w1 is
/// [E/EP, K/TP, N].
struct ExpertWeights {
  HostTensor w0; ///< [E/EP, N, gemm0_cols]: GEMM0's weights ([gate shard | up shard] when gated)
  HostTensor w1; ///< [E/EP, K/TP, N]: GEMM1's weights
};

/// \brief Allocates (uninitialized) the weights rank \p rank holds under \p config.
ExpertWeights allocate_expert_weights(MoeConfig const &config);

/// \brief Copies the shard of global expert \p expert that rank \p rank holds from the full matrices
/// \p w0_full [N, (gated ? 2 : 1) K] (gated: [gate | up]) and \p w1_full [K, N] into \p weights. Does nothing
/// when the expert lives in another EP group.
void set_expert_weights(MoeConfig const &config, int rank, int expert, float const *w0_full, float const *w1_full,
                        ExpertWeights &weights);

/// \brief Grouped expert FFN on rows grouped by local expert: rows [offsets[e], offsets[e+1]) of \p x go
/// through local expert e, and y = act-gated(x W0_e) W1_e (this rank's K-shard: a partial sum when TP > 1).
/// \p offsets has E/EP + 1 entries. Row panels bound the scratch memory without shrinking the GEMMs below
/// BLAS efficiency.
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
void grouped_ffn(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, ConstHostMatrix x,
                 std::vector<std::int64_t> const &offsets, HostMatrix y);

} // namespace tessel::moe

#endif

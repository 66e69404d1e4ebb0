#ifndef TESSEL_MOE_EXPERTFFN_HPP
#define TESSEL_MOE_EXPERTFFN_HPP

/// \file ExpertFfn.hpp
/// \brief The grouped expert FFN (GEMM0 -> activation -> GEMM1) over the experts one rank holds (ExpertWeights,
/// Weights.hpp).

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Types.hpp>
#include <tessel/moe/Weights.hpp>

#include <cstdint>
#include <vector>

namespace tessel::moe {

/// \brief Grouped expert FFN on rows grouped by local expert: rows [offsets[e], offsets[e+1]) of \p x go
/// through local expert e, and y = act-gated(x W0_e) W1_e (this rank's K-shard: a partial sum when TP > 1).
/// \p offsets has E/EP + 1 entries. Row panels bound the scratch memory without shrinking the GEMMs below
/// BLAS efficiency.
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
void grouped_ffn(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, ConstHostMatrix x,
                 std::vector<std::int64_t> const &offsets, HostMatrix y);

} // namespace tessel::moe

#endif

#ifndef TESSEL_GNN_IMPL_KWAYPARTS_HPP
#define TESSEL_GNN_IMPL_KWAYPARTS_HPP

// METIS k-way partitioning shared by the reordering (parts of a given size) and the distributed graph (one part per
// rank, balanced by vertex weights).
#include <tessel/gnn/Graph.hpp>

#include <cstdint>
#include <vector>

namespace tessel::gnn::Impl {

/// The part (0 .. nparts-1) of every vertex of \p g: METIS_PartGraphKway (edge cut) on the pattern of A + A^T,
/// self-loops ignored, with \p vertex_weights (empty: unit weights). Throws when Tessel was built without METIS and
/// more than one part is asked for.
template <class Index>
std::vector<std::int64_t> kway_parts(Graph<Index> const &g, std::int64_t nparts,
                                     std::vector<std::int64_t> const &vertex_weights, std::uint64_t seed);

} // namespace tessel::gnn::Impl

#endif

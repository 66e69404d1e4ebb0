#ifndef TESSEL_GNN_IMPL_DISTSLICES_HPP
#define TESSEL_GNN_IMPL_DISTSLICES_HPP

// DistSpmm's pieces of a rank's blocks: the row tiles of the local block, the halo blocks over the rows that have halo
// entries, and the parts of a halo block that read one message's rows.
#include <tessel/gnn/Graph.hpp>

#include <cstdint>
#include <vector>

namespace tessel::gnn::Impl {

/// A peer's rows go in messages of at least this many feature rows and at most max_messages of them (the last
/// shorter), and the part of its halo block that reads a message's rows runs as soon as that message (and the ones
/// before it) has landed.
inline constexpr std::int64_t message_rows = 1024;
inline constexpr std::int64_t max_messages = 8;

/// Which entries of a row tile a slice keeps.
enum class TilePart {
  all,    ///< every column, numbered as in the block
  inside, ///< columns [r0, r1), renumbered from 0: the square diagonal tile
  outside ///< the other columns, numbered as in the block
};

/// Rows [r0, r1) of \p a, with the entries \p part keeps.
Graph<std::int32_t> tile_slice(Graph<std::int32_t> const &a, std::int64_t r0, std::int64_t r1, TilePart part);

/// The rows \p rows (increasing) of \p a, renumbered 0, 1, ...: a halo block over the rows that have halo entries.
Graph<std::int32_t> rows_slice(Graph<std::int32_t> const &a, std::vector<std::int32_t> const &rows);

/// The part of a halo block \p a that reads one message's rows (columns [c0, c1), renumbered from 0), over the rows
/// of \p a that have such entries only; \p rows receives their numbers in \p a.
Graph<std::int32_t> message_part(Graph<std::int32_t> const &a, std::int64_t c0, std::int64_t c1,
                                 std::vector<std::int32_t> &rows);

/// Message boundaries of \p rows feature rows (the same on both sides of a pair: they depend on the count only).
std::vector<std::int64_t> message_bounds(std::size_t rows);

} // namespace tessel::gnn::Impl

#endif

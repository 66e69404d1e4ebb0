#ifndef TESSEL_GNN_IMPL_BUILDERS_HPP
#define TESSEL_GNN_IMPL_BUILDERS_HPP

// The host-side builders of each kernel's data structure (CSR pieces, condensed tiles, dense blocks), from a graph
// or from the permuted graph of a Decomposition; backends move what they build into their memory.
#include <tessel/gnn/Graph.hpp>

#include "TileShape.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::gnn::Impl {

template <class Index> class Decomposition;

/// The row of each stored entry of \p g (the row indices of its COO form).
template <class Index> std::vector<Index> entry_rows(Graph<Index> const &g);

/// Refuses (naming \p graph) a dense rows x cols float matrix larger than \p max_bytes.
void require_dense_fits(std::string const &graph, std::int64_t rows, std::int64_t cols, std::int64_t max_bytes);

/// A CSR over all rows (row_ids empty) or over a list of rows (compressed), in host vectors.
template <class Index> struct HostCsrPiece {
  std::vector<offset_type> row_map{0};
  std::vector<Index> entries;
  std::vector<float> values;
  std::vector<Index> row_ids;
  std::int64_t nnz = 0;
  std::int64_t rows() const { return static_cast<std::int64_t>(row_map.size()) - 1; }
};

/// TC-GNN condensed row windows in host vectors (see TileSet in Kernels.hpp for the layout).
template <class Index> struct HostTileSet {
  std::vector<std::int64_t> row0;
  std::vector<int> nrows;
  std::vector<std::int64_t> tile_begin{0};
  std::vector<Index> tile_col;
  std::vector<float> tile_val;
  std::int64_t num_tiles() const { return static_cast<std::int64_t>(tile_col.size()) / tile_cols; }
};

/// One dense block of A (rows x cols, row-major) at (row0, col0).
struct HostDenseBlock {
  std::int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  std::vector<float> values;
};

/// The entries of \p g with keep[k] set, as CSR over all rows or over the rows that keep an entry (compressed).
template <class Index>
HostCsrPiece<Index> make_csr(Graph<Index> const &g, std::vector<char> const &keep, bool compressed);

/// Condensed 16 x 8 tiles of the kept entries (all entries when \p keep is null), windows aligned to the starts
/// of \p part_offsets. Padding columns repeat the window's first column (their values are zero).
template <class Index>
HostTileSet<Index> make_tiles(Graph<Index> const &g, std::vector<char> const *keep,
                              std::vector<std::int64_t> const &part_offsets, bool keep_empty_windows);

/// The entries of \p d's permuted graph with keep[k] set, as CSR over all rows or over the rows that keep an entry.
template <class Index>
HostCsrPiece<Index> csr_piece(Decomposition<Index> const &d, std::vector<char> const &keep, bool compressed);
/// Condensed tiles of the kept entries of \p d's permuted graph, windows aligned to its parts.
template <class Index> HostTileSet<Index> tile_set(Decomposition<Index> const &d, std::vector<char> const &keep);
/// The dense blocks \p block_ids of \p d.
template <class Index>
std::vector<HostDenseBlock> dense_blocks(Decomposition<Index> const &d, std::vector<std::size_t> const &block_ids);
/// One pass for several pieces: the entries of class c go to CSR group_of_class[c] (< 0: none); group g has all
/// rows, or only its nonempty rows when compressed[g].
template <class Index>
std::vector<HostCsrPiece<Index>> csr_groups(Decomposition<Index> const &d, std::vector<int> const &group_of_class,
                                            std::vector<char> const &compressed);
/// One pass for several tile sets: the entries of class c go to tile set group_of_class[c] (< 0: none).
template <class Index>
std::vector<HostTileSet<Index>> tiles_groups(Decomposition<Index> const &d, std::vector<int> const &group_of_class,
                                             int groups);

} // namespace tessel::gnn::Impl

#endif

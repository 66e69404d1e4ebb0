#ifndef TESSEL_GNN_GRAPH_HPP
#define TESSEL_GNN_GRAPH_HPP

/// \file Graph.hpp
/// \brief Sparse adjacency (CSR) on a memory space, its validation, degree statistics and the GCN normalization.

#include <tessel/core/Error.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessel::gnn {

/// Row offsets are 64-bit whatever the column index type, so int32 indices still address > 2^31 edges.
using offset_type = std::int64_t;

/// \brief Dense row-major node features (one row per node) on a memory space.
template <class MemorySpace = Kokkos::HostSpace>
using Matrix = Kokkos::View<float **, Kokkos::LayoutRight, MemorySpace>;
/// \brief Read-only dense row-major features.
template <class MemorySpace = Kokkos::HostSpace>
using ConstMatrix = Kokkos::View<float const **, Kokkos::LayoutRight, MemorySpace>;

namespace Impl {
/// The requirements of a View the gnn operations read (\p writable: or write) as a feature matrix, each a
/// static_assert that names it: a Kokkos::View of rank 2 (rows x features) of float, row-major (LayoutRight).
/// Any such View works: Matrix and ConstMatrix, a plain Kokkos::View<float **>, a subview of rows, unmanaged Views.
template <class View, bool writable> constexpr bool check_feature_view() {
  static_assert(Kokkos::is_view<View>::value, "tessel::gnn: feature matrices are Kokkos::Views");
  static_assert(int(View::rank) == 2, "tessel::gnn: feature matrices are rank-2 Views (rows x features)");
  static_assert(std::is_same_v<typename View::non_const_value_type, float>, "tessel::gnn: feature matrices hold float");
  static_assert(std::is_same_v<typename View::array_layout, Kokkos::LayoutRight>,
                "tessel::gnn: feature matrices are row-major (Kokkos::LayoutRight); copy a LayoutLeft or "
                "LayoutStride View into a Matrix first");
  static_assert(!writable || !std::is_const_v<typename View::value_type>,
                "tessel::gnn: an output feature matrix must be writable (a View of non-const float)");
  return true;
}
} // namespace Impl

/// \brief A sparse matrix in CSR form: row_map (num_rows + 1 offsets), entries (column of each edge), values.
///
/// Row i holds the edges row_map(i) .. row_map(i+1)-1; entry j of row i means "i aggregates from j", so
/// Y = A X sums neighbour features into each row. Index is std::int32_t or std::int64_t. Preprocessing
/// (normalization, reordering, decomposition) runs on the host; kernels run on any execution space that can
/// access MemorySpace (use to() to move a graph).
template <class Index = std::int32_t, class MemorySpace = Kokkos::HostSpace> class Graph {
  static_assert(std::is_same_v<Index, std::int32_t> || std::is_same_v<Index, std::int64_t>,
                "tessel::gnn::Graph indices are std::int32_t or std::int64_t");

public:
  using index_type = Index;                                      ///< column index type
  using memory_space = MemorySpace;                              ///< where the arrays live
  using row_map_type = Kokkos::View<offset_type *, MemorySpace>; ///< num_rows + 1 row offsets
  using entries_type = Kokkos::View<Index *, MemorySpace>;       ///< the column of every entry
  using values_type = Kokkos::View<float *, MemorySpace>;        ///< the value of every entry

  /// An empty graph.
  Graph() = default;
  /// Wraps existing views (no copy, no validation: call validate()).
  Graph(std::string name, Index num_rows, Index num_cols, row_map_type row_map, entries_type entries,
        values_type values)
      : _name(std::move(name)), _num_rows(num_rows), _num_cols(num_cols), _row_map(std::move(row_map)),
        _entries(std::move(entries)), _values(std::move(values)) {}

  /// The graph's name (used in messages).
  std::string const &name() const { return _name; }
  /// Renames the graph.
  void set_name(std::string name) { _name = std::move(name); }
  /// Rows (the vertices that aggregate).
  Index num_rows() const { return _num_rows; }
  /// Columns (the vertices aggregated from).
  Index num_cols() const { return _num_cols; }
  /// Entries (edges).
  offset_type nnz() const { return static_cast<offset_type>(_entries.extent(0)); }
  /// Row offsets: row i holds entries row_map(i) .. row_map(i + 1) - 1.
  row_map_type const &row_map() const { return _row_map; }
  /// The column of every entry.
  entries_type const &entries() const { return _entries; }
  /// The value of every entry.
  values_type const &values() const { return _values; }

  /// A deep copy of this graph in \p Space's memory space (a shallow copy when it already lives there).
  template <class Space> Graph<Index, typename Space::memory_space> to(Space const &space) const {
    using M = typename Space::memory_space;
    if constexpr (std::is_same_v<M, MemorySpace>) {
      (void)space;
      return *this;
    } else {
      auto r = Kokkos::create_mirror_view_and_copy(space, _row_map);
      auto e = Kokkos::create_mirror_view_and_copy(space, _entries);
      auto v = Kokkos::create_mirror_view_and_copy(space, _values);
      return Graph<Index, M>(_name, _num_rows, _num_cols, r, e, v);
    }
  }

private:
  std::string _name;
  Index _num_rows = 0, _num_cols = 0;
  row_map_type _row_map;
  entries_type _entries;
  values_type _values;
};

/// \brief A host graph built from host arrays (copied). Empty values mean all ones. Validated; errors name \p name.
template <class Index>
Graph<Index> make_graph(std::string const &name, Index num_rows, Index num_cols,
                        std::vector<offset_type> const &row_map, std::vector<Index> const &entries,
                        std::vector<float> const &values = {});

/// \brief How graph_from_edges reads an edge list.
struct EdgeListOptions {
  bool symmetrize = false;      ///< add the reverse of every edge (an undirected graph from one direction each)
  bool merge_duplicates = true; ///< one entry per (row, column), weight 1
  bool drop_self_loops = false; ///< remove (i, i)
};

/// \brief A host graph from directed edges (src, dst): row dst aggregates from column src (entry (dst, src)).
///
/// Entries are sorted by column in each row. Errors name \p name and the first edge out of range.
/// \code
/// std::vector<std::pair<std::int32_t, std::int32_t>> edges{{0, 1}, {1, 2}, {2, 0}};
/// tessel::gnn::EdgeListOptions o;
/// o.symmetrize = true;                                       // undirected: both directions
/// auto g = tessel::gnn::graph_from_edges<std::int32_t>("triangle", 3, edges, o);
/// \endcode
template <class Index>
Graph<Index> graph_from_edges(std::string const &name, Index num_nodes,
                              std::vector<std::pair<Index, Index>> const &edges, EdgeListOptions const &options = {});

/// \brief The same with the options as positional flags (symmetrize, merge_duplicates, drop_self_loops).
template <class Index>
[[deprecated("pass tessel::gnn::EdgeListOptions")]] Graph<Index>
graph_from_edges(std::string const &name, Index num_nodes, std::vector<std::pair<Index, Index>> const &edges,
                 bool symmetrize, bool merge_duplicates, bool drop_self_loops = false) {
  return graph_from_edges<Index>(name, num_nodes, edges,
                                 EdgeListOptions{symmetrize, merge_duplicates, drop_self_loops});
}

/// \brief Checks sizes, monotone row_map, column range and finite values; throws tessel::Exception naming the
/// graph and the first bad entry.
template <class Index> void validate(Graph<Index> const &graph);

/// \brief Degree statistics (row lengths) of a graph.
struct DegreeStats {
  std::int64_t num_rows = 0;   ///< rows
  std::int64_t num_cols = 0;   ///< columns
  std::int64_t nnz = 0;        ///< entries
  std::int64_t min_degree = 0; ///< shortest row
  std::int64_t max_degree = 0; ///< longest row
  double mean_degree = 0;      ///< mean row length
  double stddev_degree = 0;    ///< standard deviation of the row lengths
  std::int64_t empty_rows = 0; ///< rows with no entry
  std::int64_t self_loops = 0; ///< entries on the diagonal
  std::int64_t duplicates = 0; ///< entries repeating an earlier column of the same row
  bool symmetric = false;      ///< pattern and values equal their transpose
};
/// \brief The degree statistics of \p graph (host).
template <class Index> DegreeStats degree_stats(Graph<Index> const &graph);

/// \brief D^-1/2 (A + I) D^-1/2 (Kipf & Welling): I is added to whatever diagonal A has, duplicates are merged
/// (weights summed), D is the row sum of A + I. Square graphs only.
template <class Index> Graph<Index> gcn_normalize(Graph<Index> const &graph);

/// \brief A + w I with duplicates merged (the GIN aggregation, w = 1 + eps).
template <class Index> Graph<Index> add_self_loops(Graph<Index> const &graph, float weight);

/// \brief The transpose (CSR of A^T), columns sorted in each row.
template <class Index> Graph<Index> transpose(Graph<Index> const &graph);

/// \brief True when the graph equals its transpose (pattern and values, duplicates merged).
template <class Index> bool is_symmetric(Graph<Index> const &graph);

/// \brief Copies a host graph to another index type; throws when a value does not fit.
template <class To, class From> Graph<To> convert_index(Graph<From> const &graph);

} // namespace tessel::gnn

#endif

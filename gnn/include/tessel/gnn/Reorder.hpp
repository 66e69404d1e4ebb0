#ifndef TESSEL_GNN_REORDER_HPP
#define TESSEL_GNN_REORDER_HPP

/// \file Reorder.hpp
/// \brief Vertex reordering that makes communities contiguous: METIS k-way partitioning when Tessel was built
/// with METIS, label propagation or reverse Cuthill-McKee otherwise, and exact application / undo of the order.

#include <tessel/core/Execution.hpp>
#include <tessel/gnn/Graph.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace tessel::gnn {

/// \brief How vertices are grouped into contiguous parts.
enum class PartitionMethod {
  automatic,         ///< label propagation (as good as METIS here, 5-10x faster; see gnn/README.md)
  metis,             ///< METIS_PartGraphKway (edge-cut), parts of about the requested size
  label_propagation, ///< deterministic synchronous-free label propagation, communities cut into parts
  rcm,               ///< reverse Cuthill-McKee order, cut into parts of the requested size
  none               ///< identity order, cut into parts of the requested size
};
/// "auto", "metis", "lp", "rcm" or "none".
char const *name_of(PartitionMethod method);
/// Parses "auto", "metis", "lp", "rcm" or "none".
PartitionMethod parse_partition_method(std::string const &text);
/// True when Tessel was built with METIS (Tessel_ENABLE_METIS and libmetis found).
bool metis_available();

/// \brief A vertex permutation: old_of_new[k] is the original id of the vertex now at position k,
/// new_of_old its inverse.
struct Permutation {
  std::vector<std::int64_t> old_of_new; ///< original id of the vertex at each new position
  std::vector<std::int64_t> new_of_old; ///< new position of each original vertex
  /// The identity on n vertices.
  static Permutation identity(std::int64_t n);
  /// Builds the inverse and checks that \p old_of_new is a permutation of 0..n-1.
  static Permutation from_order(std::vector<std::int64_t> old_of_new);
  /// Vertices.
  std::int64_t size() const { return static_cast<std::int64_t>(old_of_new.size()); }
  /// True when no vertex moves.
  bool is_identity() const;
};

/// \brief Contiguous parts in the new order: part p holds positions part_offsets[p] .. part_offsets[p+1]-1.
struct Partition {
  PartitionMethod method = PartitionMethod::none; ///< how the order was found
  Permutation permutation;                        ///< the new vertex order
  std::vector<std::int64_t> part_offsets;         ///< [parts + 1] first position of each part
  /// Fraction of entries whose row and column fall in the same part.
  double intra_fraction = 0;
  double seconds = 0; ///< wall time spent partitioning
};

/// \brief Partitions the vertices of a square graph into parts of about \p part_size vertices (the pattern of
/// A + A^T is used, self-loops ignored) and returns the order that makes each part contiguous. Parts larger
/// than \p max_part_size (0: 2 * part_size) are cut. Deterministic for a given \p seed.
template <class Index>
Partition partition(Graph<Index> const &graph, std::int64_t part_size, PartitionMethod method,
                    std::int64_t max_part_size = 0, std::uint64_t seed = 1);

/// \brief P A P^T: entry (i, j) of the result is entry (old_of_new[i], old_of_new[j]) of \p graph.
template <class Index> Graph<Index> permute(Graph<Index> const &graph, Permutation const &perm);

namespace Impl {
template <class ExecSpace, class MemorySpace>
void permute_rows(ExecSpace const &space, Permutation const &perm, ConstMatrix<MemorySpace> const &x,
                  Matrix<MemorySpace> const &out);
template <class ExecSpace, class MemorySpace>
void unpermute_rows(ExecSpace const &space, Permutation const &perm, ConstMatrix<MemorySpace> const &x,
                    Matrix<MemorySpace> const &out);
} // namespace Impl

/// \brief Rows of \p x in the new order (out(k) = x(old_of_new[k])), on \p space.
///
/// \p x and \p out are any row-major rank-2 Views of float in host memory (Matrix, ConstMatrix, a plain
/// Kokkos::View<float **>, subviews of rows); \p out must be writable. Other Views and execution spaces other than
/// the enabled host ones fail to compile with a message naming the requirement.
template <class ExecSpace, class XView, class OutView, class = host_execution_space_t<ExecSpace>>
void permute_rows(ExecSpace const &space, Permutation const &perm, XView const &x, OutView const &out) {
  static_assert(Impl::check_feature_view<XView, false>() && Impl::check_feature_view<OutView, true>());
  static_assert(std::is_same_v<typename XView::memory_space, Kokkos::HostSpace> &&
                    std::is_same_v<typename OutView::memory_space, Kokkos::HostSpace>,
                "tessel::gnn::permute_rows: x and out live in host memory (Kokkos::HostSpace)");
  Impl::permute_rows<ExecSpace, Kokkos::HostSpace>(space, perm, ConstMatrix<Kokkos::HostSpace>(x),
                                                   Matrix<Kokkos::HostSpace>(out));
}
/// \brief Undoes permute_rows (out(old_of_new[k]) = x(k)), on \p space; the same Views as permute_rows.
template <class ExecSpace, class XView, class OutView, class = host_execution_space_t<ExecSpace>>
void unpermute_rows(ExecSpace const &space, Permutation const &perm, XView const &x, OutView const &out) {
  static_assert(Impl::check_feature_view<XView, false>() && Impl::check_feature_view<OutView, true>());
  static_assert(std::is_same_v<typename XView::memory_space, Kokkos::HostSpace> &&
                    std::is_same_v<typename OutView::memory_space, Kokkos::HostSpace>,
                "tessel::gnn::unpermute_rows: x and out live in host memory (Kokkos::HostSpace)");
  Impl::unpermute_rows<ExecSpace, Kokkos::HostSpace>(space, perm, ConstMatrix<Kokkos::HostSpace>(x),
                                                     Matrix<Kokkos::HostSpace>(out));
}

/// \brief Applies the permutation to a per-vertex host vector (out[k] = v[old_of_new[k]]).
template <class T> std::vector<T> permute_vector(Permutation const &perm, std::vector<T> const &v) {
  TESSEL_REQUIRE(static_cast<std::int64_t>(v.size()) == perm.size(), "permute_vector: ", v.size(),
                 " values for a permutation of ", perm.size());
  std::vector<T> out(v.size());
  for (std::size_t k = 0; k < v.size(); ++k)
    out[k] = v[static_cast<std::size_t>(perm.old_of_new[k])];
  return out;
}
/// \brief Undoes permute_vector.
template <class T> std::vector<T> unpermute_vector(Permutation const &perm, std::vector<T> const &v) {
  TESSEL_REQUIRE(static_cast<std::int64_t>(v.size()) == perm.size(), "unpermute_vector: ", v.size(),
                 " values for a permutation of ", perm.size());
  std::vector<T> out(v.size());
  for (std::size_t k = 0; k < v.size(); ++k)
    out[static_cast<std::size_t>(perm.old_of_new[k])] = v[k];
  return out;
}

} // namespace tessel::gnn

#endif

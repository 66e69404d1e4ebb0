#ifndef TESSEL_GNN_IMPL_SPARSEFEATURES_HPP
#define TESSEL_GNN_IMPL_SPARSEFEATURES_HPP

// The input features by their nonzeros, for a first layer that transforms before it aggregates: bag-of-words and
// TF-IDF features (Cora 1.3%, CiteSeer 0.9% nonzero) make the dense first layer spend its epoch on zeros (the dropout
// drew a mask for every element, and the GEMM packed the whole n x F matrix). X as a CSR Graph serves the transform
// X W, its transpose (transpose(), rows sorted) the weight gradient X^T dT: each output row is owned by one work item
// and summed in a fixed order, so the results are the same on every backend and thread count. The dropout keeps exactly
// the dense path's mask (same counter per element), so the two paths train the same model up to the order of
// floating-point sums.
#include <tessel/gnn/Graph.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <vector>

namespace tessel::gnn::Impl {

/// Counter-based uniform [0, 1) draws: dropout masks depend only on (seed, epoch, layer, element), so a resumed
/// run draws exactly the masks the uninterrupted run would have, and the sparse path draws the dense path's.
KOKKOS_INLINE_FUNCTION double counter_uniform(std::uint64_t seed, std::uint64_t epoch, std::uint64_t layer,
                                              std::uint64_t index) {
  std::uint64_t x =
      seed ^ (epoch * 0x9e3779b97f4a7c15ULL) ^ (layer * 0xc2b2ae3d27d4eb4fULL) ^ (index * 0x165667b19e3779f9ULL);
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

/// The nonzeros of \p x as a host CSR matrix (rows and columns of \p x, columns sorted in each row).
template <class M> Graph<std::int32_t> nonzeros(ConstMatrix<M> const &x) {
  auto const hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  std::vector<offset_type> row_map{0};
  std::vector<std::int32_t> entries;
  std::vector<float> values;
  for (std::size_t i = 0; i < hx.extent(0); ++i) {
    for (std::size_t j = 0; j < hx.extent(1); ++j)
      if (hx(i, j) != 0.0f) {
        entries.push_back(static_cast<std::int32_t>(j));
        values.push_back(hx(i, j));
      }
    row_map.push_back(static_cast<offset_type>(entries.size()));
  }
  return make_graph("features", static_cast<std::int32_t>(hx.extent(0)), static_cast<std::int32_t>(hx.extent(1)),
                    row_map, entries, values);
}

template <class ExecSpace> struct SparseFeatures {
  using M = typename ExecSpace::memory_space;

  Graph<std::int32_t, M> x, xt;                // X by rows (CSR) and by columns (X^T's CSR)
  Kokkos::View<float *, M> dropped, dropped_t; // the dropout's values, in x's and xt's entry order

  /// \p csr: nonzeros() of the features (rows in the model's order).
  SparseFeatures(ExecSpace const &space, Graph<std::int32_t> const &csr)
      : x(csr.to(space)), xt(transpose(csr).to(space)),
        dropped(Kokkos::view_alloc(space, "Tessel::gnn::features_dropped"), static_cast<std::size_t>(csr.nnz())),
        dropped_t(Kokkos::view_alloc(space, "Tessel::gnn::features_dropped_t"), static_cast<std::size_t>(csr.nnz())) {}

  /// The dense path's dropout of layer 0 on the nonzeros (a dropped zero stays zero), for both entry orders: the
  /// mask of element (i, j) is the dense path's draw for vertex(i) * cols + j (vertex: the original id of row i).
  void dropout(ExecSpace const &space, double p, std::uint64_t seed, int epoch,
               Kokkos::View<std::int64_t const *, M> const &vertex) const {
    drop(space, "Tessel::gnn::sparse_dropout", x, false, p, seed, epoch, vertex, dropped);
    drop(space, "Tessel::gnn::sparse_dropout_t", xt, true, p, seed, epoch, vertex, dropped_t);
  }

  /// out = X W (X with or without its dropout): rows in parallel, each summed over its nonzeros in column order.
  void transform(ExecSpace const &space, bool with_dropout, ConstMatrix<M> const &w, Matrix<M> const &out) const {
    gather_sum(space, "Tessel::gnn::sparse_transform", x, with_dropout ? dropped : x.values(), w, out);
  }

  /// dw = X^T dt (X with or without its dropout): feature rows of dw in parallel, each summed over its column's
  /// nonzeros in row order.
  void weight_gradient(ExecSpace const &space, bool with_dropout, ConstMatrix<M> const &dt, Matrix<M> const &dw) const {
    gather_sum(space, "Tessel::gnn::sparse_weight_gradient", xt, with_dropout ? dropped_t : xt.values(), dt, dw);
  }

  /// d(k) = a's value k, or 0 where the dropout of layer 0 drops its element (transposed: \p a is X^T).
  static void drop(ExecSpace const &space, char const *label, Graph<std::int32_t, M> const &a, bool transposed,
                   double p, std::uint64_t seed, int epoch, Kokkos::View<std::int64_t const *, M> const &vertex,
                   Kokkos::View<float *, M> const &d) {
    float const scale = static_cast<float>(1.0 / (1.0 - p));
    auto const ptr = a.row_map();
    auto const index = a.entries();
    auto const v = a.values();
    auto const cols = static_cast<std::uint64_t>(transposed ? a.num_rows() : a.num_cols());
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(a.num_rows())),
        KOKKOS_LAMBDA(std::int64_t r) {
          for (auto k = ptr(r); k < ptr(r + 1); ++k) {
            auto const i = static_cast<std::uint64_t>(vertex(transposed ? index(k) : r));
            auto const j = static_cast<std::uint64_t>(transposed ? r : index(k));
            bool const keep = counter_uniform(seed, static_cast<std::uint64_t>(epoch), 0, i * cols + j) >= p;
            d(k) = keep ? v(k) * scale : 0.0f;
          }
        });
  }

  /// out(r, :) = sum over a's entries k of row r of v(k) b(column of k, :), in entry order, one work item per row.
  static void gather_sum(ExecSpace const &space, char const *label, Graph<std::int32_t, M> const &a,
                         Kokkos::View<float *, M> const &v, ConstMatrix<M> const &b, Matrix<M> const &out) {
    auto const ptr = a.row_map();
    auto const index = a.entries();
    auto const width = static_cast<std::int64_t>(b.extent(1));
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(out.extent(0))),
        KOKKOS_LAMBDA(std::int64_t r) {
          for (std::int64_t q = 0; q < width; ++q)
            out(r, q) = 0.0f;
          for (auto k = ptr(r); k < ptr(r + 1); ++k) {
            float const x = v(k);
            auto const j = index(k);
            for (std::int64_t q = 0; q < width; ++q)
              out(r, q) += x * b(j, q);
          }
        });
  }
};

} // namespace tessel::gnn::Impl

#endif

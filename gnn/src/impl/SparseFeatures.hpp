#ifndef TESSEL_GNN_IMPL_SPARSEFEATURES_HPP
#define TESSEL_GNN_IMPL_SPARSEFEATURES_HPP

// The input features by their nonzeros, for a first layer that transforms before it aggregates: bag-of-words and
// TF-IDF features (Cora 1.3%, CiteSeer 0.9% nonzero) make the dense first layer spend its epoch on zeros (the dropout
// drew a mask for every element, and the GEMM packed the whole n x F matrix). Rows (CSR) serve the transform
// X W and the dropout, columns (CSC) the weight gradient X^T dT: each output row is owned by one work item and
// summed in a fixed order, so the results are the same on every backend and thread count. The dropout keeps exactly
// the dense path's mask (same counter per element), so the two paths train the same model up to the order of
// floating-point sums.
#include <tessel/gnn/Graph.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
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

/// Nonzero elements of \p x.
template <class ExecSpace>
std::int64_t count_nonzero(ExecSpace const &space, ConstMatrix<typename ExecSpace::memory_space> const &x) {
  std::int64_t count = 0;
  auto const cols = static_cast<std::int64_t>(x.extent(1));
  Kokkos::parallel_reduce(
      "Tessel::gnn::count_nonzero", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(x.extent(0))),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t & sum) {
        for (std::int64_t j = 0; j < cols; ++j)
          sum += x(i, j) != 0.0f;
      },
      count);
  return count;
}

template <class ExecSpace> struct SparseFeatures {
  using M = typename ExecSpace::memory_space;
  template <class T> using Array = Kokkos::View<T *, M>;

  std::int64_t rows = 0, cols = 0, nnz = 0;
  Array<std::int64_t> row_ptr, col_ptr;
  Array<std::int32_t> col, row; // CSR column of entry k; CSC row of entry k
  Array<float> val, val_t;      // as given (CSR, CSC)
  Array<float> dropped, dropped_t;
  Array<std::int64_t> csr_of_csc; // CSC entry k is CSR entry csr_of_csc(k)

  /// The nonzeros of \p x (rows in the model's order).
  SparseFeatures(ExecSpace const &space, ConstMatrix<M> const &x) : rows(x.extent(0)), cols(x.extent(1)) {
    auto const hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
    std::vector<std::int64_t> rp(static_cast<std::size_t>(rows) + 1, 0), cp(static_cast<std::size_t>(cols) + 1, 0);
    std::vector<std::int32_t> c, r;
    std::vector<float> v;
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j)
        if (hx(i, j) != 0.0f) {
          c.push_back(static_cast<std::int32_t>(j));
          v.push_back(hx(i, j));
          ++cp[static_cast<std::size_t>(j) + 1];
        }
      rp[static_cast<std::size_t>(i) + 1] = static_cast<std::int64_t>(c.size());
    }
    nnz = static_cast<std::int64_t>(c.size());
    for (std::size_t j = 0; j < static_cast<std::size_t>(cols); ++j)
      cp[j + 1] += cp[j];
    std::vector<std::int64_t> next(cp.begin(), cp.end() - 1), map(c.size());
    r.resize(c.size());
    std::vector<float> vt(c.size());
    for (std::int64_t i = 0; i < rows; ++i) // rows ascending: each column's entries by row
      for (auto k = rp[static_cast<std::size_t>(i)]; k < rp[static_cast<std::size_t>(i) + 1]; ++k) {
        auto const at = static_cast<std::size_t>(next[static_cast<std::size_t>(c[static_cast<std::size_t>(k)])]++);
        r[at] = static_cast<std::int32_t>(i);
        vt[at] = v[static_cast<std::size_t>(k)];
        map[at] = k;
      }
    row_ptr = upload(space, "Tessel::gnn::features_row_ptr", rp);
    col_ptr = upload(space, "Tessel::gnn::features_col_ptr", cp);
    col = upload(space, "Tessel::gnn::features_col", c);
    row = upload(space, "Tessel::gnn::features_row", r);
    val = upload(space, "Tessel::gnn::features_val", v);
    val_t = upload(space, "Tessel::gnn::features_val_t", vt);
    csr_of_csc = upload(space, "Tessel::gnn::features_csr_of_csc", map);
    dropped = Array<float>(Kokkos::view_alloc(space, "Tessel::gnn::features_dropped"), c.size());
    dropped_t = Array<float>(Kokkos::view_alloc(space, "Tessel::gnn::features_dropped_t"), c.size());
  }

  template <class T> static Array<T> upload(ExecSpace const &space, char const *label, std::vector<T> const &host) {
    Array<T> a(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, std::string(label)), host.size());
    Kokkos::deep_copy(space, a, Kokkos::View<T const *, Kokkos::HostSpace>(host.data(), host.size()));
    space.fence(); // the host vector dies with the caller's frame
    return a;
  }

  /// The dense path's dropout of layer 0 on the nonzeros (a dropped zero stays zero): dropped, dropped_t.
  void dropout(ExecSpace const &space, double p, std::uint64_t seed, int epoch) const {
    float const scale = static_cast<float>(1.0 / (1.0 - p));
    auto const rp = row_ptr;
    auto const c = col;
    auto const v = val;
    auto const d = dropped;
    auto const n_cols = cols;
    Kokkos::parallel_for(
        "Tessel::gnn::sparse_dropout", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t i) {
          for (auto k = rp(i); k < rp(i + 1); ++k) {
            bool const keep = counter_uniform(seed, static_cast<std::uint64_t>(epoch), 0,
                                              static_cast<std::uint64_t>(i * n_cols + c(k))) >= p;
            d(k) = keep ? v(k) * scale : 0.0f;
          }
        });
    auto const map = csr_of_csc;
    auto const dt = dropped_t;
    Kokkos::parallel_for(
        "Tessel::gnn::sparse_dropout_t", Kokkos::RangePolicy<ExecSpace>(space, 0, nnz),
        KOKKOS_LAMBDA(std::int64_t k) { dt(k) = d(map(k)); });
  }

  /// out = X W (X with or without its dropout): rows in parallel, each summed over its nonzeros in column order.
  void transform(ExecSpace const &space, bool with_dropout, ConstMatrix<M> const &w, Matrix<M> const &out) const {
    gather_sum(space, "Tessel::gnn::sparse_transform", row_ptr, col, with_dropout ? dropped : val, w, out);
  }

  /// dw = X^T dt (X with or without its dropout): feature rows of dw in parallel, each summed over its column's
  /// nonzeros in row order.
  void weight_gradient(ExecSpace const &space, bool with_dropout, ConstMatrix<M> const &dt, Matrix<M> const &dw) const {
    gather_sum(space, "Tessel::gnn::sparse_weight_gradient", col_ptr, row, with_dropout ? dropped_t : val_t, dt, dw);
  }

  /// out(i, :) = sum over k in [ptr(i), ptr(i + 1)) of v(k) b(index(k), :), in k order, one work item per row i.
  static void gather_sum(ExecSpace const &space, char const *label, Array<std::int64_t> const &ptr,
                         Array<std::int32_t> const &index, Array<float> const &v, ConstMatrix<M> const &b,
                         Matrix<M> const &out) {
    auto const width = static_cast<std::int64_t>(b.extent(1));
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(out.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::int64_t q = 0; q < width; ++q)
            out(i, q) = 0.0f;
          for (auto k = ptr(i); k < ptr(i + 1); ++k) {
            float const x = v(k);
            auto const j = index(k);
            for (std::int64_t q = 0; q < width; ++q)
              out(i, q) += x * b(j, q);
          }
        });
  }
};

} // namespace tessel::gnn::Impl

#endif

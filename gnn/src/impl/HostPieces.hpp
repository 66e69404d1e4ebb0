#ifndef TESSEL_GNN_IMPL_HOSTPIECES_HPP
#define TESSEL_GNN_IMPL_HOSTPIECES_HPP

// The kernels' structures in a host handle's memory space (CSR pieces, tile sets, dense blocks), moved there from the
// host-side builders (Builders.hpp).
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Memory.hpp>

#include "Builders.hpp"
#include "Kernels.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessel::gnn::Impl {

/// Host vectors that views of the handle point into: where the handle's memory space is the host's, the built
/// structures are used in place (no second allocation and copy, which cost as much as building them), except arrays
/// of huge_page_size bytes and more when huge pages are on: those are copied onto huge pages (Memory.hpp).
struct HostStorage {
  HugePages huge = HugePages::off;
  std::vector<std::shared_ptr<void>> held;
};

/// \p g in \p space's memory; with huge pages on, its large arrays copied onto huge pages (else shared where \p g
/// already lives there).
template <class ExecSpace, class Index>
Graph<Index, typename ExecSpace::memory_space> graph_in(ExecSpace const &space, Graph<Index> const &g, HugePages huge) {
  using M = typename ExecSpace::memory_space;
  if (huge == HugePages::off || !std::is_same_v<M, Kokkos::HostSpace>)
    return g.to(space);
  return Graph<Index, M>(g.name(), g.num_rows(), g.num_cols(),
                         copy_array(space, "Tessel::gnn::Spmm::row_map", g.row_map(), huge),
                         copy_array(space, "Tessel::gnn::Spmm::entries", g.entries(), huge),
                         copy_array(space, "Tessel::gnn::Spmm::values", g.values(), huge));
}

template <class T, class M> Kokkos::View<T *, M> to_device(std::string const &label, std::vector<T> const &v) {
  Kokkos::View<T *, M> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), v.size());
  auto h = Kokkos::create_mirror_view(d);
  std::copy(v.begin(), v.end(), h.data());
  Kokkos::deep_copy(d, h);
  return d;
}

template <class T, class M>
Kokkos::View<T *, M> to_device(std::string const &label, std::vector<T> &&v, HostStorage &keep) {
  if constexpr (std::is_same_v<M, Kokkos::HostSpace>) {
    if (keep.huge == HugePages::on && v.size() * sizeof(T) >= huge_page_size)
      return copy_array(Kokkos::DefaultHostExecutionSpace{}, label,
                        Kokkos::View<T const *, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(v.data(), v.size()),
                        keep.huge);
    auto held = std::make_shared<std::vector<T>>(std::move(v));
    keep.held.push_back(held);
    return Kokkos::View<T *, M>(held->data(), held->size());
  } else {
    (void)keep;
    return to_device<T, M>(label, v);
  }
}

/// A CSR over all rows (row_ids empty) or over a list of rows (compressed).
template <class Index, class M> struct CsrPiece {
  Kokkos::View<offset_type *, M> row_map;
  Kokkos::View<Index *, M> entries;
  Kokkos::View<float *, M> values;
  Kokkos::View<Index *, M> row_ids;
  std::int64_t nnz = 0;
};

template <class Index, class M> struct DenseBlock {
  std::int64_t row0, rows, col0, cols;
  Matrix<M> values;
};

template <class Index, class M> CsrPiece<Index, M> to_memory(HostCsrPiece<Index> &&h, HostStorage &keep) {
  CsrPiece<Index, M> piece;
  piece.nnz = h.nnz;
  piece.row_map = to_device<offset_type, M>("Tessel::gnn::Spmm::row_map", std::move(h.row_map), keep);
  piece.entries = to_device<Index, M>("Tessel::gnn::Spmm::entries", std::move(h.entries), keep);
  piece.values = to_device<float, M>("Tessel::gnn::Spmm::values", std::move(h.values), keep);
  piece.row_ids = to_device<Index, M>("Tessel::gnn::Spmm::row_ids", std::move(h.row_ids), keep);
  return piece;
}

template <class Index, class M> TileSet<Index, M> to_memory(HostTileSet<Index> &&h, HostStorage &keep) {
  TileSet<Index, M> t;
  t.row0 = to_device<std::int64_t, M>("Tessel::gnn::Spmm::tile_row0", std::move(h.row0), keep);
  t.nrows = to_device<int, M>("Tessel::gnn::Spmm::tile_nrows", std::move(h.nrows), keep);
  t.tile_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::tile_begin", std::move(h.tile_begin), keep);
  t.tile_col = to_device<Index, M>("Tessel::gnn::Spmm::tile_col", std::move(h.tile_col), keep);
  t.tile_val = to_device<float, M>("Tessel::gnn::Spmm::tile_val", std::move(h.tile_val), keep);
  return t;
}

template <class Index, class M>
std::vector<DenseBlock<Index, M>> to_memory(std::vector<HostDenseBlock> &&h, HostStorage &keep) {
  std::vector<DenseBlock<Index, M>> out;
  for (auto &b : h) {
    DenseBlock<Index, M> d{b.row0, b.rows, b.col0, b.cols, {}};
    auto const rows = static_cast<std::size_t>(b.rows), cols = static_cast<std::size_t>(b.cols);
    if constexpr (std::is_same_v<M, Kokkos::HostSpace>) {
      auto held = std::make_shared<std::vector<float>>(std::move(b.values));
      keep.held.push_back(held);
      d.values = Matrix<M>(held->data(), rows, cols);
    } else {
      d.values =
          Matrix<M>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Spmm::dense_block"), rows, cols);
      auto hv = Kokkos::create_mirror_view(d.values);
      std::copy(b.values.begin(), b.values.end(), hv.data());
      Kokkos::deep_copy(d.values, hv);
    }
    out.push_back(d);
  }
  return out;
}

} // namespace tessel::gnn::Impl

#endif

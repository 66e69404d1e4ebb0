#ifndef TESSEL_GNN_IMPL_MATRIXREF_HPP
#define TESSEL_GNN_IMPL_MATRIXREF_HPP

// gnn's rank-2 LayoutRight views as the core strided matrix (tessel::gemm takes MatrixRef).
#include <tessel/core/Gemm.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

namespace tessel::gnn::Impl {

/// A LayoutRight rank-2 view as a MatrixRef: its data, extents and row stride (a column subview keeps its parent's
/// row stride as the leading dimension). A view of const elements gives a MatrixRef of const elements.
template <class View> MatrixRef<typename View::value_type> matrix_ref(View const &v) {
  static_assert(std::is_same_v<typename View::array_layout, Kokkos::LayoutRight>,
                "matrix_ref: row-major (LayoutRight) views only");
  return {v.data(), static_cast<std::int64_t>(v.extent(0)), static_cast<std::int64_t>(v.extent(1)),
          static_cast<std::int64_t>(v.stride(0))};
}

} // namespace tessel::gnn::Impl

#endif

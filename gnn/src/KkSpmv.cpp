#include "impl/KkSpmv.hpp"

#include <tessel/core/Execution.hpp>

#include <KokkosSparse_CrsMatrix.hpp>
#define TESSEL_COMPAT_KOKKOS_SPARSE
#include <tessel/core/KokkosCompat.hpp>

namespace tessel::gnn::Impl {

template <class Index, class ExecSpace>
void kk_spmv(ExecSpace const &space, Graph<Index, typename ExecSpace::memory_space> const &a,
             ConstMatrix<typename ExecSpace::memory_space> const &x,
             Matrix<typename ExecSpace::memory_space> const &y) {
  using Device = Kokkos::Device<ExecSpace, typename ExecSpace::memory_space>;
  using Crs = KokkosSparse::CrsMatrix<float, Index, Device, void, offset_type>;
  // Wraps the graph's views (no copy).
  Crs matrix("Tessel::gnn::kk_matrix", a.num_rows(), a.num_cols(), a.nnz(), a.values(), a.row_map(), a.entries());
  compat::spmv(space, "N", 1.0f, matrix, x, 0.0f, y);
}

#define TESSEL_GNN_INSTANTIATE_KK_SPMV(SPACE)                                                                          \
  template void kk_spmv(SPACE const &, Graph<std::int32_t, Kokkos::HostSpace> const &,                                 \
                        ConstMatrix<Kokkos::HostSpace> const &, Matrix<Kokkos::HostSpace> const &);                    \
  template void kk_spmv(SPACE const &, Graph<std::int64_t, Kokkos::HostSpace> const &,                                 \
                        ConstMatrix<Kokkos::HostSpace> const &, Matrix<Kokkos::HostSpace> const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_KK_SPMV)

} // namespace tessel::gnn::Impl

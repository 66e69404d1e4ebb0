#include "impl/Blas.hpp"

#include <tessel/core/Execution.hpp>

#define TESSEL_COMPAT_KOKKOS_BLAS
#include <tessel/core/KokkosCompat.hpp>

namespace tessel::gnn::Impl {

template <class ExecSpace>
void gemm(ExecSpace const &space, char const *trans_a, char const *trans_b, float alpha,
          ConstMatrix<typename ExecSpace::memory_space> const &a,
          ConstMatrix<typename ExecSpace::memory_space> const &b, float beta,
          Matrix<typename ExecSpace::memory_space> const &c) {
  bool const ta = trans_a[0] == 'T', tb = trans_b[0] == 'T';
  auto const m = ta ? a.extent(1) : a.extent(0), k = ta ? a.extent(0) : a.extent(1);
  auto const kb = tb ? b.extent(1) : b.extent(0), n = tb ? b.extent(0) : b.extent(1);
  TESSEL_REQUIRE(k == kb && c.extent(0) == m && c.extent(1) == n, "gemm: op(A) is ", m, " x ", k, ", op(B) is ", kb,
                 " x ", n, ", C is ", c.extent(0), " x ", c.extent(1));
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    if (beta == 0.0f)
      Kokkos::deep_copy(space, c, 0.0f);
    else if (beta != 1.0f)
      Kokkos::parallel_for(
          "Tessel::gnn::gemm_scale", Kokkos::RangePolicy<ExecSpace>(space, 0, c.extent(0)),
          KOKKOS_LAMBDA(std::size_t i) {
            for (std::size_t j = 0; j < c.extent(1); ++j)
              c(i, j) *= beta;
          });
    return;
  }
  compat::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
}

#define TESSEL_GNN_INSTANTIATE_GEMM(SPACE)                                                                             \
  template void gemm(SPACE const &, char const *, char const *, float, ConstMatrix<Kokkos::HostSpace> const &,         \
                     ConstMatrix<Kokkos::HostSpace> const &, float, Matrix<Kokkos::HostSpace> const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_GEMM)

} // namespace tessel::gnn::Impl

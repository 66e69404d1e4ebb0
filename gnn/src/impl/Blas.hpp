#ifndef TESSEL_GNN_IMPL_BLAS_HPP
#define TESSEL_GNN_IMPL_BLAS_HPP

// Narrow entry points to Kokkos Kernels, so that its heavy headers are compiled in two translation units only
// (Blas.cpp: KokkosBlas::gemm; KkSpmv.cpp: KokkosSparse::spmv).
#include <tessel/gnn/Graph.hpp>

namespace tessel::gnn::Impl {

/// C = alpha op(A) op(B) + beta C through KokkosBlas::gemm (the system BLAS for host LayoutRight float).
/// \p trans_a / \p trans_b are "N" or "T". Empty products only scale C.
template <class ExecSpace>
void gemm(ExecSpace const &space, char const *trans_a, char const *trans_b, float alpha,
          ConstMatrix<typename ExecSpace::memory_space> const &a,
          ConstMatrix<typename ExecSpace::memory_space> const &b, float beta,
          Matrix<typename ExecSpace::memory_space> const &c);

/// y = A x with KokkosSparse::spmv on rank-2 views (Kokkos Kernels' native multivector SpMV).
template <class Index, class ExecSpace>
void kk_spmv(ExecSpace const &space, Graph<Index, typename ExecSpace::memory_space> const &a,
             ConstMatrix<typename ExecSpace::memory_space> const &x, Matrix<typename ExecSpace::memory_space> const &y);

} // namespace tessel::gnn::Impl

#endif

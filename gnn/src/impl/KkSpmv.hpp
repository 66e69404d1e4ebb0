#ifndef TESSEL_GNN_IMPL_KKSPMV_HPP
#define TESSEL_GNN_IMPL_KKSPMV_HPP

// The kk algorithm's entry point into Kokkos Kernels' sparse BLAS: its headers cost ~25 s per translation unit, so
// only KkSpmv.cpp includes them.
#include <tessel/gnn/Graph.hpp>

namespace tessel::gnn::Impl {

/// y = A x with KokkosSparse::spmv on rank-2 views (Kokkos Kernels' native multivector SpMV).
template <class Index, class ExecSpace>
void kk_spmv(ExecSpace const &space, Graph<Index, typename ExecSpace::memory_space> const &a,
             ConstMatrix<typename ExecSpace::memory_space> const &x, Matrix<typename ExecSpace::memory_space> const &y);

} // namespace tessel::gnn::Impl

#endif

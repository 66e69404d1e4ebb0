#ifndef TESSEL_MOE_SRC_GEMM_HPP
#define TESSEL_MOE_SRC_GEMM_HPP

// Row-major GEMM on raw host matrices with leading dimensions, through Kokkos Kernels (whose host GEMM calls
// the system BLAS). Kokkos Kernels' headers stay inside Gemm.cpp.

#include <tessel/moe/Types.hpp>

#include <cstdint>

namespace tessel::moe::Impl {

/// A row-major matrix view: element (i, j) at data[i * ld + j].
template <class T> struct MatRef {
  T *data = nullptr;
  std::int64_t rows = 0, cols = 0, ld = 0;
  MatRef rows_range(std::int64_t begin, std::int64_t end) const { return {data + begin * ld, end - begin, cols, ld}; }
  MatRef cols_range(std::int64_t begin, std::int64_t end) const { return {data + begin, rows, end - begin, ld}; }
};

/// C = A B + beta C (A: m x k, B: k x n, C: m x n) on \p space. Empty products are handled here (Kokkos Kernels
/// would launch its own, unlabelled kernels for them).
/// Instantiated for every enabled host space and T = float, double.
template <class ExecSpace, class T>
void gemm(ExecSpace const &space, MatRef<T const> a, MatRef<T const> b, T beta, MatRef<T> c);

/// Limits the BLAS library to one thread per call when it is OpenBLAS and OPENBLAS_NUM_THREADS is unset:
/// ranks and the communication thread already share the cores. Returns the previous thread count, or -1 when
/// the BLAS has no such control.
int limit_blas_threads();

} // namespace tessel::moe::Impl

#endif

#ifndef TESSEL_CORE_GEMM_HPP
#define TESSEL_CORE_GEMM_HPP

/// \file Gemm.hpp
/// \brief Strided row-major matrices and the one host GEMM entry point (Kokkos Kernels, which calls the system
/// BLAS); Kokkos Kernels' headers stay inside Gemm.cpp.

#include <Kokkos_Macros.hpp>

#include <cstdint>
#include <type_traits>

namespace tessel {

/// \brief A non-owning row-major matrix in any memory space: element (i, j) at data[i * ld + j], ld >= cols.
template <class T> struct MatrixRef {
  T *data = nullptr;     ///< element (0, 0)
  std::int64_t rows = 0; ///< number of rows
  std::int64_t cols = 0; ///< number of columns
  std::int64_t ld = 0;   ///< distance between the starts of two rows, in elements (>= cols)

  /// An empty matrix.
  MatrixRef() = default;
  /// \p ld < 0 means cols (contiguous rows).
  KOKKOS_INLINE_FUNCTION MatrixRef(T *data_, std::int64_t rows_, std::int64_t cols_, std::int64_t ld_ = -1)
      : data(data_), rows(rows_), cols(cols_), ld(ld_ < 0 ? cols_ : ld_) {}
  /// A read-only view of a mutable matrix.
  template <class U, class = std::enable_if_t<std::is_same_v<T, U const>>>
  KOKKOS_INLINE_FUNCTION MatrixRef(MatrixRef<U> const &m) : data(m.data), rows(m.rows), cols(m.cols), ld(m.ld) {}

  /// Element (i, j).
  KOKKOS_INLINE_FUNCTION T &operator()(std::int64_t i, std::int64_t j) const { return data[i * ld + j]; }
  /// Rows [begin, end).
  KOKKOS_INLINE_FUNCTION MatrixRef rows_range(std::int64_t begin, std::int64_t end) const {
    return {data + begin * ld, end - begin, cols, ld};
  }
  /// Columns [begin, end).
  KOKKOS_INLINE_FUNCTION MatrixRef cols_range(std::int64_t begin, std::int64_t end) const {
    return {data + begin, rows, end - begin, ld};
  }
};

/// \brief How GEMM reads an operand.
enum class Op { none, transpose };

/// \brief C = alpha op(A) op(B) + beta C on the host execution space instance \p space, through KokkosBlas::gemm
/// (the system BLAS). Shapes are checked (a tessel::Exception naming them); empty products only scale C (Kokkos
/// Kernels would launch its own, unlabelled kernels for them). beta = 0 overwrites C, NaN included.
/// Instantiated for every enabled host space and T = float, double.
template <class ExecSpace, class T>
void gemm(ExecSpace const &space, Op op_a, Op op_b, T alpha, MatrixRef<T const> a, MatrixRef<T const> b, T beta,
          MatrixRef<T> c);

/// \brief Limits the BLAS library to one thread per call when it is OpenBLAS and neither OPENBLAS_NUM_THREADS nor
/// OMP_NUM_THREADS is set: ranks, Kokkos threads and communication threads already share the cores. Returns the
/// previous thread count, or -1 when the BLAS has no such control.
int limit_blas_threads();

} // namespace tessel

#endif

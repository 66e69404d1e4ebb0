#ifndef TESSEL_CORE_CUDA_BLAS_HPP
#define TESSEL_CORE_CUDA_BLAS_HPP

/// \file cuda/Blas.hpp
/// \brief The CUDA toolkit's math libraries in Tessel's terms: status checks that throw tessel::Exception
/// (TESSEL_CUBLAS_CHECK, TESSEL_CUSPARSE_CHECK, like TESSEL_CUDA_CHECK) and owned cuBLAS / cuSPARSE handles.
/// Tessel::core links cuBLAS and cuSPARSE privately: a target that calls them itself links CUDA::cublas or
/// CUDA::cusparse.

#include <tessel/core/cuda/Cuda.hpp>

#include <cublas_v2.h>
#include <cusparse.h>

#include <utility>

/// Defined where cublasGemmGroupedBatchedEx (groups of GEMMs of different shapes in one call) exists: cuBLAS 12.5+.
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120500
#define TESSEL_CUBLAS_HAS_GROUPED_GEMM 1
#endif

namespace tessel::cuda {

namespace Impl {
[[noreturn]] void throw_cublas_error(char const *file, int line, char const *call, cublasStatus_t status);
[[noreturn]] void throw_cusparse_error(char const *file, int line, char const *call, cusparseStatus_t status);
} // namespace Impl

/// \brief An owned cuBLAS handle on the current device. Move-only; destroyed with the object.
class CublasHandle {
public:
  /// Creates the handle and binds its calls to \p stream.
  explicit CublasHandle(cudaStream_t stream);
  ~CublasHandle();
  /// \name Move-only: the moved-from object owns nothing
  //@{
  /// Move-only: the moved-from object owns nothing.
  CublasHandle(CublasHandle &&other) noexcept : _handle(std::exchange(other._handle, nullptr)) {}
  CublasHandle &operator=(CublasHandle &&other) noexcept;
  CublasHandle(CublasHandle const &) = delete;
  CublasHandle &operator=(CublasHandle const &) = delete;
  //@}

  /// The cuBLAS handle.
  cublasHandle_t get() const noexcept { return _handle; }
  /// Binds the calls that follow to \p stream.
  void set_stream(cudaStream_t stream);

private:
  cublasHandle_t _handle = nullptr;
};

/// \brief An owned cuSPARSE handle on the current device. Move-only; destroyed with the object.
class CusparseHandle {
public:
  /// Creates the handle and binds its calls to \p stream.
  explicit CusparseHandle(cudaStream_t stream);
  ~CusparseHandle();
  /// \name Move-only: the moved-from object owns nothing
  //@{
  /// Move-only: the moved-from object owns nothing.
  CusparseHandle(CusparseHandle &&other) noexcept : _handle(std::exchange(other._handle, nullptr)) {}
  CusparseHandle &operator=(CusparseHandle &&other) noexcept;
  CusparseHandle(CusparseHandle const &) = delete;
  CusparseHandle &operator=(CusparseHandle const &) = delete;
  //@}

  /// The cuSPARSE handle.
  cusparseHandle_t get() const noexcept { return _handle; }
  /// Binds the calls that follow to \p stream.
  void set_stream(cudaStream_t stream);

private:
  cusparseHandle_t _handle = nullptr;
};

} // namespace tessel::cuda

/// \brief Checks a cuBLAS call; on failure throws tessel::Exception with the call, the status name and text, file
/// and line.
#define TESSEL_CUBLAS_CHECK(call)                                                                                      \
  do {                                                                                                                 \
    cublasStatus_t const tessel_cublas_rc_ = (call);                                                                   \
    if (tessel_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                                    \
      ::tessel::cuda::Impl::throw_cublas_error(__FILE__, __LINE__, #call, tessel_cublas_rc_);                          \
  } while (false)

/// \brief Checks a cuSPARSE call; on failure throws tessel::Exception with the call, the status name and text, file
/// and line.
#define TESSEL_CUSPARSE_CHECK(call)                                                                                    \
  do {                                                                                                                 \
    cusparseStatus_t const tessel_cusparse_rc_ = (call);                                                               \
    if (tessel_cusparse_rc_ != CUSPARSE_STATUS_SUCCESS)                                                                \
      ::tessel::cuda::Impl::throw_cusparse_error(__FILE__, __LINE__, #call, tessel_cusparse_rc_);                      \
  } while (false)

#endif

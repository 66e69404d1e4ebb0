// cuBLAS / cuSPARSE status checks and handles (host code; core links both libraries privately).
#include <tessel/core/cuda/Blas.hpp>

namespace tessel::cuda {

namespace Impl {
void throw_cublas_error(char const *file, int line, char const *call, cublasStatus_t status) {
  throw Exception(
      tessel::Impl::concat("cuBLAS failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ")"),
      tessel::Impl::concat(call, " (", tessel::Impl::source_location(file, line, "cuda"), ")"));
}

void throw_cusparse_error(char const *file, int line, char const *call, cusparseStatus_t status) {
  throw Exception(tessel::Impl::concat("cuSPARSE failed: ", cusparseGetErrorName(status), " (",
                                       cusparseGetErrorString(status), ")"),
                  tessel::Impl::concat(call, " (", tessel::Impl::source_location(file, line, "cuda"), ")"));
}
} // namespace Impl

CublasHandle::CublasHandle(cudaStream_t stream) {
  TESSEL_CUBLAS_CHECK(cublasCreate(&_handle));
  try {
    set_stream(stream);
  } catch (...) {
    cublasDestroy(_handle);
    throw;
  }
}

CublasHandle::~CublasHandle() {
  if (_handle)
    cublasDestroy(_handle);
}

CublasHandle &CublasHandle::operator=(CublasHandle &&other) noexcept {
  if (this != &other) {
    if (_handle)
      cublasDestroy(_handle);
    _handle = std::exchange(other._handle, nullptr);
  }
  return *this;
}

void CublasHandle::set_stream(cudaStream_t stream) { TESSEL_CUBLAS_CHECK(cublasSetStream(_handle, stream)); }

CusparseHandle::CusparseHandle(cudaStream_t stream) {
  TESSEL_CUSPARSE_CHECK(cusparseCreate(&_handle));
  try {
    set_stream(stream);
  } catch (...) {
    cusparseDestroy(_handle);
    throw;
  }
}

CusparseHandle::~CusparseHandle() {
  if (_handle)
    cusparseDestroy(_handle);
}

CusparseHandle &CusparseHandle::operator=(CusparseHandle &&other) noexcept {
  if (this != &other) {
    if (_handle)
      cusparseDestroy(_handle);
    _handle = std::exchange(other._handle, nullptr);
  }
  return *this;
}

void CusparseHandle::set_stream(cudaStream_t stream) { TESSEL_CUSPARSE_CHECK(cusparseSetStream(_handle, stream)); }

} // namespace tessel::cuda

// cuBLAS / cuSPARSE status checks (no device needed: the status names and texts are host functions) and, where a
// device is visible, the owned handles.
#include <tessel/core/cuda/Blas.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

// The message names the call, the status (name and text), this file and the line of the check.
template <class F> std::string message_of(F &&f) {
  try {
    f();
  } catch (tessel::Exception const &e) {
    // The message for people first, then where it was raised (the call, file and line), as --debug prints it.
    return std::string(e.what()) + " @ " + e.where();
  }
  ADD_FAILURE() << "no tessel::Exception thrown";
  return {};
}

cublasStatus_t fail_blas(cublasStatus_t s) { return s; }
cusparseStatus_t fail_sparse(cusparseStatus_t s) { return s; }

TEST(CudaBlas, cublas_check_throws_with_call_status_file_and_line) {
  EXPECT_NO_THROW(TESSEL_CUBLAS_CHECK(fail_blas(CUBLAS_STATUS_SUCCESS)));
  int const line = __LINE__ + 1;
  auto const what = message_of([] { TESSEL_CUBLAS_CHECK(fail_blas(CUBLAS_STATUS_NOT_SUPPORTED)); });
  EXPECT_NE(what.find("@ fail_blas(CUBLAS_STATUS_NOT_SUPPORTED)"), std::string::npos) << what;
  EXPECT_NE(what.find("CUBLAS_STATUS_NOT_SUPPORTED ("), std::string::npos) << what;
  EXPECT_NE(what.find(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)), std::string::npos) << what;
  EXPECT_NE(what.find("tstCudaBlas.cpp:" + std::to_string(line) + ")"), std::string::npos) << what;
}

TEST(CudaBlas, cusparse_check_throws_with_call_status_file_and_line) {
  EXPECT_NO_THROW(TESSEL_CUSPARSE_CHECK(fail_sparse(CUSPARSE_STATUS_SUCCESS)));
  int const line = __LINE__ + 1;
  auto const what = message_of([] { TESSEL_CUSPARSE_CHECK(fail_sparse(CUSPARSE_STATUS_INVALID_VALUE)); });
  EXPECT_NE(what.find("@ fail_sparse(CUSPARSE_STATUS_INVALID_VALUE)"), std::string::npos) << what;
  EXPECT_NE(what.find("CUSPARSE_STATUS_INVALID_VALUE ("), std::string::npos) << what;
  EXPECT_NE(what.find(cusparseGetErrorString(CUSPARSE_STATUS_INVALID_VALUE)), std::string::npos) << what;
  EXPECT_NE(what.find("tstCudaBlas.cpp:" + std::to_string(line) + ")"), std::string::npos) << what;
}

TEST(CudaBlas, handles_bind_streams_and_move) {
  if (tessel::cuda::device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible";
  tessel::cuda::Stream stream;
  tessel::cuda::CublasHandle blas(stream.get());
  cudaStream_t bound = nullptr;
  TESSEL_CUBLAS_CHECK(cublasGetStream(blas.get(), &bound));
  EXPECT_EQ(bound, stream.get());
  tessel::cuda::CublasHandle moved(std::move(blas));
  EXPECT_EQ(blas.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
  tessel::cuda::CusparseHandle sparse(stream.get());
  TESSEL_CUSPARSE_CHECK(cusparseGetStream(sparse.get(), &bound));
  EXPECT_EQ(bound, stream.get());
  sparse.set_stream(nullptr);
  TESSEL_CUSPARSE_CHECK(cusparseGetStream(sparse.get(), &bound));
  EXPECT_EQ(bound, nullptr);
}

} // namespace

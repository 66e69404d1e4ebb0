#include "SymmetricWindow.hpp"

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)

#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/core/cuda/NcclCommunicator.hpp>

#include <chrono>
#include <thread>

namespace tessel::moe::cuda::Impl {

namespace {

// Tessel's NCCL communicators are non-blocking (so that waits can time out): a call may return ncclInProgress,
// and NCCL requires it to complete before the next call on the communicator. Waits for that (bounded), then
// returns the call's final state.
ncclResult_t settle(ncclComm_t comm, ncclResult_t rc, std::chrono::milliseconds timeout) {
  auto const deadline = std::chrono::steady_clock::now() + timeout;
  while (rc == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline)
      return ncclInProgress;
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess)
      return ncclSystemError;
  }
  return rc;
}

void check(ncclComm_t comm, ncclResult_t rc, char const *call) {
  rc = settle(comm, rc, default_timeout());
  if (rc == ncclInProgress)
    throw TimeoutError(tessel::Impl::concat("tessel::moe::cuda: ", call, " did not complete within ",
                                            default_timeout().count(), " ms (a rank never joined?)"),
                       -1);
  if (rc != ncclSuccess)
    tessel::cuda::Impl::throw_nccl_error(__FILE__, __LINE__, call, rc, comm);
}

} // namespace

SymmetricWindow::SymmetricWindow(ncclComm_t comm, std::size_t bytes, cudaStream_t stream) : _comm(comm) {
  _bytes = (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  int ranks = 0;
  TESSEL_NCCL_CHECK(ncclCommCount(comm, &ranks));
  void *ptr = nullptr;
  TESSEL_NCCL_CHECK(ncclMemAlloc(&ptr, _bytes));
  _local = static_cast<char *>(ptr);
  try {
    check(comm, ncclCommWindowRegister(comm, _local, _bytes, &_window, NCCL_WIN_COLL_SYMMETRIC),
          "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)");
    _registered = true;
    ncclDevCommRequirements reqs{};
    reqs.lsaBarrierCount = 1;
    check(comm, ncclDevCommCreate(comm, &reqs, &_dev), "ncclDevCommCreate");
    _dev_created = true;
    // The fused kernels address every rank by load/store: all ranks must be in this rank's LSA (NVLink / P2P) team.
    TESSEL_REQUIRE(_dev.lsaSize == ranks, "tessel::moe::cuda: the NCCL communicator spans ", ranks, " ranks but only ",
                   _dev.lsaSize, " are load/store accessible from rank ", _dev.rank,
                   " (LSA team); the fused moe kernels need all ranks on one NVLink domain");
    TESSEL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&_table), static_cast<std::size_t>(ranks) * sizeof(char *)));
    TESSEL_CUDA_CHECK(fill_peer_table(stream, _window, ranks, _table));
    TESSEL_CUDA_CHECK(cudaMemsetAsync(_local, 0, _bytes, stream));
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    release();
    throw;
  }
}

SymmetricWindow::~SymmetricWindow() { release(); }

void SymmetricWindow::release() noexcept {
  if (_table != nullptr)
    cudaFree(_table);
  _table = nullptr;
  if (_dev_created)
    settle(_comm, ncclDevCommDestroy(_comm, &_dev), default_timeout());
  _dev_created = false;
  if (_registered)
    settle(_comm, ncclCommWindowDeregister(_comm, _window), default_timeout());
  _registered = false;
  if (_local != nullptr)
    ncclMemFree(_local);
  _local = nullptr;
}

} // namespace tessel::moe::cuda::Impl

#endif

#include "SymmetricWindow.hpp"

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)

#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/core/cuda/NcclCommunicator.hpp>

#include <chrono>
#include <string>
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

std::string release_text(int code) {
  return tessel::Impl::concat(code / 10000, ".", code % 10000 / 100, ".", code % 100);
}

} // namespace

void require_nccl_release(int loaded, int compiled) {
  auto const series = [](int code) { return code / 100; }; // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z
  TESSEL_REQUIRE(
      series(loaded) == series(nccl_written_for) && series(loaded) == series(compiled),
      "tessel::moe::cuda: the NCCL library loaded at run time is ", release_text(loaded),
      ", but the moe multi-GPU path (NCCL device API: symmetric windows, LSA peer pointers) was written for ",
      release_text(nccl_written_for), " and compiled against the headers of ", release_text(compiled),
      "; the device API has no ABI stability across releases. Load NCCL ", nccl_written_for / 10000, ".",
      nccl_written_for % 10000 / 100,
      ".x (LD_LIBRARY_PATH), or rebuild Tessel with "
      "-DTessel_MOE_NCCL_DEVICE_API=OFF");
}

std::string PeerLinks::problem(std::vector<std::string> const &bus_ids) const {
  for (int r = 0; r < world; ++r)
    for (int p = 0; p < world; ++p) {
      PeerLink const link = links[static_cast<std::size_t>(r * world + p)];
      if (link == PeerLink::ok || link == PeerLink::unchecked)
        continue;
      char const *what = link == PeerLink::same_device ? "is the same GPU as"
                         : link == PeerLink::no_access ? "has no peer access (load/store) to"
                                                       : "has peer access but no native peer atomics to";
      return tessel::Impl::concat("rank ", r, "'s GPU (", bus_ids[static_cast<std::size_t>(r)], ") ", what, " rank ", p,
                                  "'s GPU (", bus_ids[static_cast<std::size_t>(p)],
                                  "); the fused moe kernels read and signal every peer's memory directly");
    }
  return {};
}

int PeerLinks::unchecked() const {
  int n = 0;
  for (auto link : links)
    n += link == PeerLink::unchecked;
  return n;
}

std::vector<PeerLink> check_peer_links(std::vector<std::string> const &bus_ids, int rank) {
  int device = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  std::vector<PeerLink> row(bus_ids.size(), PeerLink::ok);
  for (std::size_t p = 0; p < bus_ids.size(); ++p) {
    if (static_cast<int>(p) == rank)
      continue;
    int peer = -1;
    if (cudaDeviceGetByPCIBusId(&peer, bus_ids[p].c_str()) != cudaSuccess) {
      (void)cudaGetLastError(); // not visible here: not an error of this process
      row[p] = PeerLink::unchecked;
      continue;
    }
    int access = 0, atomics = 0;
    if (peer == device) {
      row[p] = PeerLink::same_device;
      continue;
    }
    TESSEL_CUDA_CHECK(cudaDeviceCanAccessPeer(&access, device, peer));
    if (access == 0) {
      row[p] = PeerLink::no_access;
      continue;
    }
    TESSEL_CUDA_CHECK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, device, peer));
    if (atomics == 0)
      row[p] = PeerLink::no_atomics;
  }
  return row;
}

SymmetricWindow::SymmetricWindow(ncclComm_t comm, std::size_t bytes, cudaStream_t stream) : _comm(comm) {
  int loaded = 0;
  TESSEL_NCCL_CHECK(ncclGetVersion(&loaded));
  require_nccl_release(loaded);
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

#ifndef TESSEL_MOE_CUDA_SYMMETRICWINDOW_HPP
#define TESSEL_MOE_CUDA_SYMMETRICWINDOW_HPP

// One symmetric allocation per rank through NCCL 2.28's device API (the real multi-GPU mode of the fused kernels):
// ncclMemAlloc, the collective ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC), ncclDevCommCreate, and a device
// table of every rank's base pointer in that window (ncclGetPeerPointer, the LSA mapping of the peers' memory into
// this process), which is exactly what the one-process mode builds from W plain allocations. Host code; the table is
// filled by a kernel (SymmetricWindow.cu) because NCCL 2.28 gives peer pointers on the device only.
#include <tessel/core/Config.hpp>

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)

#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>

namespace tessel::moe::cuda::Impl {

/// The NCCL version the device-API code was written and checked against (CMake pins it at configure time).
constexpr int nccl_written_for = NCCL_VERSION(2, 28, 9);
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && NCCL_VERSION_CODE < NCCL_VERSION(2, 29, 0),
              "the moe NCCL device-API path is written for NCCL 2.28 (no ABI stability across releases)");

/// Fills \p table[p] = ncclGetPeerPointer(window, 0, p) for p < ranks (device array).
cudaError_t fill_peer_table(cudaStream_t stream, ncclWindow_t window, int ranks, char **table);

/// An owned symmetric window of \p bytes (rounded up to NCCL_WIN_REQUIRED_ALIGNMENT) on every rank of \p comm, with
/// its device communicator and peer-pointer table. Construction and destruction are collective.
class SymmetricWindow {
public:
  SymmetricWindow(ncclComm_t comm, std::size_t bytes, cudaStream_t stream);
  ~SymmetricWindow();
  SymmetricWindow(SymmetricWindow const &) = delete;
  SymmetricWindow &operator=(SymmetricWindow const &) = delete;

  char *local() const { return _local; }
  /// Device array [ranks]: every rank's base of the window, as mapped in this process.
  char *const *peer_table() const { return _table; }
  std::size_t bytes() const { return _bytes; }
  ncclDevComm const &device_comm() const { return _dev; }

private:
  void release() noexcept;

  ncclComm_t _comm = nullptr;
  char *_local = nullptr;
  char **_table = nullptr;
  std::size_t _bytes = 0;
  ncclWindow_t _window{};
  ncclDevComm _dev{};
  bool _registered = false, _dev_created = false;
};

} // namespace tessel::moe::cuda::Impl

#endif
#endif

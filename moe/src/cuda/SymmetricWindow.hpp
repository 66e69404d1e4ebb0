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
#include <string>
#include <vector>

namespace tessel::moe::cuda::Impl {

/// The NCCL version the device-API code was written and checked against (CMake pins it at configure time).
constexpr int nccl_written_for = NCCL_VERSION(2, 28, 9);
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && NCCL_VERSION_CODE < NCCL_VERSION(2, 29, 0),
              "the moe NCCL device-API path is written for NCCL 2.28 (no ABI stability across releases)");

/// Throws unless the NCCL release \p loaded (ncclGetVersion of the library this process loaded) is of the series the
/// device-API code was written for and compiled against (\p compiled, the headers' NCCL_VERSION_CODE): the header
/// check alone lets a different libnccl through at run time, and the device API has no ABI stability across
/// releases.
void require_nccl_release(int loaded, int compiled = NCCL_VERSION_CODE);

/// What one rank found of the path from its GPU to a peer's (cudaDeviceCanAccessPeer, and
/// cudaDevP2PAttrNativeAtomicSupported: the fused kernels signal peers with system-scope atomics).
enum class PeerLink : int {
  ok = 0,
  unchecked,   ///< the peer's GPU is not visible in this process (CUDA_VISIBLE_DEVICES): only NCCL's LSA check holds
  same_device, ///< both ranks run on one GPU
  no_access,   ///< no peer access (load/store) between the GPUs
  no_atomics   ///< peer access without native atomics
};

/// Every rank's findings, [rank][peer] row-major, gathered on every rank.
struct PeerLinks {
  int world = 1;
  std::vector<PeerLink> links;
  /// The first pair the fused kernels cannot use, as a sentence naming both ranks and their GPUs' PCI bus ids
  /// (\p bus_ids, one per rank); empty when none.
  std::string problem(std::vector<std::string> const &bus_ids) const;
  /// Pairs that could not be checked.
  int unchecked() const;
};

/// Checks the path from this rank's GPU to every peer's, whose PCI bus ids are \p bus_ids (all ranks' ids, this
/// rank's at \p rank); returns this rank's row of PeerLinks.
std::vector<PeerLink> check_peer_links(std::vector<std::string> const &bus_ids, int rank);

/// Fills \p table[p] = ncclGetPeerPointer(window, 0, p) for p < ranks (device array).
cudaError_t fill_peer_table(cudaStream_t stream, ncclWindow_t window, int ranks, char **table);

/// An owned symmetric window of \p bytes (rounded up to NCCL_WIN_REQUIRED_ALIGNMENT) on every rank of \p comm, with
/// its device communicator and peer-pointer table. Construction and destruction are collective.
class SymmetricWindow {
public:
  /// Checks the loaded NCCL release first (require_nccl_release).
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

// Peer-pointer table of an NCCL symmetric window (NCCL 2.28 device API; see SymmetricWindow.hpp).
#include "SymmetricWindow.hpp"

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)

namespace tessel::moe::cuda::Impl {

namespace {

__global__ void fill_peer_table_kernel(ncclWindow_t window, int ranks, char **table) {
  for (int p = static_cast<int>(threadIdx.x); p < ranks; p += static_cast<int>(blockDim.x))
    table[p] = static_cast<char *>(ncclGetPeerPointer(window, 0, p));
}

} // namespace

cudaError_t fill_peer_table(cudaStream_t stream, ncclWindow_t window, int ranks, char **table) {
  fill_peer_table_kernel<<<1, 32, 0, stream>>>(window, ranks, table);
  return cudaGetLastError();
}

} // namespace tessel::moe::cuda::Impl

#endif

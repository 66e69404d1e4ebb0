// The halo exchange's element-wise kernels (DistSpmm on a device): packing the rows a peer needs and adding a
// peer's block result. Both are bandwidth-bound copies: one thread per element, rows in blockIdx.y-major order so
// that consecutive threads touch consecutive features.
#include "KernelApi.hpp"

#include <algorithm>
#include <cstdint>

namespace tessel::gnn::cuda::Impl {

namespace {

constexpr int block = 256;

__global__ void gather_rows_kernel(std::int64_t n, std::int32_t const *rows, float const *x, std::int64_t ldx,
                                   float *out, std::int64_t ldo, int f) {
  auto const k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n * f)
    return;
  auto const r = k / f, c = k % f;
  out[r * ldo + c] = x[static_cast<std::int64_t>(rows[r]) * ldx + c];
}

__global__ void add_rows_kernel(std::int64_t n, float const *part, std::int64_t ldp, float *y, std::int64_t ldy,
                                int f) {
  auto const k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n * f)
    return;
  auto const r = k / f, c = k % f;
  y[r * ldy + c] += part[r * ldp + c];
}

unsigned blocks_for(std::int64_t elements) { return static_cast<unsigned>((elements + block - 1) / block); }

} // namespace

cudaError_t gather_rows(cudaStream_t stream, std::int64_t n, std::int32_t const *rows, float const *x, std::int64_t ldx,
                        float *out, std::int64_t ldo, int f) {
  if (n <= 0 || f <= 0)
    return cudaSuccess;
  gather_rows_kernel<<<blocks_for(n * f), block, 0, stream>>>(n, rows, x, ldx, out, ldo, f);
  return cudaGetLastError();
}

cudaError_t add_rows(cudaStream_t stream, std::int64_t n, float const *part, std::int64_t ldp, float *y,
                     std::int64_t ldy, int f) {
  if (n <= 0 || f <= 0)
    return cudaSuccess;
  add_rows_kernel<<<blocks_for(n * f), block, 0, stream>>>(n, part, ldp, y, ldy, f);
  return cudaGetLastError();
}

} // namespace tessel::gnn::cuda::Impl

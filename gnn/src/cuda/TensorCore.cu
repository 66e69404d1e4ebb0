// Tensor-core aggregation kernels (TF32 WMMA m16n16k8, fp32 accumulation): TC-GNN's condensed row windows and
// AdaptGear's dense blocks. Hot kernels: compiled with -Xptxas -v by the gnn.CudaSpills test, which fails on any
// register spill.
#include "KernelApi.hpp"

#include <mma.h>

#include <algorithm>
#include <cstdint>

namespace tessel::gnn::cuda::Impl {

namespace {

using namespace nvcuda;

static_assert(tile_rows == 16 && tile_cols == 8, "the WMMA kernels take 16 x 8 TF32 tiles of A");

constexpr int tc_warps = 4;             // warps per block; each owns 16 feature columns of the block's rows
constexpr int tc_block = 32 * tc_warps; // threads per block
constexpr int warp_smem = 16 * 16;      // floats per warp: the 8 x 16 staged X rows, then the 16 x 16 result
constexpr unsigned max_grid_y = 65535;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TESSEL_GNN_TENSOR_CORES 1
#endif

#ifdef TESSEL_GNN_TENSOR_CORES
/// Rounds a fragment to TF32 (round to nearest, ties away: cvt.rna), rather than leaving the truncation of the
/// low mantissa bits to the hardware.
template <class Frag> __device__ __forceinline__ void round_to_tf32(Frag &frag) {
#pragma unroll
  for (int t = 0; t < frag.num_elements; ++t)
    frag.x[t] = wmma::__float_to_tf32(frag.x[t]);
}

/// acc += A B on TF32 tensor cores: A a 16 x 8 row-major tile at \p a (leading dimension \p lda), B the 8 x 16
/// slice of X staged in shared memory at \p b; both rounded to TF32 first.
__device__ __forceinline__ void mma_tf32(FragC &acc, float const *a, unsigned lda, float const *b) {
  FragA fa;
  wmma::load_matrix_sync(fa, a, lda);
  round_to_tf32(fa);
  FragB fb;
  wmma::load_matrix_sync(fb, b, 16);
  round_to_tf32(fb);
  wmma::mma_sync(acc, fa, fb, acc);
}
#endif

/// Four consecutive features c .. c + 3 of X row \p row (zeros for row < 0 and beyond F).
template <bool VEC4>
__device__ __forceinline__ float4 gather4(float const *__restrict__ x, std::int64_t ldx, std::int64_t row, int c,
                                          int f) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (row < 0)
    return v;
  float const *p = x + row * ldx + c;
  if (VEC4 && c + 3 < f)
    return __ldg(reinterpret_cast<float4 const *>(p));
  if (c < f)
    v.x = __ldg(p);
  if (c + 1 < f)
    v.y = __ldg(p + 1);
  if (c + 2 < f)
    v.z = __ldg(p + 2);
  if (c + 3 < f)
    v.w = __ldg(p + 3);
  return v;
}

/// Lane l holds X row l / 4 (of the 8 rows of one k-step), features 4 (l % 4) .. + 3 of the warp's 16.
__device__ __forceinline__ void stage(float *buf, int lane, float4 v) {
  *reinterpret_cast<float4 *>(buf + (lane >> 2) * 16 + (lane & 3) * 4) = v;
}

/// Writes the warp's 16 x 16 result (row-major in \p buf) to rows 0 .. nrows - 1 of \p y, features c0 .. c0 + 15.
template <bool VEC4>
__device__ __forceinline__ void write_out(float const *buf, float *__restrict__ y, std::int64_t ldy, int nrows, int c0,
                                          int f, int lane, bool accumulate) {
  int const row = lane >> 1, half = lane & 1;
  if (row >= nrows)
    return;
  float *yp = y + row * ldy;
  float const *s = buf + row * 16 + half * 8;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    int const c = c0 + half * 8 + q * 4;
    float4 v = *reinterpret_cast<float4 const *>(s + q * 4);
    if (VEC4 && c + 3 < f) {
      if (accumulate) {
        float4 const o = *reinterpret_cast<float4 const *>(yp + c);
        v.x += o.x;
        v.y += o.y;
        v.z += o.z;
        v.w += o.w;
      }
      *reinterpret_cast<float4 *>(yp + c) = v;
    } else {
      float const w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (c + j < f)
          yp[c + j] = accumulate ? yp[c + j] + w[j] : w[j];
    }
  }
}

/// One warp per (row window, 16 feature columns): for each condensed tile, the 16 x 8 values of A come straight
/// from global memory into the A fragment, the 8 X rows named by the tile's column ids are gathered into shared
/// memory (the next tile's rows are already in flight while this tile's MMA runs), and one m16n16k8 MMA
/// accumulates. TC-GNN's kernel, on our tile layout.
template <bool VEC4, class Index>
__global__ void __launch_bounds__(tc_block)
    tiles_kernel(TileArgs<Index> a, float const *__restrict__ x, std::int64_t ldx, float *__restrict__ y,
                 std::int64_t ldy, int f, int slices, bool accumulate) {
#ifdef TESSEL_GNN_TENSOR_CORES
  __shared__ __align__(32) float smem[tc_warps * warp_smem];
  int const warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float *buf = smem + warp * warp_smem;
  std::int64_t const w = blockIdx.x;
  std::int64_t const tb = a.tile_begin[w], te = a.tile_begin[w + 1];
  int const i = lane >> 2;
  for (int slice = static_cast<int>(blockIdx.y) * tc_warps + warp; slice < slices;
       slice += static_cast<int>(gridDim.y) * tc_warps) {
    int const c0 = slice * 16, c = c0 + 4 * (lane & 3);
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    float4 next = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (tb < te)
      next = gather4<VEC4>(x, ldx, static_cast<std::int64_t>(a.tile_col[tb * tile_cols + i]), c, f);
    for (std::int64_t t = tb; t < te; ++t) {
      float4 const cur = next;
      __syncwarp(); // the previous MMA has read buf
      stage(buf, lane, cur);
      __syncwarp();
      if (t + 1 < te)
        next = gather4<VEC4>(x, ldx, static_cast<std::int64_t>(a.tile_col[(t + 1) * tile_cols + i]), c, f);
      mma_tf32(acc, a.tile_val + t * (tile_rows * tile_cols), tile_cols, buf);
    }
    __syncwarp();
    wmma::store_matrix_sync(buf, acc, 16, wmma::mem_row_major);
    __syncwarp();
    write_out<VEC4>(buf, y + a.row0[w] * ldy, ldy, a.nrows[w], c0, f, lane, accumulate);
  }
#else
  __trap(); // never launched: tensor_core_kernels_available() is false without an sm_80+ image
#endif
}

/// One warp per (strip of 16 rows, 16 feature columns) runs every dense block of the strip's row part, k-step
/// by k-step (8 columns of the block): the A fragment is loaded from the zero-padded block, the 8 contiguous X
/// rows are staged in shared memory (rows past the block's columns are zero), one MMA per step.
template <bool VEC4>
__global__ void __launch_bounds__(tc_block) dense_kernel(DenseArgs a, float const *__restrict__ x, std::int64_t ldx,
                                                         float *__restrict__ y, std::int64_t ldy, int f, int slices) {
#ifdef TESSEL_GNN_TENSOR_CORES
  __shared__ __align__(32) float smem[tc_warps * warp_smem];
  int const warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float *buf = smem + warp * warp_smem;
  DenseStrip const s = a.strip[blockIdx.x];
  int const i = lane >> 2;
  for (int slice = static_cast<int>(blockIdx.y) * tc_warps + warp; slice < slices;
       slice += static_cast<int>(gridDim.y) * tc_warps) {
    int const c0 = slice * 16, c = c0 + 4 * (lane & 3);
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    int b = s.block_begin, k = 0;
    DenseBlockDesc d = a.blocks[b];
    float4 next = gather4<VEC4>(x, ldx, i < d.cols ? d.col0 + i : -1, c, f);
    while (b < s.block_end) {
      float4 const cur = next;
      float const *ap = a.values + d.offset + static_cast<std::int64_t>(s.local_row) * d.ld + k;
      unsigned const lda = static_cast<unsigned>(d.ld);
      k += tile_cols;
      if (k >= d.ld) {
        k = 0;
        if (++b < s.block_end)
          d = a.blocks[b];
      }
      __syncwarp(); // the previous MMA has read buf
      stage(buf, lane, cur);
      __syncwarp();
      if (b < s.block_end)
        next = gather4<VEC4>(x, ldx, k + i < d.cols ? d.col0 + k + i : -1, c, f);
      mma_tf32(acc, ap, lda, buf);
    }
    __syncwarp();
    wmma::store_matrix_sync(buf, acc, 16, wmma::mem_row_major);
    __syncwarp();
    write_out<VEC4>(buf, y + s.row0 * ldy, ldy, s.nrows, c0, f, lane, /*accumulate=*/true);
  }
#else
  __trap(); // never launched: tensor_core_kernels_available() is false without an sm_80+ image
#endif
}

__global__ void pointers_kernel(std::int64_t n, std::int64_t const *__restrict__ row0,
                                std::int64_t const *__restrict__ col0, float const *x, std::int64_t ldx, float *y,
                                std::int64_t ldy, float const **x_ptr, float **y_ptr) {
  std::int64_t const k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) {
    x_ptr[k] = x + col0[k] * ldx;
    y_ptr[k] = y + row0[k] * ldy;
  }
}

bool vec4_ok(float const *x, std::int64_t ldx, float const *y, std::int64_t ldy) {
  return ldx % 4 == 0 && ldy % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
}

/// Calls launch(grid, block, slices) for \p items blocks (x) by the 16-column slices of F in groups of tc_warps
/// (y), then returns the launch error; nothing to do for no items or no features.
template <class Launch> cudaError_t launch_tc(std::int64_t items, int f, Launch &&launch) {
  if (items <= 0 || f <= 0)
    return cudaSuccess;
  int const slices = (f + 15) / 16;
  unsigned const gy = static_cast<unsigned>((slices + tc_warps - 1) / tc_warps);
  dim3 const grid(static_cast<unsigned>(items), std::min(gy, max_grid_y));
  // Narrow F: fewer warps per block, so that no block is mostly idle warps.
  int const block = 32 * std::min(tc_warps, slices);
  launch(grid, block, slices);
  return cudaGetLastError();
}

} // namespace

template <class Index>
cudaError_t tiles_spmm(cudaStream_t stream, TileArgs<Index> const &a, float const *x, std::int64_t ldx, float *y,
                       std::int64_t ldy, int f, bool accumulate) {
  auto const kernel = vec4_ok(x, ldx, y, ldy) ? tiles_kernel<true, Index> : tiles_kernel<false, Index>;
  return launch_tc(a.windows, f, [&](dim3 grid, int block, int slices) {
    kernel<<<grid, block, 0, stream>>>(a, x, ldx, y, ldy, f, slices, accumulate);
  });
}

cudaError_t dense_blocks_spmm(cudaStream_t stream, DenseArgs const &a, float const *x, std::int64_t ldx, float *y,
                              std::int64_t ldy, int f) {
  auto const kernel = vec4_ok(x, ldx, y, ldy) ? dense_kernel<true> : dense_kernel<false>;
  return launch_tc(a.strips, f, [&](dim3 grid, int block, int slices) {
    kernel<<<grid, block, 0, stream>>>(a, x, ldx, y, ldy, f, slices);
  });
}

cudaError_t fill_gemm_pointers(cudaStream_t stream, std::int64_t n, std::int64_t const *row0, std::int64_t const *col0,
                               float const *x, std::int64_t ldx, float *y, std::int64_t ldy, float const **x_ptr,
                               float **y_ptr) {
  if (n <= 0)
    return cudaSuccess;
  auto const blocks = static_cast<unsigned>((n + 255) / 256);
  pointers_kernel<<<blocks, 256, 0, stream>>>(n, row0, col0, x, ldx, y, ldy, x_ptr, y_ptr);
  return cudaGetLastError();
}

bool tensor_core_kernels_available() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (prop.major < 8)
    return false;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, tiles_kernel<true, std::int32_t>) != cudaSuccess) {
    cudaGetLastError(); // no image for this device
    return false;
  }
  return attr.binaryVersion >= 80;
}

template cudaError_t tiles_spmm(cudaStream_t, TileArgs<std::int32_t> const &, float const *, std::int64_t, float *,
                                std::int64_t, int, bool);
template cudaError_t tiles_spmm(cudaStream_t, TileArgs<std::int64_t> const &, float const *, std::int64_t, float *,
                                std::int64_t, int, bool);

} // namespace tessel::gnn::cuda::Impl

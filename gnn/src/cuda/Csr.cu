// CUDA-core aggregation kernels: row-parallel CSR (deterministic) and edge-parallel COO with atomics (baseline).
// Hot kernels: compiled with -Xptxas -v by the gnn.CudaSpills test, which fails on any register spill.
#include "KernelApi.hpp"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

namespace tessel::gnn::cuda::Impl {

namespace {

namespace cg = cooperative_groups;

constexpr int csr_block = 256;
constexpr unsigned max_grid_y = 65535;

template <int VEC> __device__ __forceinline__ void load_vec(float (&v)[VEC], float const *p) {
  if constexpr (VEC == 4) {
    float4 const t = __ldg(reinterpret_cast<float4 const *>(p));
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else if constexpr (VEC == 2) {
    float2 const t = __ldg(reinterpret_cast<float2 const *>(p));
    v[0] = t.x;
    v[1] = t.y;
  } else {
    v[0] = __ldg(p);
  }
}

template <int VEC> __device__ __forceinline__ void load_out(float (&v)[VEC], float const *p) {
  if constexpr (VEC == 4) {
    float4 const t = *reinterpret_cast<float4 const *>(p);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else if constexpr (VEC == 2) {
    float2 const t = *reinterpret_cast<float2 const *>(p);
    v[0] = t.x;
    v[1] = t.y;
  } else {
    v[0] = *p;
  }
}

template <int VEC> __device__ __forceinline__ void store_vec(float *p, float const (&v)[VEC]) {
  if constexpr (VEC == 4)
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
  else if constexpr (VEC == 2)
    *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]);
  else
    *p = v[0];
}

/// GROUP lanes own one output row; lane l accumulates features c .. c + VEC - 1 of the current feature slice
/// (GROUP * VEC features) in registers. The row's column ids and values are read GROUP at a time, coalesced, and
/// broadcast to the group by shuffles, so the gathers of X rows are the only scattered loads. Each output element
/// is summed by one lane in edge order: the result is bitwise reproducible.
template <int VEC, int GROUP, class Index>
__global__ void __launch_bounds__(csr_block)
    csr_kernel(std::int64_t rows, std::int64_t const *__restrict__ row_map, Index const *__restrict__ entries,
               float const *__restrict__ values, Index const *__restrict__ row_ids, float const *__restrict__ x,
               std::int64_t ldx, float *__restrict__ y, std::int64_t ldy, int f, int slices, bool accumulate) {
  auto const group = cg::tiled_partition<GROUP>(cg::this_thread_block());
  std::int64_t const r = (static_cast<std::int64_t>(blockIdx.x) * csr_block + threadIdx.x) / GROUP;
  if (r >= rows) // the whole group leaves together: r is the same for its lanes
    return;
  int const lane = static_cast<int>(group.thread_rank());
  std::int64_t const b = row_map[r], e = row_map[r + 1];
  std::int64_t const out = row_ids ? static_cast<std::int64_t>(row_ids[r]) : r;
  for (int slice = static_cast<int>(blockIdx.y); slice < slices; slice += static_cast<int>(gridDim.y)) {
    int const c = (slice * GROUP + lane) * VEC;
    bool const active = c < f;
    float acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v)
      acc[v] = 0.0f;
    if constexpr (GROUP == 1) {
      for (std::int64_t k = b; k < e; ++k) {
        float xv[VEC];
        load_vec<VEC>(xv, x + static_cast<std::int64_t>(entries[k]) * ldx + c);
        float const a = values[k];
#pragma unroll
        for (int v = 0; v < VEC; ++v)
          acc[v] = fmaf(a, xv[v], acc[v]);
      }
    } else {
      for (std::int64_t k0 = b; k0 < e; k0 += GROUP) {
        Index col = 0;
        float a = 0.0f;
        if (k0 + lane < e) {
          col = entries[k0 + lane];
          a = values[k0 + lane];
        }
        int const n = static_cast<int>(e - k0 < GROUP ? e - k0 : GROUP);
#pragma unroll 4
        for (int j = 0; j < n; ++j) {
          Index const cj = group.shfl(col, j);
          float const aj = group.shfl(a, j);
          if (active) {
            float xv[VEC];
            load_vec<VEC>(xv, x + static_cast<std::int64_t>(cj) * ldx + c);
#pragma unroll
            for (int v = 0; v < VEC; ++v)
              acc[v] = fmaf(aj, xv[v], acc[v]);
          }
        }
      }
    }
    if (active) {
      float *yp = y + out * ldy + c;
      if (accumulate) {
        float old[VEC];
        load_out<VEC>(old, yp);
#pragma unroll
        for (int v = 0; v < VEC; ++v)
          acc[v] += old[v];
      }
      store_vec<VEC>(yp, acc);
    }
  }
}

template <int VEC, int GROUP, class Index>
cudaError_t launch_csr(cudaStream_t stream, CsrArgs<Index> const &a, float const *x, std::int64_t ldx, float *y,
                       std::int64_t ldy, int f, bool accumulate) {
  std::int64_t const threads = a.rows * GROUP;
  auto const blocks = static_cast<unsigned>((threads + csr_block - 1) / csr_block);
  int const slices = (f + GROUP * VEC - 1) / (GROUP * VEC);
  dim3 const grid(blocks, std::min<unsigned>(static_cast<unsigned>(slices), max_grid_y));
  csr_kernel<VEC, GROUP, Index><<<grid, csr_block, 0, stream>>>(a.rows, a.row_map, a.entries, a.values, a.row_ids, x,
                                                                ldx, y, ldy, f, slices, accumulate);
  return cudaGetLastError();
}

template <int VEC, class Index>
cudaError_t dispatch_group(int group, cudaStream_t stream, CsrArgs<Index> const &a, float const *x, std::int64_t ldx,
                           float *y, std::int64_t ldy, int f, bool accumulate) {
  switch (group) {
  case 1:
    return launch_csr<VEC, 1, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  case 2:
    return launch_csr<VEC, 2, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  case 4:
    return launch_csr<VEC, 4, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  case 8:
    return launch_csr<VEC, 8, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  case 16:
    return launch_csr<VEC, 16, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  default:
    return launch_csr<VEC, 32, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  }
}

bool aligned(void const *p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

template <int GROUP, class Index>
__global__ void __launch_bounds__(csr_block)
    coo_atomic_kernel(std::int64_t nnz, Index const *__restrict__ edge_rows, Index const *__restrict__ entries,
                      float const *__restrict__ values, float const *__restrict__ x, std::int64_t ldx, float *y,
                      std::int64_t ldy, int f, int slices) {
  std::int64_t const k = (static_cast<std::int64_t>(blockIdx.x) * csr_block + threadIdx.x) / GROUP;
  if (k >= nnz)
    return;
  int const lane = static_cast<int>(threadIdx.x % GROUP);
  std::int64_t const r = edge_rows[k], col = entries[k];
  float const a = values[k];
  for (int slice = static_cast<int>(blockIdx.y); slice < slices; slice += static_cast<int>(gridDim.y)) {
    int const c = slice * GROUP + lane;
    if (c < f)
      atomicAdd(y + r * ldy + c, a * __ldg(x + col * ldx + c));
  }
}

template <int GROUP, class Index>
cudaError_t launch_coo_atomic(cudaStream_t stream, std::int64_t nnz, Index const *edge_rows, Index const *entries,
                              float const *values, float const *x, std::int64_t ldx, float *y, std::int64_t ldy,
                              int f) {
  auto const blocks = static_cast<unsigned>((nnz * GROUP + csr_block - 1) / csr_block);
  int const slices = (f + GROUP - 1) / GROUP;
  dim3 const grid(blocks, std::min<unsigned>(static_cast<unsigned>(slices), max_grid_y));
  coo_atomic_kernel<GROUP, Index>
      <<<grid, csr_block, 0, stream>>>(nnz, edge_rows, entries, values, x, ldx, y, ldy, f, slices);
  return cudaGetLastError();
}

} // namespace

template <class Index>
cudaError_t csr_spmm(cudaStream_t stream, CsrArgs<Index> const &a, float const *x, std::int64_t ldx, float *y,
                     std::int64_t ldy, int f, bool accumulate, CsrSlicing slicing) {
  if (a.rows <= 0 || f <= 0)
    return cudaSuccess;
  if (slicing == CsrSlicing::narrow32)
    return launch_csr<1, 32, Index>(stream, a, x, ldx, y, ldy, f, accumulate);
  // The widest vector that every row start of X and Y keeps aligned.
  int vec = 1;
  if (f % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && aligned(x, 16) && aligned(y, 16))
    vec = 4;
  else if (f % 2 == 0 && ldx % 2 == 0 && ldy % 2 == 0 && aligned(x, 8) && aligned(y, 8))
    vec = 2;
  // The smallest power-of-two group that covers the row's features in one slice, at most a warp.
  int const lanes = (f + vec - 1) / vec;
  int group = 1;
  while (group < lanes && group < 32)
    group *= 2;
  if (vec == 4)
    return dispatch_group<4, Index>(group, stream, a, x, ldx, y, ldy, f, accumulate);
  if (vec == 2)
    return dispatch_group<2, Index>(group, stream, a, x, ldx, y, ldy, f, accumulate);
  return dispatch_group<1, Index>(group, stream, a, x, ldx, y, ldy, f, accumulate);
}

template <class Index>
cudaError_t coo_atomic_spmm(cudaStream_t stream, std::int64_t nnz, Index const *edge_rows, Index const *entries,
                            float const *values, float const *x, std::int64_t ldx, float *y, std::int64_t ldy, int f) {
  if (nnz <= 0 || f <= 0)
    return cudaSuccess;
  if (f <= 8)
    return launch_coo_atomic<8, Index>(stream, nnz, edge_rows, entries, values, x, ldx, y, ldy, f);
  return launch_coo_atomic<32, Index>(stream, nnz, edge_rows, entries, values, x, ldx, y, ldy, f);
}

template cudaError_t csr_spmm(cudaStream_t, CsrArgs<std::int32_t> const &, float const *, std::int64_t, float *,
                              std::int64_t, int, bool, CsrSlicing);
template cudaError_t csr_spmm(cudaStream_t, CsrArgs<std::int64_t> const &, float const *, std::int64_t, float *,
                              std::int64_t, int, bool, CsrSlicing);
template cudaError_t coo_atomic_spmm(cudaStream_t, std::int64_t, std::int32_t const *, std::int32_t const *,
                                     float const *, float const *, std::int64_t, float *, std::int64_t, int);
template cudaError_t coo_atomic_spmm(cudaStream_t, std::int64_t, std::int64_t const *, std::int64_t const *,
                                     float const *, float const *, std::int64_t, float *, std::int64_t, int);

} // namespace tessel::gnn::cuda::Impl

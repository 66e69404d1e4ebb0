#ifndef TESSEL_MOE_CUDA_COMMON_CUH
#define TESSEL_MOE_CUDA_COMMON_CUH

// Device helpers shared by the moe kernels: memory-ordering primitives (PTX acquire/release at GPU and system
// scope, as NCCL's device API and CUTLASS's semaphores use them), bounded spins, element conversions, the
// activations, the 64 x 64 GEMM tile (WMMA for 16-bit inputs, fp32 accumulation; CUDA cores for fp32) and the
// top-k reduction of one work item.
#include "KernelApi.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>

namespace tessel::moe::cuda::Impl {

// ---------------------------------------------------------------------------------------------------------------
// Memory ordering. A producer writes its data, fences, then publishes with a release store (or reduction); the
// consumer's one thread acquires, then bar.sync extends the ordering to the whole block (the pattern of CUTLASS's
// Semaphore and cooperative groups' grid sync). System scope where the other side may be another GPU.
// ---------------------------------------------------------------------------------------------------------------

__device__ __forceinline__ int ld_acquire_gpu(int const *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint64_t ld_acquire_sys(std::uint64_t const *p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int *p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(std::uint64_t *p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_release_gpu_add(int *p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_sys_add(std::uint64_t *p, std::uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <class T> __device__ __forceinline__ T *sym(RankView const &view, int peer, std::size_t offset) {
  return reinterpret_cast<T *>(view.peer_base[peer] + offset);
}

/// True once any wait of this rank has failed (its own error word) or any rank has raised the abort word.
__device__ __forceinline__ bool aborted(RankView const &view) {
  return *static_cast<int volatile *>(&view.control->error) != 0 ||
         *static_cast<std::uint64_t volatile *>(sym<std::uint64_t>(view, view.rank, view.layout.abort)) != 0;
}

/// A wait of rank \p rank gave up: records the first error of the forward locally (later ones keep the first) and
/// raises the abort word (at \p abort in each rank's symmetric allocation) of every rank, itself included, so that
/// every spin of every rank stops and every rank reports this failure (the first to reach it; peers are written at
/// system scope, they may be other GPUs). Out of line and given scalars, not the view: the spins stay small.
static __device__ __noinline__ void fail_wait(Control *control, char *const *peer_base, std::size_t abort, int rank,
                                              int world, int code, int arg) {
  if (atomicCAS(&control->error, 0, code) == 0)
    atomicExch(&control->error_arg, arg);
  unsigned long long const word = abort_word(code, rank, arg);
  for (int p = 0; p < world; ++p)
    atomicCAS_system(reinterpret_cast<unsigned long long *>(peer_base[p] + abort), 0ull, word);
  __threadfence_system();
}
__device__ __forceinline__ void fail_wait(RankView const &view, int code, int arg) {
  fail_wait(view.control, view.peer_base, view.layout.abort, view.rank, view.world, code, arg);
}

/// Spins (one thread) until *flag >= target; gives up after timeout_ns (raising the abort word with \p code) or
/// when any rank's wait already failed. Returns false on failure. A test-only switch skips the waits of kind
/// \p code (RankView::skip_wait), to prove that the tests catch a missing wait.
__device__ __forceinline__ bool wait_geq_gpu(int const *flag, int target, RankView const &view, int code, int arg) {
  if (view.skip_wait == code || ld_acquire_gpu(flag) >= target)
    return true;
  long long const start = global_ns();
  while (ld_acquire_gpu(flag) < target) {
    if (aborted(view))
      return false;
    if (global_ns() - start > view.timeout_ns) {
      fail_wait(view, code, arg);
      return false;
    }
    __nanosleep(100);
  }
  return true;
}
__device__ __forceinline__ bool wait_geq_sys(std::uint64_t const *flag, std::uint64_t target, RankView const &view,
                                             int code, int arg) {
  if (view.skip_wait == code || ld_acquire_sys(flag) >= target)
    return true;
  long long const start = global_ns();
  while (ld_acquire_sys(flag) < target) {
    if (aborted(view))
      return false;
    if (global_ns() - start > view.timeout_ns) {
      fail_wait(view, code, arg);
      return false;
    }
    __nanosleep(200);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------------
// Elements and activations
// ---------------------------------------------------------------------------------------------------------------

template <class T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/// The host path's activations (Kernels.cpp): SiLU x / (1 + e^-x); exact GeLU 0.5 x (1 + erf(x / sqrt 2)).
__device__ __forceinline__ float activate_value(int activation, float x) {
  if (activation == 0)
    return x / (1.0f + expf(-x));
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// ---------------------------------------------------------------------------------------------------------------
// The GEMM tile: C[64][64] (fp32, in shared memory) = A[rows][K] (row-major, lda) x B[K][col0 .. col0 + cols)
// (row-major, ldb). Rows >= rows and columns >= cols are zero. 256 threads.
// ---------------------------------------------------------------------------------------------------------------

constexpr int tile_m = item_rows, tile_n = item_cols;
static_assert(fused_threads == 256, "the GEMM tile's thread layout assumes 256 threads");

template <class T> struct TileTraits {
  static constexpr int bk = 32;
  static constexpr int pad = 8; // keeps WMMA's 32-byte fragment alignment and spreads smem banks
};
template <> struct TileTraits<float> {
  static constexpr int bk = 16; // keeps layer0's shared memory (tile + up tile) under the 48 KB static limit
  static constexpr int pad = 0;
};

template <class T> struct alignas(128) TileSmem {
  static constexpr int bk = TileTraits<T>::bk, pad = TileTraits<T>::pad;
  alignas(32) T a[tile_m][bk + pad];
  alignas(32) T b[bk][tile_n + pad];
  alignas(32) float c[tile_m][tile_n + 4];
};

template <class T>
__device__ __forceinline__ void load_tiles(TileSmem<T> &s, T const *__restrict__ a, std::int64_t lda, int rows,
                                           std::int64_t k_dim, std::int64_t k0, T const *__restrict__ b,
                                           std::int64_t ldb, std::int64_t col0, int cols) {
  constexpr int bk = TileSmem<T>::bk;
  int const t = threadIdx.x;
  T const zero = from_float<T>(0.0f);
#pragma unroll
  for (int i = 0; i < tile_m * bk / fused_threads; ++i) {
    int const idx = t + i * fused_threads;
    int const r = idx / bk, k = idx % bk;
    // A may have been written by other blocks of this kernel (layer0's pulled messages): read it through L2, never
    // from an L1 line filled before the data arrived (rows of two messages can share a line).
    s.a[r][k] = (r < rows && k0 + k < k_dim) ? __ldcg(a + r * lda + k0 + k) : zero;
  }
#pragma unroll
  for (int i = 0; i < bk * tile_n / fused_threads; ++i) {
    int const idx = t + i * fused_threads;
    int const k = idx / tile_n, c = idx % tile_n;
    s.b[k][c] = (k0 + k < k_dim && c < cols) ? b[(k0 + k) * ldb + col0 + c] : zero;
  }
}

/// fp32 on CUDA cores: thread (ty, tx) owns rows ty + 16 i and columns tx + 16 j (i, j < 4).
__device__ __forceinline__ void tile_gemm(TileSmem<float> &s, float const *__restrict__ a, std::int64_t lda, int rows,
                                          std::int64_t k_dim, float const *__restrict__ b, std::int64_t ldb,
                                          std::int64_t col0, int cols) {
  constexpr int bk = TileSmem<float>::bk;
  int const ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float acc[4][4] = {};
  for (std::int64_t k0 = 0; k0 < k_dim; k0 += bk) {
    __syncthreads(); // the previous step's (or tile's) readers are done with a, b and c
    load_tiles(s, a, lda, rows, k_dim, k0, b, ldb, col0, cols);
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < bk; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        av[i] = s.a[ty + 16 * i][k];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        bv[j] = s.b[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      s.c[ty + 16 * i][tx + 16 * j] = acc[i][j];
  __syncthreads();
}

/// 16-bit inputs on tensor cores (WMMA m16n16k16, fp32 accumulation): warp w owns the 16-row strip w / 2 and the
/// two 16-column fragments 2 (w % 2) and 2 (w % 2) + 1.
template <class T>
__device__ __forceinline__ void tile_gemm(TileSmem<T> &s, T const *__restrict__ a, std::int64_t lda, int rows,
                                          std::int64_t k_dim, T const *__restrict__ b, std::int64_t ldb,
                                          std::int64_t col0, int cols) {
  using namespace nvcuda;
  constexpr int bk = TileSmem<T>::bk, lda_s = bk + TileSmem<T>::pad, ldb_s = tile_n + TileSmem<T>::pad;
  int const warp = threadIdx.x / 32, wr = warp / 2, wc = (warp % 2) * 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.0f);
  wmma::fill_fragment(acc[1], 0.0f);
  for (std::int64_t k0 = 0; k0 < k_dim; k0 += bk) {
    __syncthreads();
    load_tiles(s, a, lda, rows, k_dim, k0, b, ldb, col0, cols);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < bk; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, &s.a[wr * 16][kk], lda_s);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fb, &s.b[kk][(wc + j) * 16], ldb_s);
        wmma::mma_sync(acc[j], fa, fb, acc[j]);
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 2; ++j)
    wmma::store_matrix_sync(&s.c[wr * 16][(wc + j) * 16], acc[j], tile_n + 4, wmma::mem_row_major);
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------------------------
// Top-k reduction of one item: warp per slot, lanes over columns; the slot's rows and weights come from the
// source's slot table (a peer pointer), are loaded once per slot by lanes < topk and broadcast by shuffles. The
// rows are added in the table's order (the source's plan order: by expert), in fp32.
// ---------------------------------------------------------------------------------------------------------------

__device__ __forceinline__ void reduce_item(RankView const &view, float const *__restrict__ y, ReduceItem const &it,
                                            float *local_out) {
  int const warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  std::int32_t const *table = sym<std::int32_t const>(view, it.source, view.layout.slot_rows);
  float const *weights = sym<float const>(view, it.source, view.layout.slot_weight);
  std::int64_t const n = view.n;
  for (int slot = it.slot_begin + warp; slot < it.slot_end; slot += warps) {
    std::int64_t const entry = (it.table_base + slot) * view.topk;
    int const my_row = lane < view.topk ? table[entry + lane] : -1;
    float const my_w = lane < view.topk ? weights[entry + lane] : 0.0f;
    float *dst = local_out != nullptr ? local_out + (static_cast<std::int64_t>(it.source) * view.m + slot) * n
                                      : sym<float>(view, it.source, view.layout.combine) +
                                            (static_cast<std::int64_t>(view.rank) * view.m + slot) * n;
    for (int base = it.col_begin; base < it.col_end; base += 32) {
      int const col = base + lane;
      float acc = 0.0f;
      for (int k = 0; k < view.topk; ++k) {
        int const r = __shfl_sync(0xffffffffu, my_row, k);
        float const w = __shfl_sync(0xffffffffu, my_w, k);
        if (r >= 0 && col < it.col_end)
          acc = fmaf(w, __ldcg(y + (it.row_base + r) * n + col), acc);
      }
      if (col < it.col_end)
        dst[col] = acc;
    }
  }
}

} // namespace tessel::moe::cuda::Impl

#endif

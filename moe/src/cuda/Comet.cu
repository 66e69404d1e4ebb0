// COMET's two fused kernels (hot kernels: compiled with -Xptxas -v by the moe.CudaSpills test, which fails on any
// register spill).
//
// Both are persistent and thread-block specialized. A block's role comes from a ticket it takes when it starts
// (atomicAdd on a per-forward counter), not from blockIdx: the blocks that wait (layer0's GEMM blocks on messages,
// layer1's communication blocks on split counters) take later tickets than the blocks they wait for, so whatever
// the hardware schedules and however many blocks are resident (several virtual ranks' kernels share one GPU in
// the one-process mode), a waiting block only ever waits for blocks that are already running. Waits on peers
// (packed flags) are bounded by the rank's timeout and reported through Control::error.
#include "Common.cuh"

namespace tessel::moe::cuda::Impl {

namespace {

/// Takes the next index of \p counter for the whole block (thread 0 increments; everyone reads).
__device__ __forceinline__ int block_next(int *counter, int *slot) {
  if (threadIdx.x == 0)
    *slot = atomicAdd(counter, 1);
  __syncthreads();
  int const value = *slot;
  __syncthreads(); // nobody may still read *slot when thread 0 writes the next one
  return value;
}

/// Copies \p bytes from a peer's memory (read through L2, never a stale L1 line) to local memory, 16 bytes per
/// thread and step when both ends allow it.
__device__ __forceinline__ void copy_bytes(char *__restrict__ dst, char const *__restrict__ src, std::size_t bytes) {
  bool const vec =
      (reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) && (reinterpret_cast<std::uintptr_t>(src) % 16 == 0);
  std::size_t i = 0;
  if (vec) {
    std::size_t const words = bytes / 16;
    auto const *s = reinterpret_cast<uint4 const *>(src);
    auto *d = reinterpret_cast<uint4 *>(dst);
    for (std::size_t w = threadIdx.x; w < words; w += blockDim.x)
      d[w] = __ldcg(s + w);
    i = words * 16;
  }
  for (std::size_t b = i + threadIdx.x; b < bytes; b += blockDim.x)
    dst[b] = static_cast<char>(__ldcg(reinterpret_cast<signed char const *>(src) + b));
}

template <class T> __device__ void layer0_comm(Layer0Args const &args, int *slot) {
  RankView const &v = args.view;
  auto const *packed = sym<std::uint64_t const>(v, v.rank, v.layout.packed_flag);
  std::size_t const row_bytes = static_cast<std::size_t>(v.n) * sizeof(T);
  __shared__ int ok;
  for (;;) {
    int const i = block_next(&v.control->next_message, slot);
    if (i >= args.messages)
      break;
    Message const m = args.message[i];
    if (threadIdx.x == 0)
      ok = wait_geq_sys(packed + m.source, args.epoch, v, timeout_packed, m.source) ? 1 : 0;
    __syncthreads();
    if (ok) {
      char const *src = v.peer_base[m.source] + v.layout.send_rows + static_cast<std::size_t>(m.src_row) * row_bytes;
      char *dst = static_cast<char *>(args.x_recv) + static_cast<std::size_t>(m.dst_row) * row_bytes;
      copy_bytes(dst, src, static_cast<std::size_t>(m.rows) * row_bytes);
    }
    // Published even after a failed wait (the error is reported), so that no GEMM block waits in vain.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
      st_release_gpu(args.message_ready + i, 1);
  }
}

/// Layer0's shared memory: the GEMM tile and, for gated FFNs, the "up" half of the tile while the gate half is
/// computed (kept in shared memory rather than registers, so the kernel fits 128 registers without spills).
template <class T> struct alignas(128) Layer0Smem {
  TileSmem<T> tile;
  alignas(32) float up[tile_m][tile_n + 4];
};

template <class T>
__global__ void __launch_bounds__(fused_threads, 2) comet_dispatch_gemm_kernel(Layer0Args const args) {
  __shared__ Layer0Smem<T> shared;
  TileSmem<T> &smem = shared.tile;
  __shared__ int slot, ok;
  RankView const &v = args.view;
  if (block_next(&v.control->tickets0, &slot) < args.comm_blocks) {
    layer0_comm<T>(args, &slot);
    return;
  }
  T const *own = sym<T const>(v, v.rank, v.layout.send_rows);
  T const *x_recv = static_cast<T const *>(args.x_recv);
  T const *w0 = static_cast<T const *>(args.w0);
  T *h = static_cast<T *>(args.h);
  std::int64_t const n = v.n, ffn_per_rank = v.ffn_per_rank;
  constexpr int per_thread = tile_m * tile_n / fused_threads;
  for (;;) {
    int const i = block_next(&v.control->next_item0, &slot);
    if (i >= args.items)
      break;
    Layer0Item const it = args.item[i];
    if (it.message >= 0) {
      if (threadIdx.x == 0)
        ok = wait_geq_gpu(args.message_ready + it.message, 1, v, timeout_message, it.message) ? 1 : 0;
      __syncthreads();
    }
    T const *a = (it.message >= 0 ? x_recv : own) + it.a_row * n;
    T const *b = w0 + static_cast<std::int64_t>(it.expert) * n * args.cols0;
    int const cols = static_cast<int>(min(static_cast<std::int64_t>(tile_n), ffn_per_rank - it.col0));
    if (args.gated) {
      tile_gemm(smem, a, n, it.rows, n, b, args.cols0, ffn_per_rank + it.col0, cols);
      // Each thread copies the elements it later reads (same idx mapping), so no barrier is needed in between.
#pragma unroll
      for (int e = 0; e < per_thread; ++e) {
        int const idx = threadIdx.x + e * fused_threads;
        shared.up[idx / tile_n][idx % tile_n] = smem.c[idx / tile_n][idx % tile_n];
      }
    }
    tile_gemm(smem, a, n, it.rows, n, b, args.cols0, it.col0, cols);
#pragma unroll
    for (int e = 0; e < per_thread; ++e) {
      int const idx = threadIdx.x + e * fused_threads;
      int const r = idx / tile_n, c = idx % tile_n;
      if (r < it.rows && c < cols) {
        float const g = activate_value(args.activation, smem.c[r][c]);
        h[(it.h_row + r) * ffn_per_rank + it.col0 + c] = from_float<T>(args.gated ? g * shared.up[r][c] : g);
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(fused_threads, 2) comet_gemm_combine_kernel(Layer1Args const args) {
  __shared__ TileSmem<T> smem;
  __shared__ int slot, ok;
  RankView const &v = args.view;
  std::int64_t const n = v.n, ffn_per_rank = v.ffn_per_rank;
  if (block_next(&v.control->tickets1, &slot) < static_cast<int>(gridDim.x) - args.comm_blocks) {
    // GEMM block: y = h W1, item by item in the host's (split-major) order; each finished item counts for its split.
    T const *h = static_cast<T const *>(args.h);
    T const *w1 = static_cast<T const *>(args.w1);
    for (;;) {
      int const i = block_next(&v.control->next_item1, &slot);
      if (i >= args.items)
        break;
      Layer1Item const it = args.item[i];
      tile_gemm(smem, h + it.row * ffn_per_rank, ffn_per_rank, it.rows, ffn_per_rank,
                w1 + static_cast<std::int64_t>(it.expert) * ffn_per_rank * n, n, it.col0, it.cols);
      constexpr int per_thread = tile_m * tile_n / fused_threads;
#pragma unroll
      for (int e = 0; e < per_thread; ++e) {
        int const idx = threadIdx.x + e * fused_threads;
        int const r = idx / tile_n, c = idx % tile_n;
        if (r < it.rows && c < it.cols)
          args.y[(it.row + r) * n + it.col0 + c] = smem.c[r][c];
      }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0)
        red_release_gpu_add(args.split_done + it.split, 1);
    }
    return;
  }
  // Communication block: wait for a split's GEMM items, top-k-reduce its slots and store them to the source.
  for (;;) {
    int const i = block_next(&v.control->next_comm, &slot);
    if (i >= args.reduces)
      break;
    ReduceItem const it = args.reduce[i];
    if (threadIdx.x == 0)
      ok = wait_geq_gpu(args.split_done + it.split, args.split_tiles[it.split], v, timeout_split, it.split) ? 1 : 0;
    __syncthreads();
    if (ok)
      reduce_item(v, args.y, it, nullptr);
  }
  // Every peer learns that this block's stores to it are complete (system scope: the peer may be another GPU).
  __threadfence_system();
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < v.world)
    red_release_sys_add(sym<std::uint64_t>(v, static_cast<int>(threadIdx.x), v.layout.combine_flag) + v.rank, 1);
}

template <class T> cudaError_t launch_layer0(cudaStream_t stream, Layer0Args const &args, int grid) {
  comet_dispatch_gemm_kernel<T><<<grid, fused_threads, 0, stream>>>(args);
  return cudaGetLastError();
}
template <class T> cudaError_t launch_layer1(cudaStream_t stream, Layer1Args const &args, int grid) {
  comet_gemm_combine_kernel<T><<<grid, fused_threads, 0, stream>>>(args);
  return cudaGetLastError();
}

} // namespace

cudaError_t layer0_occupancy(tessel::DataType dtype, bool, int, int *blocks_per_sm) {
  switch (dtype) {
  case tessel::DataType::float16:
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, comet_dispatch_gemm_kernel<__half>,
                                                         fused_threads, 0);
  case tessel::DataType::bfloat16:
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, comet_dispatch_gemm_kernel<__nv_bfloat16>,
                                                         fused_threads, 0);
  default:
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, comet_dispatch_gemm_kernel<float>,
                                                         fused_threads, 0);
  }
}

cudaError_t layer1_occupancy(tessel::DataType dtype, int *blocks_per_sm) {
  switch (dtype) {
  case tessel::DataType::float16:
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, comet_gemm_combine_kernel<__half>,
                                                         fused_threads, 0);
  case tessel::DataType::bfloat16:
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, comet_gemm_combine_kernel<__nv_bfloat16>,
                                                         fused_threads, 0);
  default:
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, comet_gemm_combine_kernel<float>, fused_threads,
                                                         0);
  }
}

cudaError_t comet_layer0(cudaStream_t stream, Layer0Args const &args, int grid) {
  switch (args.dtype) {
  case tessel::DataType::float16:
    return launch_layer0<__half>(stream, args, grid);
  case tessel::DataType::bfloat16:
    return launch_layer0<__nv_bfloat16>(stream, args, grid);
  default:
    return launch_layer0<float>(stream, args, grid);
  }
}

cudaError_t comet_layer1(cudaStream_t stream, Layer1Args const &args, int grid) {
  switch (args.dtype) {
  case tessel::DataType::float16:
    return launch_layer1<__half>(stream, args, grid);
  case tessel::DataType::bfloat16:
    return launch_layer1<__nv_bfloat16>(stream, args, grid);
  default:
    return launch_layer1<float>(stream, args, grid);
  }
}

} // namespace tessel::moe::cuda::Impl

// The moe device layer's small kernels: packing the dispatch rows, conversions, flags, the baselines' activation
// and top-k reduction, and the final sum over ranks (hot: topk_reduce_kernel and final_sum_kernel are in the
// moe.CudaSpills check).
#include "Common.cuh"

#include <algorithm>

namespace tessel::moe::cuda::Impl {

namespace {

constexpr int threads = 256;

unsigned grid_for(std::int64_t work) {
  return static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>((work + threads - 1) / threads, 65535 * 8)));
}

template <class T>
__global__ void pack_rows_kernel(float const *__restrict__ tokens, std::int32_t const *__restrict__ row_token,
                                 std::int64_t rows, std::int64_t n, T *__restrict__ out) {
  std::int64_t const total = rows * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t const r = i / n, c = i % n;
    out[i] = from_float<T>(tokens[static_cast<std::int64_t>(row_token[r]) * n + c]);
  }
}

template <class T>
__global__ void convert_kernel(float const *__restrict__ in, std::size_t count, T *__restrict__ out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(in[i]);
}

__global__ void signal_packed_kernel(RankView const view, std::uint64_t epoch) {
  // The packing kernel before this one on the stream wrote the rows; the fence makes them visible to every GPU
  // before the flag (release) is.
  __threadfence_system();
  int const peer = static_cast<int>(threadIdx.x);
  if (peer < view.world)
    st_release_sys(sym<std::uint64_t>(view, peer, view.layout.packed_flag) + view.rank, epoch);
}

template <class T>
__global__ void activate_kernel(int activation, bool gated, float const *__restrict__ c, std::int64_t rows,
                                std::int64_t ffn_per_rank, T *__restrict__ h) {
  std::int64_t const total = rows * ffn_per_rank, ldc = gated ? 2 * ffn_per_rank : ffn_per_rank;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t const r = i / ffn_per_rank, j = i % ffn_per_rank;
    float const g = activate_value(activation, c[r * ldc + j]);
    h[i] = from_float<T>(gated ? g * c[r * ldc + ffn_per_rank + j] : g);
  }
}

__global__ void __launch_bounds__(threads) topk_reduce_kernel(RankView const view, float const *__restrict__ y,
                                                              ReduceItem const *__restrict__ items, float *out) {
  ReduceItem const it = items[blockIdx.x];
  reduce_item(view, y, it, out);
}

__global__ void __launch_bounds__(threads)
    final_sum_kernel(RankView const view, std::int32_t const *__restrict__ token_slot,
                     std::int32_t const *__restrict__ rank_group, std::uint64_t expected, float *__restrict__ out) {
  __shared__ int ok;
  if (expected > 0) {
    if (threadIdx.x == 0) {
      ok = 1;
      auto const *flags = sym<std::uint64_t const>(view, view.rank, view.layout.combine_flag);
      for (int r = 0; r < view.world && ok; ++r)
        ok = wait_geq_sys(flags + r, expected, view, timeout_combine, r) ? 1 : 0;
    }
    __syncthreads();
  }
  float const *combine = sym<float const>(view, view.rank, view.layout.combine);
  std::int64_t const m = view.m, n = view.n, total = m * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t const t = i / n, col = i % n;
    float acc = 0.0f;
    for (int r = 0; r < view.world; ++r) {
      int const slot = token_slot[static_cast<std::int64_t>(rank_group[r]) * m + t];
      if (slot >= 0)
        acc += __ldcg(combine + (static_cast<std::int64_t>(r) * m + slot) * n + col);
    }
    out[i] = acc;
  }
}

} // namespace

cudaError_t pack_rows(cudaStream_t stream, tessel::DataType dtype, float const *tokens, std::int32_t const *row_token,
                      std::int64_t rows, std::int64_t n, void *out) {
  if (rows * n == 0)
    return cudaSuccess;
  unsigned const grid = grid_for(rows * n);
  switch (dtype) {
  case tessel::DataType::float16:
    pack_rows_kernel<<<grid, threads, 0, stream>>>(tokens, row_token, rows, n, static_cast<__half *>(out));
    break;
  case tessel::DataType::bfloat16:
    pack_rows_kernel<<<grid, threads, 0, stream>>>(tokens, row_token, rows, n, static_cast<__nv_bfloat16 *>(out));
    break;
  default:
    pack_rows_kernel<<<grid, threads, 0, stream>>>(tokens, row_token, rows, n, static_cast<float *>(out));
  }
  return cudaGetLastError();
}

cudaError_t convert(cudaStream_t stream, tessel::DataType dtype, float const *in, std::size_t count, void *out) {
  if (count == 0)
    return cudaSuccess;
  unsigned const grid = grid_for(static_cast<std::int64_t>(count));
  switch (dtype) {
  case tessel::DataType::float16:
    convert_kernel<<<grid, threads, 0, stream>>>(in, count, static_cast<__half *>(out));
    break;
  case tessel::DataType::bfloat16:
    convert_kernel<<<grid, threads, 0, stream>>>(in, count, static_cast<__nv_bfloat16 *>(out));
    break;
  default:
    convert_kernel<<<grid, threads, 0, stream>>>(in, count, static_cast<float *>(out));
  }
  return cudaGetLastError();
}

cudaError_t signal_packed(cudaStream_t stream, RankView const &view, std::uint64_t epoch) {
  signal_packed_kernel<<<1, 32 * ((view.world + 31) / 32), 0, stream>>>(view, epoch);
  return cudaGetLastError();
}

cudaError_t activate(cudaStream_t stream, tessel::DataType dtype, int activation, bool gated, float const *c,
                     std::int64_t rows, std::int64_t ffn_per_rank, void *h) {
  if (rows * ffn_per_rank == 0)
    return cudaSuccess;
  unsigned const grid = grid_for(rows * ffn_per_rank);
  switch (dtype) {
  case tessel::DataType::float16:
    activate_kernel<<<grid, threads, 0, stream>>>(activation, gated, c, rows, ffn_per_rank, static_cast<__half *>(h));
    break;
  case tessel::DataType::bfloat16:
    activate_kernel<<<grid, threads, 0, stream>>>(activation, gated, c, rows, ffn_per_rank,
                                                  static_cast<__nv_bfloat16 *>(h));
    break;
  default:
    activate_kernel<<<grid, threads, 0, stream>>>(activation, gated, c, rows, ffn_per_rank, static_cast<float *>(h));
  }
  return cudaGetLastError();
}

cudaError_t topk_reduce(cudaStream_t stream, RankView const &view, float const *y, int items, ReduceItem const *item,
                        float *out) {
  if (items == 0)
    return cudaSuccess;
  topk_reduce_kernel<<<static_cast<unsigned>(items), threads, 0, stream>>>(view, y, item, out);
  return cudaGetLastError();
}

cudaError_t final_sum(cudaStream_t stream, RankView const &view, std::int32_t const *token_slot,
                      std::int32_t const *rank_group, std::uint64_t expected, int max_blocks, float *out) {
  if (view.m * view.n == 0)
    return cudaSuccess;
  // Grid-stride: every block of a waiting final sum has a thread spinning on the flags (at most max_blocks).
  unsigned const grid = std::min(grid_for(view.m * view.n), static_cast<unsigned>(std::max(1, max_blocks)));
  final_sum_kernel<<<grid, threads, 0, stream>>>(view, token_slot, rank_group, expected, out);
  return cudaGetLastError();
}

} // namespace tessel::moe::cuda::Impl

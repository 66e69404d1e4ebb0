#ifndef TESSEL_GNN_CUDA_KERNELAPI_HPP
#define TESSEL_GNN_CUDA_KERNELAPI_HPP

// The thin interface between the CUDA handle (src/cuda/Spmm.cpp, host compiler, Kokkos) and the kernels
// (src/cuda/*.cu, nvcc, no Kokkos): raw device pointers, row-major dense operands with leading dimensions, and a
// stream. Every launcher only enqueues work on the stream and returns the launch status (cudaGetLastError).
#include "../impl/DenseLayout.hpp"
#include "../impl/TileShape.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessel::gnn::cuda::Impl {

using gnn::Impl::DenseBlockDesc;
using gnn::Impl::DenseStrip;
using gnn::Impl::tile_cols;
using gnn::Impl::tile_rows;

/// A CSR over all rows (row_ids null) or over a list of output rows (compressed: local row r is row_ids[r]).
template <class Index> struct CsrArgs {
  std::int64_t rows = 0;
  std::int64_t const *row_map = nullptr;
  Index const *entries = nullptr;
  float const *values = nullptr;
  Index const *row_ids = nullptr;
};

/// How the CSR kernel covers the feature dimension.
enum class CsrSlicing {
  automatic, ///< vector width from F and alignment, a sub-warp per row for narrow F, 32 lanes for wide F
  narrow32   ///< one float per lane, 32-feature slices (the feature-tiled variant)
};

/// out(r, :) = x(rows[r], :) for r < n: the rows a peer needs, packed for the exchange (DistSpmm).
cudaError_t gather_rows(cudaStream_t stream, std::int64_t n, std::int32_t const *rows, float const *x, std::int64_t ldx,
                        float *out, std::int64_t ldo, int f);

/// y(r, :) += part(r, :) for r < n: one term of DistSpmm's fixed-order sum.
cudaError_t add_rows(cudaStream_t stream, std::int64_t n, float const *part, std::int64_t ldp, float *y,
                     std::int64_t ldy, int f);

/// Y (+)= A X, deterministic: a group of lanes owns each output row (warp per row for wide F), column ids and
/// values are loaded coalesced and broadcast by shuffles, the feature dimension is vectorized (float4/float2).
template <class Index>
cudaError_t csr_spmm(cudaStream_t stream, CsrArgs<Index> const &a, float const *x, std::int64_t ldx, float *y,
                     std::int64_t ldy, int f, bool accumulate, CsrSlicing slicing);

/// Y += A X edge by edge with atomic adds (PyG's scatter; non-deterministic). Y is not cleared here.
template <class Index>
cudaError_t coo_atomic_spmm(cudaStream_t stream, std::int64_t nnz, Index const *edge_rows, Index const *entries,
                            float const *values, float const *x, std::int64_t ldx, float *y, std::int64_t ldy, int f);

/// TC-GNN condensed row windows (layout of Impl::HostTileSet): window w covers rows row0[w] .. + nrows[w] - 1,
/// its tiles [tile_begin[w], tile_begin[w+1]) hold tile_cols column ids and a row-major 16 x 8 block of values.
template <class Index> struct TileArgs {
  std::int64_t windows = 0;
  std::int64_t const *row0 = nullptr;
  int const *nrows = nullptr;
  std::int64_t const *tile_begin = nullptr;
  Index const *tile_col = nullptr;
  float const *tile_val = nullptr;
};

/// Y (+)= A X over the windows on tensor cores (TF32 WMMA m16n16k8, fp32 accumulation), one warp per window and
/// 16 feature columns; deterministic. Windows without tiles write zeros (accumulate = false).
template <class Index>
cudaError_t tiles_spmm(cudaStream_t stream, TileArgs<Index> const &a, float const *x, std::int64_t ldx, float *y,
                       std::int64_t ldy, int f, bool accumulate);

struct DenseArgs {
  std::int64_t strips = 0;
  DenseStrip const *strip = nullptr;
  DenseBlockDesc const *blocks = nullptr;
  float const *values = nullptr;
};

/// Y += A X over dense blocks on tensor cores (TF32 WMMA): one warp per strip and 16 feature columns runs every
/// block of the strip's row part, so each output element has one owner (deterministic, no atomics).
cudaError_t dense_blocks_spmm(cudaStream_t stream, DenseArgs const &a, float const *x, std::int64_t ldx, float *y,
                              std::int64_t ldy, int f);

/// Pointer arrays of the grouped cuBLAS GEMMs: x_ptr[i] = x + col0[i] * ldx, y_ptr[i] = y + row0[i] * ldy.
cudaError_t fill_gemm_pointers(cudaStream_t stream, std::int64_t n, std::int64_t const *row0, std::int64_t const *col0,
                               float const *x, std::int64_t ldx, float *y, std::int64_t ldy, float const **x_ptr,
                               float **y_ptr);

/// True when the current device runs the tensor-core kernels: compute capability 8.0 or newer and the kernel
/// image that the runtime picked for it was built for sm_80 or newer (TF32 WMMA does not exist before).
bool tensor_core_kernels_available();

} // namespace tessel::gnn::cuda::Impl

#endif

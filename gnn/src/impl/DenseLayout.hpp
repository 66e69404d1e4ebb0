#ifndef TESSEL_GNN_IMPL_DENSELAYOUT_HPP
#define TESSEL_GNN_IMPL_DENSELAYOUT_HPP

// The layout of dense blocks for the device: zero-padded blocks with 16-row strips for the TF32 WMMA kernel, and
// waves of equal-shape groups for grouped cuBLAS GEMMs. Plain host data (no CUDA, no Kokkos), so that the host
// tests check it without a GPU; src/cuda uploads it.
#include <cstdint>
#include <vector>

namespace tessel::gnn::Impl {

struct HostDenseBlock;

/// A dense block of A stored row-major with leading dimension ld (cols rounded up to 8) and rows rounded up to
/// 16, zero-padded, at values + offset (a multiple of 128 floats, so every WMMA fragment is 32-byte aligned).
struct DenseBlockDesc {
  std::int64_t row0 = 0, col0 = 0, offset = 0;
  int rows = 0, cols = 0, ld = 0, pad = 0;
};

/// 16 consecutive rows of a row part: rows row0 .. row0 + nrows - 1 (nrows <= 16), local row local_row of the
/// blocks [block_begin, block_end), which all share that row part.
struct DenseStrip {
  std::int64_t row0 = 0;
  int nrows = 0, local_row = 0, block_begin = 0, block_end = 0;
};

struct DenseLayout {
  std::vector<DenseBlockDesc> blocks; ///< sorted by (row0, col0): the blocks of a row part are contiguous
  std::vector<DenseStrip> strips;
  std::vector<float> values; ///< all padded blocks
  /// Grouped GEMMs: wave w holds problems [first, first + sum(size)) in groups of equal (n, k, ld); no wave holds
  /// two blocks of one row part, so the outputs of a wave never overlap (cuBLAS requires that).
  struct Wave {
    std::int64_t first = 0;
    std::vector<int> n, k, ld, size; ///< per group: block rows, block columns, block ld, problems
  };
  std::vector<Wave> waves;
  std::vector<std::int64_t> problem_row0, problem_col0, problem_offset; ///< per problem (wave-major)
};

/// Lays out \p blocks (any order; their row parts are the distinct row0 values) for the device engines.
DenseLayout make_dense_layout(std::vector<HostDenseBlock> blocks);

} // namespace tessel::gnn::Impl

#endif

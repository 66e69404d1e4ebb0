#ifndef TESSEL_GNN_IMPL_TILESHAPE_HPP
#define TESSEL_GNN_IMPL_TILESHAPE_HPP

// The shape of TC-GNN's condensed tiles, shared by the host kernels, the decomposition and the CUDA kernels (no
// includes: nvcc translation units use it without Kokkos).

namespace tessel::gnn::Impl {

/// Rows per TC-GNN row window and columns per condensed tile (TC-GNN's BLK_H x BLK_W for TF32).
inline constexpr int tile_rows = 16;
inline constexpr int tile_cols = 8;

} // namespace tessel::gnn::Impl

#endif

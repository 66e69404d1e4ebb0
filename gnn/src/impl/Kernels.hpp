#ifndef TESSEL_GNN_IMPL_KERNELS_HPP
#define TESSEL_GNN_IMPL_KERNELS_HPP

// The aggregation kernels Y (+)= A X behind SpmmHandle. Every kernel owns whole output rows (no atomics, except the
// explicitly non-deterministic coo_atomic), so results do not depend on the number of threads. Feature loops are
// cut into chunks of compile-time width so that the accumulators of one output row chunk stay in registers.
#include <tessel/gnn/Graph.hpp>

#include "TileShape.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace tessel::gnn::Impl {

#if defined(__GNUC__) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
// GCC and Clang vector extensions: 8 floats per vector (one AVX register, two SSE ones). Without them GCC
// vectorizes the edge loop with gathers instead of the feature loop, which halves the throughput of these kernels.
#define TESSEL_GNN_HOST_VECTORS 1
typedef float vec8 __attribute__((vector_size(32)));
inline constexpr int vec_width = 8;
// Vectors go by reference: passed or returned by value, a 32-byte vector's ABI depends on whether AVX is enabled.
KOKKOS_FORCEINLINE_FUNCTION void load8(vec8 &v, float const *p) { __builtin_memcpy(&v, p, sizeof(v)); }
KOKKOS_FORCEINLINE_FUNCTION void store8(float *p, vec8 const &v) { __builtin_memcpy(p, &v, sizeof(v)); }
/// acc += a * p[0 .. 8)
KOKKOS_FORCEINLINE_FUNCTION void add_scaled8(vec8 &acc, float a, float const *p) {
  vec8 v;
  load8(v, p);
  acc += a * v;
}
/// p[0 .. 8) (+)= acc
KOKKOS_FORCEINLINE_FUNCTION void write8(float *p, vec8 const &acc, bool accumulate) {
  if (accumulate) {
    vec8 v;
    load8(v, p);
    v += acc;
    store8(p, v);
  } else {
    store8(p, acc);
  }
}
#endif

/// y[c0 .. c0+W) (+)= sum over the row's entries of value * X(column, c0 .. c0+W); the W accumulators stay in
/// registers for the whole row.
template <int W, class Index>
KOKKOS_FORCEINLINE_FUNCTION void csr_row_chunk(offset_type b, offset_type e, Index const *cols, float const *vals,
                                               float const *x, std::int64_t ldx, std::int64_t c0, float *y,
                                               bool accumulate) {
#ifdef TESSEL_GNN_HOST_VECTORS
  if constexpr (W % vec_width == 0) {
    constexpr int V = W / vec_width;
    vec8 acc[V];
    for (int v = 0; v < V; ++v)
      acc[v] = vec8{};
    for (offset_type k = b; k < e; ++k) {
      float const a = vals[k];
      float const *xr = x + static_cast<std::int64_t>(cols[k]) * ldx + c0;
      for (int v = 0; v < V; ++v)
        add_scaled8(acc[v], a, xr + v * vec_width);
    }
    for (int v = 0; v < V; ++v)
      write8(y + c0 + v * vec_width, acc[v], accumulate);
    return;
  }
#endif
  float acc[W];
  for (int w = 0; w < W; ++w)
    acc[w] = 0.0f;
  for (offset_type k = b; k < e; ++k) {
    float const a = vals[k];
    float const *xr = x + static_cast<std::int64_t>(cols[k]) * ldx + c0;
    for (int w = 0; w < W; ++w)
      acc[w] += a * xr[w];
  }
  if (accumulate)
    for (int w = 0; w < W; ++w)
      y[c0 + w] += acc[w];
  else
    for (int w = 0; w < W; ++w)
      y[c0 + w] = acc[w];
}

/// Columns c0 .. f of one output row (fewer than 2W of them): a chunk of W columns where they fit, then the rest in
/// chunks of W/2, ..., 4, then single columns.
template <int W, class Index>
KOKKOS_FORCEINLINE_FUNCTION void csr_row_rest(offset_type b, offset_type e, Index const *cols, float const *vals,
                                              float const *x, std::int64_t ldx, std::int64_t c0, std::int64_t f,
                                              float *y, bool accumulate) {
  if constexpr (W < 4) {
    for (; c0 < f; ++c0)
      csr_row_chunk<1>(b, e, cols, vals, x, ldx, c0, y, accumulate);
  } else {
    if (c0 + W <= f) {
      csr_row_chunk<W>(b, e, cols, vals, x, ldx, c0, y, accumulate);
      c0 += W;
    }
    csr_row_rest<W / 2>(b, e, cols, vals, x, ldx, c0, f, y, accumulate);
  }
}

/// One output row over all F features, in chunks of 64, 32, 16, 8, 4, 1.
template <class Index>
KOKKOS_INLINE_FUNCTION void csr_row(offset_type b, offset_type e, Index const *cols, float const *vals, float const *x,
                                    std::int64_t ldx, std::int64_t f, float *y, bool accumulate) {
  std::int64_t c0 = 0;
  for (; c0 + 64 <= f; c0 += 64)
    csr_row_chunk<64>(b, e, cols, vals, x, ldx, c0, y, accumulate);
  csr_row_rest<32>(b, e, cols, vals, x, ldx, c0, f, y, accumulate);
}

/// Row-parallel CSR: Y(i, :) = (accumulate ? Y(i, :) : 0) + sum_k A(i, k) X(k, :).
/// With \p row_ids non-empty, local row r of the CSR is output row row_ids(r) (compressed rows).
template <class ExecSpace, class Index, class MemorySpace>
void spmm_csr(ExecSpace const &space, Kokkos::View<offset_type const *, MemorySpace> row_map,
              Kokkos::View<Index const *, MemorySpace> entries, Kokkos::View<float const *, MemorySpace> values,
              Kokkos::View<Index const *, MemorySpace> row_ids, ConstMatrix<MemorySpace> x, Matrix<MemorySpace> y,
              bool accumulate) {
  auto const rows = static_cast<std::int64_t>(row_map.extent(0)) - 1;
  if (rows <= 0)
    return;
  auto const f = static_cast<std::int64_t>(x.extent(1));
  auto const ldx = f;
  // Separate kernels for full and compressed rows: the row indirection in the inner kernel costs up to 15% at
  // small F (measured), so the common full-row case does not carry it.
  if (row_ids.extent(0) > 0)
    Kokkos::parallel_for(
        "Tessel::gnn::spmm_csr_rows", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t r) {
          csr_row(row_map(r), row_map(r + 1), entries.data(), values.data(), x.data(), ldx, f,
                  &y(static_cast<std::int64_t>(row_ids(r)), 0), accumulate);
        });
  else if (accumulate)
    Kokkos::parallel_for(
        "Tessel::gnn::spmm_csr", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t r) {
          csr_row(row_map(r), row_map(r + 1), entries.data(), values.data(), x.data(), ldx, f, &y(r, 0), true);
        });
  else
    Kokkos::parallel_for(
        "Tessel::gnn::spmm_csr", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t r) {
          csr_row(row_map(r), row_map(r + 1), entries.data(), values.data(), x.data(), ldx, f, &y(r, 0), false);
        });
}

/// CSR with the feature loop outside the row loop (feature tiling): each pass touches only a W-wide column
/// slice of X, so the gathered working set is rows x W instead of rows x F.
template <class ExecSpace, class Index, class MemorySpace>
void spmm_csr_feature_tiled(ExecSpace const &space, Kokkos::View<offset_type const *, MemorySpace> row_map,
                            Kokkos::View<Index const *, MemorySpace> entries,
                            Kokkos::View<float const *, MemorySpace> values, ConstMatrix<MemorySpace> x,
                            Matrix<MemorySpace> y, bool accumulate) {
  auto const rows = static_cast<std::int64_t>(row_map.extent(0)) - 1;
  auto const f = static_cast<std::int64_t>(x.extent(1));
  if (rows <= 0)
    return;
  constexpr int W = 32;
  std::int64_t c0 = 0;
  for (; c0 + W <= f; c0 += W)
    Kokkos::parallel_for(
        "Tessel::gnn::spmm_csr_feature_tiled", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
        KOKKOS_LAMBDA(std::int64_t r) {
          csr_row_chunk<W>(row_map(r), row_map(r + 1), entries.data(), values.data(), x.data(), f, c0, &y(r, 0),
                           accumulate);
        });
  if (c0 < f) {
    // The remaining < W columns: a row pass over the narrow slice.
    auto const rest = f - c0;
    Kokkos::parallel_for(
        "Tessel::gnn::spmm_csr_feature_tiled", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
        KOKKOS_LAMBDA(std::int64_t r) {
          csr_row(row_map(r), row_map(r + 1), entries.data(), values.data(), x.data() + c0, f, rest, &y(r, c0),
                  accumulate);
        });
  }
}

/// Edge-parallel COO, deterministic: the edges (sorted by row) are cut into chunks of equal size. A chunk writes
/// the rows that start inside it; the partial sum of a row that started in an earlier chunk goes to the chunk's
/// carry row, and the carries are added in chunk order afterwards (merge-path style, no atomics).
template <class Index, class MemorySpace> struct CooChunks {
  Kokkos::View<Index *, MemorySpace> rows;              // row of each edge
  Kokkos::View<std::int64_t *, MemorySpace> edge_begin; // chunk c covers edges [edge_begin(c), edge_begin(c+1))
  Kokkos::View<std::int64_t *, MemorySpace> own_begin;  // chunk c owns rows [own_begin(c), own_begin(c+1))
  Kokkos::View<std::int64_t *, MemorySpace> carry_row;  // row continued from an earlier chunk, or -1
  Kokkos::View<float **, Kokkos::LayoutRight, MemorySpace> carry;
};

template <class ExecSpace, class Index, class MemorySpace>
void spmm_coo(ExecSpace const &space, CooChunks<Index, MemorySpace> const &coo,
              Kokkos::View<Index const *, MemorySpace> entries, Kokkos::View<float const *, MemorySpace> values,
              ConstMatrix<MemorySpace> x, Matrix<MemorySpace> y, bool accumulate) {
  auto const chunks = static_cast<std::int64_t>(coo.edge_begin.extent(0)) - 1;
  auto const f = static_cast<std::int64_t>(x.extent(1));
  // The lambdas capture a copy of coo (its views).
  Kokkos::parallel_for(
      "Tessel::gnn::spmm_coo", Kokkos::RangePolicy<ExecSpace>(space, 0, chunks), KOKKOS_LAMBDA(std::int64_t c) {
        if (!accumulate)
          for (std::int64_t r = coo.own_begin(c); r < coo.own_begin(c + 1); ++r)
            for (std::int64_t j = 0; j < f; ++j)
              y(r, j) = 0.0f;
        for (std::int64_t j = 0; j < f; ++j)
          coo.carry(c, j) = 0.0f;
        std::int64_t const first_owned = coo.own_begin(c);
        for (std::int64_t e = coo.edge_begin(c); e < coo.edge_begin(c + 1); ++e) {
          std::int64_t const r = coo.rows(e);
          float *dst = r < first_owned ? &coo.carry(c, 0) : &y(r, 0);
          float const a = values(e);
          float const *xr = &x(static_cast<std::int64_t>(entries(e)), 0);
          for (std::int64_t j = 0; j < f; ++j)
            dst[j] += a * xr[j];
        }
      });
  Kokkos::parallel_for(
      "Tessel::gnn::spmm_coo_carry", Kokkos::RangePolicy<ExecSpace>(space, 0, 1), KOKKOS_LAMBDA(std::int64_t) {
        for (std::int64_t c = 0; c < chunks; ++c)
          if (coo.carry_row(c) >= 0)
            for (std::int64_t j = 0; j < f; ++j)
              y(coo.carry_row(c), j) += coo.carry(c, j);
      });
}

/// Edge-parallel COO with atomic adds (the PyG scatter style): non-deterministic on parallel backends.
template <class ExecSpace, class Index, class MemorySpace>
void spmm_coo_atomic(ExecSpace const &space, Kokkos::View<Index const *, MemorySpace> rows,
                     Kokkos::View<Index const *, MemorySpace> entries, Kokkos::View<float const *, MemorySpace> values,
                     ConstMatrix<MemorySpace> x, Matrix<MemorySpace> y, bool accumulate) {
  auto const f = static_cast<std::int64_t>(x.extent(1));
  if (!accumulate)
    Kokkos::deep_copy(space, y, 0.0f);
  Kokkos::parallel_for(
      "Tessel::gnn::spmm_coo_atomic",
      Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(rows.extent(0))),
      KOKKOS_LAMBDA(std::int64_t e) {
        float const a = values(e);
        std::int64_t const r = rows(e), col = entries(e);
        for (std::int64_t j = 0; j < f; ++j)
          Kokkos::atomic_add(&y(r, j), a * x(col, j));
      });
}

/// TC-GNN condensed row windows: window w covers rows row0(w) .. row0(w) + nrows(w) - 1; its nonzero columns
/// (sorted, deduplicated) are packed 8 per tile and each tile stores a dense 16 x 8 block of A (zeros included).
template <class Index, class MemorySpace> struct TileSet {
  Kokkos::View<std::int64_t *, MemorySpace> row0;
  Kokkos::View<int *, MemorySpace> nrows;
  Kokkos::View<std::int64_t *, MemorySpace> tile_begin; // tiles of window w: [tile_begin(w), tile_begin(w+1))
  Kokkos::View<Index *, MemorySpace> tile_col;          // tile_cols per tile (padding repeats a valid column)
  Kokkos::View<float *, MemorySpace> tile_val;          // tile_rows x tile_cols per tile, row-major, zero-padded
  std::int64_t num_tiles() const { return static_cast<std::int64_t>(tile_col.extent(0)) / tile_cols; }
};

/// One row window, feature columns c0 .. c0+W: acc (16 x W) += tile (16 x 8) * X(tile columns, c0 .. c0+W).
template <int W, class Index>
KOKKOS_FORCEINLINE_FUNCTION void tile_window_chunk(std::int64_t tb, std::int64_t te, Index const *tcol,
                                                   float const *tval, float const *x, std::int64_t ldx, std::int64_t c0,
                                                   float *y, std::int64_t ldy, int nrows, bool accumulate) {
#ifdef TESSEL_GNN_HOST_VECTORS
  if constexpr (W == vec_width) {
    // 16 vector accumulators: one per window row.
    vec8 acc[tile_rows];
    for (int r = 0; r < tile_rows; ++r)
      acc[r] = vec8{};
    for (std::int64_t t = tb; t < te; ++t) {
      float const *v = tval + t * tile_rows * tile_cols;
      for (int c = 0; c < tile_cols; ++c) {
        vec8 xv;
        load8(xv, x + static_cast<std::int64_t>(tcol[t * tile_cols + c]) * ldx + c0);
        for (int r = 0; r < tile_rows; ++r)
          acc[r] += v[r * tile_cols + c] * xv;
      }
    }
    for (int r = 0; r < nrows; ++r)
      write8(y + r * ldy + c0, acc[r], accumulate);
    return;
  }
#endif
  float acc[tile_rows][W];
  for (int r = 0; r < tile_rows; ++r)
    for (int w = 0; w < W; ++w)
      acc[r][w] = 0.0f;
  for (std::int64_t t = tb; t < te; ++t) {
    float const *v = tval + t * tile_rows * tile_cols;
    for (int c = 0; c < tile_cols; ++c) {
      float const *xr = x + static_cast<std::int64_t>(tcol[t * tile_cols + c]) * ldx + c0;
      for (int r = 0; r < tile_rows; ++r) {
        float const a = v[r * tile_cols + c];
        for (int w = 0; w < W; ++w)
          acc[r][w] += a * xr[w];
      }
    }
  }
  for (int r = 0; r < nrows; ++r) {
    float *yr = y + r * ldy + c0;
    if (accumulate)
      for (int w = 0; w < W; ++w)
        yr[w] += acc[r][w];
    else
      for (int w = 0; w < W; ++w)
        yr[w] = acc[r][w];
  }
}

template <class ExecSpace, class Index, class MemorySpace>
void spmm_tiles(ExecSpace const &space, TileSet<Index, MemorySpace> const &tiles, ConstMatrix<MemorySpace> x,
                Matrix<MemorySpace> y, bool accumulate) {
  auto const windows = static_cast<std::int64_t>(tiles.row0.extent(0));
  auto const f = static_cast<std::int64_t>(x.extent(1));
  // The lambda captures a copy of tiles (its views).
  Kokkos::parallel_for(
      "Tessel::gnn::spmm_tiles", Kokkos::RangePolicy<ExecSpace>(space, 0, windows), KOKKOS_LAMBDA(std::int64_t w) {
        float *yw = &y(tiles.row0(w), 0);
        std::int64_t const tb = tiles.tile_begin(w), te = tiles.tile_begin(w + 1);
        int const nr = tiles.nrows(w);
        Index const *tcol = tiles.tile_col.data();
        float const *tval = tiles.tile_val.data();
        std::int64_t c0 = 0;
        for (; c0 + 8 <= f; c0 += 8)
          tile_window_chunk<8>(tb, te, tcol, tval, x.data(), f, c0, yw, f, nr, accumulate);
        for (; c0 < f; ++c0)
          tile_window_chunk<1>(tb, te, tcol, tval, x.data(), f, c0, yw, f, nr, accumulate);
      });
}

} // namespace tessel::gnn::Impl

#endif

#include "impl/Builders.hpp"
#include "impl/Decomposition.hpp"
#include "impl/DenseLayout.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

namespace tessel::gnn::Impl {

template <class Index> std::vector<Index> entry_rows(Graph<Index> const &g) {
  std::vector<Index> rows(static_cast<std::size_t>(g.nnz()));
  for (Index i = 0; i < g.num_rows(); ++i)
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
      rows[static_cast<std::size_t>(k)] = i;
  return rows;
}

void require_dense_fits(std::string const &graph, std::int64_t rows, std::int64_t cols, std::int64_t max_bytes) {
  double const bytes = 4.0 * static_cast<double>(rows) * static_cast<double>(cols);
  TESSEL_REQUIRE(bytes <= static_cast<double>(max_bytes), "dense: graph '", graph, "' needs ", bytes / (1 << 20),
                 " MiB as a dense matrix, more than dense_max_bytes = ", max_bytes / (1 << 20), " MiB");
}

template <class Index>
HostCsrPiece<Index> make_csr(Graph<Index> const &g, std::vector<char> const &keep, bool compressed) {
  HostCsrPiece<Index> piece;
  auto const n = static_cast<std::size_t>(g.num_rows());
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const before = piece.entries.size();
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
      if (keep[static_cast<std::size_t>(k)]) {
        piece.entries.push_back(g.entries()(k));
        piece.values.push_back(g.values()(k));
      }
    if (compressed && piece.entries.size() == before)
      continue;
    if (compressed)
      piece.row_ids.push_back(static_cast<Index>(i));
    piece.row_map.push_back(static_cast<offset_type>(piece.entries.size()));
  }
  piece.nnz = static_cast<std::int64_t>(piece.entries.size());
  return piece;
}

namespace {
/// Condensed tiles of the entries of each group (group_of(k) < 0: no group), windows of tile_rows rows aligned to
/// the parts. Within a window all entries of one column must fall in one group (true for groups made of density
/// classes: a window lies in one row part, a column in one column part, so they meet in one block). Columns are
/// de-duplicated with a stamp per column rather than sorting the window's entries.
template <class Index, class GroupOf>
std::vector<HostTileSet<Index>> build_tiles(Graph<Index> const &g, GroupOf group_of, int groups,
                                            std::vector<std::int64_t> const &part_offsets, bool keep_empty_windows,
                                            std::vector<std::int64_t> const &expected_tiles = {}) {
  std::vector<HostTileSet<Index>> out(static_cast<std::size_t>(groups));
  // Exact sizes where the caller knows the tile counts: growing the value array reallocated and re-zeroed it.
  for (std::size_t gi = 0; gi < expected_tiles.size() && gi < out.size(); ++gi) {
    out[gi].tile_col.reserve(static_cast<std::size_t>(expected_tiles[gi]) * tile_cols);
    out[gi].tile_val.reserve(static_cast<std::size_t>(expected_tiles[gi]) * tile_cols * tile_rows);
  }
  auto const *rm = g.row_map().data();
  auto const *ent = g.entries().data();
  auto const *val = g.values().data();
  std::vector<std::int64_t> stamp(static_cast<std::size_t>(g.num_cols()), -1);
  std::vector<int> stamp_group(static_cast<std::size_t>(g.num_cols()), -1);
  std::vector<std::int32_t> slot(static_cast<std::size_t>(g.num_cols()), 0);
  std::vector<std::vector<Index>> cols(static_cast<std::size_t>(groups));
  std::vector<std::size_t> first(static_cast<std::size_t>(groups));
  std::int64_t window = 0;
  for (std::size_t p = 0; p + 1 < part_offsets.size(); ++p) {
    for (std::int64_t r = part_offsets[p]; r < part_offsets[p + 1]; r += tile_rows, ++window) {
      std::int64_t const re = std::min<std::int64_t>(r + tile_rows, part_offsets[p + 1]);
      for (auto &c : cols)
        c.clear();
      for (std::int64_t i = r; i < re; ++i)
        for (offset_type k = rm[i]; k < rm[i + 1]; ++k) {
          int const gi = group_of(k);
          if (gi < 0)
            continue;
          auto const c = static_cast<std::size_t>(ent[k]);
          if (stamp[c] != window) {
            stamp[c] = window;
            stamp_group[c] = gi;
            cols[static_cast<std::size_t>(gi)].push_back(ent[k]);
          } else {
            TESSEL_REQUIRE(stamp_group[c] == gi, "tiles: column ", c, " of window at row ", r, " falls in two groups");
          }
        }
      for (int gi = 0; gi < groups; ++gi) {
        auto &cg = cols[static_cast<std::size_t>(gi)];
        auto &t = out[static_cast<std::size_t>(gi)];
        if (cg.empty() && !(keep_empty_windows && groups == 1))
          continue;
        std::sort(cg.begin(), cg.end());
        for (std::size_t q = 0; q < cg.size(); ++q)
          slot[static_cast<std::size_t>(cg[q])] = static_cast<std::int32_t>(q);
        std::size_t const ntiles = (cg.size() + tile_cols - 1) / tile_cols;
        first[static_cast<std::size_t>(gi)] = t.tile_col.size() / tile_cols;
        for (std::size_t q = 0; q < ntiles * tile_cols; ++q)
          // Padding repeats the window's first column (its values stay zero).
          t.tile_col.push_back(q < cg.size() ? cg[q] : cg[0]);
        t.tile_val.resize(t.tile_col.size() * tile_rows, 0.0f);
        t.row0.push_back(r);
        t.nrows.push_back(static_cast<int>(re - r));
        t.tile_begin.push_back(static_cast<std::int64_t>(t.tile_col.size() / tile_cols));
      }
      for (std::int64_t i = r; i < re; ++i)
        for (offset_type k = rm[i]; k < rm[i + 1]; ++k) {
          int const gi = group_of(k);
          if (gi < 0)
            continue;
          auto const pos = static_cast<std::size_t>(slot[static_cast<std::size_t>(ent[k])]);
          std::size_t const tile = first[static_cast<std::size_t>(gi)] + pos / tile_cols;
          out[static_cast<std::size_t>(gi)]
              .tile_val[tile * tile_rows * tile_cols + static_cast<std::size_t>(i - r) * tile_cols + pos % tile_cols] +=
              val[k];
        }
    }
  }
  return out;
}
} // namespace

template <class Index>
HostTileSet<Index> make_tiles(Graph<Index> const &g, std::vector<char> const *keep,
                              std::vector<std::int64_t> const &part_offsets, bool keep_empty_windows) {
  if (!keep)
    return build_tiles(
        g, [](offset_type) { return 0; }, 1, part_offsets, keep_empty_windows)[0];
  return build_tiles(
      g, [keep](offset_type k) { return (*keep)[static_cast<std::size_t>(k)] ? 0 : -1; }, 1, part_offsets,
      keep_empty_windows)[0];
}

namespace {
std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }
} // namespace

DenseLayout make_dense_layout(std::vector<HostDenseBlock> list) {
  DenseLayout out;
  std::sort(list.begin(), list.end(), [](HostDenseBlock const &a, HostDenseBlock const &b) {
    return std::tie(a.row0, a.col0) < std::tie(b.row0, b.col0);
  });
  auto &desc = out.blocks;
  std::int64_t offset = 0;
  for (auto const &b : list) {
    DenseBlockDesc d;
    d.row0 = b.row0;
    d.col0 = b.col0;
    d.rows = static_cast<int>(b.rows);
    d.cols = static_cast<int>(b.cols);
    d.ld = static_cast<int>(round_up(b.cols, tile_cols));
    d.offset = offset;
    offset += round_up(b.rows, tile_rows) * d.ld;
    desc.push_back(d);
  }
  out.values.assign(static_cast<std::size_t>(offset), 0.0f);
  for (std::size_t i = 0; i < list.size(); ++i)
    for (std::int64_t r = 0; r < list[i].rows; ++r)
      std::copy_n(list[i].values.begin() + r * list[i].cols, list[i].cols,
                  out.values.begin() + desc[i].offset + r * desc[i].ld);
  // Strips: 16 rows of one row part over all of its blocks. Waves: the j-th block of each row part goes to wave j.
  std::vector<std::vector<std::size_t>> wave_blocks;
  for (std::size_t b = 0; b < desc.size();) {
    std::size_t e = b;
    while (e < desc.size() && desc[e].row0 == desc[b].row0)
      ++e;
    for (int lr = 0; lr < desc[b].rows; lr += tile_rows)
      out.strips.push_back(
          {desc[b].row0 + lr, std::min(tile_rows, desc[b].rows - lr), lr, static_cast<int>(b), static_cast<int>(e)});
    for (std::size_t j = b; j < e; ++j) {
      if (wave_blocks.size() <= j - b)
        wave_blocks.emplace_back();
      wave_blocks[j - b].push_back(j);
    }
    b = e;
  }
  // Within a wave, groups of equal shape.
  for (auto &members : wave_blocks) {
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(desc[a].rows, desc[a].cols, desc[a].ld) < std::tie(desc[b].rows, desc[b].cols, desc[b].ld);
    });
    DenseLayout::Wave w;
    w.first = static_cast<std::int64_t>(out.problem_row0.size());
    for (std::size_t m = 0; m < members.size(); ++m) {
      auto const &d = desc[members[m]];
      if (m == 0 || std::tie(d.rows, d.cols, d.ld) != std::tie(w.n.back(), w.k.back(), w.ld.back())) {
        w.n.push_back(d.rows);
        w.k.push_back(d.cols);
        w.ld.push_back(d.ld);
        w.size.push_back(0);
      }
      ++w.size.back();
      out.problem_row0.push_back(d.row0);
      out.problem_col0.push_back(d.col0);
      out.problem_offset.push_back(d.offset);
    }
    out.waves.push_back(std::move(w));
  }
  return out;
}

template <class Index>
HostCsrPiece<Index> csr_piece(Decomposition<Index> const &d, std::vector<char> const &keep, bool compressed) {
  return make_csr(d.permuted, keep, compressed);
}

template <class Index> HostTileSet<Index> tile_set(Decomposition<Index> const &d, std::vector<char> const &keep) {
  return make_tiles(d.permuted, &keep, d.partition.part_offsets, /*keep_empty_windows=*/false);
}

template <class Index>
std::vector<HostDenseBlock> dense_blocks(Decomposition<Index> const &dec, std::vector<std::size_t> const &block_ids) {
  std::vector<HostDenseBlock> out;
  auto const &off = dec.partition.part_offsets;
  std::vector<std::size_t> slot(dec.blocks.size(), std::numeric_limits<std::size_t>::max());
  for (auto b : block_ids) {
    auto const &blk = dec.blocks[b];
    HostDenseBlock d;
    d.row0 = off[blk.p];
    d.rows = off[blk.p + 1] - off[blk.p];
    d.col0 = off[blk.q];
    d.cols = off[blk.q + 1] - off[blk.q];
    d.values.assign(static_cast<std::size_t>(d.rows * d.cols), 0.0f);
    slot[b] = out.size();
    out.push_back(std::move(d));
  }
  // Entries are visited row by row; the block of an entry is found by its column part.
  std::vector<std::pair<std::int64_t, std::size_t>> row_blocks; // (q, block) of the current row part
  std::int64_t current_p = -1;
  for (Index i = 0; i < dec.permuted.num_rows(); ++i) {
    std::int64_t const p = dec.part_of[static_cast<std::size_t>(i)];
    if (p != current_p) {
      current_p = p;
      row_blocks.clear();
      for (auto b : block_ids)
        if (dec.blocks[b].p == p)
          row_blocks.emplace_back(dec.blocks[b].q, b);
      std::sort(row_blocks.begin(), row_blocks.end());
    }
    if (row_blocks.empty())
      continue;
    for (offset_type k = dec.permuted.row_map()(i); k < dec.permuted.row_map()(i + 1); ++k) {
      std::int64_t const q = dec.part_of[static_cast<std::size_t>(dec.permuted.entries()(k))];
      auto it = std::lower_bound(row_blocks.begin(), row_blocks.end(), std::make_pair(q, std::size_t{0}));
      if (it == row_blocks.end() || it->first != q)
        continue;
      auto &d = out[slot[it->second]];
      d.values[static_cast<std::size_t>((i - d.row0) * d.cols + (dec.permuted.entries()(k) - d.col0))] +=
          dec.permuted.values()(k);
    }
  }
  return out;
}

template <class Index>
std::vector<HostCsrPiece<Index>> csr_groups(Decomposition<Index> const &d, std::vector<int> const &group_of_class,
                                            std::vector<char> const &compressed) {
  std::size_t const groups = compressed.size();
  std::vector<HostCsrPiece<Index>> out(groups);
  std::vector<std::int64_t> reserve(groups, 0);
  for (int c = 0; c < d.num_classes; ++c)
    if (group_of_class[static_cast<std::size_t>(c)] >= 0)
      reserve[static_cast<std::size_t>(group_of_class[static_cast<std::size_t>(c)])] +=
          d.classes[static_cast<std::size_t>(c)].nnz;
  for (std::size_t gi = 0; gi < groups; ++gi) {
    out[gi].entries.reserve(static_cast<std::size_t>(reserve[gi]));
    out[gi].values.reserve(static_cast<std::size_t>(reserve[gi]));
    if (!compressed[gi])
      out[gi].row_map.reserve(static_cast<std::size_t>(d.rows) + 1);
  }
  auto const *rm = d.permuted.row_map().data();
  auto const *ent = d.permuted.entries().data();
  auto const *val = d.permuted.values().data();
  std::vector<std::size_t> before(groups);
  for (Index i = 0; i < d.rows; ++i) {
    for (std::size_t gi = 0; gi < groups; ++gi)
      before[gi] = out[gi].entries.size();
    for (offset_type k = rm[i]; k < rm[i + 1]; ++k) {
      int const gi = group_of_class[static_cast<std::size_t>(d.entry_class[static_cast<std::size_t>(k)])];
      if (gi < 0)
        continue;
      out[static_cast<std::size_t>(gi)].entries.push_back(ent[k]);
      out[static_cast<std::size_t>(gi)].values.push_back(val[k]);
    }
    for (std::size_t gi = 0; gi < groups; ++gi) {
      auto &piece = out[gi];
      if (compressed[gi]) {
        if (piece.entries.size() == before[gi])
          continue;
        piece.row_ids.push_back(i);
      }
      piece.row_map.push_back(static_cast<offset_type>(piece.entries.size()));
    }
  }
  for (auto &piece : out)
    piece.nnz = static_cast<std::int64_t>(piece.entries.size());
  return out;
}

template <class Index>
std::vector<HostTileSet<Index>> tiles_groups(Decomposition<Index> const &d, std::vector<int> const &group_of_class,
                                             int groups) {
  std::vector<std::int64_t> expected(static_cast<std::size_t>(groups), 0);
  for (int c = 0; c < d.num_classes; ++c)
    if (group_of_class[static_cast<std::size_t>(c)] >= 0)
      expected[static_cast<std::size_t>(group_of_class[static_cast<std::size_t>(c)])] +=
          d.classes[static_cast<std::size_t>(c)].tiles;
  return build_tiles(
      d.permuted,
      [&](offset_type k) {
        return group_of_class[static_cast<std::size_t>(d.entry_class[static_cast<std::size_t>(k)])];
      },
      groups, d.partition.part_offsets, /*keep_empty_windows=*/false, expected);
}

#define TESSEL_GNN_INSTANTIATE_BUILDERS(INDEX)                                                                         \
  template std::vector<INDEX> entry_rows(Graph<INDEX> const &);                                                        \
  template HostCsrPiece<INDEX> make_csr(Graph<INDEX> const &, std::vector<char> const &, bool);                        \
  template HostTileSet<INDEX> make_tiles(Graph<INDEX> const &, std::vector<char> const *,                              \
                                         std::vector<std::int64_t> const &, bool);                                     \
  template HostCsrPiece<INDEX> csr_piece(Decomposition<INDEX> const &, std::vector<char> const &, bool);               \
  template HostTileSet<INDEX> tile_set(Decomposition<INDEX> const &, std::vector<char> const &);                       \
  template std::vector<HostDenseBlock> dense_blocks(Decomposition<INDEX> const &, std::vector<std::size_t> const &);   \
  template std::vector<HostCsrPiece<INDEX>> csr_groups(Decomposition<INDEX> const &, std::vector<int> const &,         \
                                                       std::vector<char> const &);                                     \
  template std::vector<HostTileSet<INDEX>> tiles_groups(Decomposition<INDEX> const &, std::vector<int> const &, int);
TESSEL_GNN_INSTANTIATE_BUILDERS(std::int32_t)
TESSEL_GNN_INSTANTIATE_BUILDERS(std::int64_t)

} // namespace tessel::gnn::Impl

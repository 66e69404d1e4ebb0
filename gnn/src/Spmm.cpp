#include <tessel/core/Execution.hpp>
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "impl/Blas.hpp"
#include "impl/HostCsr.hpp"
#include "impl/Json.hpp"
#include "impl/Kernels.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <sstream>

namespace tessel::gnn {

char const *name_of(SpmmAlgorithm algorithm) {
  switch (algorithm) {
  case SpmmAlgorithm::csr:
    return "csr";
  case SpmmAlgorithm::csr_feature_tiled:
    return "csr_feature_tiled";
  case SpmmAlgorithm::coo:
    return "coo";
  case SpmmAlgorithm::coo_atomic:
    return "coo_atomic";
  case SpmmAlgorithm::tiles:
    return "tiles";
  case SpmmAlgorithm::dense:
    return "dense";
  case SpmmAlgorithm::kk:
    return "kk";
  case SpmmAlgorithm::adaptive:
    return "adaptive";
  }
  return "?";
}

SpmmAlgorithm parse_spmm_algorithm(std::string const &text) {
  for (auto a : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo, SpmmAlgorithm::coo_atomic,
                 SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::kk, SpmmAlgorithm::adaptive})
    if (text == name_of(a))
      return a;
  TESSEL_THROW("unknown kernel '", text,
               "' (expected csr, csr_feature_tiled, coo, coo_atomic, tiles, dense, kk or adaptive)");
}

char const *name_of(BlockKernel kernel) {
  switch (kernel) {
  case BlockKernel::csr:
    return "csr";
  case BlockKernel::tiles:
    return "tiles";
  case BlockKernel::dense:
    return "dense";
  }
  return "?";
}

double CostModel::seconds(BlockKernel kernel, double elements, int features) const {
  double const rate = kernel == BlockKernel::csr     ? csr_gflops
                      : kernel == BlockKernel::tiles ? tiles_gflops
                                                     : dense_gflops;
  return 2.0 * elements * features / (rate * 1e9);
}

std::string SpmmPlan::to_json() const {
  using Impl::json_number;
  using Impl::json_string;
  std::ostringstream os;
  os << "{\"graph\": " << json_string(graph) << ", \"rows\": " << rows << ", \"nnz\": " << nnz
     << ", \"features\": " << features << ", \"algorithm\": " << json_string(algorithm)
     << ", \"partition\": " << json_string(partition_method) << ", \"ordering\": " << json_string(ordering)
     << ", \"partition_seconds\": " << json_number(partition_seconds) << ", \"parts\": " << parts
     << ", \"intra_fraction\": " << json_number(intra_fraction) << ", \"timed\": " << (timed ? "true" : "false")
     << ", \"frozen\": " << (frozen ? "true" : "false") << ", \"rest_kernel\": " << json_string(rest_kernel)
     << ", \"reason\": " << json_string(reason) << ", \"preprocess_seconds\": " << json_number(preprocess_seconds)
     << ", \"tuning_seconds\": " << json_number(tuning_seconds) << ", \"tuning_applies\": " << tuning_applies
     << ", \"final_measured\": " << Impl::json_pairs(final_measured) << ", \"classes\": [";
  for (std::size_t c = 0; c < classes.size(); ++c) {
    auto const &k = classes[c];
    os << (c ? ", " : "") << "{\"intra\": " << (k.intra ? "true" : "false") << ", \"density\": ["
       << json_number(k.density_min) << ", " << json_number(k.density_max) << "], \"blocks\": " << k.blocks
       << ", \"nnz\": " << k.nnz << ", \"tiles\": " << k.tiles << ", \"dense_elements\": " << k.dense_elements
       << ", \"kernel\": " << json_string(k.kernel) << ", \"predicted\": " << Impl::json_pairs(k.predicted)
       << ", \"measured\": " << Impl::json_pairs(k.measured) << ", \"reason\": " << json_string(k.reason) << "}";
  }
  os << "]}";
  return os.str();
}

namespace Impl {

namespace {
constexpr std::int64_t default_part_size = 64;
constexpr int num_kernels = 3;

/// Best of the timed samples: on a shared machine the minimum is the least disturbed run.
double best_of(std::vector<double> const &v) {
  return v.empty() ? std::numeric_limits<double>::infinity() : *std::min_element(v.begin(), v.end());
}

/// A candidate other than the simplest must win by this factor, so that timing noise does not pick it.
constexpr double switch_margin = 0.95;

template <class T, class M> Kokkos::View<T *, M> to_device(std::string const &label, std::vector<T> const &v) {
  Kokkos::View<T *, M> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), v.size());
  auto h = Kokkos::create_mirror_view(d);
  std::copy(v.begin(), v.end(), h.data());
  Kokkos::deep_copy(d, h);
  return d;
}
} // namespace

/// A CSR over all rows (row_ids empty) or over a list of rows (compressed).
template <class Index, class M> struct CsrPiece {
  Kokkos::View<offset_type *, M> row_map;
  Kokkos::View<Index *, M> entries;
  Kokkos::View<float *, M> values;
  Kokkos::View<Index *, M> row_ids;
  std::int64_t nnz = 0;
};

template <class Index, class M> struct DenseBlock {
  std::int64_t row0, rows, col0, cols;
  Matrix<M> values;
};

template <class Index, class ExecSpace> struct SpmmState {
  using M = typename ExecSpace::memory_space;
  using HostGraph = Graph<Index>;

  SpmmOptions options;
  std::string name;
  Index rows = 0, cols = 0;
  offset_type nnz = 0;

  // Whole-graph algorithms (original order).
  Graph<Index, M> graph;
  CooChunks<Index, M> coo;
  TileSet<Index, M> tiles;
  Matrix<M> dense;

  // Adaptive.
  Partition partition;
  HostGraph permuted;
  std::vector<std::int64_t> part_of; // part of each permuted vertex
  struct Block {
    std::int64_t p, q, nnz;
    double density;
    int cls;
  };
  std::vector<Block> blocks;
  std::vector<int> entry_class; // class of each entry of `permuted`
  int num_classes = 0;
  std::vector<SpmmClassPlan> classes; // width-independent parts of the class plans
  std::vector<std::vector<BlockKernel>> candidates;
  double preprocess_seconds = 0;
  std::string ordering; // how the vertex order was chosen
  bool structures_ready = false;
  std::vector<bool> multi;        // class has more than one candidate
  CsrPiece<Index, M> tuning_rest; // entries of single-candidate classes, all rows
  CsrPiece<Index, M> all_csr;     // the whole reordered graph (the final check's reference)
  bool all_csr_ready = false;
  std::vector<CsrPiece<Index, M>> class_csr;
  std::vector<TileSet<Index, M>> class_tiles;
  std::vector<std::vector<DenseBlock<Index, M>>> class_dense;

  struct Width {
    SpmmPlan plan;
    int stage = 0; // 0: timing class kernels, 1: timing final candidates, 2: frozen
    std::vector<BlockKernel> rounds;
    std::size_t round = 0;
    std::vector<std::vector<std::vector<double>>> class_samples; // [class][kernel] -> seconds
    std::vector<BlockKernel> choice;
    std::vector<std::string> final_names;
    std::vector<std::vector<double>> final_samples;
    std::size_t final_round = 0;
    // Final structures.
    bool built = false;
    bool rest_feature_tiled = false;
    CsrPiece<Index, M> rest;
    TileSet<Index, M> tiles;
    std::vector<DenseBlock<Index, M>> dense;
    bool has_tiles = false;
  };
  std::map<int, Width> widths;
  double tuning_seconds = 0;

  // ---------------------------------------------------------------------------------------------------------
  // Structure builders (host, then copied to M)

  CsrPiece<Index, M> make_csr(HostGraph const &g, std::vector<char> const &keep, bool compressed) const {
    auto const n = static_cast<std::size_t>(g.num_rows());
    std::vector<offset_type> row_map{0};
    std::vector<Index> entries, row_ids;
    std::vector<float> values;
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t const before = entries.size();
      for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
        if (keep[static_cast<std::size_t>(k)]) {
          entries.push_back(g.entries()(k));
          values.push_back(g.values()(k));
        }
      if (compressed && entries.size() == before)
        continue;
      if (compressed)
        row_ids.push_back(static_cast<Index>(i));
      row_map.push_back(static_cast<offset_type>(entries.size()));
    }
    CsrPiece<Index, M> piece;
    piece.row_map = to_device<offset_type, M>("Tessel::gnn::Spmm::row_map", row_map);
    piece.entries = to_device<Index, M>("Tessel::gnn::Spmm::entries", entries);
    piece.values = to_device<float, M>("Tessel::gnn::Spmm::values", values);
    piece.row_ids = to_device<Index, M>("Tessel::gnn::Spmm::row_ids", row_ids);
    piece.nnz = static_cast<std::int64_t>(entries.size());
    return piece;
  }

  /// Condensed 16 x 8 tiles of the kept entries, windows aligned to the starts of \p part_offsets.
  static TileSet<Index, M> make_tiles(HostGraph const &g, std::vector<char> const *keep,
                                      std::vector<std::int64_t> const &part_offsets, bool keep_empty_windows,
                                      std::int64_t *tile_count = nullptr) {
    std::vector<std::int64_t> row0, tile_begin{0};
    std::vector<int> nrows;
    std::vector<Index> tile_col;
    std::vector<float> tile_val;
    std::vector<Index> cols;
    for (std::size_t p = 0; p + 1 < part_offsets.size(); ++p) {
      for (std::int64_t r = part_offsets[p]; r < part_offsets[p + 1]; r += tile_rows) {
        std::int64_t const re = std::min<std::int64_t>(r + tile_rows, part_offsets[p + 1]);
        cols.clear();
        for (std::int64_t i = r; i < re; ++i)
          for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
            if (!keep || (*keep)[static_cast<std::size_t>(k)])
              cols.push_back(g.entries()(k));
        if (cols.empty() && !keep_empty_windows)
          continue;
        std::sort(cols.begin(), cols.end());
        cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
        std::size_t const ntiles = (cols.size() + tile_cols - 1) / tile_cols;
        std::size_t const first = tile_col.size() / tile_cols;
        for (std::size_t t = 0; t < ntiles; ++t)
          for (int c = 0; c < tile_cols; ++c) {
            std::size_t const idx = t * tile_cols + static_cast<std::size_t>(c);
            // Padding repeats the window's first column (its values stay zero).
            tile_col.push_back(idx < cols.size() ? cols[idx] : cols[0]);
          }
        tile_val.resize(tile_col.size() * tile_rows, 0.0f);
        for (std::int64_t i = r; i < re; ++i)
          for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k) {
            if (keep && !(*keep)[static_cast<std::size_t>(k)])
              continue;
            auto const pos =
                static_cast<std::size_t>(std::lower_bound(cols.begin(), cols.end(), g.entries()(k)) - cols.begin());
            std::size_t const t = first + pos / tile_cols;
            tile_val[t * tile_rows * tile_cols + static_cast<std::size_t>(i - r) * tile_cols + pos % tile_cols] +=
                g.values()(k);
          }
        row0.push_back(r);
        nrows.push_back(static_cast<int>(re - r));
        tile_begin.push_back(static_cast<std::int64_t>(tile_col.size() / tile_cols));
      }
    }
    TileSet<Index, M> t;
    t.row0 = to_device<std::int64_t, M>("Tessel::gnn::Spmm::tile_row0", row0);
    t.nrows = to_device<int, M>("Tessel::gnn::Spmm::tile_nrows", nrows);
    t.tile_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::tile_begin", tile_begin);
    t.tile_col = to_device<Index, M>("Tessel::gnn::Spmm::tile_col", tile_col);
    t.tile_val = to_device<float, M>("Tessel::gnn::Spmm::tile_val", tile_val);
    if (tile_count)
      *tile_count = static_cast<std::int64_t>(tile_col.size() / tile_cols);
    return t;
  }

  std::vector<DenseBlock<Index, M>> make_dense(std::vector<std::size_t> const &block_ids) const {
    std::vector<DenseBlock<Index, M>> out;
    auto const &off = partition.part_offsets;
    std::vector<std::size_t> slot(blocks.size(), std::numeric_limits<std::size_t>::max());
    for (auto b : block_ids) {
      auto const &blk = blocks[b];
      DenseBlock<Index, M> d{off[blk.p], off[blk.p + 1] - off[blk.p], off[blk.q], off[blk.q + 1] - off[blk.q], {}};
      d.values = Matrix<M>("Tessel::gnn::Spmm::dense_block", d.rows, d.cols);
      slot[b] = out.size();
      out.push_back(d);
    }
    std::vector<typename Matrix<M>::HostMirror> host;
    for (auto &d : out)
      host.push_back(Kokkos::create_mirror_view(d.values));
    for (auto &h : host)
      Kokkos::deep_copy(h, 0.0f);
    // Entries are visited row by row; the block of an entry is found by its column part.
    std::vector<std::pair<std::int64_t, std::size_t>> row_blocks; // (q, block) of the current row part
    std::int64_t current_p = -1;
    for (Index i = 0; i < permuted.num_rows(); ++i) {
      std::int64_t const p = part_of[static_cast<std::size_t>(i)];
      if (p != current_p) {
        current_p = p;
        row_blocks.clear();
        for (auto b : block_ids)
          if (blocks[b].p == p)
            row_blocks.emplace_back(blocks[b].q, b);
        std::sort(row_blocks.begin(), row_blocks.end());
      }
      if (row_blocks.empty())
        continue;
      for (offset_type k = permuted.row_map()(i); k < permuted.row_map()(i + 1); ++k) {
        std::int64_t const q = part_of[static_cast<std::size_t>(permuted.entries()(k))];
        auto it = std::lower_bound(row_blocks.begin(), row_blocks.end(), std::make_pair(q, std::size_t{0}));
        if (it == row_blocks.end() || it->first != q)
          continue;
        auto &d = out[slot[it->second]];
        host[slot[it->second]](i - d.row0, permuted.entries()(k) - d.col0) += permuted.values()(k);
      }
    }
    for (std::size_t s = 0; s < out.size(); ++s)
      Kokkos::deep_copy(out[s].values, host[s]);
    return out;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Setup

  void setup_fixed(HostGraph const &g) {
    graph = g.to(ExecSpace());
    switch (options.algorithm) {
    case SpmmAlgorithm::coo:
    case SpmmAlgorithm::coo_atomic: {
      std::vector<Index> edge_rows(static_cast<std::size_t>(nnz));
      for (Index i = 0; i < rows; ++i)
        for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
          edge_rows[static_cast<std::size_t>(k)] = i;
      coo.rows = to_device<Index, M>("Tessel::gnn::Spmm::coo_rows", edge_rows);
      TESSEL_REQUIRE(options.coo_chunk >= 1, "coo: chunk size must be positive, got ", options.coo_chunk);
      std::vector<std::int64_t> edge_begin, own_begin, carry_row;
      std::int64_t const chunks = std::max<std::int64_t>(1, (nnz + options.coo_chunk - 1) / options.coo_chunk);
      for (std::int64_t c = 0; c <= chunks; ++c)
        edge_begin.push_back(std::min<std::int64_t>(nnz, c * options.coo_chunk));
      // Chunk c owns the rows whose first edge lies in it (empty rows: whose offset lies in it; the last chunk
      // also owns the trailing empty rows).
      Index r = 0;
      for (std::int64_t c = 0; c < chunks; ++c) {
        own_begin.push_back(r);
        while (r < rows && (g.row_map()(r) < edge_begin[c + 1] || c + 1 == chunks))
          ++r;
        std::int64_t const e0 = edge_begin[c];
        std::int64_t carry = -1;
        if (e0 < edge_begin[c + 1] && edge_rows[static_cast<std::size_t>(e0)] < own_begin[c])
          carry = edge_rows[static_cast<std::size_t>(e0)];
        carry_row.push_back(carry);
      }
      own_begin.push_back(rows);
      coo.edge_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::coo_edge_begin", edge_begin);
      coo.own_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::coo_own_begin", own_begin);
      coo.carry_row = to_device<std::int64_t, M>("Tessel::gnn::Spmm::coo_carry_row", carry_row);
      break;
    }
    case SpmmAlgorithm::tiles:
      tiles = make_tiles(g, nullptr, {0, static_cast<std::int64_t>(rows)}, /*keep_empty_windows=*/true);
      break;
    case SpmmAlgorithm::dense: {
      double const bytes = 4.0 * static_cast<double>(rows) * static_cast<double>(cols);
      TESSEL_REQUIRE(
          bytes <= static_cast<double>(options.dense_max_bytes), "dense: graph '", name, "' needs ", bytes / (1 << 20),
          " MiB as a dense matrix, more than dense_max_bytes = ", options.dense_max_bytes / (1 << 20), " MiB");
      dense = Matrix<M>("Tessel::gnn::Spmm::dense", rows, cols);
      auto h = Kokkos::create_mirror_view(dense);
      Kokkos::deep_copy(h, 0.0f);
      for (Index i = 0; i < rows; ++i)
        for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
          h(i, g.entries()(k)) += g.values()(k);
      Kokkos::deep_copy(dense, h);
      break;
    }
    default:
      break;
    }
  }

  /// Times CSR in the original and in the partitioned order (F = 32, interleaved); keeps the original order
  /// when reordering does not pay (graphs already local, or too small to miss in cache).
  /// Times CSR in the original and in the partitioned order at the widths the caller will apply
  /// (options.probe_features, interleaved, best of 3 after a warm-up) and keeps the original order unless the
  /// partitioned one is at least as fast in total: reordering pays when X spills from cache, not for narrow X.
  void probe_reordering(HostGraph const &g, std::int64_t part_size) {
    ExecSpace space;
    auto const original = g.to(space), reordered = permuted.to(space);
    Timer<ExecSpace> timer(space, "Tessel::gnn::Spmm::probe");
    double total[2] = {0, 0};
    std::ostringstream note;
    note << "reordering probe (csr):";
    for (int f : options.probe_features) {
      TESSEL_REQUIRE(f >= 1, "SpmmOptions::probe_features must be positive, got ", f);
      Matrix<M> x(Kokkos::view_alloc(space, "Tessel::gnn::Spmm::probe_x"), static_cast<std::size_t>(rows),
                  static_cast<std::size_t>(f));
      Matrix<M> y(Kokkos::view_alloc(space, "Tessel::gnn::Spmm::probe_y"), static_cast<std::size_t>(rows),
                  static_cast<std::size_t>(f));
      Kokkos::deep_copy(space, x, 1.0f);
      std::vector<double> t[2];
      for (int rep = 0; rep < 4; ++rep)
        for (int which = 0; which < 2; ++which) {
          auto const &a = which == 0 ? original : reordered;
          timer.reset();
          spmm_csr<ExecSpace, Index, M>(space, a.row_map(), a.entries(), a.values(), {}, x, y, false);
          if (rep > 0) // the first round warms the caches
            t[which].push_back(timer.seconds());
        }
      total[0] += best_of(t[0]);
      total[1] += best_of(t[1]);
      note << " F=" << f << ": original " << 1e3 * best_of(t[0]) << " ms, " << name_of(partition.method) << " "
           << 1e3 * best_of(t[1]) << " ms;";
    }
    if (total[1] <= 1.02 * total[0]) {
      note << " -> reordered";
    } else {
      note << " -> original order kept";
      partition = gnn::partition(g, part_size, PartitionMethod::none);
      permuted = g;
    }
    ordering = note.str();
  }

  void setup_adaptive(HostGraph const &g, Partition const *given) {
    auto const t0 = std::chrono::steady_clock::now();
    TESSEL_REQUIRE(rows == cols, "adaptive: graph '", name, "' is ", rows, " x ", cols,
                   "; the adaptive algorithm reorders vertices and needs a square matrix");
    if (given) {
      TESSEL_REQUIRE(given->permutation.size() == static_cast<std::int64_t>(rows), "adaptive: the given partition has ",
                     given->permutation.size(), " vertices, graph '", name, "' has ", rows);
      partition = *given;
      permuted = permute(g, partition.permutation);
    } else {
      std::int64_t const part_size = options.part_size > 0 ? options.part_size : default_part_size;
      partition = gnn::partition(g, part_size, options.partition, 0, options.seed);
      permuted = permute(g, partition.permutation);
      if (options.timing && partition.method != PartitionMethod::none && !options.probe_features.empty())
        probe_reordering(g, part_size);
    }
    auto const &off = partition.part_offsets;
    std::size_t const nparts = off.size() - 1;
    part_of.assign(static_cast<std::size_t>(rows), 0);
    for (std::size_t p = 0; p < nparts; ++p)
      for (auto v = off[p]; v < off[p + 1]; ++v)
        part_of[static_cast<std::size_t>(v)] = static_cast<std::int64_t>(p);

    // Blocks: nonempty (row part, column part) pairs with their density.
    auto const &bounds = options.class_bounds;
    int const bins = static_cast<int>(bounds.size()) + 1;
    num_classes = 2 * bins;
    entry_class.assign(static_cast<std::size_t>(nnz), 0);
    std::vector<std::int64_t> qs;
    for (std::size_t p = 0; p < nparts; ++p) {
      qs.clear();
      for (auto i = off[p]; i < off[p + 1]; ++i)
        for (offset_type k = permuted.row_map()(i); k < permuted.row_map()(i + 1); ++k)
          qs.push_back(part_of[static_cast<std::size_t>(permuted.entries()(k))]);
      std::sort(qs.begin(), qs.end());
      std::size_t const first_block = blocks.size();
      for (std::size_t s = 0; s < qs.size();) {
        std::size_t e = s;
        while (e < qs.size() && qs[e] == qs[s])
          ++e;
        auto const q = qs[s];
        double const area = static_cast<double>(off[p + 1] - off[p]) * static_cast<double>(off[q + 1] - off[q]);
        double const density = static_cast<double>(e - s) / area;
        int bin = 0;
        while (bin < bins - 1 && density >= bounds[static_cast<std::size_t>(bin)])
          ++bin;
        int const cls = (static_cast<std::int64_t>(p) == q ? 0 : bins) + bin;
        blocks.push_back({static_cast<std::int64_t>(p), q, static_cast<std::int64_t>(e - s), density, cls});
        s = e;
      }
      for (auto i = off[p]; i < off[p + 1]; ++i)
        for (offset_type k = permuted.row_map()(i); k < permuted.row_map()(i + 1); ++k) {
          auto const q = part_of[static_cast<std::size_t>(permuted.entries()(k))];
          auto it = std::lower_bound(blocks.begin() + static_cast<std::ptrdiff_t>(first_block), blocks.end(), q,
                                     [](Block const &b, std::int64_t v) { return b.q < v; });
          entry_class[static_cast<std::size_t>(k)] = it->cls;
        }
    }

    classes.assign(static_cast<std::size_t>(num_classes), {});
    for (int c = 0; c < num_classes; ++c) {
      auto &k = classes[static_cast<std::size_t>(c)];
      int const bin = c % bins;
      k.intra = c < bins;
      k.density_min = bin == 0 ? 0.0 : bounds[static_cast<std::size_t>(bin - 1)];
      k.density_max = bin == bins - 1 ? 1.0 : bounds[static_cast<std::size_t>(bin)];
    }
    for (auto const &b : blocks) {
      auto &k = classes[static_cast<std::size_t>(b.cls)];
      ++k.blocks;
      k.nnz += b.nnz;
      k.dense_elements += (off[b.p + 1] - off[b.p]) * (off[b.q + 1] - off[b.q]);
    }
    // Tile counts per class (windows aligned to row parts), in one pass over the windows.
    {
      std::vector<std::pair<int, Index>> window; // (class, column)
      for (std::size_t p = 0; p < nparts; ++p)
        for (auto r = off[p]; r < off[p + 1]; r += tile_rows) {
          auto const re = std::min<std::int64_t>(r + tile_rows, off[p + 1]);
          window.clear();
          for (auto i = r; i < re; ++i)
            for (offset_type e = permuted.row_map()(i); e < permuted.row_map()(i + 1); ++e)
              window.emplace_back(entry_class[static_cast<std::size_t>(e)], permuted.entries()(e));
          std::sort(window.begin(), window.end());
          window.erase(std::unique(window.begin(), window.end()), window.end());
          for (std::size_t k = 0; k < window.size();) {
            std::size_t e = k;
            while (e < window.size() && window[e].first == window[k].first)
              ++e;
            classes[static_cast<std::size_t>(window[k].first)].tiles +=
                static_cast<std::int64_t>((e - k + tile_cols - 1) / tile_cols);
            k = e;
          }
        }
    }
    // Candidates: csr always; tiles and dense unless the cost model rules them out (or the dense storage is
    // too large). Any F gives the same pruning because every prediction is linear in F.
    auto const &cm = options.cost_model;
    candidates.assign(static_cast<std::size_t>(num_classes), {});
    multi.assign(static_cast<std::size_t>(num_classes), false);
    for (int c = 0; c < num_classes; ++c) {
      auto &k = classes[static_cast<std::size_t>(c)];
      auto &cand = candidates[static_cast<std::size_t>(c)];
      if (k.nnz == 0)
        continue;
      double const elements[num_kernels] = {static_cast<double>(k.nnz),
                                            static_cast<double>(k.tiles) * tile_rows * tile_cols,
                                            static_cast<double>(k.dense_elements)};
      double best = std::numeric_limits<double>::infinity();
      for (int kernel = 0; kernel < num_kernels; ++kernel)
        best = std::min(best, cm.seconds(static_cast<BlockKernel>(kernel), elements[kernel], 1));
      std::ostringstream why;
      for (int kernel = 0; kernel < num_kernels; ++kernel) {
        auto const bk = static_cast<BlockKernel>(kernel);
        double const t = cm.seconds(bk, elements[kernel], 1);
        bool ok = true;
        if (options.force_kernel >= 0) {
          ok = options.force_kernel == kernel;
        } else if (bk != BlockKernel::csr && t > cm.prune_factor * best) {
          ok = false;
          why << name_of(bk) << " pruned (predicted " << t / best << "x the best); ";
        } else if (bk == BlockKernel::dense && 4.0 * elements[kernel] > static_cast<double>(options.dense_max_bytes)) {
          ok = false;
          why << "dense pruned (" << 4.0 * elements[kernel] / (1 << 20) << " MiB > dense_max_bytes); ";
        }
        if (ok)
          cand.push_back(bk);
      }
      k.reason = why.str();
      multi[static_cast<std::size_t>(c)] = cand.size() > 1;
    }
    preprocess_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void build_tuning_structures() {
    if (structures_ready)
      return;
    auto const t0 = std::chrono::steady_clock::now();
    std::vector<char> keep(static_cast<std::size_t>(nnz));
    for (std::size_t e = 0; e < keep.size(); ++e)
      keep[e] = !multi[static_cast<std::size_t>(entry_class[e])] &&
                candidates[static_cast<std::size_t>(entry_class[e])].size() == 1 &&
                candidates[static_cast<std::size_t>(entry_class[e])][0] == BlockKernel::csr;
    // Forced single non-csr kernels are built like multi-candidate classes.
    tuning_rest = make_csr(permuted, keep, /*compressed=*/false);
    class_csr.assign(static_cast<std::size_t>(num_classes), {});
    class_tiles.assign(static_cast<std::size_t>(num_classes), {});
    class_dense.assign(static_cast<std::size_t>(num_classes), {});
    for (int c = 0; c < num_classes; ++c) {
      auto const &cand = candidates[static_cast<std::size_t>(c)];
      bool const separate = multi[static_cast<std::size_t>(c)] || (cand.size() == 1 && cand[0] != BlockKernel::csr);
      if (!separate)
        continue;
      for (std::size_t e = 0; e < keep.size(); ++e)
        keep[e] = entry_class[e] == c;
      for (auto kernel : cand) {
        if (kernel == BlockKernel::csr)
          class_csr[static_cast<std::size_t>(c)] = make_csr(permuted, keep, /*compressed=*/true);
        else if (kernel == BlockKernel::tiles)
          class_tiles[static_cast<std::size_t>(c)] =
              make_tiles(permuted, &keep, partition.part_offsets, /*keep_empty_windows=*/false);
        else {
          std::vector<std::size_t> ids;
          for (std::size_t b = 0; b < blocks.size(); ++b)
            if (blocks[b].cls == c)
              ids.push_back(b);
          class_dense[static_cast<std::size_t>(c)] = make_dense(ids);
        }
      }
    }
    structures_ready = true;
    tuning_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // ---------------------------------------------------------------------------------------------------------
  // Execution

  void run_csr(ExecSpace const &space, CsrPiece<Index, M> const &piece, ConstMatrix<M> const &x, Matrix<M> const &y,
               bool accumulate, bool feature_tiled) const {
    if (feature_tiled)
      spmm_csr_feature_tiled<ExecSpace, Index, M>(space, piece.row_map, piece.entries, piece.values, x, y, accumulate);
    else
      spmm_csr<ExecSpace, Index, M>(space, piece.row_map, piece.entries, piece.values, piece.row_ids, x, y, accumulate);
  }

  void run_dense(ExecSpace const &space, std::vector<DenseBlock<Index, M>> const &list, ConstMatrix<M> const &x,
                 Matrix<M> const &y) const {
    for (auto const &d : list) {
      auto xs = Kokkos::subview(x, std::make_pair(d.col0, d.col0 + d.cols), Kokkos::ALL());
      auto ys = Kokkos::subview(y, std::make_pair(d.row0, d.row0 + d.rows), Kokkos::ALL());
      Impl::gemm(space, "N", "N", 1.0f, ConstMatrix<M>(d.values), ConstMatrix<M>(xs), 1.0f, Matrix<M>(ys));
    }
  }

  void run_class(ExecSpace const &space, int c, BlockKernel kernel, ConstMatrix<M> const &x, Matrix<M> const &y) const {
    auto const cc = static_cast<std::size_t>(c);
    if (kernel == BlockKernel::csr)
      run_csr(space, class_csr[cc], x, y, /*accumulate=*/true, false);
    else if (kernel == BlockKernel::tiles)
      spmm_tiles<ExecSpace, Index, M>(space, class_tiles[cc], x, y, /*accumulate=*/true);
    else
      run_dense(space, class_dense[cc], x, y);
  }

  void build_final(Width &w) {
    if (w.built)
      return;
    std::vector<char> keep(static_cast<std::size_t>(nnz));
    for (std::size_t e = 0; e < keep.size(); ++e)
      keep[e] = w.choice[static_cast<std::size_t>(entry_class[e])] == BlockKernel::csr;
    w.rest = make_csr(permuted, keep, /*compressed=*/false);
    bool any_tiles = false;
    for (std::size_t e = 0; e < keep.size(); ++e) {
      keep[e] = w.choice[static_cast<std::size_t>(entry_class[e])] == BlockKernel::tiles;
      any_tiles = any_tiles || keep[e];
    }
    w.has_tiles = any_tiles;
    if (any_tiles)
      w.tiles = make_tiles(permuted, &keep, partition.part_offsets, /*keep_empty_windows=*/false);
    std::vector<std::size_t> ids;
    for (std::size_t b = 0; b < blocks.size(); ++b)
      if (w.choice[static_cast<std::size_t>(blocks[b].cls)] == BlockKernel::dense)
        ids.push_back(b);
    w.dense = make_dense(ids);
    w.built = true;
  }

  void run_final(ExecSpace const &space, Width const &w, ConstMatrix<M> const &x, Matrix<M> const &y,
                 bool feature_tiled) const {
    run_csr(space, w.rest, x, y, /*accumulate=*/false, feature_tiled);
    if (w.has_tiles)
      spmm_tiles<ExecSpace, Index, M>(space, w.tiles, x, y, /*accumulate=*/true);
    run_dense(space, w.dense, x, y);
  }

  /// Cost-model choice per class (also the prediction shown before tuning ends).
  void predict(Width &w, int f) {
    w.choice.assign(static_cast<std::size_t>(num_classes), BlockKernel::csr);
    for (int c = 0; c < num_classes; ++c) {
      auto &k = w.plan.classes[static_cast<std::size_t>(c)];
      k.predicted.clear();
      if (k.nnz == 0) {
        k.kernel = "csr";
        continue;
      }
      double const elements[num_kernels] = {static_cast<double>(k.nnz),
                                            static_cast<double>(k.tiles) * tile_rows * tile_cols,
                                            static_cast<double>(k.dense_elements)};
      double best = std::numeric_limits<double>::infinity();
      for (auto kernel : candidates[static_cast<std::size_t>(c)]) {
        double const t = options.cost_model.seconds(kernel, elements[static_cast<int>(kernel)], f);
        k.predicted.emplace_back(name_of(kernel), t);
        if (t < best) {
          best = t;
          w.choice[static_cast<std::size_t>(c)] = kernel;
        }
      }
      k.kernel = name_of(w.choice[static_cast<std::size_t>(c)]);
    }
  }

  Width &width(int f) {
    auto it = widths.find(f);
    if (it != widths.end())
      return it->second;
    Width &w = widths[f];
    w.plan = base_plan(f);
    if (options.algorithm != SpmmAlgorithm::adaptive) {
      w.stage = 2;
      w.plan.frozen = true;
      w.plan.reason = "fixed algorithm";
      return w;
    }
    predict(w, f);
    if (!options.timing) {
      w.stage = 2;
      w.plan.frozen = true;
      w.plan.reason = "cost model (timing disabled)";
      for (auto &k : w.plan.classes)
        if (k.nnz > 0)
          k.reason += "chosen by the cost model";
      return w;
    }
    w.class_samples.assign(static_cast<std::size_t>(num_classes), std::vector<std::vector<double>>(num_kernels));
    for (int kernel = 0; kernel < num_kernels; ++kernel) {
      bool used = false;
      for (int c = 0; c < num_classes; ++c) {
        auto const &cand = candidates[static_cast<std::size_t>(c)];
        used = used || (multi[static_cast<std::size_t>(c)] &&
                        std::find(cand.begin(), cand.end(), static_cast<BlockKernel>(kernel)) != cand.end());
      }
      if (used)
        for (int r = 0; r < options.tuning_repeats; ++r)
          w.rounds.push_back(static_cast<BlockKernel>(kernel));
    }
    // Interleave repeats (k0 k1 k2 k0 k1 k2 ...) so that drifting machine load hits every candidate alike.
    std::vector<BlockKernel> interleaved;
    for (int r = 0; r < options.tuning_repeats; ++r)
      for (int kernel = 0; kernel < num_kernels; ++kernel)
        if (std::count(w.rounds.begin(), w.rounds.end(), static_cast<BlockKernel>(kernel)) > r)
          interleaved.push_back(static_cast<BlockKernel>(kernel));
    w.rounds = interleaved;
    w.stage = w.rounds.empty() ? 1 : 0;
    if (w.stage == 1)
      start_final(w);
    return w;
  }

  SpmmPlan base_plan(int f) const {
    SpmmPlan p;
    p.graph = name;
    p.rows = rows;
    p.nnz = nnz;
    p.features = f;
    p.algorithm = name_of(options.algorithm);
    if (options.algorithm == SpmmAlgorithm::adaptive) {
      p.partition_method = name_of(partition.method);
      p.parts = static_cast<std::int64_t>(partition.part_offsets.size()) - 1;
      p.intra_fraction = partition.intra_fraction;
      p.classes = classes;
      p.preprocess_seconds = preprocess_seconds;
      p.partition_seconds = partition.seconds;
      p.ordering = ordering.empty() ? std::string(name_of(partition.method)) + " order" : ordering;
      p.timed = options.timing;
    } else {
      p.rest_kernel = name_of(options.algorithm);
    }
    return p;
  }

  void start_final(Width &w) {
    // Per class: the candidate with the smallest median time.
    for (int c = 0; c < num_classes; ++c) {
      auto const cc = static_cast<std::size_t>(c);
      if (!multi[cc])
        continue;
      auto &k = w.plan.classes[cc];
      k.measured.clear();
      // csr is the reference; another kernel replaces it only when clearly faster.
      double best = std::numeric_limits<double>::infinity();
      for (auto kernel : candidates[cc]) {
        double const t = best_of(w.class_samples[cc][static_cast<std::size_t>(kernel)]);
        k.measured.emplace_back(name_of(kernel), t);
        double const effective = kernel == BlockKernel::csr ? t * switch_margin : t;
        if (effective < best) {
          best = effective;
          w.choice[cc] = kernel;
        }
      }
      k.kernel = name_of(w.choice[cc]);
      k.reason += std::string("fastest of the timed candidates");
    }
    for (int c = 0; c < num_classes; ++c)
      if (!multi[static_cast<std::size_t>(c)] && w.plan.classes[static_cast<std::size_t>(c)].nnz > 0) {
        w.choice[static_cast<std::size_t>(c)] = candidates[static_cast<std::size_t>(c)][0];
        w.plan.classes[static_cast<std::size_t>(c)].kernel = name_of(w.choice[static_cast<std::size_t>(c)]);
        w.plan.classes[static_cast<std::size_t>(c)].reason += "only candidate";
      }
    auto const t0 = std::chrono::steady_clock::now();
    build_final(w);
    tuning_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bool mixed = false;
    for (int c = 0; c < num_classes; ++c)
      mixed = mixed || (w.plan.classes[static_cast<std::size_t>(c)].nnz > 0 &&
                        w.choice[static_cast<std::size_t>(c)] != BlockKernel::csr);
    // The mixed plan must also beat plain CSR on the reordered graph as a whole: class timings of small classes
    // are dominated by call overheads that only the whole apply shows.
    if (mixed && options.force_kernel < 0) {
      build_all_csr();
      w.final_names = {"all_csr", "all_csr+feature_tiled", "plan", "plan+feature_tiled_rest"};
    } else {
      w.final_names = {"plan", "plan+feature_tiled_rest"};
    }
    w.final_samples.assign(w.final_names.size(), {});
    w.final_round = 0;
    w.stage = 1;
  }

  void freeze(Width &w) {
    // The first candidate is the simplest; another must be faster by the switch margin.
    std::size_t best = 0;
    w.plan.final_measured.clear();
    for (std::size_t i = 0; i < w.final_names.size(); ++i) {
      w.plan.final_measured.emplace_back(w.final_names[i], best_of(w.final_samples[i]));
      if (best_of(w.final_samples[i]) < switch_margin * best_of(w.final_samples[best]))
        best = i;
    }
    std::string const &winner = w.final_names[best];
    w.rest_feature_tiled = winner.find("feature_tiled") != std::string::npos;
    w.plan.rest_kernel = w.rest_feature_tiled ? "csr_feature_tiled" : "csr";
    w.plan.reason = "timed: per class the fastest candidate, then the fastest of " +
                    std::to_string(w.final_names.size()) + " whole-apply variants: " + winner;
    if (winner.rfind("all_csr", 0) == 0) {
      for (std::size_t c = 0; c < w.choice.size(); ++c)
        if (w.choice[c] != BlockKernel::csr) {
          w.choice[c] = BlockKernel::csr;
          w.plan.classes[c].kernel = "csr";
          w.plan.classes[c].reason += "; overruled: the whole apply was faster with csr everywhere";
        }
      w.rest = all_csr;
      w.has_tiles = false;
      w.dense.clear();
    }
    w.stage = 2;
    w.plan.frozen = true;
  }

  void build_all_csr() {
    if (all_csr_ready)
      return;
    auto const t0 = std::chrono::steady_clock::now();
    all_csr = make_csr(permuted, std::vector<char>(static_cast<std::size_t>(nnz), 1), /*compressed=*/false);
    all_csr_ready = true;
    tuning_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void apply(ExecSpace const &space, ConstMatrix<M> const &x, Matrix<M> const &y) {
    TESSEL_REQUIRE(x.extent(0) == static_cast<std::size_t>(cols) && y.extent(0) == static_cast<std::size_t>(rows) &&
                       x.extent(1) == y.extent(1),
                   "SpmmHandle::apply on graph '", name, "' (", rows, " x ", cols, "): X is ", x.extent(0), " x ",
                   x.extent(1), ", Y is ", y.extent(0), " x ", y.extent(1));
    int const f = static_cast<int>(x.extent(1));
    if (f == 0 || rows == 0)
      return;
    if (options.algorithm != SpmmAlgorithm::adaptive && widths.find(f) == widths.end())
      width(f); // records the (fixed) plan of this width for plans()
    switch (options.algorithm) {
    case SpmmAlgorithm::csr:
      spmm_csr<ExecSpace, Index, M>(space, graph.row_map(), graph.entries(), graph.values(), {}, x, y, false);
      return;
    case SpmmAlgorithm::csr_feature_tiled:
      spmm_csr_feature_tiled<ExecSpace, Index, M>(space, graph.row_map(), graph.entries(), graph.values(), x, y, false);
      return;
    case SpmmAlgorithm::coo:
      if (coo.carry.extent(1) != x.extent(1))
        coo.carry = decltype(coo.carry)("Tessel::gnn::Spmm::coo_carry", coo.edge_begin.extent(0) - 1, x.extent(1));
      if (nnz == 0) {
        Kokkos::deep_copy(space, y, 0.0f);
        return;
      }
      spmm_coo<ExecSpace, Index, M>(space, coo, graph.entries(), graph.values(), x, y, false);
      return;
    case SpmmAlgorithm::coo_atomic:
      spmm_coo_atomic<ExecSpace, Index, M>(space, coo.rows, graph.entries(), graph.values(), x, y, false);
      return;
    case SpmmAlgorithm::tiles:
      spmm_tiles<ExecSpace, Index, M>(space, tiles, x, y, false);
      return;
    case SpmmAlgorithm::dense:
      Impl::gemm(space, "N", "N", 1.0f, ConstMatrix<M>(dense), x, 0.0f, y);
      return;
    case SpmmAlgorithm::kk:
      kk_spmv<Index, ExecSpace>(space, graph, x, y);
      return;
    case SpmmAlgorithm::adaptive:
      break;
    }
    Width &w = width(f);
    if (w.stage == 2) {
      build_final(w);
      run_final(space, w, x, y, w.rest_feature_tiled);
      return;
    }
    Timer<ExecSpace> timer(space, "Tessel::gnn::Spmm::tuning");
    if (w.stage == 0) {
      build_tuning_structures();
      BlockKernel const kernel = w.rounds[w.round];
      timer.reset();
      run_csr(space, tuning_rest, x, y, /*accumulate=*/false, false);
      for (int c = 0; c < num_classes; ++c) {
        auto const cc = static_cast<std::size_t>(c);
        auto const &cand = candidates[cc];
        bool const separate = multi[cc] || (cand.size() == 1 && cand[0] != BlockKernel::csr);
        if (!separate)
          continue;
        BlockKernel const use = std::find(cand.begin(), cand.end(), kernel) != cand.end() ? kernel : cand.front();
        double const start = timer.seconds();
        run_class(space, c, use, x, y);
        double const t = timer.seconds() - start;
        if (use == kernel)
          w.class_samples[cc][static_cast<std::size_t>(kernel)].push_back(t);
      }
      double const total = timer.seconds();
      tuning_seconds += total;
      w.plan.tuning_seconds = tuning_seconds;
      ++w.plan.tuning_applies;
      if (++w.round == w.rounds.size())
        start_final(w);
      w.plan.tuning_seconds = tuning_seconds;
      return;
    }
    // Stage 1: the final structure with either remainder kernel, interleaved.
    std::size_t const which = w.final_round % w.final_names.size();
    std::string const &variant = w.final_names[which];
    bool const tiled = variant.find("feature_tiled") != std::string::npos;
    timer.reset();
    if (variant.rfind("all_csr", 0) == 0)
      run_csr(space, all_csr, x, y, /*accumulate=*/false, tiled);
    else
      run_final(space, w, x, y, tiled);
    double const t = timer.seconds();
    w.final_samples[which].push_back(t);
    tuning_seconds += t;
    ++w.plan.tuning_applies;
    if (++w.final_round == w.final_names.size() * static_cast<std::size_t>(options.tuning_repeats))
      freeze(w);
    w.plan.tuning_seconds = tuning_seconds;
  }
};

} // namespace Impl

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>()) {
  (void)space;
  auto &s = *_state;
  s.options = options;
  TESSEL_REQUIRE(options.tuning_repeats >= 1, "SpmmHandle: tuning_repeats must be >= 1, got ", options.tuning_repeats);
  TESSEL_REQUIRE(std::is_sorted(options.class_bounds.begin(), options.class_bounds.end()),
                 "SpmmHandle: class_bounds must be increasing");
  validate(graph);
  s.name = graph.name();
  s.rows = graph.num_rows();
  s.cols = graph.num_cols();
  s.nnz = graph.nnz();
  if (options.algorithm == SpmmAlgorithm::adaptive)
    s.setup_adaptive(graph, nullptr);
  else {
    s.partition.permutation = Permutation::identity(graph.num_rows());
    s.partition.part_offsets = {0, static_cast<std::int64_t>(graph.num_rows())};
    s.setup_fixed(graph);
  }
}

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
                                         Partition const &partition)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>()) {
  (void)space;
  auto &s = *_state;
  s.options = options;
  TESSEL_REQUIRE(options.algorithm == SpmmAlgorithm::adaptive,
                 "SpmmHandle: a given partition needs the adaptive algorithm, got ", name_of(options.algorithm));
  validate(graph);
  s.name = graph.name();
  s.rows = graph.num_rows();
  s.cols = graph.num_cols();
  s.nnz = graph.nnz();
  s.setup_adaptive(graph, &partition);
}

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
                                         std::string const &plan_path)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>()) {
  (void)space;
  auto &s = *_state;
  s.options = options;
  s.options.algorithm = SpmmAlgorithm::adaptive;
  validate(graph);
  s.name = graph.name();
  s.rows = graph.num_rows();
  s.cols = graph.num_cols();
  s.nnz = graph.nnz();
  h5::File file(plan_path, h5::Mode::read);
  TESSEL_REQUIRE(file.has_attribute("/", "schema") &&
                     file.read_string_attribute("/", "schema") == "tessel.gnn.spmm_plan",
                 "plan file '", plan_path, "': root attribute schema is not 'tessel.gnn.spmm_plan'");
  auto const rows = file.read_attribute<std::int64_t>("/", "rows");
  auto const nnz = file.read_attribute<std::int64_t>("/", "nnz");
  TESSEL_REQUIRE(rows == static_cast<std::int64_t>(s.rows) && nnz == s.nnz, "plan file '", plan_path,
                 "' was saved for a graph with ", rows, " rows and ", nnz, " entries; graph '", s.name, "' has ",
                 s.rows, " rows and ", s.nnz, " entries");
  auto const bounds = file.read<double>("class_bounds").data;
  TESSEL_REQUIRE(bounds == options.class_bounds, "plan file '", plan_path,
                 "': its density class bounds differ from the handle's options");
  Partition partition;
  partition.method = parse_partition_method(file.read_string_attribute("/partition", "method"));
  partition.permutation =
      Permutation::from_order(file.read<std::int64_t>("partition/old_of_new", {static_cast<std::size_t>(rows)}).data);
  partition.part_offsets = file.read<std::int64_t>("partition/part_offsets").data;
  TESSEL_REQUIRE(partition.part_offsets.size() >= 2 && partition.part_offsets.front() == 0 &&
                     partition.part_offsets.back() == rows &&
                     std::is_sorted(partition.part_offsets.begin(), partition.part_offsets.end()),
                 "plan file '", plan_path, "': partition/part_offsets must rise from 0 to ", rows);
  partition.intra_fraction = file.read_attribute<double>("/partition", "intra_fraction");
  s.setup_adaptive(graph, &partition);
  for (auto const &entry : file.list("plans")) {
    std::string const group = "plans/" + entry;
    int const f = file.read_attribute<int>(group, "features");
    auto const kernels = file.read<int>(group + "/class_kernel", {static_cast<std::size_t>(s.num_classes)}).data;
    auto &w = s.widths[f];
    w.plan = s.base_plan(f);
    w.plan.timed = false;
    s.predict(w, f);
    for (int c = 0; c < s.num_classes; ++c) {
      int const k = kernels[static_cast<std::size_t>(c)];
      TESSEL_REQUIRE(k >= 0 && k < Impl::num_kernels, "plan file '", plan_path, "': ", group, "/class_kernel[", c,
                     "] = ", k, " is not a kernel id (0 csr, 1 tiles, 2 dense)");
      w.choice[static_cast<std::size_t>(c)] = static_cast<BlockKernel>(k);
      w.plan.classes[static_cast<std::size_t>(c)].kernel = name_of(static_cast<BlockKernel>(k));
      w.plan.classes[static_cast<std::size_t>(c)].reason = "loaded from " + plan_path;
    }
    w.plan.rest_kernel = file.read_string_attribute(group, "rest_kernel");
    w.rest_feature_tiled = w.plan.rest_kernel == "csr_feature_tiled";
    w.plan.reason = "loaded from " + plan_path;
    w.plan.frozen = true;
    w.stage = 2;
  }
}

template <class Index, class ExecSpace> SpmmHandle<Index, ExecSpace>::~SpmmHandle() = default;
template <class Index, class ExecSpace> SpmmHandle<Index, ExecSpace>::SpmmHandle(SpmmHandle &&) noexcept = default;
template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace> &SpmmHandle<Index, ExecSpace>::operator=(SpmmHandle &&) noexcept = default;

template <class Index, class ExecSpace>
void SpmmHandle<Index, ExecSpace>::apply(ExecSpace const &space, ConstMatrix<memory_space> const &x,
                                         Matrix<memory_space> const &y) {
  _state->apply(space, x, y);
}

template <class Index, class ExecSpace> SpmmAlgorithm SpmmHandle<Index, ExecSpace>::algorithm() const {
  return _state->options.algorithm;
}

template <class Index, class ExecSpace> Permutation const &SpmmHandle<Index, ExecSpace>::permutation() const {
  return _state->partition.permutation;
}

template <class Index, class ExecSpace> Partition const &SpmmHandle<Index, ExecSpace>::partition() const {
  return _state->partition;
}

template <class Index, class ExecSpace> bool SpmmHandle<Index, ExecSpace>::tuned(int features) const {
  if (_state->options.algorithm != SpmmAlgorithm::adaptive || !_state->options.timing)
    return true;
  auto it = _state->widths.find(features);
  return it != _state->widths.end() && it->second.stage == 2;
}

template <class Index, class ExecSpace> SpmmPlan SpmmHandle<Index, ExecSpace>::plan(int features) const {
  return _state->width(features).plan;
}

template <class Index, class ExecSpace> std::vector<SpmmPlan> SpmmHandle<Index, ExecSpace>::plans() const {
  std::vector<SpmmPlan> out;
  for (auto const &[f, w] : _state->widths)
    out.push_back(w.plan);
  return out;
}

template <class Index, class ExecSpace> double SpmmHandle<Index, ExecSpace>::overhead_seconds() const {
  return _state->preprocess_seconds + _state->tuning_seconds;
}

template <class Index, class ExecSpace> void SpmmHandle<Index, ExecSpace>::save_plans(std::string const &path) const {
  auto const &s = *_state;
  TESSEL_REQUIRE(s.options.algorithm == SpmmAlgorithm::adaptive, "save_plans: only adaptive handles have plans, this ",
                 "one runs ", name_of(s.options.algorithm));
  h5::File file(path, h5::Mode::truncate);
  file.write_attribute("/", "schema", "tessel.gnn.spmm_plan");
  file.write_attribute("/", "schema_version", 1);
  file.write_attribute("/", "graph", s.name);
  file.write_attribute("/", "rows", static_cast<std::int64_t>(s.rows));
  file.write_attribute("/", "nnz", static_cast<std::int64_t>(s.nnz));
  file.write("class_bounds", s.options.class_bounds);
  file.write("partition/old_of_new", s.partition.permutation.old_of_new);
  file.write("partition/part_offsets", s.partition.part_offsets);
  file.write_attribute("/partition", "method", name_of(s.partition.method));
  file.write_attribute("/partition", "intra_fraction", s.partition.intra_fraction);
  file.create_group("plans");
  for (auto const &[f, w] : s.widths) {
    if (w.stage != 2)
      continue;
    std::string const group = "plans/F" + std::to_string(f);
    std::vector<int> kernels;
    for (auto k : w.choice)
      kernels.push_back(static_cast<int>(k));
    file.write(group + "/class_kernel", kernels);
    file.write_attribute(group, "features", f);
    file.write_attribute(group, "rest_kernel", w.plan.rest_kernel);
    file.write_attribute(group, "json", w.plan.to_json());
  }
}

using HostExec = Kokkos::DefaultHostExecutionSpace;
template class SpmmHandle<std::int32_t, HostExec>;
template class SpmmHandle<std::int64_t, HostExec>;

} // namespace tessel::gnn

#include "impl/Decomposition.hpp"
#include "impl/DenseLayout.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>
#include <tuple>

namespace tessel::gnn::Impl {

double best_of(std::vector<double> const &samples) {
  return samples.empty() ? std::numeric_limits<double>::infinity() : *std::min_element(samples.begin(), samples.end());
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

SpmmPlan fixed_plan(std::string const &graph, std::int64_t rows, std::int64_t nnz, int features,
                    std::string const &algorithm) {
  SpmmPlan p;
  p.graph = graph;
  p.rows = rows;
  p.nnz = nnz;
  p.features = features;
  p.algorithm = algorithm;
  p.rest_kernel = algorithm;
  p.frozen = true;
  p.reason = "fixed algorithm";
  return p;
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
Decomposition<Index>::Decomposition(Graph<Index> const &g, SpmmOptions const &opts, Partition const *given,
                                    CsrProbe<Index> *probe, unsigned available, std::string const &unavailable_reason)
    : options(opts), name(g.name()), rows(g.num_rows()), nnz(g.nnz()) {
  auto const t0 = std::chrono::steady_clock::now();
  available |= 1u; // csr
  TESSEL_REQUIRE(options.force_kernel < 0 ||
                     (options.force_kernel < num_block_kernels && (available >> options.force_kernel & 1u) != 0),
                 "adaptive: force_kernel = ", options.force_kernel, " names a kernel this backend cannot run",
                 unavailable_reason.empty() ? "" : " (", unavailable_reason, unavailable_reason.empty() ? "" : ")");
  TESSEL_REQUIRE(g.num_rows() == g.num_cols(), "adaptive: graph '", name, "' is ", g.num_rows(), " x ", g.num_cols(),
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
    if (options.timing && probe && partition.method != PartitionMethod::none && !options.probe_features.empty()) {
      auto const p0 = std::chrono::steady_clock::now();
      probe_reordering(g, part_size, *probe);
      probe_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    }
  }
  auto const &off = partition.part_offsets;
  std::size_t const nparts = off.size() - 1;
  part_of.assign(static_cast<std::size_t>(rows), 0);
  for (std::size_t p = 0; p < nparts; ++p)
    for (auto v = off[p]; v < off[p + 1]; ++v)
      part_of[static_cast<std::size_t>(v)] = static_cast<std::int64_t>(p);

  // Blocks: nonempty (row part, column part) pairs with their density, found per row part with a counter per
  // column part (reset through the list of parts touched), in two linear passes over the part's entries.
  auto const &bounds = options.class_bounds;
  int const bins = static_cast<int>(bounds.size()) + 1;
  num_classes = 2 * bins;
  entry_class.assign(static_cast<std::size_t>(nnz), 0);
  auto const *rm = permuted.row_map().data();
  auto const *ent = permuted.entries().data();
  {
    std::vector<std::int64_t> count(nparts, 0), block_of(nparts, -1), touched;
    for (std::size_t p = 0; p < nparts; ++p) {
      touched.clear();
      for (offset_type k = rm[off[p]]; k < rm[off[p + 1]]; ++k) {
        auto const q = part_of[static_cast<std::size_t>(ent[k])];
        if (count[static_cast<std::size_t>(q)]++ == 0)
          touched.push_back(q);
      }
      std::sort(touched.begin(), touched.end());
      for (auto q : touched) {
        auto const uq = static_cast<std::size_t>(q);
        double const area = static_cast<double>(off[p + 1] - off[p]) * static_cast<double>(off[uq + 1] - off[uq]);
        double const density = static_cast<double>(count[uq]) / area;
        int bin = 0;
        while (bin < bins - 1 && density >= bounds[static_cast<std::size_t>(bin)])
          ++bin;
        int const cls = (static_cast<std::int64_t>(p) == q ? 0 : bins) + bin;
        block_of[uq] = cls;
        blocks.push_back({static_cast<std::int64_t>(p), q, count[uq], density, cls});
        count[uq] = 0;
      }
      for (offset_type k = rm[off[p]]; k < rm[off[p + 1]]; ++k)
        entry_class[static_cast<std::size_t>(k)] =
            static_cast<int>(block_of[static_cast<std::size_t>(part_of[static_cast<std::size_t>(ent[k])])]);
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
  // Tile counts per class (windows aligned to row parts): distinct columns per window and class, counted with a
  // stamp per column (a column meets a window in one block, hence in one class).
  {
    std::vector<std::int64_t> stamp(static_cast<std::size_t>(rows), -1);
    std::vector<std::int64_t> distinct(static_cast<std::size_t>(num_classes), 0);
    std::int64_t window = 0;
    for (std::size_t p = 0; p < nparts; ++p)
      for (auto r = off[p]; r < off[p + 1]; r += tile_rows, ++window) {
        auto const re = std::min<std::int64_t>(r + tile_rows, off[p + 1]);
        std::fill(distinct.begin(), distinct.end(), 0);
        for (offset_type e = rm[r]; e < rm[re]; ++e) {
          auto const c = static_cast<std::size_t>(ent[e]);
          if (stamp[c] != window) {
            stamp[c] = window;
            ++distinct[static_cast<std::size_t>(entry_class[static_cast<std::size_t>(e)])];
          }
        }
        for (int c = 0; c < num_classes; ++c)
          classes[static_cast<std::size_t>(c)].tiles +=
              (distinct[static_cast<std::size_t>(c)] + tile_cols - 1) / tile_cols;
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
    double const elements[num_block_kernels] = {static_cast<double>(k.nnz),
                                                static_cast<double>(k.tiles) * tile_rows * tile_cols,
                                                static_cast<double>(k.dense_elements)};
    double best = std::numeric_limits<double>::infinity();
    for (int kernel = 0; kernel < num_block_kernels; ++kernel)
      best = std::min(best, cm.seconds(static_cast<BlockKernel>(kernel), elements[kernel], 1));
    std::ostringstream why;
    for (int kernel = 0; kernel < num_block_kernels; ++kernel) {
      auto const bk = static_cast<BlockKernel>(kernel);
      double const t = cm.seconds(bk, elements[kernel], 1);
      bool ok = true;
      if (options.force_kernel >= 0) {
        ok = options.force_kernel == kernel;
      } else if ((available >> kernel & 1u) == 0) {
        ok = false;
        why << name_of(bk) << " unavailable (" << unavailable_reason << "); ";
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

/// Times the whole-graph CSR kernels (row-parallel, and feature-tiled where F > its slice width) in the original
/// and in the partitioned order at the widths the caller will apply (options.probe_features). A round runs every
/// candidate twice, in mirrored order (A B B A, or A B C D D C B A), so that each candidate runs once right after
/// itself and once after another kernel, and drifting load hits all alike; per round and order the faster kernel
/// counts, and the round's ratio partitioned / original compares runs made within milliseconds of each other, so
/// that load from other processes, which comes in bursts on a shared machine, mostly cancels. After two rounds
/// the probe stops if the ratios agree (all below reorder_margin(F), or all above); otherwise it runs up to five. The
/// partitioned order is kept only when it is faster by reorder_margin(F) in every round, or in all but one of three
/// or more (per width the second largest ratio; widths weighted by their time): the original order's best single kernel
/// is the baseline the handle must not lose to, and reordering pays when X spills from cache, not for narrow X.
template <class Index>
void Decomposition<Index>::probe_reordering(Graph<Index> const &g, std::int64_t part_size, CsrProbe<Index> &probe) {
  probe.prepare(g, permuted);
  constexpr int min_rounds = 2, max_rounds = 5;
  double weighted = 0, weight = 0;
  std::ostringstream note;
  note << "reordering probe (best whole-graph csr kernel per order, median of mirrored rounds):";
  for (int f : options.probe_features) {
    TESSEL_REQUIRE(f >= 1, "SpmmOptions::probe_features must be positive, got ", f);
    int const kernels = f > feature_tile_width ? 2 : 1;
    int const candidates = 2 * kernels; // candidate c: order c % 2, kernel c / 2
    double const margin = reorder_margin(f);
    probe.seconds(0, f, 0); // first touch of the probe's X and Y
    std::vector<double> ratios, best[2];
    double fastest[2][2] = {{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()},
                            {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()}};
    for (int round = 0; round < max_rounds; ++round) {
      std::vector<double> sum(static_cast<std::size_t>(candidates), 0.0);
      for (int i = 0; i < 2 * candidates; ++i) {
        int const c = i < candidates ? i : 2 * candidates - 1 - i;
        double const sec = probe.seconds(c % 2, f, c / 2);
        sum[static_cast<std::size_t>(c)] += sec;
        fastest[c % 2][c / 2] = std::min(fastest[c % 2][c / 2], sec);
      }
      double t[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
      for (int c = 0; c < candidates; ++c)
        t[c % 2] = std::min(t[c % 2], sum[static_cast<std::size_t>(c)] / 2);
      best[0].push_back(t[0]);
      best[1].push_back(t[1]);
      ratios.push_back(t[1] / t[0]);
      if (round + 1 >= min_rounds) {
        auto const below = std::count_if(ratios.begin(), ratios.end(), [&](double r) { return r <= margin; });
        if (below == 0 || below == static_cast<std::ptrdiff_t>(ratios.size()))
          break;
      }
    }
    // The second largest ratio: a gain must show in all rounds but one, so that a marginal or noisy gain (the
    // rounds disagree) leaves the original order, while one burst against a clear gain does not.
    std::vector<double> sorted = ratios;
    std::sort(sorted.begin(), sorted.end());
    double const ratio = sorted.size() >= 3 ? sorted[sorted.size() - 2] : sorted.back();
    double const base = best_of(best[0]);
    weighted += ratio / margin * base; // <= 1 when the gain reaches this width's margin
    weight += base;
    note << " F=" << f << ": original " << 1e3 * base << " ms ("
         << (fastest[0][1] < fastest[0][0] ? "csr_feature_tiled" : "csr") << "), " << name_of(partition.method) << " "
         << 1e3 * best_of(best[1]) << " ms (" << (fastest[1][1] < fastest[1][0] ? "csr_feature_tiled" : "csr")
         << "), ratio " << sorted[sorted.size() / 2] << " (median) " << ratio << " (second largest) of "
         << ratios.size() << " rounds, needs <= " << margin << ";";
  }
  // Widths weighted by their time: the partitioned order must reach the margins on the time-weighted average.
  double const relative = weight > 0 ? weighted / weight : 2.0;
  if (relative <= 1.0) {
    note << " -> reordered";
  } else {
    note << " -> original order kept (the partitioned one is not faster by the margin)";
    double const spent = partition.seconds; // the partitioning was done, if not kept
    partition = gnn::partition(g, part_size, PartitionMethod::none);
    partition.seconds += spent;
    permuted = g;
  }
  ordering = note.str();
}

template <class Index> bool Decomposition<Index>::separate(int c) const {
  auto const &cand = candidates[static_cast<std::size_t>(c)];
  return multi[static_cast<std::size_t>(c)] || (cand.size() == 1 && cand[0] != BlockKernel::csr);
}

template <class Index> std::vector<char> Decomposition<Index>::tuning_rest_mask() const {
  // Forced single non-csr kernels are built like multi-candidate classes.
  std::vector<char> keep(static_cast<std::size_t>(nnz));
  for (std::size_t e = 0; e < keep.size(); ++e) {
    auto const c = static_cast<std::size_t>(entry_class[e]);
    keep[e] = !multi[c] && candidates[c].size() == 1 && candidates[c][0] == BlockKernel::csr;
  }
  return keep;
}

template <class Index> std::vector<char> Decomposition<Index>::class_mask(int c) const {
  std::vector<char> keep(static_cast<std::size_t>(nnz));
  for (std::size_t e = 0; e < keep.size(); ++e)
    keep[e] = entry_class[e] == c;
  return keep;
}

template <class Index>
std::vector<char> Decomposition<Index>::choice_mask(std::vector<BlockKernel> const &choice, BlockKernel kernel) const {
  std::vector<char> keep(static_cast<std::size_t>(nnz));
  for (std::size_t e = 0; e < keep.size(); ++e)
    keep[e] = choice[static_cast<std::size_t>(entry_class[e])] == kernel;
  return keep;
}

template <class Index> std::vector<std::size_t> Decomposition<Index>::class_blocks(int c) const {
  std::vector<std::size_t> ids;
  for (std::size_t b = 0; b < blocks.size(); ++b)
    if (blocks[b].cls == c)
      ids.push_back(b);
  return ids;
}

template <class Index>
std::vector<std::size_t> Decomposition<Index>::choice_blocks(std::vector<BlockKernel> const &choice,
                                                             BlockKernel kernel) const {
  std::vector<std::size_t> ids;
  for (std::size_t b = 0; b < blocks.size(); ++b)
    if (choice[static_cast<std::size_t>(blocks[b].cls)] == kernel)
      ids.push_back(b);
  return ids;
}

template <class Index>
HostCsrPiece<Index> Decomposition<Index>::csr(std::vector<char> const &keep, bool compressed) const {
  return make_csr(permuted, keep, compressed);
}

template <class Index> HostTileSet<Index> Decomposition<Index>::tiles(std::vector<char> const &keep) const {
  return make_tiles(permuted, &keep, partition.part_offsets, /*keep_empty_windows=*/false);
}

template <class Index>
std::vector<HostDenseBlock> Decomposition<Index>::dense(std::vector<std::size_t> const &block_ids) const {
  std::vector<HostDenseBlock> out;
  auto const &off = partition.part_offsets;
  std::vector<std::size_t> slot(blocks.size(), std::numeric_limits<std::size_t>::max());
  for (auto b : block_ids) {
    auto const &blk = blocks[b];
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
      d.values[static_cast<std::size_t>((i - d.row0) * d.cols + (permuted.entries()(k) - d.col0))] +=
          permuted.values()(k);
    }
  }
  return out;
}

template <class Index>
std::vector<HostCsrPiece<Index>> Decomposition<Index>::csr_groups(std::vector<int> const &group_of_class,
                                                                  std::vector<char> const &compressed) const {
  std::size_t const groups = compressed.size();
  std::vector<HostCsrPiece<Index>> out(groups);
  std::vector<std::int64_t> reserve(groups, 0);
  for (int c = 0; c < num_classes; ++c)
    if (group_of_class[static_cast<std::size_t>(c)] >= 0)
      reserve[static_cast<std::size_t>(group_of_class[static_cast<std::size_t>(c)])] +=
          classes[static_cast<std::size_t>(c)].nnz;
  for (std::size_t gi = 0; gi < groups; ++gi) {
    out[gi].entries.reserve(static_cast<std::size_t>(reserve[gi]));
    out[gi].values.reserve(static_cast<std::size_t>(reserve[gi]));
    if (!compressed[gi])
      out[gi].row_map.reserve(static_cast<std::size_t>(rows) + 1);
  }
  auto const *rm = permuted.row_map().data();
  auto const *ent = permuted.entries().data();
  auto const *val = permuted.values().data();
  std::vector<std::size_t> before(groups);
  for (Index i = 0; i < rows; ++i) {
    for (std::size_t gi = 0; gi < groups; ++gi)
      before[gi] = out[gi].entries.size();
    for (offset_type k = rm[i]; k < rm[i + 1]; ++k) {
      int const gi = group_of_class[static_cast<std::size_t>(entry_class[static_cast<std::size_t>(k)])];
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
std::vector<HostTileSet<Index>> Decomposition<Index>::tiles_groups(std::vector<int> const &group_of_class,
                                                                   int groups) const {
  std::vector<std::int64_t> expected(static_cast<std::size_t>(groups), 0);
  for (int c = 0; c < num_classes; ++c)
    if (group_of_class[static_cast<std::size_t>(c)] >= 0)
      expected[static_cast<std::size_t>(group_of_class[static_cast<std::size_t>(c)])] +=
          classes[static_cast<std::size_t>(c)].tiles;
  return build_tiles(
      permuted,
      [&](offset_type k) { return group_of_class[static_cast<std::size_t>(entry_class[static_cast<std::size_t>(k)])]; },
      groups, partition.part_offsets, /*keep_empty_windows=*/false, expected);
}

template <class Index> SpmmPlan Decomposition<Index>::base_plan(int f) const {
  SpmmPlan p;
  p.graph = name;
  p.rows = rows;
  p.nnz = nnz;
  p.features = f;
  p.algorithm = name_of(SpmmAlgorithm::adaptive);
  p.partition_method = name_of(partition.method);
  p.parts = static_cast<std::int64_t>(partition.part_offsets.size()) - 1;
  p.intra_fraction = partition.intra_fraction;
  p.classes = classes;
  p.preprocess_seconds = preprocess_seconds;
  p.partition_seconds = partition.seconds;
  p.probe_seconds = probe_seconds;
  p.ordering = ordering.empty() ? std::string(name_of(partition.method)) + " order" : ordering;
  p.timed = options.timing;
  return p;
}

/// Cost-model choice per class (also the prediction shown before tuning ends).
template <class Index> void Decomposition<Index>::predict(WidthSelection &w, int f) const {
  w.choice.assign(static_cast<std::size_t>(num_classes), BlockKernel::csr);
  for (int c = 0; c < num_classes; ++c) {
    auto &k = w.plan.classes[static_cast<std::size_t>(c)];
    k.predicted.clear();
    if (k.nnz == 0) {
      k.kernel = "csr";
      continue;
    }
    double const elements[num_block_kernels] = {static_cast<double>(k.nnz),
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

template <class Index> WidthSelection Decomposition<Index>::begin(int f) const {
  WidthSelection w;
  w.plan = base_plan(f);
  predict(w, f);
  if (!options.timing) {
    w.stage = 2;
    w.plan.frozen = true;
    w.plan.reason = "cost model (timing disabled)";
    w.winner = "plan";
    for (auto &k : w.plan.classes)
      if (k.nnz > 0)
        k.reason += "chosen by the cost model";
    return w;
  }
  w.class_samples.assign(static_cast<std::size_t>(num_classes), std::vector<std::vector<double>>(num_block_kernels));
  std::vector<int> used(num_block_kernels, 0);
  for (int c = 0; c < num_classes; ++c)
    if (multi[static_cast<std::size_t>(c)])
      for (auto kernel : candidates[static_cast<std::size_t>(c)])
        used[static_cast<std::size_t>(kernel)] = 1;
  // Interleave repeats (k0 k1 k2 k0 k1 k2 ...) so that drifting machine load hits every candidate alike.
  for (int r = 0; r < options.tuning_repeats; ++r)
    for (int kernel = 0; kernel < num_block_kernels; ++kernel)
      if (used[static_cast<std::size_t>(kernel)])
        w.rounds.push_back(static_cast<BlockKernel>(kernel));
  w.stage = w.rounds.empty() ? 1 : 0;
  return w;
}

template <class Index> BlockKernel Decomposition<Index>::round_kernel(int c, BlockKernel kernel) const {
  auto const &cand = candidates[static_cast<std::size_t>(c)];
  return std::find(cand.begin(), cand.end(), kernel) != cand.end() ? kernel : cand.front();
}

template <class Index>
BlockKernel Decomposition<Index>::round_kernel(WidthSelection const &w, int c, BlockKernel kernel) const {
  auto const cc = static_cast<std::size_t>(c);
  if (cc < w.dropped.size() && w.dropped[cc][static_cast<std::size_t>(kernel)])
    return candidates[cc].front();
  return round_kernel(c, kernel);
}

template <class Index> void Decomposition<Index>::after_round(WidthSelection &w) const {
  if (w.dropped.empty())
    w.dropped.assign(static_cast<std::size_t>(num_classes), std::vector<char>(num_block_kernels, 0));
  std::vector<char> still_timed(num_block_kernels, 0);
  for (int c = 0; c < num_classes; ++c) {
    auto const cc = static_cast<std::size_t>(c);
    if (!multi[cc])
      continue;
    auto const &samples = w.class_samples[cc];
    double fastest = std::numeric_limits<double>::infinity();
    bool complete = true;
    for (auto kernel : candidates[cc]) {
      auto const &s = samples[static_cast<std::size_t>(kernel)];
      complete = complete && !s.empty();
      fastest = std::min(fastest, best_of(s));
    }
    for (auto kernel : candidates[cc]) {
      auto const k = static_cast<std::size_t>(kernel);
      if (complete && !w.dropped[cc][k] && best_of(samples[k]) > drop_factor * fastest) {
        w.dropped[cc][k] = 1;
        std::ostringstream why;
        why << name_of(kernel) << " dropped after " << samples[k].size() << " sample(s) ("
            << best_of(samples[k]) / fastest << "x the fastest); ";
        w.plan.classes[cc].reason += why.str();
      }
      if (!w.dropped[cc][k])
        still_timed[k] = 1;
    }
  }
  auto const from = w.rounds.begin() + static_cast<std::ptrdiff_t>(w.round);
  w.rounds.erase(
      std::remove_if(from, w.rounds.end(), [&](BlockKernel k) { return !still_timed[static_cast<std::size_t>(k)]; }),
      w.rounds.end());
}

template <class Index> void Decomposition<Index>::choose(WidthSelection &w) const {
  for (int c = 0; c < num_classes; ++c) {
    auto const cc = static_cast<std::size_t>(c);
    auto &k = w.plan.classes[cc];
    if (!multi[cc]) {
      if (k.nnz > 0) {
        w.choice[cc] = candidates[cc][0];
        k.kernel = name_of(w.choice[cc]);
        k.reason += "only candidate";
      }
      continue;
    }
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
}

template <class Index> bool Decomposition<Index>::mixed(WidthSelection const &w) const {
  for (int c = 0; c < num_classes; ++c)
    if (w.plan.classes[static_cast<std::size_t>(c)].nnz > 0 &&
        w.choice[static_cast<std::size_t>(c)] != BlockKernel::csr)
      return true;
  return false;
}

template <class Index> void Decomposition<Index>::start_final(WidthSelection &w, std::vector<std::string> names) const {
  bool const is_mixed = mixed(w);
  w.final_levels.clear();
  for (auto const &name : names)
    w.final_levels.push_back(is_mixed && name.rfind("all_csr", 0) != 0 ? 1 : 0);
  w.final_names = std::move(names);
  w.final_samples.assign(w.final_names.size(), {});
  w.final_round = 0;
  w.stage = 1;
}

namespace {
/// Variant of whole-apply number \p round: mirrored rounds (A B C C B A ...), so that every variant runs once right
/// after itself and once after another one, as the rounds of the reordering probe.
std::size_t mirrored(std::size_t round, std::size_t n) {
  std::size_t const p = round % (2 * n);
  return p < n ? p : 2 * n - 1 - p;
}
} // namespace

template <class Index>
std::string const &Decomposition<Index>::final_variant(WidthSelection const &w, std::size_t k) const {
  return w.final_names[mirrored(k, w.final_names.size())];
}

template <class Index> std::size_t Decomposition<Index>::final_applies(WidthSelection const &w) const {
  // tuning_repeats samples per variant at least, in whole mirrored rounds.
  return 2 * w.final_names.size() * static_cast<std::size_t>(std::max(1, (options.tuning_repeats + 1) / 2));
}

template <class Index> std::string const &Decomposition<Index>::current_final(WidthSelection const &w) const {
  return final_variant(w, w.final_round);
}

template <class Index> bool Decomposition<Index>::record_final(WidthSelection &w, double seconds) const {
  w.final_samples[mirrored(w.final_round, w.final_names.size())].push_back(seconds);
  if (++w.final_round < final_applies(w))
    return false;
  freeze(w);
  return true;
}

template <class Index> void Decomposition<Index>::freeze(WidthSelection &w) const {
  // Names come simplest first: within a level (csr on the whole graph; the mixed plan) the first variant stays
  // unless another is faster by the switch margin (row-parallel before feature-tiled csr, whose samples in tuning
  // were not always borne out later), and the mixed plan must beat the csr variant by the margin as well.
  std::size_t const none = w.final_names.size();
  std::size_t best_level[2] = {none, none};
  w.plan.final_measured.clear();
  for (std::size_t i = 0; i < w.final_names.size(); ++i) {
    double const t = best_of(w.final_samples[i]);
    if (!w.final_samples[i].empty())
      w.plan.final_measured.emplace_back(w.final_names[i], t);
    auto &b = best_level[w.final_levels[i]];
    if (b == none || t < switch_margin * best_of(w.final_samples[b]))
      b = i;
  }
  std::size_t best = best_level[0] != none ? best_level[0] : best_level[1];
  if (best_level[0] != none && best_level[1] != none &&
      best_of(w.final_samples[best_level[1]]) < switch_margin * best_of(w.final_samples[best_level[0]]))
    best = best_level[1];
  w.winner = w.final_names[best];
  w.plan.reason = "timed: per class the fastest candidate, then the fastest of " +
                  std::to_string(w.final_names.size()) + " whole-apply variants: " + w.winner;
  if (w.winner.rfind("all_csr", 0) == 0)
    for (std::size_t c = 0; c < w.choice.size(); ++c)
      if (w.choice[c] != BlockKernel::csr) {
        w.choice[c] = BlockKernel::csr;
        w.plan.classes[c].kernel = "csr";
        w.plan.classes[c].reason += "; overruled: the whole apply was faster with csr everywhere";
      }
  w.stage = 2;
  w.plan.frozen = true;
}

template HostCsrPiece<std::int32_t> make_csr(Graph<std::int32_t> const &, std::vector<char> const &, bool);
template HostCsrPiece<std::int64_t> make_csr(Graph<std::int64_t> const &, std::vector<char> const &, bool);
template HostTileSet<std::int32_t> make_tiles(Graph<std::int32_t> const &, std::vector<char> const *,
                                              std::vector<std::int64_t> const &, bool);
template HostTileSet<std::int64_t> make_tiles(Graph<std::int64_t> const &, std::vector<char> const *,
                                              std::vector<std::int64_t> const &, bool);
template class Decomposition<std::int32_t>;
template class Decomposition<std::int64_t>;

} // namespace tessel::gnn::Impl

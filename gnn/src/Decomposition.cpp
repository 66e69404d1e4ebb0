#include "impl/Decomposition.hpp"
#include "impl/ForceKernel.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>

namespace tessel::gnn::Impl {

double best_of(std::vector<double> const &samples) {
  return samples.empty() ? std::numeric_limits<double>::infinity() : *std::min_element(samples.begin(), samples.end());
}

namespace {
int forced = -1;
} // namespace

int forced_kernel() { return forced; }
ForceKernel::ForceKernel(BlockKernel kernel) : _previous(forced) { forced = static_cast<int>(kernel); }
ForceKernel::~ForceKernel() { forced = _previous; }

template <class Index>
Decomposition<Index>::Decomposition(Graph<Index> const &g, SpmmOptions const &opts, Partition const *given,
                                    CsrProbe<Index> *probe, unsigned available, std::string const &unavailable_reason)
    : options(opts), force_kernel(forced_kernel()), name(g.name()), rows(g.num_rows()), nnz(g.nnz()) {
  auto const t0 = std::chrono::steady_clock::now();
  available |= 1u; // csr
  TESSEL_REQUIRE(force_kernel < 0 || (force_kernel < num_block_kernels && (available >> force_kernel & 1u) != 0),
                 "adaptive: force_kernel = ", force_kernel, " names a kernel this backend cannot run",
                 unavailable_reason.empty() ? "" : " (", unavailable_reason, unavailable_reason.empty() ? "" : ")");
  TESSEL_REQUIRE(g.num_rows() == g.num_cols(), "adaptive: graph '", name, "' is ", g.num_rows(), " x ", g.num_cols(),
                 "; the adaptive algorithm reorders vertices and needs a square matrix");
  reorder(g, given, probe);
  find_blocks();
  count_classes();
  choose_candidates(available, unavailable_reason);
  preprocess_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Vertex order and parts: \p given, or a partition of \p g (with timing on, \p probe decides whether it pays).
template <class Index>
void Decomposition<Index>::reorder(Graph<Index> const &g, Partition const *given, CsrProbe<Index> *probe) {
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
  if (!partition.permutation.is_identity())
    other_order = partition.permutation.new_of_old; // the original order, in the handle's numbering
  auto const &off = partition.part_offsets;
  std::size_t const nparts = off.size() - 1;
  part_of.assign(static_cast<std::size_t>(rows), 0);
  for (std::size_t p = 0; p < nparts; ++p)
    for (auto v = off[p]; v < off[p + 1]; ++v)
      part_of[static_cast<std::size_t>(v)] = static_cast<std::int64_t>(p);
}

/// Blocks: nonempty (row part, column part) pairs with their density and class, found per row part with a counter
/// per column part (reset through the list of parts touched), in two linear passes over the part's entries.
template <class Index> void Decomposition<Index>::find_blocks() {
  auto const &off = partition.part_offsets;
  std::size_t const nparts = off.size() - 1;
  auto const &bounds = options.class_bounds;
  int const bins = static_cast<int>(bounds.size()) + 1;
  num_classes = 2 * bins;
  entry_class.assign(static_cast<std::size_t>(nnz), 0);
  auto const *rm = permuted.row_map().data();
  auto const *ent = permuted.entries().data();
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

/// The width-independent class plans: density range, blocks, entries, dense elements and tiles of each class.
template <class Index> void Decomposition<Index>::count_classes() {
  auto const &off = partition.part_offsets;
  auto const &bounds = options.class_bounds;
  int const bins = num_classes / 2;
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
  auto const *rm = permuted.row_map().data();
  auto const *ent = permuted.entries().data();
  {
    std::size_t const nparts = off.size() - 1;
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
}

/// Candidates: csr always; tiles and dense unless the cost model rules them out (or the dense storage is too
/// large). Any F gives the same pruning because every prediction is linear in F.
template <class Index>
void Decomposition<Index>::choose_candidates(unsigned available, std::string const &unavailable_reason) {
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
      if (force_kernel >= 0) {
        ok = force_kernel == kernel;
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
    other_order = partition.permutation.old_of_new; // still a candidate of the final stage
    double const spent = partition.seconds;         // the partitioning was done, if not kept
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

template class Decomposition<std::int32_t>;
template class Decomposition<std::int64_t>;

} // namespace tessel::gnn::Impl

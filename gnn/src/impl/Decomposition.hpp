#ifndef TESSEL_GNN_IMPL_DECOMPOSITION_HPP
#define TESSEL_GNN_IMPL_DECOMPOSITION_HPP

// AdaptGear's decomposition and kernel selection, shared by the host handle (src/Spmm.cpp) and the CUDA handle
// (src/cuda/Spmm.cpp): the reordering, the density classes of blocks and their candidate kernels, the host-side
// builders of each kernel's data structure, and the selection state machine of one feature width. Backends only
// move the built structures to their memory, run the kernels and report timings; the plan (SpmmPlan) and the
// decisions are made here, once for both.
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Reorder.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "TileShape.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::gnn::Impl {

inline constexpr int num_block_kernels = 3;
inline constexpr std::int64_t default_part_size = 64;
/// A candidate other than the simplest must win by this factor, so that timing noise does not pick it.
inline constexpr double switch_margin = 0.95;
/// A class candidate slower than this factor times the class's fastest after one sample each is not timed again.
inline constexpr double drop_factor = 2.5;
/// The partitioned vertex order replaces the original one only when the probe finds it faster by this factor at
/// width \p f: the original order's best whole-graph kernel is the baseline the adaptive handle must never lose
/// to, and gains smaller than this were not reproducible on a loaded machine. At F <= 16 (an X row is at most one
/// cache line, so reordering gains only from reuse in L2) the probe's gains predicted the bench's worst: R-MAT at
/// F = 16, probed 11-13% faster, ran 9% slower in the full bench; there a 20% gain is required.
inline constexpr double reorder_margin(int f) { return f <= 16 ? 0.8 : 0.9; }
/// Feature slice width of the feature-tiled CSR (host and device); at F <= this width it is plain CSR.
inline constexpr int feature_tile_width = 32;

/// Best of the timed samples: on a shared machine the minimum is the least disturbed run (infinity when empty).
double best_of(std::vector<double> const &samples);

/// A CSR over all rows (row_ids empty) or over a list of rows (compressed), in host vectors.
template <class Index> struct HostCsrPiece {
  std::vector<offset_type> row_map{0};
  std::vector<Index> entries;
  std::vector<float> values;
  std::vector<Index> row_ids;
  std::int64_t nnz = 0;
  std::int64_t rows() const { return static_cast<std::int64_t>(row_map.size()) - 1; }
};

/// TC-GNN condensed row windows in host vectors (see TileSet in Kernels.hpp for the layout).
template <class Index> struct HostTileSet {
  std::vector<std::int64_t> row0;
  std::vector<int> nrows;
  std::vector<std::int64_t> tile_begin{0};
  std::vector<Index> tile_col;
  std::vector<float> tile_val;
  std::int64_t num_tiles() const { return static_cast<std::int64_t>(tile_col.size()) / tile_cols; }
};

/// One dense block of A (rows x cols, row-major) at (row0, col0).
struct HostDenseBlock {
  std::int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  std::vector<float> values;
};

/// The entries of \p g with keep[k] set, as CSR over all rows or over the rows that keep an entry (compressed).
template <class Index>
HostCsrPiece<Index> make_csr(Graph<Index> const &g, std::vector<char> const &keep, bool compressed);

/// Condensed 16 x 8 tiles of the kept entries (all entries when \p keep is null), windows aligned to the starts
/// of \p part_offsets. Padding columns repeat the window's first column (their values are zero).
template <class Index>
HostTileSet<Index> make_tiles(Graph<Index> const &g, std::vector<char> const *keep,
                              std::vector<std::int64_t> const &part_offsets, bool keep_empty_windows);

/// Times the whole-graph CSR kernels on the original and on the reordered graph for the reordering probe; each
/// backend runs its own kernels.
template <class Index> class CsrProbe {
public:
  virtual ~CsrProbe() = default;
  virtual void prepare(Graph<Index> const &original, Graph<Index> const &reordered) = 0;
  /// Seconds of one apply of the original (which = 0) or the reordered (1) graph with \p f feature columns, by
  /// row-parallel CSR (kernel 0) or feature-tiled CSR (kernel 1, asked only for f > feature_tile_width).
  virtual double seconds(int which, int f, int kernel) = 0;
};

/// The selection state of one feature width.
struct WidthSelection {
  SpmmPlan plan;
  /// 0: timing class kernels, 1: timing the whole-apply variants, 2: frozen.
  int stage = 0;
  std::vector<BlockKernel> rounds; ///< kernel of each class-timing apply (interleaved repeats)
  std::size_t round = 0;
  std::vector<std::vector<std::vector<double>>> class_samples; ///< [class][kernel] -> seconds
  std::vector<std::vector<char>> dropped; ///< [class][kernel]: no longer timed (see Decomposition::after_round)
  std::vector<BlockKernel> choice;        ///< kernel of each class
  std::vector<std::string> final_names;   ///< whole-apply variants, the simplest first
  std::vector<int> final_levels;          ///< 0: csr on the whole graph, 1: the mixed plan (must win by switch_margin)
  std::vector<std::vector<double>> final_samples;
  std::size_t final_round = 0;
  std::string winner; ///< the frozen variant
};

/// AdaptGear's decomposition of one square graph (see gnn/README.md, "The adaptive algorithm").
template <class Index> class Decomposition {
public:
  /// Reorders (or uses \p given), cuts P A P^T into blocks and density classes and lists each class's candidate
  /// kernels among those the backend has (\p available: bit k for BlockKernel k; csr is always available). With
  /// timing on, \p probe (may be null: always reorder) decides whether the reordering pays.
  Decomposition(Graph<Index> const &graph, SpmmOptions const &options, Partition const *given, CsrProbe<Index> *probe,
                unsigned available = 0b111u, std::string const &unavailable_reason = "");

  struct Block {
    std::int64_t p, q, nnz;
    double density;
    int cls;
  };

  SpmmOptions options;
  std::string name;
  Index rows = 0;
  offset_type nnz = 0;
  Partition partition;
  Graph<Index> permuted;
  std::vector<std::int64_t> part_of; ///< part of each permuted vertex
  std::vector<Block> blocks;
  std::vector<int> entry_class; ///< class of each entry of `permuted`
  int num_classes = 0;
  std::vector<SpmmClassPlan> classes; ///< width-independent parts of the class plans
  std::vector<std::vector<BlockKernel>> candidates;
  std::vector<bool> multi; ///< class has more than one candidate
  double preprocess_seconds = 0;
  double probe_seconds = 0; ///< of preprocess_seconds, the reordering probe's share
  std::string ordering;     ///< how the vertex order was chosen

  /// True when class \p c runs apart from the remainder while tuning (several candidates, or one that is not csr).
  bool separate(int c) const;
  /// Entries that stay in the CSR remainder while tuning (classes whose only candidate is csr).
  std::vector<char> tuning_rest_mask() const;
  /// Entries of class \p c.
  std::vector<char> class_mask(int c) const;
  /// Entries whose class runs \p kernel in \p choice.
  std::vector<char> choice_mask(std::vector<BlockKernel> const &choice, BlockKernel kernel) const;
  /// Blocks of class \p c / of the classes that run \p kernel in \p choice.
  std::vector<std::size_t> class_blocks(int c) const;
  std::vector<std::size_t> choice_blocks(std::vector<BlockKernel> const &choice, BlockKernel kernel) const;

  /// Builders on the permuted graph.
  HostCsrPiece<Index> csr(std::vector<char> const &keep, bool compressed) const;
  HostTileSet<Index> tiles(std::vector<char> const &keep) const;
  std::vector<HostDenseBlock> dense(std::vector<std::size_t> const &block_ids) const;
  /// One pass for several pieces: the entries of class c go to CSR group_of_class[c] (< 0: none); group g has all
  /// rows, or only its nonempty rows when compressed[g].
  std::vector<HostCsrPiece<Index>> csr_groups(std::vector<int> const &group_of_class,
                                              std::vector<char> const &compressed) const;
  /// One pass for several tile sets: the entries of class c go to tile set group_of_class[c] (< 0: none).
  std::vector<HostTileSet<Index>> tiles_groups(std::vector<int> const &group_of_class, int groups) const;

  /// The width-independent plan of width \p f.
  SpmmPlan base_plan(int f) const;
  /// A new width: the cost-model choice; without timing frozen at once, with timing the class-timing rounds (stage
  /// 0), or stage 1 when no class has a choice (the caller then builds the final structure and calls start_final).
  WidthSelection begin(int f) const;
  /// The kernel class \p c runs in class-timing round \p round_kernel.
  BlockKernel round_kernel(int c, BlockKernel round_kernel) const;
  /// The same, for a width whose hopeless candidates after_round dropped (they run csr instead).
  BlockKernel round_kernel(WidthSelection const &w, int c, BlockKernel round_kernel) const;
  /// After a class-timing apply: once every candidate of a class has a sample, a candidate slower than
  /// drop_factor times the class's fastest is no longer timed, and the remaining rounds of a kernel that no class
  /// still times are dropped (fewer slow tuning applies). Optional: a backend that never calls it times every
  /// round.
  void after_round(WidthSelection &w) const;
  /// After the class rounds: per class the fastest candidate (csr unless another wins by the switch margin).
  void choose(WidthSelection &w) const;
  /// True when some nonempty class runs a kernel other than csr.
  bool mixed(WidthSelection const &w) const;
  /// Starts the whole-apply stage with \p names (the simplest first). Names starting with "all_csr", and every
  /// name when the plan is not mixed, run csr on the whole graph (level 0); the others run the mixed plan (level 1).
  void start_final(WidthSelection &w, std::vector<std::string> names) const;
  /// Records one whole-apply sample of the current variant (final_round runs through final_names in mirrored
  /// rounds); freezes the plan after tuning_repeats samples per variant and returns true then: per level the first
  /// variant unless another beats it by switch_margin, and the mixed plan only when it beats the csr variant by
  /// switch_margin.
  bool record_final(WidthSelection &w, double seconds) const;
  /// The variant the next stage-1 apply runs.
  std::string const &current_final(WidthSelection const &w) const;
  /// The variant of the k-th whole apply of stage 1 (backends that issue several before recording), and how many
  /// whole applies stage 1 takes.
  std::string const &final_variant(WidthSelection const &w, std::size_t k) const;
  std::size_t final_applies(WidthSelection const &w) const;
  /// The cost model's kernel per class for width \p f (w.choice and the class plans' predictions).
  void predict(WidthSelection &w, int f) const;

  /// Decides from the whole-apply samples so far (at once when there is a single variant) and freezes the plan.
  void freeze(WidthSelection &w) const;

private:
  void probe_reordering(Graph<Index> const &g, std::int64_t part_size, CsrProbe<Index> &probe);
};

/// The plan of a non-adaptive algorithm.
SpmmPlan fixed_plan(std::string const &graph, std::int64_t rows, std::int64_t nnz, int features,
                    std::string const &algorithm);

} // namespace tessel::gnn::Impl

#endif

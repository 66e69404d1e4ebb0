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

/// Times CSR on the original and on the reordered graph for the reordering probe; each backend runs its own CSR.
template <class Index> class CsrProbe {
public:
  virtual ~CsrProbe() = default;
  virtual void prepare(Graph<Index> const &original, Graph<Index> const &reordered) = 0;
  /// Seconds of one CSR apply of the original (which = 0) or the reordered (1) graph, \p f feature columns.
  virtual double seconds(int which, int f) = 0;
};

/// The selection state of one feature width.
struct WidthSelection {
  SpmmPlan plan;
  /// 0: timing class kernels, 1: timing the whole-apply variants, 2: frozen.
  int stage = 0;
  std::vector<BlockKernel> rounds; ///< kernel of each class-timing apply (interleaved repeats)
  std::size_t round = 0;
  std::vector<std::vector<std::vector<double>>> class_samples; ///< [class][kernel] -> seconds
  std::vector<BlockKernel> choice;                             ///< kernel of each class
  std::vector<std::string> final_names;                        ///< whole-apply variants, the simplest first
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
  std::string ordering; ///< how the vertex order was chosen

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

  /// The width-independent plan of width \p f.
  SpmmPlan base_plan(int f) const;
  /// A new width: the cost-model choice; without timing frozen at once, with timing the class-timing rounds (stage
  /// 0), or stage 1 when no class has a choice (the caller then builds the final structure and calls start_final).
  WidthSelection begin(int f) const;
  /// The kernel class \p c runs in class-timing round \p round_kernel.
  BlockKernel round_kernel(int c, BlockKernel round_kernel) const;
  /// After the class rounds: per class the fastest candidate (csr unless another wins by the switch margin).
  void choose(WidthSelection &w) const;
  /// True when some nonempty class runs a kernel other than csr.
  bool mixed(WidthSelection const &w) const;
  /// Starts the whole-apply stage with \p names (the simplest first).
  void start_final(WidthSelection &w, std::vector<std::string> names) const;
  /// Records one whole-apply sample of the current variant (final_round cycles through final_names); freezes the
  /// plan after tuning_repeats rounds and returns true then.
  bool record_final(WidthSelection &w, double seconds) const;
  /// The variant the next stage-1 apply runs.
  std::string const &current_final(WidthSelection const &w) const;
  /// The cost model's kernel per class for width \p f (w.choice and the class plans' predictions).
  void predict(WidthSelection &w, int f) const;

private:
  void freeze(WidthSelection &w) const;
  void probe_reordering(Graph<Index> const &g, std::int64_t part_size, CsrProbe<Index> &probe);
};

/// The plan of a non-adaptive algorithm.
SpmmPlan fixed_plan(std::string const &graph, std::int64_t rows, std::int64_t nnz, int features,
                    std::string const &algorithm);

} // namespace tessel::gnn::Impl

#endif

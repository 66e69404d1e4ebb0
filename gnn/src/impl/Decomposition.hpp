#ifndef TESSEL_GNN_IMPL_DECOMPOSITION_HPP
#define TESSEL_GNN_IMPL_DECOMPOSITION_HPP

// AdaptGear's decomposition, shared by the host handle (src/Spmm.cpp) and the CUDA handle (src/cuda/Spmm.cpp): the
// reordering (with its probe), the blocks and density classes, and each class's candidate kernels. The builders of
// the kernels' structures are in Builders.hpp, the selection of one feature width in Selection.hpp.
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

/// AdaptGear's decomposition of one square graph into blocks and density classes (see gnn/README.md, "The adaptive
/// algorithm"); the builders of each kernel's structure are in Builders.hpp, the selection in Selection.hpp.
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
  int force_kernel = -1; ///< forced_kernel() at construction (tests)
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
  /// The rows of `permuted` in the other candidate order (the original one when reordered, the partitioned one the
  /// probe turned down when not): its single whole-graph kernel visits them so. Empty without another order.
  std::vector<std::int64_t> other_order;

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

private:
  // The steps of the constructor, in order.
  void reorder(Graph<Index> const &g, Partition const *given, CsrProbe<Index> *probe);
  void find_blocks();
  void count_classes();
  void choose_candidates(unsigned available, std::string const &unavailable_reason);
  void probe_reordering(Graph<Index> const &g, std::int64_t part_size, CsrProbe<Index> &probe);
};

} // namespace tessel::gnn::Impl

#endif

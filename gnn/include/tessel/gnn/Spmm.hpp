#ifndef TESSEL_GNN_SPMM_HPP
#define TESSEL_GNN_SPMM_HPP

/// \file Spmm.hpp
/// \brief Y = A X (graph aggregation) through a reusable handle, in the manner of Kokkos Kernels' SPMVHandle: the
/// handle owns the preprocessed forms of A for the chosen algorithm; SpmmAlgorithm::adaptive is AdaptGear's
/// subgraph-level choice (reorder, split A into density classes of blocks, pick a kernel per class by timing the
/// candidates during the first applies, or by a cost model).

#include <tessel/core/Execution.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Memory.hpp>
#include <tessel/gnn/Reorder.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessel::gnn {

/// \brief Algorithms of SpmmHandle. All but adaptive run one kernel on the whole graph in its given order.
enum class SpmmAlgorithm {
  csr,               ///< row-parallel CSR, register-blocked feature chunks (deterministic)
  csr_feature_tiled, ///< CSR with the feature loop outside the row loop (32-wide column slices)
  coo,               ///< edge-parallel COO, equal edge chunks, carries added in order (deterministic)
  coo_atomic,        ///< edge-parallel COO with atomic adds (non-deterministic on parallel backends)
  tiles,             ///< TC-GNN condensed row windows: 16-row windows, 16 x 8 dense tiles
  dense,             ///< the whole adjacency as one dense matrix, GEMM through KokkosBlas (system BLAS)
  kk,                ///< KokkosSparse::spmv with rank-2 views (the portability baseline)
  cusparse,          ///< cusparseSpMM, CSR_ALG2, row-major (the vendor baseline; CUDA handle only)
  adaptive           ///< AdaptGear: per density class of blocks the fastest of csr / tiles / dense
};
/// The algorithm's name ("csr", "adaptive", ...).
char const *name_of(SpmmAlgorithm algorithm);
/// Parses the names printed by name_of.
SpmmAlgorithm parse_spmm_algorithm(std::string const &text);

/// \brief Kernels a class of blocks can get in an adaptive plan.
enum class BlockKernel : int {
  csr = 0,   ///< row-parallel CSR over the class's blocks
  tiles = 1, ///< 16 x 8 dense tiles (TC-GNN's condensed windows)
  dense = 2  ///< each block as a dense matrix (GEMM)
};
/// "csr", "tiles" or "dense".
char const *name_of(BlockKernel kernel);

/// \brief Effective rates (GFLOP/s counting 2 flops per stored element) that predict kernel times when timing
/// is off, and prune hopeless candidates when it is on. Defaults: medians measured by `tessel-gnn-bench` on this
/// project's CI-class machine (see gnn/README.md, "Cost model").
struct CostModel {
  double csr_gflops = 33.0;   ///< per nonzero
  double tiles_gflops = 67.0; ///< per stored tile element (16 x 8 per tile, zeros included)
  double dense_gflops = 87.0; ///< per dense block element
  /// Candidates predicted slower than prune_factor times the best prediction are not timed.
  double prune_factor = 3.0;
  /// Predicted seconds of one apply for \p elements stored elements and \p features columns.
  double seconds(BlockKernel kernel, double elements, int features) const;
};

/// \brief Options of SpmmHandle.
struct SpmmOptions {
  SpmmAlgorithm algorithm = SpmmAlgorithm::adaptive; ///< the kernel, or adaptive selection
  /// Adaptive: time candidates during the first applies (true) or decide by the cost model alone (false).
  bool timing = true;
  /// Adaptive: timed applies per candidate (the best counts; whole-apply variants run in mirrored rounds, so they
  /// get an even number, at least this many).
  int tuning_repeats = 2;
  /// Adaptive: reordering and part size (0: 64, see gnn/README.md).
  PartitionMethod partition = PartitionMethod::automatic;
  std::int64_t part_size = 0; ///< adaptive: vertices per part (0: 64)
  /// Adaptive: upper density bounds of the density classes (the last class reaches 1).
  std::vector<double> class_bounds{0.01, 0.04, 0.15, 0.4};
  CostModel cost_model; ///< adaptive: predictions of the candidates' times
  /// Adaptive with timing: feature widths at which the reordering probe compares CSR in the original and the
  /// partitioned order (the widths the caller will apply; reordering helps wide X and can slow narrow X).
  /// Empty: always reorder.
  std::vector<int> probe_features{64};
  /// Largest dense storage (bytes) for the dense algorithm and for the dense blocks of one class.
  std::int64_t dense_max_bytes = std::int64_t{1} << 30;
  /// Equal-size edge chunks of the coo algorithm.
  std::int64_t coo_chunk = 4096;
  std::uint64_t seed = 1; ///< the partitioner's seed
  /// The handle's graph arrays (and a model's feature matrices, TrainOptions::spmm) on transparent huge pages where
  /// the OS allows (Memory.hpp; gnn/README.md, "Huge pages").
  HugePages huge_pages = HugePages::on;
};

/// \brief What an adaptive handle decided for one density class of blocks, and why.
struct SpmmClassPlan {
  bool intra = true;               ///< diagonal blocks (both ends in one part) or off-diagonal ones
  double density_min = 0;          ///< the class's lower density bound
  double density_max = 1;          ///< its upper density bound
  std::int64_t blocks = 0;         ///< blocks in the class
  std::int64_t nnz = 0;            ///< their entries
  std::int64_t tiles = 0;          ///< their 16 x 8 tiles
  std::int64_t dense_elements = 0; ///< their dense storage
  std::vector<std::pair<BlockKernel, double>> predicted; ///< cost model seconds per kernel
  std::vector<std::pair<BlockKernel, double>> measured;  ///< best timed seconds per candidate kernel
  BlockKernel kernel = BlockKernel::csr;                 ///< the kernel chosen
  std::string reason;                                    ///< why (measured, predicted, or the only candidate)
};

/// \brief The plan of a handle for one feature width: inspectable, printable as JSON, saved with save_plans.
struct SpmmPlan {
  std::string graph;                                 ///< the graph's name
  std::int64_t rows = 0;                             ///< its rows
  std::int64_t nnz = 0;                              ///< its entries
  int features = 0;                                  ///< the feature width the plan is for
  SpmmAlgorithm algorithm = SpmmAlgorithm::adaptive; ///< the handle's algorithm
  std::string partition_method = "none";             ///< how the vertices were reordered
  std::string ordering;               ///< how the vertex order was chosen (the reordering probe's timings)
  double partition_seconds = 0;       ///< of preprocess_seconds, the partitioner's share
  std::int64_t parts = 0;             ///< parts of the reordering
  double intra_fraction = 0;          ///< entries inside a part
  bool timed = false;                 ///< decided by timing (false: cost model or fixed algorithm)
  bool frozen = false;                ///< decided (false while candidates are still being timed)
  std::vector<SpmmClassPlan> classes; ///< what each density class got
  /// Kernel of the CSR remainder (inter-class entries and csr classes): csr or csr_feature_tiled; a fixed plan's
  /// algorithm.
  SpmmAlgorithm rest_kernel = SpmmAlgorithm::csr;
  std::string backend = "host"; ///< where the plan was made and runs ("cuda: <device>" for the device handle)
  std::string dense_engine;     ///< device handle: how dense blocks run (wmma or cublas); empty on the host
  std::vector<std::pair<std::string, double>> final_measured; ///< median seconds of the final candidates
  std::string reason;                                         ///< why this plan, in words
  double preprocess_seconds = 0;   ///< partition + reordering probe + decomposition (shared by all widths)
  double probe_seconds = 0;        ///< of preprocess_seconds, the reordering probe's share
  double tuning_seconds = 0;       ///< time spent inside tuning applies plus building their structures
  double tuning_build_seconds = 0; ///< of tuning_seconds, building the candidates' structures
  int tuning_applies = 0;          ///< applies that timed candidates
  /// Host handle, timed plans: seconds of one apply of the frozen plan (median of its first five applies; 0 until
  /// measured). tuning_applies x apply_seconds is the part of tuning_seconds that an untuned plan would spend too.
  double apply_seconds = 0;
  /// The plan as a JSON object (kernels by name).
  Json json() const;
  /// json() as compact text (no trailing newline).
  std::string to_json() const;
  /// The plan in a few lines for people (partition, then one line per nonempty class), each ending in a newline.
  std::string summary() const;
};

namespace Impl {
template <class Index, class ExecSpace> struct SpmmState;
}

/// \brief Y = A X for a fixed A and any feature width, with an algorithm chosen at construction.
///
/// X and Y are in the handle's vertex order: permutation().old_of_new[k] is the original vertex at row k (the
/// identity for every algorithm but adaptive with reordering). Move data into that order once with permute_rows
/// (e.g. before training) rather than per apply. Not thread-safe.
/// Instantiated for every enabled host execution space (tessel::is_host_execution_space_v); the CUDA handle is
/// tessel::gnn::cuda::SpmmHandle.
template <class Index = std::int32_t, class ExecSpace = Kokkos::DefaultHostExecutionSpace> class SpmmHandle {
  static_assert(is_host_execution_space_v<ExecSpace>,
                "tessel::gnn::SpmmHandle runs on the host execution spaces enabled in Kokkos (Serial, OpenMP, "
                "Threads); for a GPU use tessel::gnn::cuda::SpmmHandle (tessel/gnn/cuda/Spmm.hpp)");
  static_assert(std::is_same_v<Index, std::int32_t> || std::is_same_v<Index, std::int64_t>,
                "tessel::gnn::SpmmHandle: Index must be std::int32_t or std::int64_t");

public:
  using execution_space = ExecSpace;                     ///< where the applies run
  using memory_space = typename ExecSpace::memory_space; ///< where X and Y live

  /// Preprocesses \p graph (host) for \p options.algorithm; adaptive partitions and decomposes here.
  SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options = {});
  /// Adaptive with a given vertex order and parts, e.g. those of the forward handle for the backward A^T.
  SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options, Partition const &partition);
  /// Adaptive with plans loaded by load_plans (no tuning for their widths). Throws when \p path was saved for
  /// another graph.
  SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
             std::string const &plan_path);
  ~SpmmHandle();
  /// \name Move-only
  //@{
  /// Move-only.
  SpmmHandle(SpmmHandle &&) noexcept;
  SpmmHandle &operator=(SpmmHandle &&) noexcept;
  //@}
  SpmmHandle(SpmmHandle const &) = delete;
  SpmmHandle &operator=(SpmmHandle const &) = delete;

  /// Y = A X on \p space (X: rows = num_cols, Y: rows = num_rows, same width). While the plan of this width is
  /// being tuned, each call runs one candidate (the result is always exact) and times it.
  void apply(ExecSpace const &space, ConstMatrix<memory_space> const &x, Matrix<memory_space> const &y);
  /// The same with any row-major rank-2 Views of float in the handle's memory space (a plain
  /// Kokkos::View<float **>, Matrix, subviews of rows); other Views fail to compile, naming the requirement.
  template <class XView, class YView> void apply(ExecSpace const &space, XView const &x, YView const &y) {
    static_assert(Impl::check_feature_view<XView, false>() && Impl::check_feature_view<YView, true>());
    static_assert(std::is_same_v<typename XView::memory_space, memory_space> &&
                      std::is_same_v<typename YView::memory_space, memory_space>,
                  "tessel::gnn::SpmmHandle::apply: X and Y live in the handle's memory space");
    apply(space, ConstMatrix<memory_space>(x), Matrix<memory_space>(y));
  }

  /// The handle's algorithm.
  SpmmAlgorithm algorithm() const;
  /// The vertex order X and Y are in: permute_rows() moves X into it, unpermute_rows() moves Y back (the identity
  /// for every algorithm but adaptive).
  Permutation const &permutation() const;
  /// The parts of that order.
  Partition const &partition() const;
  /// True when the plan for \p features is decided (always for non-adaptive algorithms).
  bool tuned(int features) const;
  /// The plan for \p features (a prediction until tuned(features)).
  SpmmPlan plan(int features) const;
  /// Plans of every width applied so far.
  std::vector<SpmmPlan> plans() const;
  /// Saves the partition and the decided plans (HDF5) so that a later handle can reuse them without tuning.
  void save_plans(std::string const &path) const;
  /// Seconds spent so far in tuning applies and preprocessing (selection overhead).
  double overhead_seconds() const;

private:
  std::unique_ptr<Impl::SpmmState<Index, ExecSpace>> _state;
};

} // namespace tessel::gnn

#endif

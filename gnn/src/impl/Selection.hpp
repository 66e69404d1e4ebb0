#ifndef TESSEL_GNN_IMPL_SELECTION_HPP
#define TESSEL_GNN_IMPL_SELECTION_HPP

// The selection of one feature width, the same for every backend: setup (the cost model's choice, the class-timing
// rounds), tuning (per class the fastest candidate, then the fastest whole-apply variant), freezing. Backends build,
// run and time the kernels and hand the samples over; the plan (SpmmPlan) and the decisions are made here.
#include "Decomposition.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace tessel::gnn::Impl {

/// A candidate other than the simplest must win by this factor, so that timing noise does not pick it.
inline constexpr double switch_margin = 0.95;
/// A class candidate slower than this factor times the class's fastest after one sample each is not timed again.
inline constexpr double drop_factor = 2.5;
/// The whole-apply variants: two whose best samples are within this fraction (or within their measured spread)
/// are a close call and get more mirrored rounds, up to max_extra_rounds.
inline constexpr double close_call = 0.05;
inline constexpr int max_extra_rounds = 2;
/// The frozen choice runs this many applies interleaved (mirrored) with the runner-up right after freezing, and
/// is replaced when the runner-up's median is faster beyond the measured spread.
inline constexpr int recheck_applies = 8;

/// Relative spread of a variant's samples: (median - best) / best (0 for fewer than two samples). A composite plan
/// must win by more than the spread of the samples it is compared on.
double spread_of(std::vector<double> const &samples);

/// The whole-apply variants of the final tuning stage. A list of them runs simplest first: within csr on the whole
/// graph and within the mixed plan, a later variant must beat an earlier one by the switch margin.
enum class WholeVariant {
  all_csr,                 ///< row-parallel csr on the whole graph in the handle's order
  all_csr_feature_tiled,   ///< feature-tiled csr on the whole graph in the handle's order
  plan,                    ///< the mixed plan (csr remainder, then the tile and dense classes)
  plan_feature_tiled_rest, ///< the mixed plan with a feature-tiled remainder
  plan_cublas_dense,       ///< the mixed plan with its dense blocks through cuBLAS (device handle)
  other_order_csr          ///< csr on the whole graph with rows visited in the other candidate order (host handle)
};
/// The variant's name in plans (SpmmPlan::final_measured): all_csr, all_csr+feature_tiled, plan, ...
char const *name_of(WholeVariant variant);
/// True for the variants that run csr on the whole graph.
constexpr bool whole_graph_csr(WholeVariant v) {
  return v == WholeVariant::all_csr || v == WholeVariant::all_csr_feature_tiled || v == WholeVariant::other_order_csr;
}
/// True for the variants whose csr part is feature-tiled.
constexpr bool feature_tiled(WholeVariant v) {
  return v == WholeVariant::all_csr_feature_tiled || v == WholeVariant::plan_feature_tiled_rest;
}

/// The selection state of one feature width.
struct WidthSelection {
  SpmmPlan plan;
  /// 0: timing class kernels, 1: timing the whole-apply variants, 2: frozen.
  int stage = 0;
  std::vector<BlockKernel> rounds; ///< kernel of each class-timing apply (interleaved repeats)
  std::size_t round = 0;
  std::vector<std::vector<std::vector<double>>> class_samples; ///< [class][kernel] -> seconds
  std::vector<std::vector<char>> dropped; ///< [class][kernel]: no longer timed (see Selector::after_round)
  std::vector<BlockKernel> choice;        ///< kernel of each class
  std::vector<WholeVariant> variants;     ///< whole-apply variants, the simplest first
  std::vector<int> final_levels;          ///< 0: csr on the whole graph, 1: the mixed plan (must win by switch_margin)
  std::vector<std::vector<double>> final_samples;
  std::size_t final_round = 0;
  WholeVariant winner = WholeVariant::plan; ///< the frozen variant
  int extra_rounds = 0;                     ///< mirrored rounds added to stage 1 for a close call
  std::vector<BlockKernel> timed_choice;    ///< the class kernels timed (freeze may overrule them with csr)
  /// The re-check after freezing: the runner-up variant and both sides' samples (empty when there is none).
  bool recheck_done = false;
  WholeVariant runner_up = WholeVariant::plan;
  std::vector<double> recheck_samples[2]; ///< [0] the frozen choice, [1] the runner-up
};

/// The selection rules of the adaptive algorithm on one decomposition (see gnn/README.md, "The adaptive
/// algorithm"); the state of each width is a WidthSelection.
template <class Index> class Selector {
public:
  explicit Selector(Decomposition<Index> const &d);

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
  /// Starts the whole-apply stage with \p variants (the simplest first). The whole-graph csr variants, and every
  /// variant when the plan is not mixed, run csr on the whole graph (level 0); the others the mixed plan (level 1).
  void start_final(WidthSelection &w, std::vector<WholeVariant> variants) const;
  /// Records one whole-apply sample of the current variant (final_round runs through the variants in mirrored
  /// rounds); freezes the plan after tuning_repeats samples per variant and returns true then: per level the first
  /// variant unless another beats it by switch_margin, and the mixed plan only when it beats the csr variant by
  /// switch_margin.
  bool record_final(WidthSelection &w, double seconds) const;
  /// The variant the next stage-1 apply runs.
  WholeVariant current_final(WidthSelection const &w) const;
  /// The variant of the k-th whole apply of stage 1 (backends that issue several before recording), and how many
  /// whole applies stage 1 takes.
  WholeVariant final_variant(WidthSelection const &w, std::size_t k) const;
  std::size_t final_applies(WidthSelection const &w) const;
  /// The cost model's kernel per class for width \p f (w.choice and the class plans' predictions).
  void predict(WidthSelection &w, int f) const;

  /// Decides from the whole-apply samples so far (at once when there is a single variant) and freezes the plan.
  void freeze(WidthSelection &w) const;
  /// The variant to re-check the frozen choice against (the fastest other one); false when there is none.
  bool runner_up(WidthSelection &w) const;
  /// After the re-check applies: replaces the winner by the runner-up when its median is faster beyond the
  /// spread of both; returns true when it did (the backend rebuilds its frozen structure). Records why either way.
  bool finish_recheck(WidthSelection &w) const;

private:
  Decomposition<Index> const &_d;
};

/// The options both handles refuse (whatever the algorithm): tuning_repeats < 1, class_bounds not increasing.
void check_selection_options(SpmmOptions const &options);

/// The plan of a non-adaptive algorithm.
SpmmPlan fixed_plan(std::string const &graph, std::int64_t rows, std::int64_t nnz, int features,
                    SpmmAlgorithm algorithm);

} // namespace tessel::gnn::Impl

#endif

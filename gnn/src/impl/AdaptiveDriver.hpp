#ifndef TESSEL_GNN_IMPL_ADAPTIVEDRIVER_HPP
#define TESSEL_GNN_IMPL_ADAPTIVEDRIVER_HPP

// The one driver of both SpmmHandles (src/Spmm.cpp on the host spaces, src/cuda/Spmm.cpp on a CUDA device): the
// widths applied so far and their plans, and the adaptive algorithm's loop over applies (per width: the class-timing
// rounds, the whole-apply variants, the frozen plan). The rules of each decision are the Selector's; an executor
// builds, runs and times the kernels of one backend. It provides:
//   instance_type, input_type, output_type  where the work runs, X and Y
//   synchronous_timing  samples can be read right after each apply (then hopeless class candidates are dropped)
//   warm_up             run every kernel of a tuning stage once, untimed, before its samples (first-launch costs)
//   time_frozen         time the first applies of a frozen plan against the runner-up (Selector::finish_recheck,
//                       SpmmPlan::apply_seconds); frozen(w) is called again when the runner-up replaces it
//   time_single_variant time stage 1 even with a single variant (its samples are SpmmPlan::final_measured)
//   build_tuning(i), build_final(i, w), build_all_csr(i)     structures (each idempotent)
//   final_variants(w, with_all_csr)                          the whole-apply variants of stage 1, simplest first
//   run_rest(i, x, y), run_class(i, c, kernel, x, y), run_variant(i, w, name, x, y), run_frozen(i, w, x, y)
//   frozen(w)                                                the backend's part of a decided plan
//   stamp(i, w), seconds(w, a, b), wait(w, stamp), reset(w)  timing marks of a width's tuning applies
// where w is the driver's Width, which derives from the executor's per-width structures.
#include "Selection.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessel::gnn::Impl {

template <class Index, class BackendWidth> class AdaptiveDriver {
public:
  /// A timed interval of a tuning apply: class \p cls running \p kernel, or a whole apply (cls = -1).
  struct Interval {
    int cls;
    BlockKernel kernel;
    std::size_t start, stop;
  };
  struct Width : BackendWidth {
    WidthSelection sel;
    bool built = false;                 ///< the final structure of sel.choice exists
    int warmed_stage = -1;              ///< the tuning stage whose kernels have run once
    std::size_t issued = 0;             ///< whole applies issued in stage 1
    std::vector<Interval> pending;      ///< intervals whose samples are not read yet
    std::vector<double> frozen_samples; ///< the first applies after tuning (plan.apply_seconds)
    int recheck_applies = 0;            ///< applies of the re-check so far (-1: no runner-up)
  };

  /// The graph's identity (name, shape) and where plans run (SpmmPlan::backend).
  AdaptiveDriver(Graph<Index> const &g, SpmmOptions const &options, std::string backend)
      : _options(options), _name(g.name()), _rows(g.num_rows()), _nnz(g.nnz()), _backend(std::move(backend)) {
    check_selection_options(options);
    _identity.permutation = Permutation::identity(g.num_rows());
    _identity.part_offsets = {0, static_cast<std::int64_t>(g.num_rows())};
  }

  /// Adaptive: the decomposition (see Decomposition's constructor for the arguments) and its selector.
  void decompose(Graph<Index> const &g, Partition const *given, CsrProbe<Index> *probe, unsigned available = 0b111u,
                 std::string const &unavailable_reason = "") {
    _dec = std::make_unique<Decomposition<Index>>(g, _options, given, probe, available, unavailable_reason);
    _selector = std::make_unique<Selector<Index>>(*_dec);
  }

  Decomposition<Index> const &decomposition() const { return *_dec; }
  Selector<Index> const &selector() const { return *_selector; }
  Partition const &partition() const { return _dec ? _dec->partition : _identity; }

  /// The state of width \p f, begun on first use. A new width whose classes have no choice starts its whole-apply
  /// stage at once when \p where is given, else with its first apply.
  template <class Executor> Width &width(Executor &ex, int f, typename Executor::instance_type const *where) {
    auto it = widths.find(f);
    if (it != widths.end())
      return it->second;
    Width &w = widths[f];
    if (_options.algorithm != SpmmAlgorithm::adaptive) {
      w.sel.plan = fixed_plan(_name, _rows, _nnz, f, _options.algorithm);
      w.sel.stage = 2;
    } else {
      w.sel = _selector->begin(f);
      if (w.sel.stage == 2)
        ex.frozen(w);
      else if (w.sel.stage == 1 && where != nullptr)
        start_final(ex, *where, w);
    }
    w.sel.plan.backend = _backend;
    return w;
  }

  /// One apply of the adaptive algorithm: while width \p x.cols is tuned, one tuning apply (the result is always
  /// complete), then the frozen plan.
  template <class Executor>
  void apply(Executor &ex, typename Executor::instance_type const &in, typename Executor::input_type const &x,
             typename Executor::output_type const &y, int f) {
    Width &w = width(ex, f, &in);
    auto &sel = w.sel;
    if (sel.stage == 2) {
      if (!w.built) {
        ex.build_final(in, w);
        w.built = true;
      }
      if constexpr (Executor::time_frozen)
        if (sel.plan.tuning_applies > 0 && !sel.recheck_done) {
          recheck(ex, in, w, x, y);
          return;
        }
      ex.run_frozen(in, w, x, y);
      return;
    }
    if (sel.stage == 1 && sel.variants.empty())
      start_final(ex, in, w);
    if (sel.stage == 0)
      class_round(ex, in, w, x, y);
    else if (sel.stage == 1)
      final_round(ex, in, w, x, y);
    else // frozen at once by start_final: a single variant
      ex.run_frozen(in, w, x, y);
    sel.plan.tuning_seconds = tuning_seconds;
    sel.plan.tuning_build_seconds = tuning_build_seconds;
  }

  /// True when the plan for \p f is decided: always for fixed algorithms and the cost model, else once frozen.
  bool tuned(int f) const {
    if (_options.algorithm != SpmmAlgorithm::adaptive || !_options.timing)
      return true;
    auto it = widths.find(f);
    return it != widths.end() && it->second.sel.stage == 2;
  }

  std::vector<SpmmPlan> plans() const {
    std::vector<SpmmPlan> out;
    for (auto const &[f, w] : widths)
      out.push_back(w.sel.plan);
    return out;
  }

  /// Preprocessing and tuning seconds so far.
  double overhead_seconds() const { return (_dec ? _dec->preprocess_seconds : 0.0) + tuning_seconds; }

  std::map<int, Width> widths;
  double tuning_seconds = 0;
  double tuning_build_seconds = 0; ///< of tuning_seconds, building the candidates' structures

private:
  template <class F> void timed_build(F &&build) {
    auto const t0 = std::chrono::steady_clock::now();
    build();
    double const t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tuning_seconds += t;
    tuning_build_seconds += t;
  }

  /// After the class rounds (or at once when no class has a choice): the class kernels, the final structure and the
  /// whole-apply variants to time. The mixed plan must also beat plain CSR on the handle's vertex order as a whole:
  /// class timings of small classes are dominated by call overheads that only the whole apply shows.
  template <class Executor> void start_final(Executor &ex, typename Executor::instance_type const &in, Width &w) {
    _selector->choose(w.sel);
    timed_build([&] {
      ex.build_final(in, w);
      w.built = true;
    });
    bool const with_all_csr = _selector->mixed(w.sel) && _dec->force_kernel < 0;
    if (with_all_csr)
      timed_build([&] { ex.build_all_csr(in); });
    auto variants = ex.final_variants(w, with_all_csr);
    bool const single = variants.size() == 1 && !Executor::time_single_variant;
    _selector->start_final(w.sel, std::move(variants));
    if (single) { // nothing to compare
      _selector->freeze(w.sel);
      ex.frozen(w);
    }
  }

  template <class Executor>
  void warm_up(Executor &ex, typename Executor::instance_type const &in, Width &w,
               typename Executor::input_type const &x, typename Executor::output_type const &y) {
    if (w.warmed_stage == w.sel.stage)
      return;
    auto const &d = *_dec;
    if (w.sel.stage == 0) {
      ex.run_rest(in, x, y);
      for (int c = 0; c < d.num_classes; ++c)
        if (d.separate(c))
          for (auto kernel : d.candidates[static_cast<std::size_t>(c)])
            ex.run_class(in, c, kernel, x, y);
    } else {
      for (auto const variant : w.sel.variants)
        ex.run_variant(in, w, variant, x, y);
    }
    w.warmed_stage = w.sel.stage;
  }

  /// Stage 0: the remainder, then every class timed apart with this round's kernel where it is a candidate.
  template <class Executor>
  void class_round(Executor &ex, typename Executor::instance_type const &in, Width &w,
                   typename Executor::input_type const &x, typename Executor::output_type const &y) {
    auto const &d = *_dec;
    auto &sel = w.sel;
    timed_build([&] { ex.build_tuning(in); });
    if constexpr (Executor::warm_up)
      warm_up(ex, in, w, x, y);
    BlockKernel const kernel = sel.rounds[sel.round];
    std::size_t const all0 = ex.stamp(in, w);
    ex.run_rest(in, x, y);
    for (int c = 0; c < d.num_classes; ++c) {
      if (!d.separate(c))
        continue;
      BlockKernel const use = _selector->round_kernel(sel, c, kernel);
      std::size_t const c0 = ex.stamp(in, w);
      ex.run_class(in, c, use, x, y);
      std::size_t const c1 = ex.stamp(in, w);
      if (use == kernel)
        w.pending.push_back({c, kernel, c0, c1});
    }
    w.pending.push_back({-1, kernel, all0, ex.stamp(in, w)});
    ++sel.plan.tuning_applies;
    ++sel.round;
    if constexpr (Executor::synchronous_timing) {
      resolve(ex, w);
      _selector->after_round(sel);
    }
    if (sel.round >= sel.rounds.size()) {
      resolve(ex, w);
      start_final(ex, in, w);
    }
  }

  /// Stage 1: the whole-apply variants in mirrored rounds.
  template <class Executor>
  void final_round(Executor &ex, typename Executor::instance_type const &in, Width &w,
                   typename Executor::input_type const &x, typename Executor::output_type const &y) {
    if constexpr (Executor::warm_up)
      warm_up(ex, in, w, x, y);
    WholeVariant const variant = _selector->final_variant(w.sel, w.issued);
    std::size_t const s0 = ex.stamp(in, w);
    ex.run_variant(in, w, variant, x, y);
    w.pending.push_back({-1, BlockKernel::csr, s0, ex.stamp(in, w)});
    ++w.sel.plan.tuning_applies;
    if (++w.issued == _selector->final_applies(w.sel) || Executor::synchronous_timing)
      resolve(ex, w);
  }

  /// Reads the samples of the pending intervals and hands them to the selection.
  template <class Executor> void resolve(Executor &ex, Width &w) {
    if (w.pending.empty())
      return;
    ex.wait(w, w.pending.back().stop);
    for (auto const &p : w.pending) {
      double const t = ex.seconds(w, p.start, p.stop);
      if (p.cls >= 0) {
        w.sel.class_samples[static_cast<std::size_t>(p.cls)][static_cast<std::size_t>(p.kernel)].push_back(t);
      } else {
        tuning_seconds += t;
        if (w.sel.stage == 1 && _selector->record_final(w.sel, t))
          ex.frozen(w);
      }
    }
    w.pending.clear();
    ex.reset(w);
  }

  /// A frozen plan's first applies: interleaved (mirrored: F R R F F R R F) with the runner-up of the whole-apply
  /// stage, which replaces it when faster beyond the spread (Selector::finish_recheck); without a runner-up, five
  /// applies of the frozen plan alone. SpmmPlan::apply_seconds is the median of the final choice's samples.
  template <class Executor>
  void recheck(Executor &ex, typename Executor::instance_type const &in, Width &w,
               typename Executor::input_type const &x, typename Executor::output_type const &y) {
    auto &sel = w.sel;
    if (w.recheck_applies == 0 && !_selector->runner_up(sel))
      w.recheck_applies = -1; // nothing to compare with
    if (w.recheck_applies < 0) {
      time_frozen(ex, in, w, x, y);
      sel.recheck_done = w.frozen_samples.size() >= 5;
      return;
    }
    int const k = w.recheck_applies++;
    bool const frozen_turn = k % 4 == 0 || k % 4 == 3;
    std::size_t const s0 = ex.stamp(in, w);
    if (frozen_turn)
      ex.run_frozen(in, w, x, y);
    else
      ex.run_variant(in, w, sel.runner_up, x, y);
    std::size_t const s1 = ex.stamp(in, w);
    ex.wait(w, s1);
    sel.recheck_samples[frozen_turn ? 0 : 1].push_back(ex.seconds(w, s0, s1));
    ex.reset(w);
    if (w.recheck_applies < recheck_applies)
      return;
    bool const replaced = _selector->finish_recheck(sel);
    if (replaced)
      ex.frozen(w);
    auto sorted = sel.recheck_samples[replaced ? 1 : 0];
    std::sort(sorted.begin(), sorted.end());
    sel.plan.apply_seconds = sorted[sorted.size() / 2];
  }

  /// A frozen plan's first applies, timed: SpmmPlan::apply_seconds is their median.
  template <class Executor>
  void time_frozen(Executor &ex, typename Executor::instance_type const &in, Width &w,
                   typename Executor::input_type const &x, typename Executor::output_type const &y) {
    std::size_t const s0 = ex.stamp(in, w);
    ex.run_frozen(in, w, x, y);
    std::size_t const s1 = ex.stamp(in, w);
    ex.wait(w, s1);
    w.frozen_samples.push_back(ex.seconds(w, s0, s1));
    ex.reset(w);
    auto sorted = w.frozen_samples;
    std::sort(sorted.begin(), sorted.end());
    w.sel.plan.apply_seconds = sorted[sorted.size() / 2];
  }

  SpmmOptions _options;
  std::string _name;
  Index _rows = 0;
  offset_type _nnz = 0;
  std::string _backend;
  Partition _identity; // the partition of a non-adaptive handle
  std::unique_ptr<Decomposition<Index>> _dec;
  std::unique_ptr<Selector<Index>> _selector;
};

} // namespace tessel::gnn::Impl

#endif

#include "impl/Selection.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

namespace tessel::gnn::Impl {

char const *name_of(WholeVariant variant) {
  switch (variant) {
  case WholeVariant::all_csr:
    return "all_csr";
  case WholeVariant::all_csr_feature_tiled:
    return "all_csr+feature_tiled";
  case WholeVariant::plan:
    return "plan";
  case WholeVariant::plan_feature_tiled_rest:
    return "plan+feature_tiled_rest";
  case WholeVariant::plan_cublas_dense:
    return "plan+cublas_dense";
  case WholeVariant::other_order_csr:
    return "other_order_csr";
  }
  return "?";
}

double spread_of(std::vector<double> const &samples) {
  if (samples.size() < 2)
    return 0.0;
  auto sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  return (sorted[sorted.size() / 2] - sorted.front()) / sorted.front();
}

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? std::numeric_limits<double>::infinity() : v[v.size() / 2];
}
} // namespace

void check_selection_options(SpmmOptions const &options) {
  TESSEL_REQUIRE(options.tuning_repeats >= 1, "SpmmHandle: tuning_repeats must be >= 1, got ", options.tuning_repeats);
  TESSEL_REQUIRE(std::is_sorted(options.class_bounds.begin(), options.class_bounds.end()),
                 "SpmmHandle: class_bounds must be increasing");
}

SpmmPlan fixed_plan(std::string const &graph, std::int64_t rows, std::int64_t nnz, int features,
                    SpmmAlgorithm algorithm) {
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

template <class Index> SpmmPlan Selector<Index>::base_plan(int f) const {
  SpmmPlan p;
  p.graph = _d.name;
  p.rows = _d.rows;
  p.nnz = _d.nnz;
  p.features = f;
  p.algorithm = SpmmAlgorithm::adaptive;
  p.partition_method = name_of(_d.partition.method);
  p.parts = static_cast<std::int64_t>(_d.partition.part_offsets.size()) - 1;
  p.intra_fraction = _d.partition.intra_fraction;
  p.classes = _d.classes;
  p.preprocess_seconds = _d.preprocess_seconds;
  p.partition_seconds = _d.partition.seconds;
  p.probe_seconds = _d.probe_seconds;
  p.ordering = _d.ordering.empty() ? std::string(name_of(_d.partition.method)) + " order" : _d.ordering;
  p.timed = _d.options.timing;
  return p;
}

/// Cost-model choice per class (also the prediction shown before tuning ends).
template <class Index> void Selector<Index>::predict(WidthSelection &w, int f) const {
  w.choice.assign(static_cast<std::size_t>(_d.num_classes), BlockKernel::csr);
  for (int c = 0; c < _d.num_classes; ++c) {
    auto &k = w.plan.classes[static_cast<std::size_t>(c)];
    k.predicted.clear();
    if (k.nnz == 0) {
      k.kernel = BlockKernel::csr;
      continue;
    }
    double const elements[num_block_kernels] = {static_cast<double>(k.nnz),
                                                static_cast<double>(k.tiles) * tile_rows * tile_cols,
                                                static_cast<double>(k.dense_elements)};
    double best = std::numeric_limits<double>::infinity();
    for (auto kernel : _d.candidates[static_cast<std::size_t>(c)]) {
      double const t = _d.options.cost_model.seconds(kernel, elements[static_cast<int>(kernel)], f);
      k.predicted.emplace_back(kernel, t);
      if (t < best) {
        best = t;
        w.choice[static_cast<std::size_t>(c)] = kernel;
      }
    }
    k.kernel = w.choice[static_cast<std::size_t>(c)];
  }
}

template <class Index> WidthSelection Selector<Index>::begin(int f) const {
  WidthSelection w;
  w.plan = base_plan(f);
  predict(w, f);
  if (!_d.options.timing) {
    w.stage = 2;
    w.plan.frozen = true;
    w.plan.reason = "cost model (timing disabled)";
    w.winner = WholeVariant::plan;
    for (auto &k : w.plan.classes)
      if (k.nnz > 0)
        k.reason += "chosen by the cost model";
    return w;
  }
  w.class_samples.assign(static_cast<std::size_t>(_d.num_classes), std::vector<std::vector<double>>(num_block_kernels));
  std::vector<int> used(num_block_kernels, 0);
  for (int c = 0; c < _d.num_classes; ++c)
    if (_d.multi[static_cast<std::size_t>(c)])
      for (auto kernel : _d.candidates[static_cast<std::size_t>(c)])
        used[static_cast<std::size_t>(kernel)] = 1;
  // Interleave repeats (k0 k1 k2 k0 k1 k2 ...) so that drifting machine load hits every candidate alike.
  for (int r = 0; r < _d.options.tuning_repeats; ++r)
    for (int kernel = 0; kernel < num_block_kernels; ++kernel)
      if (used[static_cast<std::size_t>(kernel)])
        w.rounds.push_back(static_cast<BlockKernel>(kernel));
  w.stage = w.rounds.empty() ? 1 : 0;
  return w;
}

template <class Index> BlockKernel Selector<Index>::round_kernel(int c, BlockKernel kernel) const {
  auto const &cand = _d.candidates[static_cast<std::size_t>(c)];
  return std::find(cand.begin(), cand.end(), kernel) != cand.end() ? kernel : cand.front();
}

template <class Index>
BlockKernel Selector<Index>::round_kernel(WidthSelection const &w, int c, BlockKernel kernel) const {
  auto const cc = static_cast<std::size_t>(c);
  if (cc < w.dropped.size() && w.dropped[cc][static_cast<std::size_t>(kernel)])
    return _d.candidates[cc].front();
  return round_kernel(c, kernel);
}

template <class Index> void Selector<Index>::after_round(WidthSelection &w) const {
  if (w.dropped.empty())
    w.dropped.assign(static_cast<std::size_t>(_d.num_classes), std::vector<char>(num_block_kernels, 0));
  std::vector<char> still_timed(num_block_kernels, 0);
  for (int c = 0; c < _d.num_classes; ++c) {
    auto const cc = static_cast<std::size_t>(c);
    if (!_d.multi[cc])
      continue;
    auto const &samples = w.class_samples[cc];
    double fastest = std::numeric_limits<double>::infinity();
    bool complete = true;
    for (auto kernel : _d.candidates[cc]) {
      auto const &s = samples[static_cast<std::size_t>(kernel)];
      complete = complete && !s.empty();
      fastest = std::min(fastest, best_of(s));
    }
    for (auto kernel : _d.candidates[cc]) {
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

template <class Index> void Selector<Index>::choose(WidthSelection &w) const {
  for (int c = 0; c < _d.num_classes; ++c) {
    auto const cc = static_cast<std::size_t>(c);
    auto &k = w.plan.classes[cc];
    if (!_d.multi[cc]) {
      if (k.nnz > 0) {
        w.choice[cc] = _d.candidates[cc][0];
        k.kernel = w.choice[cc];
        k.reason += "only candidate";
      }
      continue;
    }
    k.measured.clear();
    // csr is the reference; another kernel replaces it only when clearly faster.
    double best = std::numeric_limits<double>::infinity();
    for (auto kernel : _d.candidates[cc]) {
      double const t = best_of(w.class_samples[cc][static_cast<std::size_t>(kernel)]);
      k.measured.emplace_back(kernel, t);
      double const effective = kernel == BlockKernel::csr ? t * switch_margin : t;
      if (effective < best) {
        best = effective;
        w.choice[cc] = kernel;
      }
    }
    k.kernel = w.choice[cc];
    k.reason += std::string("fastest of the timed candidates");
  }
}

template <class Index> bool Selector<Index>::mixed(WidthSelection const &w) const {
  for (int c = 0; c < _d.num_classes; ++c)
    if (w.plan.classes[static_cast<std::size_t>(c)].nnz > 0 &&
        w.choice[static_cast<std::size_t>(c)] != BlockKernel::csr)
      return true;
  return false;
}

template <class Index> void Selector<Index>::start_final(WidthSelection &w, std::vector<WholeVariant> variants) const {
  bool const is_mixed = mixed(w);
  w.final_levels.clear();
  for (auto const v : variants)
    w.final_levels.push_back(is_mixed && !whole_graph_csr(v) ? 1 : 0);
  w.variants = std::move(variants);
  w.final_samples.assign(w.variants.size(), {});
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

template <class Index> WholeVariant Selector<Index>::final_variant(WidthSelection const &w, std::size_t k) const {
  return w.variants[mirrored(k, w.variants.size())];
}

template <class Index> std::size_t Selector<Index>::final_applies(WidthSelection const &w) const {
  // tuning_repeats samples per variant at least, in whole mirrored rounds, plus the rounds added for a close call.
  return 2 * w.variants.size() *
         static_cast<std::size_t>(std::max(1, (_d.options.tuning_repeats + 1) / 2) + w.extra_rounds);
}

template <class Index> WholeVariant Selector<Index>::current_final(WidthSelection const &w) const {
  return final_variant(w, w.final_round);
}

namespace {
/// True when the two fastest variants (by their best samples) are within close_call of each other or within the
/// spread of their samples: more samples decide it.
bool close_call_between(WidthSelection const &w) {
  std::vector<std::size_t> order(w.variants.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  if (order.size() < 2)
    return false;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return best_of(w.final_samples[a]) < best_of(w.final_samples[b]); });
  auto const &a = w.final_samples[order[0]], &b = w.final_samples[order[1]];
  double const gap = best_of(b) / best_of(a) - 1.0;
  return gap < std::max({close_call, spread_of(a), spread_of(b)});
}
} // namespace

template <class Index> bool Selector<Index>::record_final(WidthSelection &w, double seconds) const {
  w.final_samples[mirrored(w.final_round, w.variants.size())].push_back(seconds);
  if (++w.final_round < final_applies(w))
    return false;
  if (w.extra_rounds < max_extra_rounds && close_call_between(w)) { // another mirrored round
    ++w.extra_rounds;
    return false;
  }
  freeze(w);
  return true;
}

template <class Index> void Selector<Index>::freeze(WidthSelection &w) const {
  // Variants come simplest first: within a level (csr on the whole graph; the mixed plan) the first variant stays
  // unless another is faster by the switch margin (row-parallel before feature-tiled csr, whose samples in tuning
  // were not always borne out later), and the mixed plan must beat the best whole-graph variant by the margin and by
  // more than the spread of both variants' samples (a composite plan wins only beyond the noise).
  std::size_t const none = w.variants.size();
  std::size_t best_level[2] = {none, none};
  w.plan.final_measured.clear();
  for (std::size_t i = 0; i < w.variants.size(); ++i) {
    double const t = best_of(w.final_samples[i]);
    if (!w.final_samples[i].empty())
      w.plan.final_measured.emplace_back(name_of(w.variants[i]), t);
    auto &b = best_level[w.final_levels[i]];
    if (b == none || t < switch_margin * best_of(w.final_samples[b]))
      b = i;
  }
  std::size_t best = best_level[0] != none ? best_level[0] : best_level[1];
  std::ostringstream why;
  if (best_level[0] != none && best_level[1] != none) {
    auto const &single = w.final_samples[best_level[0]], &mixed = w.final_samples[best_level[1]];
    double const margin = std::min(switch_margin, 1.0 - std::max(spread_of(single), spread_of(mixed)));
    if (best_of(mixed) < margin * best_of(single))
      best = best_level[1];
    why << "; the mixed plan " << (best == best_level[1] ? "beat" : "did not beat") << " "
        << name_of(w.variants[best_level[0]]) << " by the margin " << 1.0 - margin << " (" << 1e3 * best_of(mixed)
        << " vs " << 1e3 * best_of(single) << " ms)";
  }
  w.winner = w.variants[best];
  w.plan.reason = "timed: per class the fastest candidate, then the fastest of " + std::to_string(w.variants.size()) +
                  " whole-apply variants" +
                  (w.extra_rounds ? " (" + std::to_string(w.extra_rounds) + " more rounds for a close call)" : "") +
                  ": " + name_of(w.winner) + why.str();
  w.timed_choice = w.choice;
  if (whole_graph_csr(w.winner))
    for (std::size_t c = 0; c < w.choice.size(); ++c)
      if (w.choice[c] != BlockKernel::csr) {
        w.choice[c] = BlockKernel::csr;
        w.plan.classes[c].kernel = BlockKernel::csr;
        w.plan.classes[c].reason += "; overruled: the whole apply was faster with csr everywhere";
      }
  w.stage = 2;
  w.plan.frozen = true;
}

template <class Index> bool Selector<Index>::runner_up(WidthSelection &w) const {
  double best = std::numeric_limits<double>::infinity();
  bool found = false;
  for (std::size_t i = 0; i < w.variants.size(); ++i) {
    if (w.variants[i] == w.winner || w.final_samples[i].empty())
      continue;
    double const t = best_of(w.final_samples[i]);
    if (t < best) {
      best = t;
      w.runner_up = w.variants[i];
      found = true;
    }
  }
  return found;
}

template <class Index> bool Selector<Index>::finish_recheck(WidthSelection &w) const {
  w.recheck_done = true;
  double const kept = median_of(w.recheck_samples[0]), other = median_of(w.recheck_samples[1]);
  double const spread = std::max(spread_of(w.recheck_samples[0]), spread_of(w.recheck_samples[1]));
  bool const replace = other < kept * std::min(switch_margin, 1.0 - spread);
  std::ostringstream why;
  why << "; re-checked over " << w.recheck_samples[0].size() + w.recheck_samples[1].size()
      << " interleaved applies against " << name_of(w.runner_up) << ": median " << 1e3 * kept << " vs " << 1e3 * other
      << " ms (spread " << spread << ") -> " << (replace ? "replaced by " : "kept ")
      << name_of(replace ? w.runner_up : w.winner);
  w.plan.reason += why.str();
  if (!replace)
    return false;
  w.winner = w.runner_up;
  w.choice = w.timed_choice;
  for (std::size_t c = 0; c < w.choice.size(); ++c) {
    auto const k = whole_graph_csr(w.winner) ? BlockKernel::csr : w.choice[c];
    w.choice[c] = k;
    w.plan.classes[c].kernel = k;
  }
  return true;
}

template <class Index> Selector<Index>::Selector(Decomposition<Index> const &d) : _d(d) {}

template class Selector<std::int32_t>;
template class Selector<std::int64_t>;

} // namespace tessel::gnn::Impl

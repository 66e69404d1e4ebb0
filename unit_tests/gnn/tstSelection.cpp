// The decisions of the adaptive selection (src/impl/Decomposition.hpp, Selection.hpp), with timings made up by the test
// rather than measured, so that each rule is checked exactly: the reordering probe keeps the original vertex order
// unless the partitioned one is clearly faster than the original order's best whole-graph kernel (feature-tiled
// included), and a burst of load in one sample does not decide it; the final whole-apply variants pick the fastest csr
// variant, and the mixed plan only by the switch margin; hopeless class candidates stop being timed; the one-pass
// builders equal the per-mask ones; the reordering keeps duplicate entries in their order.
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Reorder.hpp>

#include "impl/Builders.hpp"
#include "impl/Selection.hpp"

#include <GnnTestGraphs.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace {

using namespace tessel::gnn;
using Impl::Decomposition;
using Impl::Selector;
using Impl::WholeVariant;
using Impl::WidthSelection;

/// Seconds per apply = time[order][kernel] * F, except the samples listed in bursts (call number -> factor); with
/// only_faster_at set, the partitioned order runs at the original order's times at every other width.
class FakeProbe final : public Impl::CsrProbe<std::int32_t> {
public:
  double time[2][2] = {{1e-3, 1e-3}, {1e-3, 1e-3}};
  std::map<int, double> bursts;
  int only_faster_at = 0;
  int calls = 0, tiled_calls = 0;
  std::vector<int> widths;
  void prepare(Graph<std::int32_t> const &, Graph<std::int32_t> const &) override {}
  double seconds(int which, int f, int kernel) override {
    widths.push_back(f);
    tiled_calls += kernel == 1;
    double const factor = bursts.count(calls) ? bursts[calls] : 1.0;
    ++calls;
    int const order = only_faster_at != 0 && f != only_faster_at ? 0 : which;
    return time[order][kernel] * f * factor;
  }
};

Graph<std::int32_t> community_graph() {
  SbmOptions o;
  o.nodes = 1500;
  o.community_size = 60;
  o.p_in = 0.3;
  o.inter_degree = 1.0;
  o.features = 0;
  return gcn_normalize(generate_sbm(o).graph); // shuffled ids: the partition is far from the identity
}

SpmmOptions timed(std::vector<int> widths) {
  SpmmOptions o;
  o.partition = PartitionMethod::label_propagation;
  o.part_size = 32;
  o.probe_features = std::move(widths);
  return o;
}

TEST(gnn_selection, reordering_needs_a_clear_gain) {
  auto const g = community_graph();
  {
    FakeProbe probe; // reordered 7% faster: within the margin, the original order stays
    probe.time[1][0] = 0.93e-3;
    Decomposition<std::int32_t> d(g, timed({16}), nullptr, &probe);
    EXPECT_EQ(d.partition.method, PartitionMethod::none);
    EXPECT_TRUE(d.partition.permutation.is_identity());
    EXPECT_NE(d.ordering.find("original order kept"), std::string::npos) << d.ordering;
    EXPECT_EQ(probe.tiled_calls, 0) << "F = 16: feature-tiled csr is plain csr there";
    EXPECT_EQ(probe.calls, 1 + 2 * 2 * 2) << "two mirrored rounds that agree";
  }
  {
    FakeProbe probe; // reordered 25% faster
    probe.time[1][0] = 0.75e-3;
    Decomposition<std::int32_t> d(g, timed({16}), nullptr, &probe);
    EXPECT_EQ(d.partition.method, PartitionMethod::label_propagation);
    EXPECT_FALSE(d.partition.permutation.is_identity());
    EXPECT_NE(d.ordering.find("-> reordered"), std::string::npos) << d.ordering;
  }
}

TEST(gnn_selection, narrow_widths_need_a_larger_gain) {
  auto const g = community_graph();
  // 15% faster reordered: enough at F = 64 (margin 10%), not at F = 16 (margin 20%).
  for (int f : {16, 64}) {
    FakeProbe probe;
    probe.time[1][0] = 0.85e-3;
    probe.time[0][1] = probe.time[1][1] = 2e-3; // feature-tiled csr out of the running at F = 64
    Decomposition<std::int32_t> d(g, timed({f}), nullptr, &probe);
    EXPECT_EQ(d.partition.method, f == 16 ? PartitionMethod::none : PartitionMethod::label_propagation)
        << "F = " << f << ": " << d.ordering;
    EXPECT_NE(d.ordering.find(f == 16 ? "needs <= 0.8" : "needs <= 0.9"), std::string::npos) << d.ordering;
  }
  // Both widths, weighted by their time: F = 64 (4x the time of F = 16 here) 15% faster, F = 16 equal:
  // (1.0 / 0.8 * t16 + 0.85 / 0.9 * t64) / (t16 + t64) = (1.25 + 4 * 0.944) / 5 > 1: the original order stays.
  FakeProbe both;
  both.time[1][0] = 0.85e-3;
  both.time[0][1] = both.time[1][1] = 2e-3;
  both.only_faster_at = 64;
  Decomposition<std::int32_t> d2(g, timed({16, 64}), nullptr, &both);
  EXPECT_EQ(d2.partition.method, PartitionMethod::none) << d2.ordering;
}

TEST(gnn_selection, reordering_competes_with_the_best_original_kernel) {
  auto const g = community_graph();
  FakeProbe probe;
  // F = 64: the reordered graph beats csr in the original order by 30%, but feature-tiled csr in the original order
  // is faster still; the original order must stay.
  probe.time[0][0] = 1.0e-3;
  probe.time[0][1] = 0.5e-3;
  probe.time[1][0] = 0.7e-3;
  probe.time[1][1] = 0.8e-3;
  Decomposition<std::int32_t> d(g, timed({64}), nullptr, &probe);
  EXPECT_EQ(d.partition.method, PartitionMethod::none) << d.ordering;
  EXPECT_GT(probe.tiled_calls, 0);
  EXPECT_NE(d.ordering.find("csr_feature_tiled"), std::string::npos) << d.ordering;
  // Several widths: every one is probed.
  FakeProbe both;
  both.time[1][0] = 0.5e-3;
  both.time[1][1] = 0.6e-3;
  Decomposition<std::int32_t> d2(g, timed({8, 64}), nullptr, &both);
  EXPECT_EQ(d2.partition.method, PartitionMethod::label_propagation) << d2.ordering;
  EXPECT_TRUE(std::find(both.widths.begin(), both.widths.end(), 8) != both.widths.end());
}

TEST(gnn_selection, one_burst_of_load_does_not_decide_the_order) {
  auto const g = community_graph();
  FakeProbe probe; // equal orders, but the first timed run of the original order is 3x slower
  probe.bursts[1] = 3.0;
  Decomposition<std::int32_t> d(g, timed({16}), nullptr, &probe);
  EXPECT_EQ(d.partition.method, PartitionMethod::none) << d.ordering;
  EXPECT_GT(probe.calls, 1 + 2 * 2 * 2) << "the rounds disagreed, so the probe must have run more of them";
}

TEST(gnn_selection, one_burst_of_load_does_not_hide_a_clear_gain) {
  auto const g = community_graph();
  FakeProbe probe; // reordering halves the time, but its first timed run (call 2) is 5x slower
  probe.time[1][0] = 0.5e-3;
  probe.bursts[2] = 5.0;
  Decomposition<std::int32_t> d(g, timed({16}), nullptr, &probe);
  EXPECT_EQ(d.partition.method, PartitionMethod::label_propagation) << d.ordering;
  EXPECT_EQ(probe.calls, 1 + 5 * 2 * 2) << "the first round disagreed: five rounds";
}

TEST(gnn_selection, a_gain_seen_in_some_rounds_only_is_not_taken) {
  auto const g = community_graph();
  FakeProbe probe; // 25% faster in three rounds of five, 6% slower in the other two (rounds 0 and 3)
  probe.time[1][0] = 0.75e-3;
  for (int round : {0, 3})
    for (int call : {2, 3}) // the reordered runs of the round: calls 1 + 4 round + (1, 2)
      probe.bursts[4 * round + call] = 1.25;
  Decomposition<std::int32_t> d(g, timed({16}), nullptr, &probe);
  EXPECT_EQ(probe.calls, 1 + 5 * 2 * 2);
  EXPECT_EQ(d.partition.method, PartitionMethod::none) << d.ordering;
}

TEST(gnn_selection, timing_off_or_no_probe_keeps_the_partition) {
  auto const g = community_graph();
  auto o = timed({16});
  o.timing = false;
  FakeProbe probe;
  probe.time[1][0] = 2e-3; // would keep the original order if it were asked
  Decomposition<std::int32_t> d(g, o, nullptr, &probe);
  EXPECT_EQ(probe.calls, 0);
  EXPECT_EQ(d.partition.method, PartitionMethod::label_propagation);
}

/// A decomposition of the community graph (partitioned order kept) with a mixed width selection.
struct Mixed {
  Graph<std::int32_t> g = community_graph();
  Decomposition<std::int32_t> d;
  Selector<std::int32_t> s{d};
  Mixed(int repeats = 1)
      : d(
            g,
            [&] {
              auto o = timed({16});
              o.tuning_repeats = repeats;
              return o;
            }(),
            nullptr, nullptr) {}
  WidthSelection mixed_selection() const {
    WidthSelection w;
    w.plan = s.base_plan(16);
    s.predict(w, 16);
    std::fill(w.choice.begin(), w.choice.end(), BlockKernel::csr);
    for (int c = 0; c < d.num_classes; ++c)
      if (w.plan.classes[static_cast<std::size_t>(c)].nnz > 0) {
        w.choice[static_cast<std::size_t>(c)] = BlockKernel::tiles;
        break;
      }
    return w;
  }
};

std::string freeze_with(Mixed const &m, std::vector<double> const &seconds) {
  auto w = m.mixed_selection();
  EXPECT_TRUE(m.s.mixed(w));
  m.s.start_final(w, {WholeVariant::all_csr, WholeVariant::all_csr_feature_tiled, WholeVariant::plan,
                      WholeVariant::plan_feature_tiled_rest});
  EXPECT_EQ(w.final_levels, (std::vector<int>{0, 0, 1, 1}));
  // The samples repeat in further mirrored rounds while the call is close (at most max_extra_rounds of them).
  bool frozen = false;
  std::size_t k = 0;
  for (; !frozen && k < seconds.size() * (1 + Impl::max_extra_rounds); ++k)
    frozen = m.s.record_final(w, seconds[k % seconds.size()]);
  EXPECT_TRUE(frozen);
  EXPECT_EQ(k % seconds.size(), 0u) << "frozen in the middle of a round";
  EXPECT_EQ(w.stage, 2);
  return Impl::name_of(w.winner);
}

TEST(gnn_selection, final_variants) {
  Mixed const m;
  // Samples come in mirrored rounds (A B C D D C B A); repeats = 1 still takes one whole round, two per variant.
  auto twice = [](std::vector<double> t) {
    std::vector<double> out = t;
    out.insert(out.end(), t.rbegin(), t.rend());
    return out;
  };
  // Feature-tiled csr must beat row-parallel csr by the margin; so must the mixed plan beat the csr variant.
  EXPECT_EQ(freeze_with(m, twice({1.00, 0.98, 0.96, 0.97})), "all_csr");
  EXPECT_EQ(freeze_with(m, twice({1.00, 0.90, 0.88, 0.97})), "all_csr+feature_tiled");
  // The mixed plan clearly faster.
  EXPECT_EQ(freeze_with(m, twice({1.00, 0.98, 0.90, 0.92})), "plan");
  EXPECT_EQ(freeze_with(m, twice({1.00, 1.10, 0.99, 0.80})), "plan+feature_tiled_rest");
  // The best sample of each variant counts: a burst in one sample does not decide.
  EXPECT_EQ(freeze_with(m, {3.00, 1.10, 1.10, 1.10, 1.10, 1.10, 1.10, 1.00}), "all_csr");
  // The winner overrules the class choices when it is a csr variant.
  auto w = m.mixed_selection();
  m.s.start_final(w, {WholeVariant::all_csr, WholeVariant::plan});
  for (double s : {1.0, 1.2, 1.2, 1.0})
    m.s.record_final(w, s);
  ASSERT_EQ(w.stage, 2);
  EXPECT_STREQ(Impl::name_of(w.winner), "all_csr");
  for (auto k : w.choice)
    EXPECT_EQ(k, BlockKernel::csr);
  // Not mixed: every variant is csr on the whole graph.
  auto plain = m.s.base_plan(64);
  WidthSelection w2;
  w2.plan = plain;
  m.s.predict(w2, 64);
  std::fill(w2.choice.begin(), w2.choice.end(), BlockKernel::csr);
  m.s.start_final(w2, {WholeVariant::plan, WholeVariant::plan_feature_tiled_rest});
  EXPECT_EQ(w2.final_levels, (std::vector<int>{0, 0}));
  for (double s : {1.0, 0.9, 0.9, 1.0})
    m.s.record_final(w2, s);
  ASSERT_EQ(w2.stage, 2);
  EXPECT_STREQ(Impl::name_of(w2.winner), "plan+feature_tiled_rest");
  // A single variant freezes without samples.
  WidthSelection w3;
  w3.plan = plain;
  m.s.predict(w3, 64);
  m.s.start_final(w3, {WholeVariant::plan});
  m.s.freeze(w3);
  EXPECT_STREQ(Impl::name_of(w3.winner), "plan");
  EXPECT_TRUE(w3.plan.frozen);
  EXPECT_TRUE(w3.plan.final_measured.empty());
}

// A composite plan wins only beyond the measured spread: a 10% gain over a whole-graph variant whose samples spread
// by 20% is noise, the same gain over steady samples is not.
TEST(gnn_selection, a_composite_plan_wins_only_beyond_the_spread) {
  Mixed const m;
  // Mirrored rounds A B B A: round r records single[2r], mixed[2r], mixed[2r + 1], single[2r + 1].
  auto run = [&](std::vector<double> const &single, std::vector<double> const &mixed) {
    auto w = m.mixed_selection();
    m.s.start_final(w, {WholeVariant::all_csr, WholeVariant::plan});
    bool frozen = false;
    for (std::size_t r = 0; !frozen && 2 * r + 1 < single.size(); ++r)
      for (double t : {single[2 * r], mixed[2 * r], mixed[2 * r + 1], single[2 * r + 1]})
        if (!frozen)
          frozen = m.s.record_final(w, t);
    EXPECT_TRUE(frozen);
    return w;
  };
  auto noisy = run({1.0, 1.25, 1.3, 1.2, 1.0, 1.3}, {0.9, 0.9, 0.9, 0.9, 0.9, 0.9});
  EXPECT_STREQ(Impl::name_of(noisy.winner), "all_csr") << noisy.plan.reason;
  EXPECT_NE(noisy.plan.reason.find("did not beat all_csr"), std::string::npos) << noisy.plan.reason;
  auto steady = run({1.0, 1.01, 1.0, 1.0, 1.0, 1.0}, {0.9, 0.9, 0.9, 0.9, 0.9, 0.9});
  EXPECT_STREQ(Impl::name_of(steady.winner), "plan") << steady.plan.reason;
}

// Close calls take more (mirrored) samples; a clear one does not.
TEST(gnn_selection, close_calls_take_more_samples) {
  Mixed const m;
  auto w = m.mixed_selection();
  m.s.start_final(w, {WholeVariant::all_csr, WholeVariant::plan});
  std::size_t const base = m.s.final_applies(w);
  std::size_t n = 0;
  while (!m.s.record_final(w, n % 2 == 0 ? 1.0 : 0.98))
    ++n;
  EXPECT_EQ(w.extra_rounds, Impl::max_extra_rounds);
  EXPECT_EQ(n + 1, base * (1 + Impl::max_extra_rounds));
  auto clear = m.mixed_selection();
  m.s.start_final(clear, {WholeVariant::all_csr, WholeVariant::plan});
  n = 0;
  while (!m.s.record_final(clear, n % 4 == 0 || n % 4 == 3 ? 1.0 : 0.5))
    ++n;
  EXPECT_EQ(clear.extra_rounds, 0);
  EXPECT_EQ(n + 1, base);
}

// The frozen choice is re-checked against the runner-up over interleaved applies and replaced when slower beyond the
// spread; the class kernels it had overruled come back with the mixed plan.
TEST(gnn_selection, a_frozen_choice_slower_than_the_runner_up_is_replaced) {
  Mixed const m;
  auto w = m.mixed_selection();
  auto const timed = w.choice;
  m.s.start_final(w, {WholeVariant::all_csr, WholeVariant::plan});
  for (double s : {1.0, 1.2, 1.2, 1.0})
    m.s.record_final(w, s);
  ASSERT_EQ(w.stage, 2);
  ASSERT_STREQ(Impl::name_of(w.winner), "all_csr");
  ASSERT_TRUE(m.s.runner_up(w));
  EXPECT_STREQ(Impl::name_of(w.runner_up), "plan");
  auto again = w;
  // Later applies show the mixed plan clearly faster (tuning caught a slow phase of it).
  w.recheck_samples[0] = {1.0, 1.02, 1.0, 1.01};
  w.recheck_samples[1] = {0.8, 0.81, 0.8, 0.8};
  EXPECT_TRUE(m.s.finish_recheck(w));
  EXPECT_STREQ(Impl::name_of(w.winner), "plan");
  EXPECT_EQ(w.choice, timed);
  EXPECT_NE(w.plan.reason.find("replaced by plan"), std::string::npos) << w.plan.reason;
  // A runner-up within the noise does not replace it.
  again.recheck_samples[0] = {1.0, 1.3, 1.0, 1.2};
  again.recheck_samples[1] = {0.99, 0.98, 0.99, 0.99};
  EXPECT_FALSE(m.s.finish_recheck(again));
  EXPECT_STREQ(Impl::name_of(again.winner), "all_csr");
  EXPECT_NE(again.plan.reason.find("kept all_csr"), std::string::npos) << again.plan.reason;
}

TEST(gnn_selection, hopeless_candidates_stop_being_timed) {
  // Dense communities: intra-part classes with several candidates.
  SbmOptions o;
  o.nodes = 1200;
  o.community_size = 40;
  o.p_in = 0.6;
  o.inter_degree = 1.0;
  o.features = 0;
  auto const g = gcn_normalize(generate_sbm(o).graph);
  auto opts = timed({16});
  Decomposition<std::int32_t> d(g, opts, nullptr, nullptr);
  Selector<std::int32_t> const sel(d);
  auto w = sel.begin(16);
  ASSERT_EQ(w.stage, 0);
  int multi = -1;
  for (int c = 0; c < d.num_classes; ++c)
    if (d.multi[static_cast<std::size_t>(c)])
      multi = c;
  ASSERT_GE(multi, 0);
  std::size_t const rounds = w.rounds.size();
  ASSERT_EQ(rounds % static_cast<std::size_t>(opts.tuning_repeats), 0u);
  std::size_t const kinds = rounds / static_cast<std::size_t>(opts.tuning_repeats);
  ASSERT_GE(kinds, 2u);
  // First repeat: csr 1 ms everywhere, every other kernel 3 ms (hopeless) in every multi-candidate class.
  for (std::size_t r = 0; r < kinds; ++r) {
    auto const kernel = w.rounds[w.round];
    for (int c = 0; c < d.num_classes; ++c)
      if (d.multi[static_cast<std::size_t>(c)] && sel.round_kernel(w, c, kernel) == kernel)
        w.class_samples[static_cast<std::size_t>(c)][static_cast<std::size_t>(kernel)].push_back(
            kernel == BlockKernel::csr ? 1e-3 : 3e-3);
    ++w.round;
    sel.after_round(w);
  }
  // Only csr rounds remain, and the dropped kernels run csr in any round.
  for (std::size_t r = w.round; r < w.rounds.size(); ++r)
    EXPECT_EQ(w.rounds[r], BlockKernel::csr);
  EXPECT_EQ(w.rounds.size(), kinds + static_cast<std::size_t>(opts.tuning_repeats) - 1);
  for (auto kernel : d.candidates[static_cast<std::size_t>(multi)])
    EXPECT_EQ(sel.round_kernel(w, multi, kernel), BlockKernel::csr);
  EXPECT_NE(w.plan.classes[static_cast<std::size_t>(multi)].reason.find("dropped"), std::string::npos);
  // A close candidate is kept.
  auto w2 = sel.begin(16);
  for (std::size_t r = 0; r < kinds; ++r) {
    auto const kernel = w2.rounds[w2.round];
    for (int c = 0; c < d.num_classes; ++c)
      if (d.multi[static_cast<std::size_t>(c)])
        w2.class_samples[static_cast<std::size_t>(c)][static_cast<std::size_t>(kernel)].push_back(
            kernel == BlockKernel::csr ? 1e-3 : 1.5e-3);
    ++w2.round;
    sel.after_round(w2);
  }
  EXPECT_EQ(w2.rounds.size(), rounds);
}

TEST(gnn_selection, grouped_builders_equal_per_mask_builders) {
  SbmOptions o;
  o.nodes = 900;
  o.community_size = 30;
  o.p_in = 0.5;
  o.inter_degree = 2.0;
  o.features = 0;
  auto const g = gcn_normalize(generate_sbm(o).graph);
  for (auto const &graph : {g, test::awkward_graph<std::int32_t>(300, 7)}) {
    auto opts = timed({16});
    opts.timing = false;
    opts.part_size = 20;
    Decomposition<std::int32_t> d(graph, opts, nullptr, nullptr);
    // Classes alternate between two CSR groups (all rows / compressed) and two tile groups; one class in none.
    std::vector<int> csr_group(static_cast<std::size_t>(d.num_classes)), tile_group(csr_group.size());
    for (int c = 0; c < d.num_classes; ++c) {
      csr_group[static_cast<std::size_t>(c)] = c == 1 ? -1 : c % 2;
      tile_group[static_cast<std::size_t>(c)] = c == 1 ? -1 : c % 2;
    }
    auto const pieces = Impl::csr_groups(d, csr_group, {0, 1});
    auto const tiles = Impl::tiles_groups(d, tile_group, 2);
    for (int gi = 0; gi < 2; ++gi) {
      std::vector<char> keep(static_cast<std::size_t>(d.nnz));
      for (std::size_t e = 0; e < keep.size(); ++e)
        keep[e] = csr_group[static_cast<std::size_t>(d.entry_class[e])] == gi;
      auto const ref = Impl::csr_piece(d, keep, gi == 1);
      auto const &got = pieces[static_cast<std::size_t>(gi)];
      EXPECT_EQ(got.row_map, ref.row_map) << gi;
      EXPECT_EQ(got.entries, ref.entries) << gi;
      EXPECT_EQ(got.values, ref.values) << gi;
      EXPECT_EQ(got.row_ids, ref.row_ids) << gi;
      EXPECT_EQ(got.nnz, ref.nnz);
      auto const tref = Impl::tile_set(d, keep);
      auto const &t = tiles[static_cast<std::size_t>(gi)];
      EXPECT_EQ(t.row0, tref.row0);
      EXPECT_EQ(t.nrows, tref.nrows);
      EXPECT_EQ(t.tile_begin, tref.tile_begin);
      EXPECT_EQ(t.tile_col, tref.tile_col);
      EXPECT_EQ(t.tile_val, tref.tile_val);
    }
    // Tile counts of the decomposition agree with the built tile sets, class by class.
    for (int c = 0; c < d.num_classes; ++c) {
      auto const t = Impl::tile_set(d, d.class_mask(c));
      EXPECT_EQ(t.num_tiles(), d.classes[static_cast<std::size_t>(c)].tiles) << "class " << c;
    }
  }
}

TEST(gnn_selection, reordering_keeps_rows_sorted_and_duplicates_in_order) {
  // Duplicates with distinct values: their order within a row must survive (sums stay bitwise reproducible).
  auto g = test::awkward_graph<std::int32_t>(200, 9);
  auto const p = partition(g, 16, PartitionMethod::label_propagation);
  auto const pg = permute(g, p.permutation);
  for (std::int32_t k = 0; k < pg.num_rows(); ++k) {
    auto const old = p.permutation.old_of_new[static_cast<std::size_t>(k)];
    std::vector<std::pair<std::int32_t, float>> expect;
    for (auto e = g.row_map()(old); e < g.row_map()(old + 1); ++e)
      expect.emplace_back(static_cast<std::int32_t>(p.permutation.new_of_old[static_cast<std::size_t>(g.entries()(e))]),
                          g.values()(e));
    std::stable_sort(expect.begin(), expect.end(), [](auto const &a, auto const &b) { return a.first < b.first; });
    std::vector<std::pair<std::int32_t, float>> got;
    for (auto e = pg.row_map()(k); e < pg.row_map()(k + 1); ++e)
      got.emplace_back(pg.entries()(e), pg.values()(e));
    ASSERT_EQ(got, expect) << "row " << k;
  }
}

} // namespace

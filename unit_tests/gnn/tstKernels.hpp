// Every aggregation kernel against a double-precision reference on awkward random graphs, for several feature
// widths (1, not a multiple of the vector or tile width, larger than one register chunk), both index types.
#include <tessel/gnn/Spmm.hpp>

#include <GnnTestGraphs.hpp>
#include <TesselToolsRecorder.hpp>

#include "impl/ForceKernel.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

namespace {

using namespace tessel::gnn;
using Space = TEST_EXECSPACE;
using Mem = Space::memory_space;

std::vector<std::size_t> const widths{1, 3, 8, 17, 64, 70};

std::vector<float> random_x(std::size_t n, std::size_t f, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n * f);
  for (auto &v : x)
    v = u(rng);
  return x;
}

/// Applies the handle (until its plan is frozen, then twice more) and compares every result with the reference.
template <class Index>
void check_handle(SpmmHandle<Index, Space> &handle, Graph<Index> const &g, std::size_t f, std::string const &what) {
  auto const n = static_cast<std::size_t>(g.num_rows());
  auto const xh = random_x(n, f, 11 + f);
  auto const ref = test::reference_spmm(g, xh, f);
  Matrix<Kokkos::HostSpace> x_host("Tessel::test::x", n, f);
  for (std::size_t k = 0; k < xh.size(); ++k)
    x_host.data()[k] = xh[k];
  auto x = Kokkos::create_mirror_view_and_copy(Space(), x_host);
  Matrix<Mem> xp("Tessel::test::xp", n, f), y("Tessel::test::y", n, f), yo("Tessel::test::yo", n, f);
  Space space;
  permute_rows(space, handle.permutation(), ConstMatrix<Mem>(x), xp);
  int applies = 0, after_tuned = 0;
  while (after_tuned < 2) {
    ASSERT_LT(applies, 100) << what << ": the plan never froze";
    // Stale output must not leak into the result.
    Kokkos::deep_copy(y, 1e30f);
    handle.apply(space, xp, y);
    unpermute_rows(space, handle.permutation(), ConstMatrix<Mem>(y), yo);
    auto out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), yo);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < f; ++c) {
        double const r = ref[i * f + c];
        ASSERT_NEAR(out(i, c), r, 2e-5 * (1.0 + std::abs(r)) * 8)
            << what << ", F = " << f << ", apply " << applies << ", row " << i << ", column " << c;
      }
    ++applies;
    if (handle.tuned(static_cast<int>(f)))
      ++after_tuned;
  }
}

template <class Index> void check_algorithm(SpmmOptions const &options, std::string const &what, Index n = 200) {
  for (std::uint64_t seed : {1u, 2u}) {
    auto const g = test::awkward_graph<Index>(n, seed);
    SpmmHandle<Index, Space> handle(Space(), g, options);
    for (auto f : widths)
      check_handle(handle, g, f, what + " seed " + std::to_string(seed));
  }
}

SpmmOptions with(SpmmAlgorithm algorithm) {
  SpmmOptions o;
  o.algorithm = algorithm;
  return o;
}

TEST(TEST_CATEGORY, spmm_csr) {
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::csr), "csr");
  check_algorithm<std::int64_t>(with(SpmmAlgorithm::csr), "csr int64");
}

TEST(TEST_CATEGORY, spmm_csr_feature_tiled) {
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::csr_feature_tiled), "csr_feature_tiled");
}

TEST(TEST_CATEGORY, spmm_coo_carries_across_chunks) {
  auto o = with(SpmmAlgorithm::coo);
  // Small chunks: rows (the star's hub) span several chunks, so carries are exercised.
  for (std::int64_t chunk : {1, 7, 64, 100000}) {
    o.coo_chunk = chunk;
    check_algorithm<std::int32_t>(o, "coo chunk " + std::to_string(chunk));
  }
  check_algorithm<std::int64_t>(o, "coo int64");
}

TEST(TEST_CATEGORY, spmm_coo_atomic) { check_algorithm<std::int32_t>(with(SpmmAlgorithm::coo_atomic), "coo_atomic"); }

TEST(TEST_CATEGORY, spmm_tiles) {
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::tiles), "tiles");
  check_algorithm<std::int64_t>(with(SpmmAlgorithm::tiles), "tiles int64", std::int64_t{37});
}

TEST(TEST_CATEGORY, spmm_dense) { check_algorithm<std::int32_t>(with(SpmmAlgorithm::dense), "dense"); }

TEST(TEST_CATEGORY, spmm_dense_refuses_huge_graphs) {
  auto o = with(SpmmAlgorithm::dense);
  o.dense_max_bytes = 1000;
  auto const g = test::awkward_graph<std::int32_t>(100, 1);
  EXPECT_THROW((SpmmHandle<std::int32_t, Space>(Space(), g, o)), tessel::Exception);
}

TEST(TEST_CATEGORY, spmm_kokkos_kernels) {
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::kk), "kk");
  check_algorithm<std::int64_t>(with(SpmmAlgorithm::kk), "kk int64");
}

TEST(TEST_CATEGORY, spmm_adaptive_timed_and_cost_model) {
  for (auto method :
       {PartitionMethod::automatic, PartitionMethod::label_propagation, PartitionMethod::rcm, PartitionMethod::none}) {
    for (bool timing : {true, false}) {
      auto o = with(SpmmAlgorithm::adaptive);
      o.partition = method;
      o.part_size = 24;
      o.timing = timing;
      o.tuning_repeats = 1;
      check_algorithm<std::int32_t>(o, std::string("adaptive ") + name_of(method) + (timing ? " timed" : " model"));
    }
  }
  auto o = with(SpmmAlgorithm::adaptive);
  o.part_size = 16;
  check_algorithm<std::int64_t>(o, "adaptive int64");
}

TEST(TEST_CATEGORY, spmm_adaptive_every_block_kernel) {
  // Forcing each class kernel makes every kernel run inside the adaptive decomposition (dense blocks and
  // condensed tiles on diagonal and off-diagonal blocks, compressed-row CSR pieces).
  for (int kernel = 0; kernel < 3; ++kernel)
    for (bool timing : {true, false}) {
      auto o = with(SpmmAlgorithm::adaptive);
      o.part_size = 20;
      tessel::gnn::Impl::ForceKernel const force(kernel);
      o.timing = timing;
      o.tuning_repeats = 1;
      check_algorithm<std::int32_t>(o, std::string("adaptive forced ") + name_of(static_cast<BlockKernel>(kernel)));
      auto const g = test::awkward_graph<std::int32_t>(120, 3);
      SpmmHandle<std::int32_t, Space> h(Space(), g, o);
      auto const plan = h.plan(8);
      for (auto const &c : plan.classes)
        if (c.nnz > 0) {
          EXPECT_EQ(c.kernel, static_cast<BlockKernel>(kernel));
        }
    }
}

TEST(TEST_CATEGORY, spmm_empty_and_tiny_graphs) {
  for (auto algorithm :
       {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo, SpmmAlgorithm::coo_atomic,
        SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::kk, SpmmAlgorithm::adaptive}) {
    // No edges at all: Y must be zero, not left over.
    auto const empty = graph_from_edges<std::int32_t>("empty", 30, {});
    SpmmHandle<std::int32_t, Space> h(Space(), empty, with(algorithm));
    check_handle(h, empty, 5, std::string("empty graph, ") + name_of(algorithm));
    auto const one = graph_from_edges<std::int32_t>("one", 1, {{0, 0}});
    SpmmHandle<std::int32_t, Space> h1(Space(), one, with(algorithm));
    check_handle(h1, one, 3, std::string("one node, ") + name_of(algorithm));
  }
}

TEST(TEST_CATEGORY, spmm_rejects_mismatched_shapes) {
  auto const g = test::awkward_graph<std::int32_t>(50, 1);
  SpmmHandle<std::int32_t, Space> h(Space(), g, with(SpmmAlgorithm::csr));
  Matrix<Mem> x("Tessel::test::x", 49, 4), y("Tessel::test::y", 50, 4);
  EXPECT_THROW(h.apply(Space(), x, y), tessel::Exception);
}

TEST(TEST_CATEGORY, spmm_plan_saves_and_reloads) {
  auto const g = test::awkward_graph<std::int32_t>(150, 4);
  auto o = with(SpmmAlgorithm::adaptive);
  o.part_size = 20;
  o.tuning_repeats = 1;
  SpmmHandle<std::int32_t, Space> tuned(Space(), g, o);
  Matrix<Mem> x("Tessel::test::x", 150, 16), y("Tessel::test::y", 150, 16);
  Kokkos::deep_copy(x, 0.5f);
  while (!tuned.tuned(16))
    tuned.apply(Space(), x, y);
  std::string const path = TEST_CATEGORY_NAME "_tessel_gnn_test_plan.h5";
  tuned.save_plans(path);
  SpmmHandle<std::int32_t, Space> loaded(Space(), g, o, path);
  EXPECT_TRUE(loaded.tuned(16));
  EXPECT_EQ(loaded.permutation().old_of_new, tuned.permutation().old_of_new);
  auto const a = tuned.plan(16), b = loaded.plan(16);
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (std::size_t c = 0; c < a.classes.size(); ++c)
    EXPECT_EQ(a.classes[c].kernel, b.classes[c].kernel) << "class " << c;
  EXPECT_EQ(a.rest_kernel, b.rest_kernel);
  check_handle(loaded, g, 16, "reloaded plan");
  // A plan saved for another graph is refused.
  auto const other = test::awkward_graph<std::int32_t>(151, 4);
  EXPECT_THROW((SpmmHandle<std::int32_t, Space>(Space(), other, o, path)), tessel::Exception);
  std::remove(path.c_str());
}

TEST(TEST_CATEGORY, spmm_plan_is_inspectable_json) {
  auto const g = test::awkward_graph<std::int32_t>(100, 5);
  auto o = with(SpmmAlgorithm::adaptive);
  o.part_size = 20;
  o.timing = false;
  SpmmHandle<std::int32_t, Space> h(Space(), g, o);
  auto const json = h.plan(32).to_json();
  EXPECT_NE(json.find("\"classes\""), std::string::npos);
  EXPECT_NE(json.find("\"kernel\""), std::string::npos);
  EXPECT_NE(json.find("cost model"), std::string::npos);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
}

TEST(TEST_CATEGORY, spmm_allocations_and_kernels_are_labelled) {
  auto const g = test::awkward_graph<std::int32_t>(80, 6);
  Matrix<Mem> x("Tessel::test::x", 80, 9), y("Tessel::test::y", 80, 9);
  // Kokkos Kernels' spmv names its own kernels; it is the baseline, not checked here.
  for (auto algorithm :
       {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo, SpmmAlgorithm::coo_atomic,
        SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::adaptive}) {
    tessel::test::ToolsRecorder recorder;
    auto o = with(algorithm);
    o.part_size = 16;
    o.tuning_repeats = 1;
    SpmmHandle<std::int32_t, Space> h(Space(), g, o);
    for (int k = 0; k < 12; ++k)
      h.apply(Space(), x, y);
    EXPECT_FALSE(recorder.kernels.empty()) << name_of(algorithm);
    for (auto const &label : recorder.allocations)
      EXPECT_TRUE(tessel::test::tessel_labelled(label)) << name_of(algorithm) << " allocation '" << label << "'";
    for (auto const &name : recorder.kernels)
      EXPECT_TRUE(tessel::test::tessel_labelled(name) || name.rfind("Kokkos::View", 0) == 0)
          << name_of(algorithm) << " kernel '" << name << "'";
  }
}

} // namespace

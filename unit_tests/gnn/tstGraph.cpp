// Graph construction, validation messages, GCN normalization, transpose, and the reorder / undo round trip.
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Model.hpp>
#include <tessel/gnn/Reorder.hpp>

#include <GnnTestGraphs.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <cmath>
#include <numeric>

namespace {

using namespace tessel::gnn;

using tessel::test::error_of;

TEST(gnn_graph, validation_names_graph_and_first_bad_entry) {
  auto msg = error_of([] { make_graph<std::int32_t>("g1", 3, 3, {0, 2, 1, 3}, {0, 1, 2}); });
  EXPECT_NE(msg.find("'g1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not monotone at row 1"), std::string::npos) << msg;
  msg = error_of([] { make_graph<std::int32_t>("g2", 3, 3, {0, 1, 2, 3}, {0, 7, 2}); });
  EXPECT_NE(msg.find("'g2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("indices[1] = 7 (row 1)"), std::string::npos) << msg;
  msg = error_of([] { make_graph<std::int32_t>("g3", 3, 3, {0, 1, 2}, {0, 1}); });
  EXPECT_NE(msg.find("expected num_rows + 1 = 4"), std::string::npos) << msg;
  msg = error_of([] { make_graph<std::int32_t>("g4", 2, 2, {0, 1, 3}, {0, 1}); });
  EXPECT_NE(msg.find("indptr[last] = 3"), std::string::npos) << msg;
  msg = error_of([] { make_graph<std::int64_t>("g5", 2, 2, {0, 1, 2}, {0, 1}, {1.0f, NAN}); });
  EXPECT_NE(msg.find("values[1]"), std::string::npos) << msg;
  msg = error_of([] { graph_from_edges<std::int32_t>("g6", 4, {{0, 1}, {2, 9}}, EdgeListOptions{true, true}); });
  EXPECT_NE(msg.find("edge 1 (2 -> 9)"), std::string::npos) << msg;
}

TEST(gnn_graph, degree_stats) {
  auto const g =
      graph_from_edges<std::int32_t>("s", 5, {{0, 1}, {0, 1}, {2, 2}, {3, 1}}, EdgeListOptions{false, false});
  auto const st = degree_stats(g);
  EXPECT_EQ(st.nnz, 4);
  EXPECT_EQ(st.max_degree, 3); // row 1 aggregates 0, 0, 3
  EXPECT_EQ(st.empty_rows, 3);
  EXPECT_EQ(st.self_loops, 1);
  EXPECT_EQ(st.duplicates, 1);
  EXPECT_FALSE(st.symmetric);
  EXPECT_DOUBLE_EQ(st.mean_degree, 0.8);
}

TEST(gnn_graph, gcn_normalization_matches_dense_formula) {
  auto const g = test::awkward_graph<std::int32_t>(60, 3);
  auto const a = gcn_normalize(g);
  std::size_t const n = 60;
  std::vector<double> dense(n * n, 0.0), deg(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
      dense[i * n + static_cast<std::size_t>(g.entries()(k))] += g.values()(k);
    dense[i * n + i] += 1.0;
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      deg[i] += dense[i * n + j];
  std::vector<double> got(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (offset_type k = a.row_map()(i); k < a.row_map()(i + 1); ++k) {
      if (k > a.row_map()(i)) {
        EXPECT_LT(a.entries()(k - 1), a.entries()(k)) << "duplicates must be merged, row " << i;
      }
      got[i * n + static_cast<std::size_t>(a.entries()(k))] = a.values()(k);
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      EXPECT_NEAR(got[i * n + j], dense[i * n + j] / std::sqrt(deg[i] * deg[j]), 1e-6) << i << ", " << j;
}

TEST(gnn_graph, transpose_and_symmetry) {
  auto const g = test::awkward_graph<std::int64_t>(70, 4);
  auto const t = transpose(g);
  auto const tt = transpose(t);
  EXPECT_FALSE(is_symmetric(g));
  // Transposing twice gives the rows sorted by column, with the same multiset of entries.
  for (std::int64_t i = 0; i < g.num_rows(); ++i) {
    std::vector<std::pair<std::int64_t, float>> a, b;
    for (auto k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
      a.emplace_back(g.entries()(k), g.values()(k));
    for (auto k = tt.row_map()(i); k < tt.row_map()(i + 1); ++k)
      b.emplace_back(tt.entries()(k), tt.values()(k));
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b) << "row " << i;
  }
  auto const sym = graph_from_edges<std::int32_t>("sym", 6, {{0, 1}, {2, 3}, {4, 4}}, EdgeListOptions{true, true});
  EXPECT_TRUE(is_symmetric(sym));
  EXPECT_TRUE(is_symmetric(gcn_normalize(sym)));
}

TEST(gnn_reorder, permutation_round_trip_is_exact) {
  auto const g = test::awkward_graph<std::int32_t>(300, 5);
  for (auto method :
       {PartitionMethod::automatic, PartitionMethod::label_propagation, PartitionMethod::rcm, PartitionMethod::none}) {
    auto const p = partition(g, 32, method);
    ASSERT_EQ(p.permutation.size(), 300);
    ASSERT_EQ(p.part_offsets.front(), 0);
    ASSERT_EQ(p.part_offsets.back(), 300);
    for (std::size_t k = 0; k + 1 < p.part_offsets.size(); ++k) {
      EXPECT_LT(p.part_offsets[k], p.part_offsets[k + 1]);
      EXPECT_LE(p.part_offsets[k + 1] - p.part_offsets[k], 64) << name_of(method);
    }
    auto const pg = permute(g, p.permutation);
    auto const inverse = Permutation::from_order(p.permutation.new_of_old);
    auto const back = permute(pg, inverse);
    // Undo is exact: every row holds the original (column, value) pairs.
    for (std::int32_t i = 0; i < g.num_rows(); ++i) {
      std::vector<std::pair<std::int32_t, float>> a, b;
      for (auto k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
        a.emplace_back(g.entries()(k), g.values()(k));
      for (auto k = back.row_map()(i); k < back.row_map()(i + 1); ++k)
        b.emplace_back(back.entries()(k), back.values()(k));
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      ASSERT_EQ(a, b) << name_of(method) << " row " << i;
    }
    // Feature rows: permute then unpermute is bitwise the identity.
    Matrix<> x("Tessel::test::x", 300, 7), xp("Tessel::test::xp", 300, 7), xb("Tessel::test::xb", 300, 7);
    for (std::size_t k = 0; k < x.size(); ++k)
      x.data()[k] = static_cast<float>(k) * 0.37f;
    Kokkos::DefaultHostExecutionSpace space;
    permute_rows(space, p.permutation, ConstMatrix<>(x), xp);
    unpermute_rows(space, p.permutation, ConstMatrix<>(xp), xb);
    for (std::size_t k = 0; k < x.size(); ++k)
      ASSERT_EQ(x.data()[k], xb.data()[k]);
    for (std::int64_t k = 0; k < 300; ++k)
      ASSERT_EQ(xp(k, 3), x(p.permutation.old_of_new[static_cast<std::size_t>(k)], 3));
    std::vector<int> labels(300);
    std::iota(labels.begin(), labels.end(), 0);
    EXPECT_EQ(unpermute_vector(p.permutation, permute_vector(p.permutation, labels)), labels);
  }
}

TEST(gnn_reorder, rejects_bad_permutations) {
  EXPECT_THROW(Permutation::from_order({0, 2, 2}), tessel::Exception);
  EXPECT_THROW(Permutation::from_order({0, 3, 1}), tessel::Exception);
  EXPECT_THROW(parse_partition_method("kmeans"), tessel::Exception);
}

TEST(gnn_reorder, partitions_recover_planted_communities) {
  SbmOptions o;
  o.nodes = 2000;
  o.community_size = 100;
  o.p_in = 0.2;
  o.inter_degree = 1.0;
  o.features = 0;
  auto const d = generate_sbm(o);
  // Shuffled ids: the original order has almost no intra-part entries.
  auto const none = partition(d.graph, 100, PartitionMethod::none);
  EXPECT_LT(none.intra_fraction, 0.2);
  for (auto method : {PartitionMethod::automatic, PartitionMethod::label_propagation, PartitionMethod::metis}) {
    if (method == PartitionMethod::metis && !metis_available()) {
      EXPECT_THROW(partition(d.graph, 100, method), tessel::Exception);
      continue;
    }
    auto const p = partition(d.graph, 100, method, 200);
    EXPECT_EQ(p.method, method == PartitionMethod::automatic ? PartitionMethod::label_propagation : method);
    EXPECT_GT(p.intra_fraction, 0.75) << name_of(method);
  }
}

// The in-memory path of an application: an edge list read with named options, its own feature and label arrays,
// a split, training; and its own Views (plain, non-const, subviews) handed to the row permutations and the handle.
TEST(gnn_graph, an_application_builds_its_data_in_memory) {
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  std::int32_t const n = 120;
  for (std::int32_t i = 0; i < n; ++i) {
    edges.emplace_back(i, (i + 1) % n);
    edges.emplace_back(i, (i * 7 + 3) % n);
  }
  edges.emplace_back(5, 5);
  EdgeListOptions o;
  o.symmetrize = true;
  o.drop_self_loops = true;
  auto const graph = graph_from_edges<std::int32_t>("ring", n, edges, o);
  EXPECT_TRUE(is_symmetric(graph));
  EXPECT_EQ(degree_stats(graph).self_loops, 0);
  Matrix<Kokkos::HostSpace> features("Tessel::test::features", static_cast<std::size_t>(n), 4);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 3;
    features(static_cast<std::size_t>(i), static_cast<std::size_t>(i % 3)) = 1.0f;
  }
  auto data = make_dataset("ring", graph, features, labels);
  EXPECT_EQ(data.num_classes, 3);
  EXPECT_FALSE(data.directed);
  make_split(data, 10, 30, 30, 1);
  TrainOptions t;
  t.epochs = 3;
  t.spmm.algorithm = SpmmAlgorithm::csr;
  auto const result = train(Kokkos::DefaultHostExecutionSpace(), data, t);
  EXPECT_EQ(result.epochs_run, 3);
  labels[0] = 7; // beyond the classes given
  EXPECT_NE(error_of([&] { make_dataset("bad", graph, features, labels, 3); }).find("labels[0] = 7"),
            std::string::npos);

  // Plain Kokkos Views, non-const Matrix and a subview of rows: the permutation and its inverse restore X exactly.
  auto const perm = partition(graph, 16, PartitionMethod::label_propagation).permutation;
  Kokkos::View<float **> x("Tessel::test::x", static_cast<std::size_t>(n), 5), back("Tessel::test::back", n, 5);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.data()[k] = static_cast<float>(k);
  Matrix<Kokkos::HostSpace> moved("Tessel::test::moved", static_cast<std::size_t>(n), 5);
  Kokkos::DefaultHostExecutionSpace space;
  permute_rows(space, perm, x, moved);
  unpermute_rows(space, perm, moved, back);
  space.fence();
  for (std::size_t k = 0; k < x.size(); ++k)
    ASSERT_EQ(back.data()[k], x.data()[k]);
  SpmmHandle<std::int32_t> h(space, graph);
  auto rows = Kokkos::subview(back, std::make_pair(0, n), Kokkos::ALL());
  h.apply(space, moved, rows); // a plain View and a subview, in the handle's order
  space.fence();
}

} // namespace

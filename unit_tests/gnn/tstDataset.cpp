// The tessel.gnn.graph schema: round trip, generators, and malformed files that must be refused with the file,
// the data set and the first bad entry in the message.
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Dataset.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

namespace {

using namespace tessel::gnn;

/// A valid 4-node file; \p tweak edits it before closing.
std::string write_file(std::string const &path, std::function<void(tessel::h5::File &)> const &tweak) {
  tessel::h5::File f(path, tessel::h5::Mode::truncate);
  f.write_attribute("/", "schema", "tessel.gnn.graph");
  f.write_attribute("/", "schema_version", 1);
  f.write_attribute("/", "name", "tiny");
  f.write_attribute("/", "source", "unit test");
  f.write_attribute("/", "num_classes", 2);
  f.write("graph/indptr", std::vector<std::int64_t>{0, 2, 3, 5, 6});
  f.write("graph/indices", std::vector<std::int32_t>{1, 2, 0, 0, 3, 2});
  std::vector<float> x(4 * 3, 0.5f);
  f.write("features/dense", x.data(), {4, 3});
  f.write("labels", std::vector<std::int32_t>{0, 1, -1, 1});
  f.write("masks/train", std::vector<std::uint8_t>{1, 1, 0, 0});
  f.write("masks/val", std::vector<std::uint8_t>{0, 0, 0, 1});
  f.write("masks/test", std::vector<std::uint8_t>{0, 1, 0, 1});
  tweak(f);
  f.close();
  return path;
}

std::string load_error(std::function<void(tessel::h5::File &)> const &tweak) {
  auto const path = write_file("tessel_gnn_test_bad.h5", tweak);
  std::string msg;
  try {
    load_dataset(path);
  } catch (tessel::Exception const &e) {
    msg = e.what();
  }
  std::remove(path.c_str());
  EXPECT_NE(msg.find("tessel_gnn_test_bad.h5"), std::string::npos) << "the message must name the file: " << msg;
  return msg;
}

TEST(gnn_dataset, valid_file_loads) {
  auto const path = write_file("tessel_gnn_test_ok.h5", [](auto &) {});
  auto const d = load_dataset(path);
  EXPECT_EQ(d.name, "tiny");
  EXPECT_EQ(d.num_nodes(), 4);
  EXPECT_EQ(d.graph.nnz(), 6);
  EXPECT_EQ(d.num_features(), 3);
  EXPECT_EQ(d.labels[2], -1);
  EXPECT_EQ(d.test_mask[3], 1);
  std::remove(path.c_str());
}

TEST(gnn_dataset, indices_out_of_range) {
  auto msg = load_error([](auto &f) { f.write("graph/indices", std::vector<std::int32_t>{1, 2, 0, 0, 9, 2}); });
  EXPECT_NE(msg.find("'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("graph/indices[4] = 9 (row 2)"), std::string::npos) << msg;
}

TEST(gnn_dataset, non_monotone_indptr) {
  auto msg = load_error([](auto &f) { f.write("graph/indptr", std::vector<std::int64_t>{0, 2, 1, 5, 6}); });
  EXPECT_NE(msg.find("'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not monotone at row 1"), std::string::npos) << msg;
}

TEST(gnn_dataset, indptr_and_indices_disagree) {
  auto msg = load_error([](auto &f) { f.write("graph/indptr", std::vector<std::int64_t>{0, 2, 3, 5, 7}); });
  EXPECT_NE(msg.find("graph/indptr[4] = 7"), std::string::npos) << msg;
}

TEST(gnn_dataset, feature_rows_differ_from_nodes) {
  auto msg = load_error([](auto &f) {
    std::vector<float> x(5 * 3, 0.5f);
    f.write("features/dense", x.data(), {5, 3});
  });
  EXPECT_NE(msg.find("'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("features/dense has 5 rows but the graph has 4 nodes"), std::string::npos) << msg;
}

TEST(gnn_dataset, labels_out_of_range) {
  auto msg = load_error([](auto &f) { f.write("labels", std::vector<std::int32_t>{0, 1, 2, 1}); });
  EXPECT_NE(msg.find("'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("labels[2] = 2 is out of range [-1, 2)"), std::string::npos) << msg;
}

TEST(gnn_dataset, nan_features) {
  auto msg = load_error([](auto &f) {
    std::vector<float> x(4 * 3, 0.5f);
    x[7] = NAN;
    f.write("features/dense", x.data(), {4, 3});
  });
  EXPECT_NE(msg.find("'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("features[2, 1] = nan"), std::string::npos) << msg;
}

TEST(gnn_dataset, unlabelled_node_in_a_mask) {
  auto msg = load_error([](auto &f) { f.write("masks/test", std::vector<std::uint8_t>{0, 0, 1, 0}); });
  EXPECT_NE(msg.find("node 2 is in masks/test but has no label"), std::string::npos) << msg;
}

TEST(gnn_dataset, wrong_schema) {
  auto msg = load_error([](auto &f) { f.write_attribute("/", "schema", "tessel.moe.layer"); });
  EXPECT_NE(msg.find("tessel.gnn.graph"), std::string::npos) << msg;
}

// Values accepted as something else: a flag is 0 or 1, a class count and a feature width lie in range (and what
// they would allocate is checked against memory) before anything is allocated.
TEST(gnn_dataset, flags_other_than_0_or_1_are_refused) {
  for (auto const *flag : {"directed", "features_random"})
    for (int v : {2, -1}) {
      auto msg = load_error([&](auto &f) { f.write_attribute("/", flag, v); });
      EXPECT_NE(msg.find(std::string("root attribute ") + flag + " = " + std::to_string(v) + ", expected 0 or 1"),
                std::string::npos)
          << msg;
    }
}

TEST(gnn_dataset, declared_sizes_out_of_range_are_refused) {
  auto msg = load_error([](auto &f) { f.write_attribute("/", "num_classes", std::int64_t{2147483647}); });
  EXPECT_NE(msg.find("num_classes = 2147483647, expected an integer in [0, 1048576]"), std::string::npos) << msg;
  // A file with n nodes, no edges and the sparse form of features of the given width.
  auto const sparse_width = [](std::int64_t nodes, std::int64_t width) {
    std::string const path = "tessel_gnn_test_bad.h5";
    {
      tessel::h5::File f(path, tessel::h5::Mode::truncate);
      f.write_attribute("/", "schema", "tessel.gnn.graph");
      f.write_attribute("/", "schema_version", 1);
      f.write_attribute("/", "name", "wide");
      std::vector<std::int64_t> const zeros(static_cast<std::size_t>(nodes) + 1, 0);
      f.write("graph/indptr", zeros);
      f.write("graph/indices", std::vector<std::int64_t>{});
      f.write("features/indptr", zeros);
      f.write("features/indices", std::vector<std::int64_t>{});
      f.write("features/data", std::vector<float>{});
      f.write_attribute("/features", "num_features", width);
      f.close();
    }
    std::string m;
    try {
      load_dataset(path);
    } catch (tessel::Exception const &e) {
      m = e.what();
    }
    std::remove(path.c_str());
    return m;
  };
  msg = sparse_width(4, -5);
  EXPECT_NE(msg.find("num_features = -5, expected an integer in [0, 2147483648]"), std::string::npos) << msg;
  // In range, but 2^20 rows of 2^31 floats (8 PiB) fit no machine: the error says how much, before allocating.
  msg = sparse_width(std::int64_t{1} << 20, std::int64_t{1} << 31);
  EXPECT_NE(msg.find("its dense features (1048576 x 2147483648 floats"), std::string::npos) << msg;
  EXPECT_NE(msg.find("would need 8.38861e+06 GiB"), std::string::npos) << msg;
}

TEST(gnn_dataset, an_empty_name_falls_back_to_the_file) {
  auto const path = write_file("tessel_gnn_test_noname.h5", [](auto &f) { f.write_attribute("/", "name", ""); });
  EXPECT_EQ(load_dataset(path).name, path);
  std::remove(path.c_str());
}

TEST(gnn_dataset, the_content_digest_sees_graph_features_and_labels_not_the_name) {
  SbmOptions o;
  o.nodes = 300;
  o.community_size = 30;
  o.features = 4;
  auto const a = generate_sbm(o);
  auto b = generate_sbm(o);
  EXPECT_EQ(content_digest(a), content_digest(b));
  b.name = "renamed";
  EXPECT_EQ(content_digest(a), content_digest(b));
  b.features(7, 2) += 1.0f;
  EXPECT_NE(content_digest(a), content_digest(b));
  auto c = generate_sbm(o);
  c.labels[3] = (c.labels[3] + 1) % c.num_classes;
  EXPECT_NE(content_digest(a), content_digest(c));
  o.seed = 2; // another graph of the same name and shape
  auto const d = generate_sbm(o);
  EXPECT_EQ(d.name, a.name);
  EXPECT_NE(content_digest(a), content_digest(d));
}

TEST(gnn_dataset, round_trip) {
  SbmOptions o;
  o.nodes = 500;
  o.community_size = 50;
  o.features = 6;
  auto const g = generate_sbm(o);
  save_dataset("tessel_gnn_test_rt.h5", g);
  auto const back = load_dataset("tessel_gnn_test_rt.h5");
  EXPECT_EQ(back.name, g.name);
  EXPECT_EQ(back.graph.nnz(), g.graph.nnz());
  EXPECT_EQ(back.labels, g.labels);
  EXPECT_EQ(back.train_mask, g.train_mask);
  for (std::size_t k = 0; k < g.features.size(); ++k)
    ASSERT_EQ(back.features.data()[k], g.features.data()[k]);
  std::remove("tessel_gnn_test_rt.h5");
}

TEST(gnn_dataset, sparse_features_only) {
  auto const path = std::string("tessel_gnn_test_sparse_only.h5");
  {
    tessel::h5::File f(path, tessel::h5::Mode::truncate);
    f.write_attribute("/", "schema", "tessel.gnn.graph");
    f.write_attribute("/", "schema_version", 1);
    f.write_attribute("/", "name", "sparse");
    f.write("graph/indptr", std::vector<std::int64_t>{0, 1, 2});
    f.write("graph/indices", std::vector<std::int64_t>{1, 0});
    f.write("features/indptr", std::vector<std::int64_t>{0, 1, 3});
    f.write("features/indices", std::vector<std::int32_t>{2, 0, 4});
    f.write("features/data", std::vector<float>{1.0f, 2.0f, 3.0f});
    f.write_attribute("/features", "num_features", std::int64_t{5});
    f.close();
  }
  auto const d = load_dataset(path);
  EXPECT_EQ(d.num_features(), 5);
  EXPECT_EQ(d.features(0, 2), 1.0f);
  EXPECT_EQ(d.features(1, 0), 2.0f);
  EXPECT_EQ(d.features(1, 4), 3.0f);
  EXPECT_EQ(d.features(1, 1), 0.0f);
  std::remove(path.c_str());
}

TEST(gnn_dataset, generators) {
  SbmOptions o;
  o.nodes = 3000;
  o.community_size = 60;
  o.p_in = 0.25;
  o.inter_degree = 2;
  o.features = 4;
  auto const a = generate_sbm(o), b = generate_sbm(o);
  EXPECT_EQ(a.graph.nnz(), b.graph.nnz()) << "deterministic for a seed";
  auto const st = degree_stats(a.graph);
  EXPECT_TRUE(st.symmetric);
  EXPECT_EQ(st.self_loops, 0);
  EXPECT_EQ(st.duplicates, 0);
  // Expected degree: p_in (size - 1) + inter_degree, about 0.25 * 59 + 2 = 16.75 (community sizes vary).
  EXPECT_GT(st.mean_degree, 13.0);
  EXPECT_LT(st.mean_degree, 21.0);
  RmatOptions r;
  r.scale = 12;
  r.edge_factor = 8;
  auto const m = generate_rmat(r);
  EXPECT_EQ(m.num_nodes(), 4096);
  auto const rs = degree_stats(m.graph);
  EXPECT_TRUE(rs.symmetric);
  EXPECT_GT(rs.max_degree, 20 * rs.mean_degree) << "R-MAT has heavy hubs";
  EXPECT_TRUE(m.features_random);
}

} // namespace

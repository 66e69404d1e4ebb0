// Data test (TESSEL_DATA_DIR): the Planetoid and npz converters on the real files, the restricted unpickler, and
// GCN accuracy on Cora / CiteSeer with the standard split against Kipf & Welling (81.5 / 70.3, +-1.5 points).
#include <tessel/gnn/Model.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

using namespace tessel::gnn;
using Space = Kokkos::DefaultHostExecutionSpace;

std::string data_dir() {
  char const *dir = std::getenv("TESSEL_DATA_DIR");
  if (!dir || !std::ifstream(std::string(dir) + "/graphs/planetoid/cora/ind.cora.graph").good())
    return "";
  return dir;
}

int run(std::string const &command) {
  int const rc = std::system((command + " > tessel_gnn_test_convert.log 2>&1").c_str());
  return rc;
}

std::string convert_planetoid(std::string const &dir, std::string const &name) {
  std::string const out = "tessel_gnn_test_" + name + ".h5";
  int const rc = run(std::string("/usr/bin/python3 ") + TESSEL_GNN_PLANETOID_SCRIPT + " --dir " + dir +
                     "/graphs/planetoid/" + name + " --name " + name + " --out " + out);
  EXPECT_EQ(rc, 0) << "converter failed for " << name;
  return out;
}

double gcn_test_accuracy(Dataset const &data, std::uint64_t seed) {
  TrainOptions o; // Kipf & Welling: 2 layers, 16 hidden, dropout 0.5, lr 0.01, wd 5e-4, 200 epochs, window 10
  o.seed = seed;
  o.spmm.algorithm = SpmmAlgorithm::adaptive;
  return train(Space(), data, o).test_acc;
}

TEST(gnn_data, planetoid_gcn_accuracy_matches_kipf_welling) {
  auto const dir = data_dir();
  if (dir.empty())
    GTEST_SKIP() << "TESSEL_DATA_DIR with graphs/planetoid is not available";
  struct Case {
    char const *name;
    double published;
    std::int64_t nodes, entries;
  };
  for (auto const &c : {Case{"cora", 0.815, 2708, 10556}, Case{"citeseer", 0.703, 3327, 9228}}) {
    auto const path = convert_planetoid(dir, c.name);
    auto const data = load_dataset(path);
    EXPECT_EQ(data.num_nodes(), c.nodes);
    EXPECT_EQ(data.graph.nnz(), c.entries);
    EXPECT_FALSE(data.features_random);
    EXPECT_EQ(std::count(data.train_mask.begin(), data.train_mask.end(), 1),
              c.name[0] == 'c' && c.name[1] == 'o' ? 140 : 120);
    EXPECT_EQ(std::count(data.test_mask.begin(), data.test_mask.end(), 1), 1000);
    double const acc = 0.5 * (gcn_test_accuracy(data, 1) + gcn_test_accuracy(data, 2));
    std::printf("%s: GCN test accuracy %.4f (mean of 2 seeds), Kipf & Welling %.3f\n", c.name, acc, c.published);
    EXPECT_NEAR(acc, c.published, 0.015) << c.name;
    std::remove(path.c_str());
  }
}

TEST(gnn_data, pubmed_without_allx_gets_random_features) {
  auto const dir = data_dir();
  if (dir.empty())
    GTEST_SKIP() << "TESSEL_DATA_DIR with graphs/planetoid is not available";
  auto const path = convert_planetoid(dir, "pubmed");
  auto const data = load_dataset(path);
  EXPECT_EQ(data.num_nodes(), 19717);
  EXPECT_TRUE(data.features_random);
  EXPECT_NE(data.source.find("timing only"), std::string::npos);
  std::remove(path.c_str());
}

TEST(gnn_data, npz_converter_keeps_directed_links_and_sparse_features) {
  auto const dir = data_dir();
  if (dir.empty())
    GTEST_SKIP() << "TESSEL_DATA_DIR with graphs/npz is not available";
  std::string const out = "tessel_gnn_test_cora_npz.h5";
  ASSERT_EQ(run(std::string("/usr/bin/python3 ") + TESSEL_GNN_NPZ_SCRIPT + " --npz " + dir +
                "/graphs/npz/cora.npz --name cora-npz --out " + out),
            0);
  auto const data = load_dataset(out);
  EXPECT_EQ(data.num_nodes(), 2708);
  EXPECT_EQ(data.graph.nnz(), 5429);
  EXPECT_TRUE(data.directed);
  EXPECT_FALSE(is_symmetric(data.graph));
  EXPECT_EQ(data.num_features(), 1433);
  std::remove(out.c_str());
}

TEST(gnn_data, planetoid_converter_refuses_foreign_pickle_globals) {
  auto const dir = data_dir();
  if (dir.empty())
    GTEST_SKIP() << "TESSEL_DATA_DIR is not available";
  // A copy of Cora whose ind.evil.y pickle calls os.system: the restricted unpickler must refuse it.
  std::string const evil = "tessel_gnn_test_evil";
  std::string const marker = evil + "/pwned";
  ASSERT_EQ(run("rm -rf " + evil + " && mkdir -p " + evil), 0);
  for (auto part : {"x", "tx", "ty", "allx", "ally", "graph", "test.index"})
    ASSERT_EQ(
        run(std::string("cp ") + dir + "/graphs/planetoid/cora/ind.cora." + part + " " + evil + "/ind.evil." + part),
        0);
  {
    std::ofstream f(evil + "/ind.evil.y", std::ios::binary);
    f << "cos\nsystem\n(S'touch " << marker << "'\ntR.";
  }
  EXPECT_NE(run(std::string("/usr/bin/python3 ") + TESSEL_GNN_PLANETOID_SCRIPT + " --dir " + evil +
                " --name evil --out " + evil + "/out.h5"),
            0);
  EXPECT_FALSE(std::ifstream(marker).good()) << "code from the pickle ran";
  std::ifstream log("tessel_gnn_test_convert.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("os.system"), std::string::npos) << text;
  run("rm -rf " + evil);
}

} // namespace

// Distributed full-graph training under mpiexec at 1, 2 and 4 ranks: GCN and GIN over DistSpmm follow the
// single-process loss curve (every rank also trains the single-process model on the whole graph) on a planted-
// community graph, a directed graph with empty rows (A^T through its own DistGraph) and Cora when the data sets are
// at hand; checkpoints resume at the same rank count and are refused at another; ranks given different options fail
// alike.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Model.hpp>

#include <gtest/gtest.h>

#include <GnnTestGraphs.hpp>
#include <GnnTestModels.hpp>
#include <TesselTestError.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

namespace {

using namespace tessel::gnn;
using Exec = Kokkos::DefaultHostExecutionSpace;
using tessel::Communicator;

/// A directed graph with empty rows and isolated vertices (A is not symmetric: the backward pass runs A^T).
Dataset directed(std::uint64_t seed) {
  Dataset d;
  d.name = "directed";
  d.graph = test::awkward_graph<std::int32_t>(150, seed);
  d.num_classes = 3;
  std::mt19937_64 rng(seed);
  d.features = Matrix<Kokkos::HostSpace>("Tessel::test::features", 150, 7);
  std::uniform_real_distribution<float> u(0, 1); // nonnegative, as real features (rows are normalized by their sum)
  for (std::size_t k = 0; k < d.features.size(); ++k)
    d.features.data()[k] = u(rng);
  // Labels the features tell (the largest of the first three): a learnable task, so that the loss falls smoothly
  // (random labels make GIN's loss jump, which would amplify any rounding difference).
  d.labels.resize(150);
  for (std::size_t i = 0; i < 150; ++i)
    d.labels[i] =
        static_cast<std::int32_t>(std::max_element(&d.features(i, 0), &d.features(i, 0) + 3) - &d.features(i, 0));
  make_split(d, 15, 60, 45, seed);
  return d;
}

TrainOptions options(ModelKind kind, SpmmAlgorithm algorithm, DistPartitionMethod method) {
  auto o = test::model_options(kind, algorithm, 20);
  o.spmm.timing = false;
  o.distribution.method = method;
  return o;
}

/// The distributed run's curve against the single-process one: per epoch the training and validation losses
/// within 1e-5 (relative to the loss where it exceeds 1), and the same final accuracies.
void expect_same_training(Communicator const &comm, Dataset const &data, TrainOptions const &o, char const *what) {
  auto const single = train(Exec(), data, o);
  auto const dist = train(Exec(), comm, data, o);
  ASSERT_EQ(dist.history.size(), single.history.size()) << what;
  EXPECT_EQ(dist.ranks, comm.size());
  double worst = 0;
  auto const check = [&](double d, double s, char const *which, std::size_t e) {
    double const difference = std::abs(d - s) / std::max(1.0, std::abs(s));
    worst = std::max(worst, difference);
    EXPECT_LE(difference, 1e-5) << what << ", epoch " << e + 1 << ", " << which << " loss " << d << " against " << s;
  };
  for (std::size_t e = 0; e < single.history.size(); ++e) {
    check(dist.history[e].train_loss, single.history[e].train_loss, "training", e);
    check(dist.history[e].val_loss, single.history[e].val_loss, "validation", e);
  }
  EXPECT_DOUBLE_EQ(dist.train_acc, single.train_acc) << what;
  EXPECT_DOUBLE_EQ(dist.val_acc, single.val_acc) << what;
  EXPECT_DOUBLE_EQ(dist.test_acc, single.test_acc) << what;
  // Learning happened (the comparison is not between two untrained models).
  EXPECT_LT(dist.history.back().train_loss, dist.history.front().train_loss) << what;
  if (comm.rank() == 0)
    std::printf("%s on %d rank(s): largest loss difference %.2e over %zu epochs, test accuracy %.4f\n", what,
                comm.size(), worst, single.history.size(), dist.test_acc);
}

TEST(DistModel, gcn_and_gin_follow_the_single_process_curve) {
  auto const comm = Communicator::world();
  auto const data = test::communities();
  for (auto kind : {ModelKind::gcn, ModelKind::gin})
    for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
      auto const o = options(kind, algorithm, DistPartitionMethod::automatic);
      std::string const what = std::string(name_of(kind)) + " " + name_of(algorithm) + " on communities";
      expect_same_training(comm, data, o, what.c_str());
    }
}

TEST(DistModel, directed_graphs_train_through_the_transpose) {
  auto const comm = Communicator::world();
  auto const data = directed(7);
  for (auto kind : {ModelKind::gcn, ModelKind::gin})
    for (auto method : {DistPartitionMethod::contiguous, DistPartitionMethod::automatic}) {
      auto o = options(kind, SpmmAlgorithm::csr, method);
      o.features = FeatureFormat::dense;
      // The graph's hub (a third of the vertices) makes GIN's sums large: at the default rate its loss jumps from
      // epoch to epoch, which would amplify any rounding difference; a gentler step keeps the comparison meaningful.
      if (kind == ModelKind::gin)
        o.learning_rate = 0.001;
      std::string const what = std::string(name_of(kind)) + " on directed, " + name_of(method);
      expect_same_training(comm, data, o, what.c_str());
    }
}

TEST(DistModel, sparse_input_features_train_alike) {
  auto const comm = Communicator::world();
  auto data = directed(9);
  // About 8% nonzero: the first layer reads them by their nonzeros (its dropout per original vertex too).
  std::mt19937_64 rng(3);
  data.features = Matrix<Kokkos::HostSpace>("Tessel::test::features", 150, 40);
  for (std::size_t i = 2; i < 150; ++i)
    for (std::size_t j = 0; j < 40; ++j)
      if (rng() % 12 == 0)
        data.features(i, j) = 1.0f;
  auto o = options(ModelKind::gcn, SpmmAlgorithm::csr, DistPartitionMethod::contiguous);
  o.features = FeatureFormat::sparse;
  expect_same_training(comm, data, o, "gcn with sparse features on directed");
}

TEST(DistModel, cora_follows_the_single_process_curve) {
  char const *dir = std::getenv("TESSEL_DATA_DIR");
  if (!dir || !std::ifstream(std::string(dir) + "/graphs/planetoid/cora/ind.cora.graph").good())
    GTEST_SKIP() << "TESSEL_DATA_DIR with graphs/planetoid is not available";
  auto const comm = Communicator::world();
  // Each rank converts its own copy (no rank reads a file another is still writing).
  std::string const path = "tessel_gnn_test_dist_cora_" + std::to_string(comm.rank()) + ".h5";
  int const rc = std::system((std::string("/usr/bin/python3 ") + TESSEL_GNN_PLANETOID_SCRIPT + " --dir " + dir +
                              "/graphs/planetoid/cora --name cora --out " + path + " > " + path + ".log 2>&1")
                                 .c_str());
  ASSERT_EQ(rc, 0) << "converter failed (" << path << ".log)";
  auto const data = load_dataset(path);
  // GIN with the adaptive kernel is left to the community graph: on Cora the single-process adaptive handle's
  // reordered sums alone move GIN's curve by 7e-6 (measured at one rank, where nothing is distributed), which
  // would leave the distribution itself no margin under the 1e-5.
  for (auto [kind, algorithm] :
       {std::pair{ModelKind::gcn, SpmmAlgorithm::csr}, std::pair{ModelKind::gin, SpmmAlgorithm::csr},
        std::pair{ModelKind::gcn, SpmmAlgorithm::adaptive}}) {
    auto o = options(kind, algorithm, DistPartitionMethod::automatic);
    std::string const what = std::string(name_of(kind)) + " " + name_of(algorithm) + " on cora";
    expect_same_training(comm, data, o, what.c_str());
  }
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".log");
}

TEST(DistModel, checkpoints_resume_at_the_same_rank_count) {
  auto const comm = Communicator::world();
  auto const data = directed(5);
  std::string const path = "tessel_gnn_test_dist_checkpoint_" + std::to_string(comm.size()) + ".h5";
  if (comm.rank() == 0)
    std::filesystem::remove(path);
  comm.barrier();
  auto o = options(ModelKind::gin, SpmmAlgorithm::csr, DistPartitionMethod::automatic);
  auto const whole = train(Exec(), comm, data, o);
  o.checkpoint = path;
  o.resume = true;
  o.epochs = 8;
  train(Exec(), comm, data, o);
  o.epochs = 20;
  auto const resumed = train(Exec(), comm, data, o);
  ASSERT_EQ(resumed.history.size(), whole.history.size());
  for (std::size_t e = 0; e < whole.history.size(); ++e)
    EXPECT_EQ(resumed.history[e].train_loss, whole.history[e].train_loss) << "epoch " << e + 1;
  EXPECT_EQ(resumed.test_acc, whole.test_acc);

  // A checkpoint of one rank count is refused at another, on every rank, naming both.
  if (comm.size() > 1) {
    std::string const single = "tessel_gnn_test_dist_checkpoint_single.h5";
    if (comm.rank() == 0) {
      std::filesystem::remove(single);
      auto s = o;
      s.checkpoint = single;
      s.epochs = 3;
      train(Exec(), data, s);
    }
    comm.barrier();
    auto r = o;
    r.checkpoint = single;
    EXPECT_NE(tessel::test::error_of([&] {
                train(Exec(), comm, data, r);
              }).find("was written by 1 rank(s); resume it with 1"),
              std::string::npos);
    comm.barrier();
    if (comm.rank() == 0)
      std::filesystem::remove(single);
  }
  comm.barrier();
  if (comm.rank() == 0)
    std::filesystem::remove(path);
}

TEST(DistModel, ranks_given_different_options_fail_alike) {
  auto const comm = Communicator::world();
  if (comm.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  auto const data = directed(5);
  auto o = options(ModelKind::gcn, SpmmAlgorithm::csr, DistPartitionMethod::contiguous);
  if (comm.rank() == 1)
    o.learning_rate = 0.02;
  EXPECT_NE(tessel::test::error_of([&] { train(Exec(), comm, data, o); }).find("the data set and the training options"),
            std::string::npos);
  // Labels that differ on one rank: the same error.
  auto other = data;
  if (comm.rank() == comm.size() - 1)
    other.labels[17] = (other.labels[17] + 1) % 3;
  o.learning_rate = 0.01;
  EXPECT_NE(
      tessel::test::error_of([&] { train(Exec(), comm, other, o); }).find("the data set and the training options"),
      std::string::npos);
  // A file only some ranks can read: one error on every rank rather than a split run.
  std::string const path = "tessel_gnn_test_dist_checkpoint_missing.h5";
  std::filesystem::remove(path + "." + std::to_string(comm.rank()));
  if (comm.rank() == 0) {
    auto s = o;
    s.checkpoint = path + ".0";
    s.epochs = 2;
    train(Exec(), data, s); // one rank's checkpoint, under a name only rank 0 uses
  }
  comm.barrier();
  o.checkpoint = path + "." + std::to_string(comm.rank());
  o.resume = true;
  EXPECT_FALSE(tessel::test::error_of([&] { train(Exec(), comm, data, o); }).empty());
  comm.barrier();
  std::filesystem::remove(path + ".0");
}

} // namespace

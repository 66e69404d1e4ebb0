// GCN / GIN: gradients against finite differences (directed graphs, so the A^T path is exercised; dense and sparse
// input features), learning on a planted-community graph, the sparse-feature path against the dense one, and
// checkpoints that resume bit for bit.
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Model.hpp>

#include <GnnTestGraphs.hpp>
#include <GnnTestModels.hpp>
#include <TesselTestError.hpp>
#include <TesselToolsRecorder.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

namespace {

using namespace tessel::gnn;
using Space = TEST_EXECSPACE;

Dataset small_directed(std::uint64_t seed) {
  Dataset d;
  d.name = "small-directed";
  d.graph = test::awkward_graph<std::int32_t>(48, seed);
  d.num_classes = 3;
  std::mt19937_64 rng(seed);
  d.features = Matrix<Kokkos::HostSpace>("Tessel::test::features", 48, 5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::size_t k = 0; k < d.features.size(); ++k)
    d.features.data()[k] = u(rng);
  d.labels.resize(48);
  for (auto &l : d.labels)
    l = static_cast<std::int32_t>(rng() % 3);
  make_split(d, 6, 10, 10, seed);
  return d;
}

/// small_directed with 40 features of which about 7% are nonzero (FeatureFormat::automatic reads them as sparse),
/// rows 0 and 1 and column 3 without any.
Dataset sparse_featured(std::uint64_t seed) {
  auto d = small_directed(seed);
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<float> u(-1, 1);
  d.features = Matrix<Kokkos::HostSpace>("Tessel::test::features", 48, 40);
  for (std::size_t i = 2; i < 48; ++i)
    for (std::size_t j = 0; j < 40; ++j)
      if (j != 3 && rng() % 15 == 0)
        d.features(i, j) = u(rng);
  return d;
}

/// Central differences of the training loss against the analytic gradient, on a sample of parameters.
void check_gradients(ModelKind kind, SpmmAlgorithm algorithm, FeatureFormat features = FeatureFormat::automatic) {
  // (sparse_featured(3) puts a GIN ReLU input within the step h of its kink: central differences then miss the
  // analytic gradient of either path by the same 4%.)
  auto const data = features == FeatureFormat::sparse ? sparse_featured(5) : small_directed(3);
  TrainOptions o;
  o.model = kind;
  o.layers = kind == ModelKind::gcn ? 2 : 3;
  o.hidden = 6;
  o.dropout = 0; // the sparse path's dropout is checked against the dense path's (train_as_dense_ones)
  o.features = features;
  o.weight_decay = 5e-3; // large enough to matter in the check
  o.normalize_features = false;
  o.spmm.algorithm = algorithm;
  o.spmm.part_size = 12;
  o.spmm.timing = false;
  GnnModel<Space> model(Space(), data, o);
  model.forward(true, 1);
  model.backward();
  std::mt19937_64 rng(5);
  int checked = 0;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (bool bias : {false, true}) {
      auto p = bias ? model.bias(l) : model.weight(l);
      auto g = bias ? model.bias_gradient(l) : model.weight_gradient(l);
      if (p.size() == 0)
        continue;
      auto gh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
      for (int sample = 0; sample < 6; ++sample) {
        std::size_t const k = rng() % p.size();
        float const saved = p.data()[k];
        float const h = 1e-2f;
        p.data()[k] = saved + h;
        double const up = model.forward(true, 1);
        p.data()[k] = saved - h;
        double const down = model.forward(true, 1);
        p.data()[k] = saved;
        double const fd = (up - down) / (2.0 * h);
        double const an = gh.data()[k];
        EXPECT_NEAR(an, fd, 3e-3 + 3e-2 * std::abs(fd))
            << name_of(kind) << " " << name_of(algorithm) << (bias ? " bias" : " weight") << " layer " << l
            << " element " << k;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 12);
}

TEST(TEST_CATEGORY, gnn_model_gcn_gradients_match_finite_differences) {
  check_gradients(ModelKind::gcn, SpmmAlgorithm::csr);
  check_gradients(ModelKind::gcn, SpmmAlgorithm::adaptive);
}

TEST(TEST_CATEGORY, gnn_model_gin_gradients_match_finite_differences) {
  check_gradients(ModelKind::gin, SpmmAlgorithm::csr);
  check_gradients(ModelKind::gin, SpmmAlgorithm::adaptive);
}

TEST(TEST_CATEGORY, gnn_model_sparse_features_gradients_match_finite_differences) {
  check_gradients(ModelKind::gcn, SpmmAlgorithm::csr, FeatureFormat::sparse);
  check_gradients(ModelKind::gin, SpmmAlgorithm::adaptive, FeatureFormat::sparse);
}

using test::communities;

// The first layer by the features' nonzeros trains the model the dense path trains: the same dropout masks, the
// same losses up to the order of floating-point sums, the same accuracies; automatic picks it for sparse features
// only.
TEST(TEST_CATEGORY, gnn_model_sparse_features_train_as_dense_ones) {
  auto const data = sparse_featured(11);
  for (auto kind : {ModelKind::gcn, ModelKind::gin}) {
    TrainOptions o;
    o.model = kind;
    o.layers = kind == ModelKind::gcn ? 2 : 3;
    o.hidden = 8;
    o.epochs = 30;
    o.patience = 0;
    o.spmm.algorithm = SpmmAlgorithm::csr;
    o.features = FeatureFormat::dense;
    auto const dense = train(Space(), data, o);
    o.features = FeatureFormat::automatic;
    auto const sparse = train(Space(), data, o);
    EXPECT_FALSE(dense.sparse_features);
    ASSERT_TRUE(sparse.sparse_features) << name_of(kind) << ": 7% nonzero features were read as dense";
    ASSERT_EQ(dense.history.size(), sparse.history.size());
    for (std::size_t e = 0; e < dense.history.size(); ++e) {
      EXPECT_NEAR(sparse.history[e].train_loss, dense.history[e].train_loss, 1e-5 * dense.history[e].train_loss)
          << name_of(kind) << " epoch " << e + 1;
      EXPECT_NEAR(sparse.history[e].val_loss, dense.history[e].val_loss, 1e-5 * dense.history[e].val_loss)
          << name_of(kind) << " epoch " << e + 1;
    }
    EXPECT_EQ(sparse.test_acc, dense.test_acc) << name_of(kind);
  }
  // Dense features stay dense unless asked (16 features into 8 hidden: the first layer transforms first).
  auto const dense_data = communities();
  TrainOptions o;
  o.epochs = 2;
  o.hidden = 8;
  EXPECT_FALSE(train(Space(), dense_data, o).sparse_features);
  o.features = FeatureFormat::sparse;
  EXPECT_TRUE(train(Space(), dense_data, o).sparse_features);
}

TEST(TEST_CATEGORY, gnn_model_gcn_and_gin_learn_planted_communities) {
  auto const data = communities();
  for (auto kind : {ModelKind::gcn, ModelKind::gin}) {
    for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
      auto const o = test::model_options(kind, algorithm, 60);
      auto const r = train(Space(), data, o);
      EXPECT_EQ(r.epochs_run, 60);
      EXPECT_GT(r.test_acc, 0.85) << name_of(kind) << " " << name_of(algorithm);
      EXPECT_LT(r.history.back().train_loss, r.history.front().train_loss);
      EXPECT_FALSE(r.plans.empty());
      EXPECT_GE(r.aggregation_seconds, 0.0);
    }
  }
}

TEST(TEST_CATEGORY, gnn_model_early_stopping_stops) {
  auto const data = communities();
  TrainOptions o;
  o.epochs = 400;
  o.patience = 5;
  o.learning_rate = 0.05;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  auto const r = train(Space(), data, o);
  EXPECT_TRUE(r.early_stopped);
  EXPECT_LT(r.epochs_run, 400);
}

TEST(TEST_CATEGORY, gnn_model_divergence_stops_training_with_the_epoch) {
  auto data = communities();
  // Features at the top of float's range overflow the first product: the loss is not finite from epoch 1.
  for (std::size_t k = 0; k < data.features.size(); ++k)
    data.features.data()[k] = 3e38f;
  TrainOptions o;
  o.epochs = 5;
  o.patience = 0;
  o.normalize_features = false;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  auto const what = tessel::test::error_of([&] { train(Space(), data, o); });
  EXPECT_NE(what.find("training diverged at epoch 1"), std::string::npos) << what;
  o.stop_on_divergence = false; // asked to train on: every epoch runs and the history shows it
  auto const r = train(Space(), data, o);
  EXPECT_EQ(r.epochs_run, 5);
  EXPECT_FALSE(std::isfinite(r.history.back().train_loss));
}

void check_resume(SpmmAlgorithm algorithm, bool timing) {
  auto const data = small_directed(8);
  TrainOptions o;
  o.epochs = 8;
  o.patience = 0;
  o.hidden = 8;
  o.spmm.algorithm = algorithm;
  o.spmm.timing = timing;
  o.spmm.part_size = 12;
  o.spmm.tuning_repeats = 1;
  std::string const full = TEST_CATEGORY_NAME "_tessel_gnn_test_full.h5",
                    part = TEST_CATEGORY_NAME "_tessel_gnn_test_part.h5";
  o.checkpoint = full;
  GnnModel<Space> straight(Space(), data, o);
  auto const r_full = straight.train();
  o.checkpoint = part;
  o.epochs = 4;
  { GnnModel<Space>(Space(), data, o).train(); }
  o.epochs = 8;
  o.resume = true;
  GnnModel<Space> resumed(Space(), data, o);
  auto const r_resumed = resumed.train();
  ASSERT_EQ(r_resumed.history.size(), 8u);
  for (std::size_t e = 0; e < 8; ++e) {
    EXPECT_EQ(r_resumed.history[e].train_loss, r_full.history[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(r_resumed.history[e].val_loss, r_full.history[e].val_loss) << "epoch " << e + 1;
  }
  for (int l = 0; l < straight.num_layers(); ++l) {
    auto a = straight.weight(l), b = resumed.weight(l);
    for (std::size_t k = 0; k < a.size(); ++k)
      ASSERT_EQ(a.data()[k], b.data()[k]) << name_of(algorithm) << " layer " << l << " element " << k;
  }
  EXPECT_EQ(r_resumed.test_acc, r_full.test_acc);
  for (auto const &f : {full, part})
    for (auto const &suffix : {"", ".plan.h5", ".plan_t.h5"})
      std::remove((f + suffix).c_str());
}

TEST(TEST_CATEGORY, gnn_model_checkpoint_resumes_exactly) {
  check_resume(SpmmAlgorithm::csr, false);
  // Cost-model plans are deterministic. (Timed plans are saved with the checkpoint and reloaded, but two
  // independent runs may time different winners, so a straight run is no reference for them.)
  check_resume(SpmmAlgorithm::adaptive, false);
}

TEST(TEST_CATEGORY, gnn_model_checkpoint_of_another_model_is_refused) {
  auto const data = small_directed(9);
  TrainOptions o;
  o.epochs = 2;
  o.checkpoint = TEST_CATEGORY_NAME "_tessel_gnn_test_other.h5";
  o.spmm.algorithm = SpmmAlgorithm::csr;
  train(Space(), data, o);
  o.model = ModelKind::gin;
  o.resume = true;
  EXPECT_THROW(train(Space(), data, o), tessel::Exception);
  std::remove(TEST_CATEGORY_NAME "_tessel_gnn_test_other.h5");
}

/// A checkpoint of 4 epochs of GCN (csr) on \p data at \p path.
void write_checkpoint_of(Dataset const &data, std::string const &path) {
  TrainOptions o;
  o.epochs = 4;
  o.patience = 0;
  o.hidden = 8;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  o.checkpoint = path;
  train(Space(), data, o);
}

std::string resume_error(Dataset const &data, std::string const &path, std::uint64_t seed = 42) {
  TrainOptions o;
  o.epochs = 6;
  o.patience = 0;
  o.hidden = 8;
  o.seed = seed;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  o.checkpoint = path;
  o.resume = true;
  try {
    train(Space(), data, o);
  } catch (tessel::Exception const &e) {
    return e.what();
  }
  return "";
}

// A checkpoint is for its data set by content: another graph saved under the same name does not resume.
TEST(TEST_CATEGORY, gnn_model_checkpoint_of_another_graph_with_the_same_name_is_refused) {
  std::string const path = TEST_CATEGORY_NAME "_tessel_gnn_test_same_name.h5";
  auto const data = small_directed(21);
  write_checkpoint_of(data, path);
  auto other = small_directed(22);
  other.name = data.name;
  ASSERT_EQ(other.num_nodes(), data.num_nodes());
  auto const msg = resume_error(other, path);
  EXPECT_NE(msg.find("with other content than this run's"), std::string::npos) << msg;
  EXPECT_EQ(resume_error(data, path), ""); // the same data resumes
  std::remove(path.c_str());
}

// What a checkpoint claims is checked before it is believed: epochs 1, 2, ... one per optimizer step, finite
// parameters, the seed that wrote it; a refused file leaves the model's parameters as they were.
TEST(TEST_CATEGORY, gnn_model_damaged_checkpoints_are_refused) {
  std::string const path = TEST_CATEGORY_NAME "_tessel_gnn_test_damaged.h5";
  auto const data = small_directed(23);
  auto const damaged = [&](std::function<void(tessel::h5::File &)> const &damage) {
    write_checkpoint_of(data, path);
    {
      tessel::h5::File f(path, tessel::h5::Mode::append);
      damage(f);
      f.close();
    }
    return resume_error(data, path);
  };
  auto msg = damaged([](tessel::h5::File &f) {
    auto h = f.read<double>("history", {tessel::h5::any, 8});
    for (std::size_t r = 0; r < h.rows(); ++r)
      h.data[r * 8] = -1000000.0 + static_cast<double>(r);
    f.write("history", h.data.data(), {h.rows(), 8});
  });
  EXPECT_NE(msg.find("history row 0 is epoch -1e+06, expected 1"), std::string::npos) << msg;
  msg = damaged([](tessel::h5::File &f) { f.write_attribute("/", "adam_t", std::int64_t{7}); });
  EXPECT_NE(msg.find("history has 4 epochs but adam_t = 7"), std::string::npos) << msg;
  msg = damaged([](tessel::h5::File &f) { f.write_attribute("/", "adam_t", std::int64_t{-1000000}); });
  EXPECT_NE(msg.find("adam_t = -1000000 is outside [0, 1000000]"), std::string::npos) << msg;
  msg = damaged([](tessel::h5::File &f) {
    auto w = f.read<float>("layer1/weight", {tessel::h5::any, tessel::h5::any});
    w.data[3] = NAN;
    f.write("layer1/weight", w.data.data(), {w.rows(), w.data.size() / w.rows()});
  });
  EXPECT_NE(msg.find("layer1/weight[1, 0] = nan is not finite"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("learning rate"), std::string::npos) << msg;
  // The refused file leaves the model untouched.
  {
    TrainOptions o;
    o.hidden = 8;
    o.spmm.algorithm = SpmmAlgorithm::csr;
    GnnModel<Space> model(Space(), data, o);
    auto const before = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.weight(0));
    EXPECT_THROW(model.load_checkpoint(path), tessel::Exception);
    auto const after = model.weight(0);
    for (std::size_t k = 0; k < before.size(); ++k)
      ASSERT_EQ(before.data()[k], after.data()[k]) << "element " << k;
  }
  write_checkpoint_of(data, path);
  msg = resume_error(data, path, 7);
  EXPECT_NE(msg.find("was written with seed 42; this run has seed 7"), std::string::npos) << msg;
  std::remove(path.c_str());
}

TEST(TEST_CATEGORY, gnn_model_refuses_data_it_cannot_learn_from) {
  auto data = small_directed(24);
  TrainOptions o;
  o.epochs = 2;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  auto const error = [&](Dataset const &d, TrainOptions const &opts) {
    try {
      train(Space(), d, opts);
    } catch (tessel::Exception const &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto no_val = data;
  std::fill(no_val.val_mask.begin(), no_val.val_mask.end(), 0);
  auto msg = error(no_val, o);
  EXPECT_NE(msg.find("has no validation node"), std::string::npos) << msg;
  o.patience = 0; // no early stopping: nothing needs the validation nodes
  EXPECT_EQ(error(no_val, o), "");
  auto no_train = data;
  std::fill(no_train.train_mask.begin(), no_train.train_mask.end(), 0);
  msg = error(no_train, o);
  EXPECT_NE(msg.find("has no training node"), std::string::npos) << msg;
  TrainOptions huge = o;
  huge.hidden = 1 << 16;
  huge.layers = 64;
  msg = error(data, huge);
  EXPECT_NE(msg.find("the model (64 layers of width 65536"), std::string::npos) << msg;
}

TEST(TEST_CATEGORY, gnn_model_bias_moments_are_labelled_as_such) {
  auto const data = small_directed(25);
  tessel::test::ToolsRecorder recorder;
  TrainOptions o;
  o.model = ModelKind::gin;
  o.layers = 3;
  o.hidden = 8;
  o.epochs = 1;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  train(Space(), data, o);
  auto const count = [&](char const *label) {
    return std::count(recorder.allocations.begin(), recorder.allocations.end(), std::string(label));
  };
  // Every layer's weight and bias each have two moments, labelled as what they belong to.
  EXPECT_EQ(count("Tessel::gnn::adam_m"), 3);
  EXPECT_EQ(count("Tessel::gnn::adam_v"), 3);
  EXPECT_EQ(count("Tessel::gnn::bias_adam_m"), 3);
  EXPECT_EQ(count("Tessel::gnn::bias_adam_v"), 3);
}

TEST(TEST_CATEGORY, gnn_model_training_allocations_are_labelled) {
  auto const data = small_directed(10);
  tessel::test::ToolsRecorder recorder;
  TrainOptions o;
  o.epochs = 3;
  o.spmm.algorithm = SpmmAlgorithm::adaptive;
  o.spmm.part_size = 12;
  train(Space(), data, o);
  EXPECT_FALSE(recorder.allocations.empty());
  for (auto const &label : recorder.allocations)
    EXPECT_TRUE(tessel::test::tessel_labelled(label)) << "allocation '" << label << "'";
  for (auto const &name : recorder.kernels)
    EXPECT_TRUE(tessel::test::tessel_labelled(name) || name.rfind("Kokkos::View", 0) == 0) << "kernel '" << name << "'";
  EXPECT_NE(std::find(recorder.regions.begin(), recorder.regions.end(), "Tessel::gnn::epoch"), recorder.regions.end());
}

} // namespace

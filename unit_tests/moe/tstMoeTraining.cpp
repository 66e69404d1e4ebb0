// Training with MoeLayer (tools/src/moe/Train.cpp's model: embedding -> MoE -> linear head, on a teacher's data) under
// mpiexec at 1, 2 and 4 ranks: the loss falls, and the loss curve of 50 steps is the same (within 1e-5) on every
// rank count that divides the world (sub-communicators side by side), every EP x TP layout, and every schedule.
// Also the optimizers against their formulas.
#include <tessel/tools/moe/Train.hpp>

#include <tessel/moe/Training.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace tessel::moe;
using tessel::Communicator;

app::TrainSettings small_model() {
  app::TrainSettings s;
  s.layer.tokens = 48; // the global batch
  s.layer.hidden = 32;
  s.layer.ffn = 48;
  s.layer.experts = 8;
  s.layer.topk = 2;
  s.vocab = 64;
  s.outputs = 8;
  s.steps = 50;
  s.seed = 3;
  s.optimizer.learning_rate = 1e-2;
  s.aux_loss_coef = 0.01;
  return s;
}

// small_model over every rank of world: expert-parallel over all of them where the 8 experts divide evenly, else
// tensor-parallel.
app::TrainSettings small_model_on(Communicator const &world) {
  auto s = small_model();
  s.layer.ep = world.size() <= 8 && 8 % world.size() == 0 ? world.size() : 1;
  s.layer.tp = world.size() / s.layer.ep;
  return s;
}

struct Curve {
  std::string name;
  std::vector<double> loss;
};

void expect_same_curve(Curve const &a, Curve const &b) {
  ASSERT_EQ(a.loss.size(), b.loss.size());
  for (std::size_t i = 0; i < a.loss.size(); ++i)
    ASSERT_LE(std::abs(a.loss[i] - b.loss[i]), 1e-5 * std::abs(a.loss[i]))
        << b.name << " differs from " << a.name << " at step " << i << ": " << b.loss[i] << " vs " << a.loss[i];
}

TEST(MoeTraining, loss_falls_and_is_the_same_at_every_rank_count_and_schedule) {
  auto const world = Communicator::world();
  HostExecSpace space;
  std::vector<Curve> runs;
  CometParams comet;
  comet.comm_workers = 0;
  comet.tile_m = 4;
  comet.n_splits = 2;
  for (int size : {1, 2, 4}) {
    if (world.size() % size != 0)
      continue;
    auto const comm = world.split(world.rank() / size, world.rank());
    auto const layouts = size == 1   ? std::vector<std::pair<int, int>>{{1, 1}}
                         : size == 2 ? std::vector<std::pair<int, int>>{{2, 1}, {1, 2}}
                                     : std::vector<std::pair<int, int>>{{4, 1}, {2, 2}};
    for (auto [ep, tp] : layouts) {
      for (auto schedule : {Schedule::sequential, Schedule::pipelined, Schedule::comet}) {
        auto s = small_model();
        s.layer.ep = ep;
        s.layer.tp = tp;
        s.schedule = schedule;
        s.layer_options.comet = comet;
        s.layer_options.pipeline_chunks = 3;
        auto const name = std::string(name_of(schedule)) + " on " + std::to_string(size) + " ranks (EP " +
                          std::to_string(ep) + " x TP " + std::to_string(tp) + ")";
        runs.push_back({name, app::train(space, comm, s).loss});
      }
    }
  }
  ASSERT_GE(runs.size(), 3u);
  auto const &first = runs.front();
  EXPECT_LT(first.loss.back(), 0.5 * first.loss.front())
      << "the loss did not fall: " << first.loss.front() << " -> " << first.loss.back();
  for (std::size_t r = 1; r < runs.size(); ++r)
    expect_same_curve(first, runs[r]);
  if (world.rank() == 0)
    std::printf("loss %.6f -> %.6f over %zu steps; %zu runs agree\n", first.loss.front(), first.loss.back(),
                first.loss.size(), runs.size());
}

TEST(MoeTraining, sgd_also_trains) {
  auto const world = Communicator::world();
  HostExecSpace space;
  auto s = small_model_on(world);
  s.optimizer.kind = OptimizerOptions::Kind::sgd;
  s.optimizer.learning_rate = 0.5;
  s.optimizer.momentum = 0.9;
  auto const loss = app::train(space, world, s).loss;
  EXPECT_LT(loss.back(), 0.7 * loss.front()) << loss.front() << " -> " << loss.back();
}

TEST(MoeTraining, optimizer_steps_follow_their_formulas) {
  HostExecSpace space;
  float p[2] = {1.0f, -2.0f};
  float const g[2] = {0.5f, -1.0f};
  OptimizerOptions o;
  o.kind = OptimizerOptions::Kind::adam;
  o.learning_rate = 0.1;
  Optimizer adam(o);
  adam.begin_step();
  adam.update(space, "p", p, g, 2);
  // First Adam step: m / (1 - b1) = g, v / (1 - b2) = g^2, so the step is lr * g / (|g| + eps).
  EXPECT_NEAR(p[0], 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-6);
  EXPECT_NEAR(p[1], -2.0 + 0.1 * 1.0 / (1.0 + 1e-8), 1e-6);
  EXPECT_THROW(adam.update(space, "p", p, g, 1), tessel::Exception); // another size for the same key
  o.kind = OptimizerOptions::Kind::sgd;
  o.momentum = 0.5;
  Optimizer sgd(o);
  float q[1] = {1.0f};
  float const h[1] = {2.0f};
  sgd.begin_step();
  sgd.update(space, "q", q, h, 1); // buf = 2, q = 1 - 0.1 * 2
  sgd.begin_step();
  sgd.update(space, "q", q, h, 1); // buf = 0.5 * 2 + 2 = 3, q = 0.8 - 0.3
  EXPECT_NEAR(q[0], 0.5, 1e-6);
  EXPECT_THROW(Optimizer(OptimizerOptions{OptimizerOptions::Kind::adam, -1.0}), tessel::Exception);
  EXPECT_THROW(parse_optimizer("adagrad"), tessel::Exception);
  // A momentum given to Adam would do nothing: refused, naming both.
  auto const momentum = tessel::test::error_of([] {
    Optimizer(OptimizerOptions{OptimizerOptions::Kind::adam, 1e-3, 0.9});
  });
  EXPECT_NE(momentum.find("momentum 0.9 is SGD's; Adam has none"), std::string::npos) << momentum;
}

// The success check of tessel-moe train can fail: a learning rate too small to change any parameter leaves the
// held-out loss where it was (the old check, last step's loss below the first's, passed on batch noise alone), and a
// real one lowers it beyond its noise.
TEST(MoeTraining, the_loss_check_fails_when_nothing_was_learnt) {
  auto const world = Communicator::world();
  HostExecSpace space;
  auto s = small_model_on(world);
  s.steps = 10;
  s.optimizer.learning_rate = 1e-300;
  auto const idle = app::train(space, world, s);
  auto const none = app::check_loss(idle);
  EXPECT_FALSE(none.fell) << none.before << " -> " << none.after << " (noise " << none.noise << ")";
  EXPECT_EQ(none.before, none.after); // no parameter moved: the same batches give the same loss
  EXPECT_GT(none.noise, 0.0);
  // The training losses still move with the batches: what the old check took for learning.
  EXPECT_NE(idle.loss.front(), idle.loss.back());
  s.optimizer.learning_rate = 1e-2;
  auto const learnt = app::check_loss(app::train(space, world, s));
  EXPECT_TRUE(learnt.fell) << learnt.before << " -> " << learnt.after << " (noise " << learnt.noise << ")";
  // Nothing to check without held-out batches or steps: refused, not a pass.
  s.steps = 0;
  EXPECT_NE(tessel::test::error_of([&] { app::train(space, world, s); }).find("steps must be >= 1"), std::string::npos);
}

// A learning rate that blows the parameters up stops the training at the step it happened, naming it (not a later
// forward's "non-finite token" about the input).
TEST(MoeTraining, divergence_is_named) {
  auto const world = Communicator::world();
  HostExecSpace space;
  auto s = small_model_on(world);
  s.optimizer.kind = OptimizerOptions::Kind::sgd;
  s.optimizer.learning_rate = 1e6;
  auto const what = tessel::test::error_of([&] { app::train(space, world, s); });
  EXPECT_NE(what.find("train: the training diverged at step"), std::string::npos) << what;
  EXPECT_NE(what.find("lower the learning rate (1e+06)"), std::string::npos) << what;
}

} // namespace

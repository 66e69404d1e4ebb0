// A layer's weights from the application's arrays (Weights.hpp): the shard each rank holds equals the one cut from
// the dense weights for every EP x TP layout, gated or not; only a rank's own experts are asked for; null and
// non-finite inputs are errors naming the expert, matrix, row and column; the gate is copied with or without a bias;
// a layer built this way computes the dense reference's output.
#include "MoeTestUtils.hpp"

#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Weights.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <cmath>
#include <set>
#include <vector>

namespace {

using namespace tessel::moe;
using namespace tessel::moe::test;
using tessel::test::error_of;

// Each expert's matrices as an application might keep them: one vector per expert and matrix.
struct AppExperts {
  std::vector<std::vector<float>> w0, w1;
  AppExperts(MoeConfig const &config, DenseWeights const &dense) {
    for (int e = 0; e < config.experts; ++e) {
      w0.emplace_back(&dense.w0(e, 0, 0), &dense.w0(e, 0, 0) + dense.w0.extent(1) * dense.w0.extent(2));
      w1.emplace_back(&dense.w1(e, 0, 0), &dense.w1(e, 0, 0) + dense.w1.extent(1) * dense.w1.extent(2));
    }
  }
};

TEST(Weights, the_shard_from_arrays_is_the_shard_of_the_dense_weights) {
  for (bool gated : {true, false})
    for (auto [ep, tp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}}) {
      auto config = shape(10, 12, 16, 8, 2, true, Activation::silu, gated);
      config.ep = ep;
      config.tp = tp;
      auto const dense = random_weights(config, 7);
      AppExperts const app(config, dense);
      for (int rank = 0; rank < ep * tp; ++rank) {
        std::set<int> asked;
        auto const shard = shard_from_arrays(config, rank, [&](int e) {
          asked.insert(e);
          return ExpertMatrices{app.w0[static_cast<std::size_t>(e)].data(), app.w1[static_cast<std::size_t>(e)].data()};
        });
        auto const expected = shard_weights(config, rank, dense);
        ASSERT_EQ(shard.w0.size(), expected.w0.size());
        for (std::size_t i = 0; i < shard.w0.size(); ++i)
          ASSERT_EQ(shard.w0.data()[i], expected.w0.data()[i]) << config.describe() << " rank " << rank;
        for (std::size_t i = 0; i < shard.w1.size(); ++i)
          ASSERT_EQ(shard.w1.data()[i], expected.w1.data()[i]) << config.describe() << " rank " << rank;
        // Only the rank's own experts were asked for.
        std::set<int> own;
        for (int e = config.first_expert_of_rank(rank); e < config.first_expert_of_rank(rank) + 8 / ep; ++e)
          own.insert(e);
        EXPECT_EQ(asked, own) << config.describe() << " rank " << rank;
      }
    }
}

TEST(Weights, bad_arrays_are_named) {
  auto config = shape(10, 12, 16, 4, 2);
  config.ep = 2;
  auto const dense = random_weights(config, 3);
  AppExperts app(config, dense);
  auto const from = [&](int nulls_at, int rank = 1) {
    return error_of([&] {
      shard_from_arrays(config, rank, [&](int e) {
        auto const i = static_cast<std::size_t>(e);
        return ExpertMatrices{app.w0[i].data(), e == nulls_at ? nullptr : app.w1[i].data()};
      });
    });
  };
  EXPECT_NE(from(3).find("shard_from_arrays: expert 3's w1 is a null pointer"), std::string::npos) << from(3);
  EXPECT_EQ(from(0), ""); // expert 0 is rank 0's: rank 1 never asks for it
  EXPECT_NE(from(-1, 2).find("rank 2 outside [0, 2)"), std::string::npos) << from(-1, 2);
  app.w0[2][5 * 32 + 7] = std::nanf("");
  auto const nan = from(-1);
  EXPECT_NE(nan.find("expert 2's w0 holds nan at row 5, column 7"), std::string::npos) << nan;

  std::vector<float> weight(12 * 4, 0.5f), bias{0.0f, 1.0f, 2.0f, 3.0f};
  auto const gate = gate_from_arrays(config, weight.data(), bias.data());
  EXPECT_EQ(gate.weight.extent(0), 12u);
  EXPECT_EQ(gate.weight(11, 3), 0.5f);
  EXPECT_EQ(gate.bias(2), 2.0f);
  EXPECT_EQ(gate_from_arrays(config, weight.data()).bias.data(), nullptr); // a gate without bias
  bias[1] = INFINITY;
  auto const inf = error_of([&] { gate_from_arrays(config, weight.data(), bias.data()); });
  EXPECT_NE(inf.find("the gate bias holds inf at row 0, column 1"), std::string::npos) << inf;
}

// The README's use: the application's arrays to a layer, whose forward matches the dense reference.
TEST(Weights, a_layer_from_arrays_computes_the_reference) {
  auto const world = tessel::Communicator::world();
  auto const comm = world.split(world.rank(), 0); // one rank on its own
  auto config = shape(24, 16, 24, 4, 2);
  auto const dense = random_weights(config, 11);
  AppExperts const app(config, dense);
  auto const tokens = random_matrix("tokens", 24, 16, 12);
  auto const gate_weight = random_matrix("gate_weight", 16, 4, 13);
  std::vector<float> const bias{0.1f, -0.2f, 0.3f, 0.0f};
  auto const gate = gate_from_arrays(config, gate_weight.data(), bias.data());
  MoeLayer layer(config, comm, shard_from_arrays(config, comm.rank(), [&](int e) {
                   auto const i = static_cast<std::size_t>(e);
                   return ExpertMatrices{app.w0[i].data(), app.w1[i].data()};
                 }));
  HostMatrix out("out", 24, 16);
  layer.forward(HostExecSpace(), tokens, gate.input(), out, Schedule::comet);
  auto const ref = reference_forward(config, tokens, gate.input(), layer.routing().experts, dense);
  EXPECT_LT(max_relative_error(out, ref.out), 1e-5);
  EXPECT_EQ(ref.routing_violations, 0);
}

} // namespace

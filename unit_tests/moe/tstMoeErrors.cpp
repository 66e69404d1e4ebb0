// Bad input to a distributed MoE layer, under mpiexec at 1, 2 and 4 ranks: a rank whose configuration differs,
// NaN in the tokens, wrong shapes, and a peer that never sends (every waiting rank times out with a message that
// names it; nobody hangs).
#include "MoeTestUtils.hpp"

#include <tessel/moe/MoeLayer.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <chrono>
#include <string>

namespace {

using namespace tessel::moe;
using tessel::Communicator;

Communicator fresh_comm() {
  auto world = Communicator::world();
  return world.split(0, world.rank());
}

MoeConfig small_config(int world) {
  MoeConfig c;
  c.tokens = 16;
  c.hidden = 16;
  c.ffn = 24;
  c.experts = 8;
  c.topk = 2;
  c.ep = 8 % world == 0 ? world : 1;
  c.tp = world / c.ep;
  return c;
}

using tessel::test::error_of;

TEST(MoeErrors, invalid_configurations_name_the_field) {
  auto c = small_config(1);
  c.topk = 9;
  EXPECT_NE(error_of([&] { c.validate(); }).find("topk must be in [1, E=8]"), std::string::npos);
  c = small_config(1);
  c.ep = 3;
  EXPECT_NE(error_of([&] { c.validate(); }).find("E=8 is not divisible by EP=3"), std::string::npos);
  c = small_config(1);
  c.tp = 5;
  EXPECT_NE(error_of([&] { c.validate(); }).find("K=24 is not divisible by TP=5"), std::string::npos);
  c = small_config(1);
  c.dtype = tessel::DataType::bfloat16;
  EXPECT_NE(error_of([&] { c.validate(); }).find("float32"), std::string::npos);
  c = small_config(1);
  EXPECT_NE(error_of([&] { c.validate(7); }).find("does not match the communicator's 7 ranks"), std::string::npos);
}

TEST(MoeErrors, rank_with_different_config_fails_on_every_rank) {
  auto const comm = fresh_comm();
  if (comm.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  auto config = small_config(comm.size());
  if (comm.rank() == 1)
    config.topk = 1;
  auto const what = error_of([&] { MoeLayer layer(config, comm, allocate_expert_weights(config)); });
  EXPECT_NE(what.find("MoeConfig.topk differs across ranks: ranks 1 disagree with rank 0"), std::string::npos) << what;
}

TEST(MoeErrors, nan_tokens_are_reported_on_every_rank) {
  auto const comm = fresh_comm();
  auto const config = small_config(comm.size());
  auto const dense = tessel::moe::test::random_weights(config, 11);
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), dense));
  auto tokens = tessel::moe::test::random_matrix("tokens", 16, 16, 5 + static_cast<std::uint64_t>(comm.rank()));
  auto gate = tessel::moe::test::random_matrix("gate", 16, 8, 6);
  int const bad = comm.size() - 1;
  if (comm.rank() == bad)
    tokens(3, 5) = std::nanf("");
  HostMatrix out("out", 16, 16);
  HostExecSpace space;
  for (auto s : {Schedule::sequential, Schedule::pipelined, Schedule::comet}) {
    auto const what = error_of([&] { layer.forward(space, tokens, GateInput::from_weight(gate), out, s); });
    EXPECT_NE(what.find("the tokens of rank " + std::to_string(bad) + " contain NaN or infinity at row 3, column 5"),
              std::string::npos)
        << name_of(s) << ": " << what;
  }
  // The layer is still usable once the input is fixed.
  tokens(3, 5) = 0.5f;
  EXPECT_NO_THROW(layer.forward(space, tokens, GateInput::from_weight(gate), out, Schedule::comet));
}

TEST(MoeErrors, nan_output_gradients_are_reported_on_every_rank) {
  auto const comm = fresh_comm();
  auto const config = small_config(comm.size());
  auto const dense = tessel::moe::test::random_weights(config, 11);
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), dense));
  auto const tokens = tessel::moe::test::random_matrix("tokens", 16, 16, 5 + static_cast<std::uint64_t>(comm.rank()));
  auto const gate = tessel::moe::test::random_matrix("gate", 16, 8, 6);
  auto d_out = tessel::moe::test::random_matrix("d_out", 16, 16, 7 + static_cast<std::uint64_t>(comm.rank()));
  int const bad = comm.size() - 1;
  if (comm.rank() == bad)
    d_out(2, 7) = INFINITY;
  HostMatrix out("out", 16, 16);
  HostExecSpace space;
  MoeGradients grads;
  for (auto s : {Schedule::sequential, Schedule::pipelined, Schedule::comet}) {
    layer.forward(space, tokens, GateInput::from_weight(gate), out, s);
    auto const what = error_of([&] { layer.backward(space, d_out, grads, s); });
    EXPECT_NE(what.find("the output gradient of rank " + std::to_string(bad) +
                        " contains NaN or infinity at row 2, column 7"),
              std::string::npos)
        << name_of(s) << ": " << what;
  }
  d_out(2, 7) = 0.5f;
  EXPECT_NO_THROW(layer.backward(space, d_out, grads, Schedule::comet));
}

TEST(MoeErrors, wrong_shapes_are_rejected) {
  auto const comm = fresh_comm();
  auto const config = small_config(comm.size());
  auto const dense = tessel::moe::test::random_weights(config, 3);
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), dense));
  HostExecSpace space;
  HostMatrix tokens("tokens", 15, 16), out("out", 16, 16), gate("gate", 16, 8), logits("logits", 16, 7);
  EXPECT_NE(error_of([&] {
              layer.forward(space, tokens, GateInput::from_weight(gate), out);
            }).find("tokens are 15 x 16, expected M x N = 16 x 16"),
            std::string::npos);
  HostMatrix good("tokens", 16, 16);
  EXPECT_NE(error_of([&] {
              layer.forward(space, good, GateInput::from_logits(logits), out);
            }).find("gate logits are 16 x 7, expected 16 x 8"),
            std::string::npos);
  auto weights = allocate_expert_weights(config);
  auto wrong = config;
  wrong.ffn = 48;
  EXPECT_NE(error_of([&] { MoeLayer bad(wrong, comm, weights); }).find("expected E/EP x N x 2K/TP"), std::string::npos);
}

TEST(MoeErrors, silent_peer_times_out_on_every_waiting_rank) {
  auto comm = fresh_comm();
  if (comm.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  auto const config = small_config(comm.size());
  auto const dense = tessel::moe::test::random_weights(config, 3);
  auto tokens = tessel::moe::test::random_matrix("tokens", 16, 16, 9);
  auto gate = tessel::moe::test::random_matrix("gate", 16, 8, 10);
  HostMatrix out("out", 16, 16);
  HostExecSpace space;
  auto const seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Rank 0 never calls forward. Without the finite check the first messages are point-to-point, and the
  // error names the silent rank.
  LayerOptions options;
  options.check_finite = false;
  // Pipelined and comet twice: messages progressed by the compute thread, and by a communication thread. Rank 0
  // falls silent in a forward, or after a forward in its backward.
  for (bool in_backward : {false, true})
    for (auto [s, workers] : {std::pair{Schedule::sequential, 0},
                              {Schedule::pipelined, 0},
                              {Schedule::pipelined, 1},
                              {Schedule::comet, 0},
                              {Schedule::comet, 1}}) {
      std::string const phase = in_backward ? "backward" : "forward";
      SCOPED_TRACE(tessel::Impl::concat(phase, " ", name_of(s), ", ", workers, " communication threads"));
      auto short_comm = comm;
      short_comm.set_timeout(std::chrono::milliseconds(1000));
      options.pipeline_comm_workers = workers;
      MoeLayer layer(config, short_comm, shard_weights(config, comm.rank(), dense), options);
      auto params = layer.comet_params();
      params.comm_workers = workers;
      layer.set_comet_params(params);
      auto const d_out = tessel::moe::test::random_matrix("d_out", 16, 16, 12);
      MoeGradients grads;
      // One complete step first (it also runs the one-time parameter check).
      layer.forward(space, tokens, GateInput::from_weight(gate), out, s);
      layer.backward(space, d_out, grads, s);
      if (in_backward)
        layer.forward(space, tokens, GateInput::from_weight(gate), out, s);
      if (comm.rank() != 0) {
        auto const t0 = std::chrono::steady_clock::now();
        try {
          if (in_backward)
            layer.backward(space, d_out, grads, s);
          else
            layer.forward(space, tokens, GateInput::from_weight(gate), out, s);
          ADD_FAILURE() << name_of(s) << ": expected a timeout";
        } catch (tessel::TimeoutError const &e) {
          std::string const what = e.what();
          EXPECT_EQ(e.peer(), 0) << what;
          EXPECT_NE(what.find("rank 0"), std::string::npos) << name_of(s) << ": " << what;
          EXPECT_NE(what.find("MoE layer " + phase + " (" + name_of(s) + " schedule)"), std::string::npos) << what;
        }
        EXPECT_LT(seconds_since(t0), 20.0);
      }
      // Everyone meets again on a fresh communicator (the old one may hold unmatched messages).
      comm = fresh_comm();
    }
  // With the finite check, the first step is a collective that rank 0 never joins: it times out too.
  {
    auto short_comm = comm;
    short_comm.set_timeout(std::chrono::milliseconds(1000));
    MoeLayer layer(config, short_comm, shard_weights(config, comm.rank(), dense));
    if (comm.rank() != 0) {
      try {
        layer.forward(space, tokens, GateInput::from_weight(gate), out, Schedule::comet);
        ADD_FAILURE() << "expected a timeout";
      } catch (tessel::TimeoutError const &e) {
        EXPECT_NE(std::string(e.what()).find("did not complete within 1000 ms"), std::string::npos) << e.what();
      }
    }
    comm = fresh_comm();
  }
  comm.barrier();
}

} // namespace

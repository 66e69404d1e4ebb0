// Every schedule of MoeLayer against the dense single-process reference, under mpiexec at 1, 2 and 4 ranks:
// the three model shapes (scaled down), topk 1/2/4/8, an expert that receives no token, all tokens on one
// expert, M not divisible by the tile size, every EP x TP layout the rank count allows, gate weight (+ bias)
// and gate logits, both comet plan policies, several communication workers, and a paced communicator.
#include "MoeTestUtils.hpp"

#include <tessel/moe/MoeLayer.hpp>
#include <tessel/tools/moe/Harness.hpp> // the tools' calibration of the emulated link

#include <tessel/core/PacedCommunicator.hpp>

#include <TesselToolsRecorder.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace {

using namespace tessel::moe;
using tessel::Communicator;
using tessel::moe::test::fresh_seed;
using tessel::moe::test::random_matrix;
using tessel::moe::test::random_weights;
using namespace tessel::moe::test;

constexpr double tolerance = 1e-5;

// Runs every layout and variant of one case on \p comm, on an instance of \p Space; each rank checks its own
// tokens.
template <class Space = HostExecSpace>
void check_case(Case const &c, Communicator const &comm, bool all_variants = true) {
  auto const seed = fresh_seed(comm);
  SCOPED_TRACE("case " + c.name + ", seed " + std::to_string(seed) + ", on " + Space::name());
  Space space;
  for (auto const &config : layouts_of(c.config, comm.size())) {
    SCOPED_TRACE("EP=" + std::to_string(config.ep) + " TP=" + std::to_string(config.tp));
    auto const in = make_inputs(c, config, comm.rank(), seed);
    MoeLayer layer(config, comm, shard_weights(config, comm.rank(), in.dense));
    HostMatrix out("out", static_cast<std::size_t>(config.tokens), static_cast<std::size_t>(config.hidden));
    tessel::moe::ReferenceResult ref;
    bool have_ref = false;
    auto const all = variants();
    for (std::size_t v = 0; v < (all_variants ? all.size() : 1); ++v) {
      auto const &variant = all[v];
      SCOPED_TRACE(variant.describe());
      variant.apply(layer);
      Kokkos::deep_copy(out, std::nanf(""));
      layer.forward(space, in.tokens, in.gate(), out, variant.schedule);
      if (!have_ref) {
        ref = reference_forward(config, in.tokens, in.gate(), layer.routing().experts, in.dense);
        have_ref = true;
        EXPECT_EQ(ref.routing_violations, 0) << ref.first_violation;
      }
      double const err = max_relative_error(out, ref.out);
      EXPECT_LT(err, tolerance) << "rank " << comm.rank();
      // Every schedule must see the same routing.
      EXPECT_EQ(layer.routing().experts.extent(0), static_cast<std::size_t>(config.tokens));
    }
  }
}

Communicator fresh_comm() {
  auto world = Communicator::world();
  return world.split(0, world.rank());
}

TEST(MoeLayer, mixtral_shape_topk_1_2_4_8) {
  auto const comm = fresh_comm();
  for (int topk : {1, 2, 4, 8}) {
    Case c{"mixtral topk " + std::to_string(topk), shape(37, 64, 96, 8, topk), GateKind::weight, {}};
    check_case(c, comm);
  }
}

TEST(MoeLayer, every_enabled_host_backend) {
  // The same layer and schedules on each host execution space of this Kokkos (Serial, OpenMP, Threads).
  auto const comm = fresh_comm();
  Case const c{"mixtral topk 2", shape(37, 64, 96, 8, 2), GateKind::weight, {}};
  int backends = 0;
#define TESSEL_TEST_ON_SPACE(SPACE)                                                                                    \
  check_case<SPACE>(c, comm);                                                                                          \
  ++backends;
  TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_TEST_ON_SPACE)
#undef TESSEL_TEST_ON_SPACE
  EXPECT_GE(backends, 1);
}

TEST(MoeLayer, qwen2_shape) {
  auto const comm = fresh_comm();
  check_case({"qwen2", shape(29, 32, 24, 64, 4, false), GateKind::weight_bias, {}}, comm);
  check_case({"qwen3-like topk 8", shape(23, 32, 16, 32, 8, true), GateKind::weight_bias, {}}, comm);
}

TEST(MoeLayer, phi35_shape) {
  auto const comm = fresh_comm();
  check_case({"phi3.5", shape(33, 64, 80, 16, 2), GateKind::logits, {}}, comm);
}

TEST(MoeLayer, gelu_and_ungated_experts) {
  auto const comm = fresh_comm();
  check_case({"gelu gated", shape(21, 48, 40, 8, 2, true, Activation::gelu, true), GateKind::weight, {}}, comm);
  check_case({"silu ungated", shape(21, 48, 40, 8, 2, true, Activation::silu, false), GateKind::weight, {}}, comm);
  check_case({"gelu ungated", shape(21, 48, 40, 4, 1, false, Activation::gelu, false), GateKind::logits, {}}, comm);
}

TEST(MoeLayer, expert_with_zero_tokens) {
  auto const comm = fresh_comm();
  // Expert 3 (and 6) are never chosen: their logits sit far below the others.
  std::vector<float> skew(8, 0.0f);
  skew[3] = -60.0f;
  skew[6] = -60.0f;
  check_case({"zero-token experts", shape(26, 32, 48, 8, 2), GateKind::logits, skew}, comm);
}

TEST(MoeLayer, all_tokens_to_one_expert) {
  auto const comm = fresh_comm();
  std::vector<float> skew(8, 0.0f);
  skew[5] = 60.0f;
  check_case({"all to expert 5, topk 1", shape(31, 32, 48, 8, 1), GateKind::logits, skew}, comm);
  check_case({"all to expert 5, topk 2", shape(31, 32, 48, 8, 2), GateKind::logits, skew}, comm);
}

TEST(MoeLayer, skewed_zipf_routing_and_tiny_m) {
  auto const comm = fresh_comm();
  std::vector<float> skew(16);
  for (int e = 0; e < 16; ++e)
    skew[static_cast<std::size_t>(e)] = -1.2f * std::log(static_cast<float>(e + 1)); // Zipf-like popularity
  check_case({"zipf", shape(40, 32, 32, 16, 2), GateKind::weight, skew}, comm);
  check_case({"one token", shape(1, 16, 16, 4, 2), GateKind::weight, {}}, comm);
  check_case({"no token", shape(0, 16, 16, 4, 2), GateKind::weight, {}}, comm, /*all_variants=*/true);
}

TEST(MoeLayer, paced_communicator_gives_the_same_result) {
  auto const comm = tessel::make_paced_communicator(fresh_comm(), tessel::LinkModel{2e9, 5e-6});
  check_case({"paced mixtral", shape(37, 64, 96, 8, 2), GateKind::weight, {}}, comm);
}

TEST(MoeLayer, aux_loss_and_imbalance) {
  auto const comm = fresh_comm();
  HostExecSpace space;
  auto config = shape(64, 16, 16, 8, 2);
  config.ep = comm.size() <= 8 && 8 % comm.size() == 0 ? comm.size() : 1;
  config.tp = comm.size() / config.ep;
  // Uniform routing: every token's logits are a rotation so each expert gets the same share.
  HostMatrix logits("logits", 64, 8), tokens("tokens", 64, 16);
  for (int t = 0; t < 64; ++t)
    for (int e = 0; e < 8; ++e)
      logits(t, e) = static_cast<float>((e - t) % 8 == 0 ? 4 : ((e - t - 1) % 8 == 0 ? 3 : 0));
  Routing routing;
  route(space, config, tokens, GateInput::from_logits(logits), routing);
  EXPECT_NEAR(routing.imbalance_std(comm), 0.0, 1e-12);
  // f_e = 1/8 for all e, and sum_e P_e = 1, so the loss is E * (1/8) * sum_e P_e / ... = 1.
  EXPECT_NEAR(routing.aux_loss(comm), 1.0, 1e-6);
  // All tokens on experts 0 and 1: f = (1/2, 1/2, 0...), P concentrated: loss > 1.
  for (int t = 0; t < 64; ++t)
    for (int e = 0; e < 8; ++e)
      logits(t, e) = e == 0 ? 9.0f : (e == 1 ? 8.0f : 0.0f);
  route(space, config, tokens, GateInput::from_logits(logits), routing);
  EXPECT_GT(routing.aux_loss(comm), 3.0);
  EXPECT_NEAR(routing.imbalance_std(comm), std::sqrt((2 * 0.375 * 0.375 + 6 * 0.125 * 0.125) / 8), 1e-12);
}

TEST(MoeLayer, kokkos_tools_see_tessel_labels_only) {
  auto const comm = fresh_comm();
  auto config = shape(24, 32, 32, 8, 2);
  config.ep = 8 % comm.size() == 0 ? comm.size() : 1;
  config.tp = comm.size() / config.ep;
  Case c{"tools", config, GateKind::weight, {}};
  auto const in = make_inputs(c, config, comm.rank(), 7);
  HostExecSpace space;
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), in.dense));
  HostMatrix out("out", 24, 32);
  tessel::test::ToolsRecorder recorder;
  for (auto s : {Schedule::sequential, Schedule::pipelined, Schedule::comet})
    layer.forward(space, in.tokens, in.gate(), out, s);
  EXPECT_FALSE(recorder.kernels.empty());
  EXPECT_FALSE(recorder.allocations.empty());
  for (auto const &k : recorder.kernels)
    EXPECT_TRUE(tessel::test::tessel_labelled(k)) << "kernel " << k;
  for (auto const &a : recorder.allocations)
    EXPECT_TRUE(tessel::test::tessel_labelled(a)) << "allocation " << a;
  bool saw_region = false;
  for (auto const &r : recorder.regions)
    saw_region = saw_region || r == "Tessel::moe::forward_comet";
  EXPECT_TRUE(saw_region);
}

TEST(MoeLayer, calibration_reaches_the_share_and_agrees_across_ranks) {
  auto const world = fresh_comm();
  if (world.size() < 2)
    GTEST_SKIP() << "one rank has no communication to calibrate";
  auto const comm = tessel::make_paced_communicator(world, tessel::LinkModel{0.0, 5e-6});
  // Large enough that computation outweighs the per-message latency: the bandwidth search itself is exercised.
  auto config = shape(1024, 128, 256, 8, 2);
  config.ep = 8 % comm.size() == 0 ? comm.size() : 1;
  config.tp = comm.size() / config.ep;
  Case c{"calibration", config, GateKind::weight, {}};
  auto const in = make_inputs(c, config, comm.rank(), 11);
  HostExecSpace space;
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), in.dense));
  auto &link = *tessel::paced_backend_of(comm);
  EXPECT_THROW(tessel::moe::bench::calibrate_comm_share(space, layer, link, in.tokens, in.gate(), 1.5, 5e-6),
               tessel::Exception);
  auto const say = [&](std::string const &line) {
    if (comm.rank() == 0)
      std::printf("%s\n", line.c_str());
  };
  auto const cal =
      tessel::moe::bench::calibrate_comm_share(space, layer, link, in.tokens, in.gate(), 0.47, 5e-6, 3, say);
  EXPECT_LE(cal.measurements, 11);
  EXPECT_GT(cal.t_comp, 0.0);
  // Every rank set the same link (decisions are taken on values all ranks share).
  EXPECT_EQ(comm.allreduce_value(cal.link.bandwidth, tessel::ReduceOp::min),
            comm.allreduce_value(cal.link.bandwidth, tessel::ReduceOp::max));
  if (cal.link.bandwidth > 0.0) {
    // Loose bounds: timings on a shared machine; the calibration keeps the closest point it measured.
    EXPECT_GT(cal.share, 0.25) << "t_comm " << cal.t_comm << " s, t_comp " << cal.t_comp << " s";
    EXPECT_LT(cal.share, 0.7) << "t_comm " << cal.t_comm << " s, t_comp " << cal.t_comp << " s";
  } else {
    EXPECT_GE(cal.share, 0.4) << "unlimited bandwidth is chosen only when latency alone reaches the share";
  }
}

} // namespace

// The multi-GPU CUDA path (NcclMoeLayer: one rank per process and GPU, comet on an NCCL symmetric window, the
// baselines on NCCL all-to-alls) against the dense double-precision reference, under mpiexec at 1, 2 and 4 ranks.
// Skipped (reported as skipped) unless every rank has its own CUDA device on this node; where they do, it asserts.
// Bounds per dtype as in tstCudaMoe.cpp (float32 1e-4, bfloat16 6e-2). As there, every forward starts from buffers
// filled with NaN (DeviceDebug::poison_buffers) and has inputs of its own, so that no schedule passes on another's
// data. The backward (float32) of every schedule against reference_backward (< 1e-5, as the host backward's test),
// each forward/backward pair on inputs and output gradients of its own, from NaN-filled buffers.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/core/cuda/NcclCommunicator.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/cuda/NcclMoeLayer.hpp>

#include <MoeTestUtils.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

namespace {

using namespace tessel;
using namespace tessel::moe;
using tessel::moe::test::relative_error;

// Why the multi-GPU tests cannot run here ("" when every rank has a device of its own); the same on every rank.
std::string without_a_device_per_rank(Communicator const &world) {
  int const devices = tessel::cuda::device_count();
  if (world.allreduce_value(devices >= world.size() ? 1 : 0, ReduceOp::min) != 0)
    return "";
  return "needs one CUDA device per rank on the node (" + std::to_string(devices) + " visible, " +
         std::to_string(world.size()) + " ranks)";
}

TEST(CudaNcclMoe, schedules_against_reference) {
  auto const world = Communicator::world();
  if (auto const why = without_a_device_per_rank(world); !why.empty())
    GTEST_SKIP() << why;
  auto const nccl = tessel::cuda::make_nccl_communicator(world);
  auto const seed = test::fresh_seed(world);
  for (DataType dtype : {DataType::float32, DataType::bfloat16})
    for (int topk : {1, 2}) {
      MoeConfig config;
      config.tokens = 100;
      config.hidden = 72;
      config.ffn = 80;
      config.experts = 4 * world.size();
      config.topk = topk;
      config.ep = world.size();
      MoeConfig host = config;
      config.dtype = dtype;
      auto const dense = test::random_weights(host, seed);
      tessel::moe::cuda::DeviceOptions options;
      options.debug.poison_buffers = true;
      tessel::moe::cuda::NcclMoeLayer layer(config, nccl, shard_weights(host, world.rank(), dense), options);
      CometParams p;
      p.comm_workers = 2;
      p.tile_m = 16;
      p.n_splits = 3;
      std::uint64_t input = 0;
      for (Schedule s : {Schedule::sequential, Schedule::pipelined, Schedule::comet, Schedule::comet}) {
        auto const mine = seed + 97 * ++input + 10 * static_cast<std::uint64_t>(world.rank() + 1);
        auto const tokens = test::random_matrix("tokens", 100, 72, mine);
        auto const logits =
            test::random_matrix("logits", 100, static_cast<std::size_t>(config.experts), mine + 1, 2.0f);
        auto const gate = GateInput::from_logits(logits);
        HostMatrix out("out", 100, 72);
        std::fill(out.data(), out.data() + out.size(), std::nanf(""));
        if (s == Schedule::comet)
          layer.set_comet_params(p);
        layer.forward(tokens, gate, out, s);
        auto const ref = reference_forward(host, tokens, gate, layer.routing().experts, dense);
        double const err = max_relative_error(out, ref.out);
        EXPECT_LE(err, dtype == DataType::float32 ? 1e-4 : 6e-2)
            << name_of(s) << " " << name_of(dtype) << " topk " << topk << " rank " << world.rank() << " seed " << seed;
        p.policy = PlanPolicy::local_first; // the second comet forward: the other plan order, same flags
      }
    }
}

TEST(CudaNcclMoe, backward_against_reference) {
  auto const world = Communicator::world();
  if (auto const why = without_a_device_per_rank(world); !why.empty())
    GTEST_SKIP() << why;
  auto const nccl = tessel::cuda::make_nccl_communicator(world);
  auto const seed = test::fresh_seed(world);
  int const w = world.size(), me = world.rank();
  constexpr double aux_coef = 0.01;
  for (int topk : {1, 2})
    for (bool gate_weight : {false, true}) {
      MoeConfig config;
      config.tokens = 100;
      config.hidden = 72;
      config.ffn = 80;
      config.experts = 4 * w;
      config.topk = topk;
      config.ep = w;
      auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden),
                 e = static_cast<std::size_t>(config.experts), k = static_cast<std::size_t>(topk);
      auto const dense = test::random_weights(config, seed);
      tessel::moe::cuda::DeviceOptions options;
      options.debug.poison_buffers = true;
      tessel::moe::cuda::NcclMoeLayer layer(config, nccl, shard_weights(config, me, dense), options);
      layer.set_pipeline_chunks(3);
      CometParams p;
      p.comm_workers = 2;
      p.tile_m = 16;
      p.n_splits = 3;
      layer.set_comet_params(p);
      auto const gate_w = test::random_matrix("gate_weight", n, e, seed + 5, 0.3f);
      HostVector bias("bias", e);
      for (std::size_t j = 0; j < e; ++j)
        bias(j) = 0.1f * static_cast<float>(j % 3);
      std::uint64_t input = 0;
      for (auto [fwd, bwd] :
           {std::tuple{Schedule::sequential, Schedule::sequential},
            std::tuple{Schedule::pipelined, Schedule::pipelined}, std::tuple{Schedule::comet, Schedule::comet},
            std::tuple{Schedule::pipelined, Schedule::comet}}) {
        ++input;
        // Every rank's inputs (each rank makes them all: the reference needs them).
        auto inputs_of = [&](int r) {
          auto const mine = seed + 97 * input + 10 * static_cast<std::uint64_t>(r + 1);
          return std::tuple{test::random_matrix("tokens", m, n, mine),
                            test::random_matrix("logits", m, e, mine + 1, 2.0f),
                            test::random_matrix("d_out", m, n, mine + 2)};
        };
        auto gate_of = [&](HostMatrix const &logits) {
          return gate_weight ? GateInput::from_weight(gate_w, bias) : GateInput::from_logits(logits);
        };
        auto const [tokens, logits, d_out] = inputs_of(me);
        HostMatrix out("out", m, n);
        layer.forward(tokens, gate_of(logits), out, fwd);
        MoeGradients grads;
        grads.tokens = HostMatrix("grad_tokens", m, n);
        Kokkos::deep_copy(grads.tokens, std::nanf(""));
        layer.backward(d_out, grads, bwd, aux_coef);

        HostMatrix all_tokens("all_tokens", m * w, n), all_logits("all_logits", m * w, e),
            all_d_out("all_d_out", m * w, n);
        HostIndexMatrix chosen("chosen", m * w, k);
        HostExecSpace space;
        for (int r = 0; r < w; ++r) {
          auto const [t_r, l_r, d_r] = inputs_of(r);
          Routing routing;
          route(space, config, t_r, gate_of(l_r), routing); // the choice rank r's router makes
          for (std::size_t t = 0; t < m; ++t) {
            auto const row = static_cast<std::size_t>(r) * m + t;
            for (std::size_t j = 0; j < n; ++j) {
              all_tokens(row, j) = t_r(t, j);
              all_d_out(row, j) = d_r(t, j);
            }
            for (std::size_t j = 0; j < e; ++j)
              all_logits(row, j) = l_r(t, j);
            for (std::size_t q = 0; q < k; ++q)
              chosen(row, q) = routing.experts(t, q);
          }
        }
        auto const ref =
            reference_backward(config, all_tokens, gate_of(all_logits), chosen, dense, all_d_out, aux_coef);
        auto grad = allocate_dense_weights(config);
        for (std::size_t i = 0; i < grad.w0.size(); ++i)
          grad.w0.data()[i] = static_cast<float>(ref.w0[i]);
        for (std::size_t i = 0; i < grad.w1.size(); ++i)
          grad.w1.data()[i] = static_cast<float>(ref.w1[i]);
        auto const shard = shard_weights(config, me, grad);
        std::string const what = std::string("forward ") + name_of(fwd) + ", backward " + name_of(bwd) + ", topk " +
                                 std::to_string(topk) + (gate_weight ? ", gate weight" : ", logits") + ", rank " +
                                 std::to_string(me) + ", seed " + std::to_string(seed);
        auto const row0 = static_cast<std::size_t>(me) * m;
        EXPECT_LT(relative_error(grads.tokens.data(), &ref.tokens(row0, 0), m * n), 1e-5) << what << ": tokens";
        EXPECT_LT(relative_error(grads.logits.data(), &ref.logits(row0, 0), m * e,
                                 test::logit_gradient_floor(layer.routing().weights, ref, row0)),
                  1e-5)
            << what << ": logits";
        std::vector<double> e0(shard.w0.data(), shard.w0.data() + shard.w0.size()),
            e1(shard.w1.data(), shard.w1.data() + shard.w1.size());
        ASSERT_EQ(grads.experts.w0.size(), e0.size()) << what;
        ASSERT_EQ(grads.experts.w1.size(), e1.size()) << what;
        EXPECT_LT(relative_error(grads.experts.w0.data(), e0.data(), e0.size()), 1e-5) << what << ": W0";
        EXPECT_LT(relative_error(grads.experts.w1.data(), e1.data(), e1.size()), 1e-5) << what << ": W1";
        if (gate_weight) {
          EXPECT_LT(relative_error(grads.gate_weight.data(), ref.gate_weight.data(), ref.gate_weight.size()), 1e-5)
              << what << ": gate weight";
          EXPECT_LT(relative_error(grads.gate_bias.data(), ref.bias.data(), ref.bias.size()), 1e-5)
              << what << ": gate bias";
        }
      }
    }
}

} // namespace

// The multi-GPU CUDA path (NcclMoeLayer: one rank per process and GPU, comet on an NCCL symmetric window, the
// baselines on NCCL all-to-alls) against the dense double-precision reference, under mpiexec at 1, 2 and 4 ranks.
// Skipped (reported as skipped) unless every rank has its own CUDA device on this node; where they do, it asserts.
// Bounds per dtype as in tstCudaMoe.cpp (float32 1e-4, bfloat16 6e-2). As there, every forward starts from buffers
// filled with NaN (DeviceDebug::poison_buffers) and has inputs of its own, so that no schedule passes on another's
// data.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/core/cuda/NcclCommunicator.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/cuda/NcclMoeLayer.hpp>

#include <MoeTestUtils.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace {

using namespace tessel;
using namespace tessel::moe;

TEST(CudaNcclMoe, schedules_against_reference) {
  auto const world = Communicator::world();
  int const devices = tessel::cuda::device_count();
  int const have = world.allreduce_value(devices >= world.size() ? 1 : 0, ReduceOp::min);
  if (have == 0)
    GTEST_SKIP() << "needs one CUDA device per rank on the node (" << devices << " visible, " << world.size()
                 << " ranks)";
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

} // namespace

// Example 5 (moe): a complete MPI program with one Mixture-of-Experts layer, expert-parallel over the ranks.
//   - weights from the application's own arrays (as read from its checkpoint), sharded for this rank;
//   - the tuning choice made explicit (no first-use tuning: no tuning time, no file written);
//   - comet and sequential forwards, each checked against the dense double-precision reference;
//   - a backward checked against the reference's gradients, an optimizer step, and a few training steps.
// Run: mpiexec -n 2 ./tessel_example_moe   (or ./tessel_example_moe on one process)
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Training.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

namespace moe = tessel::moe;
using Space = moe::HostExecSpace;

// The application's arrays: what it would read from its own checkpoint (the same on every rank), and each rank's
// own tokens. Plain std::vectors, row-major.
std::vector<float> random_array(std::size_t size, float scale, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(size);
  for (auto &v : values)
    v = normal(rng);
  return values;
}

double max_relative_difference(moe::ConstHostMatrix a, moe::HostMatrix64 b, std::int64_t b_first_row) {
  double worst = 0;
  for (std::size_t i = 0; i < a.extent(0); ++i)
    for (std::size_t j = 0; j < a.extent(1); ++j) {
      double const want = b(static_cast<std::size_t>(b_first_row) + i, j);
      worst = std::max(worst, std::abs(a(i, j) - want) / std::max(1.0, std::abs(want)));
    }
  return worst;
}

int run(int /*argc*/, char ** /*argv*/) {
  tessel::Communicator comm = tessel::Communicator::world();
  int const rank = comm.rank(), ranks = comm.size();
  Space const space;
  int failures = 0;
  auto check = [&](bool ok, char const *what) {
    if (!ok) {
      std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what);
      ++failures;
    }
  };

  // [snippet:moe-config]
  moe::MoeConfig config;
  config.tokens = 128; // M: tokens per rank (every rank brings its own)
  config.hidden = 64;  // N
  config.ffn = 96;     // K
  config.experts = 4;  // E
  config.topk = 2;
  config.ep = ranks; // expert parallelism over all ranks: each holds E / EP experts
  config.tp = 1;
  // [snippet:moe-config]
  std::int64_t const m = config.tokens, n = config.hidden, k = config.ffn, e = config.experts;

  // The application's weights: all experts' full matrices (GEMM0 [E, N, 2K] = [gate | up], GEMM1 [E, K, N]) and the
  // router's [N, E] weight and [E] bias.
  std::vector<float> const w0_app = random_array(static_cast<std::size_t>(e * n * 2 * k), 1.0f / std::sqrt(n), 1);
  std::vector<float> const w1_app = random_array(static_cast<std::size_t>(e * k * n), 1.0f / std::sqrt(k), 2);
  std::vector<float> const gate_app = random_array(static_cast<std::size_t>(n * e), 1.0f / std::sqrt(n), 3);

  // [snippet:moe-weights]
  // Copy them into Tessel's Views, and keep this rank's shard: its E / EP experts.
  moe::DenseWeights dense = moe::allocate_dense_weights(config);
  std::copy(w0_app.begin(), w0_app.end(), dense.w0.data()); // row-major [E, N, 2K]
  std::copy(w1_app.begin(), w1_app.end(), dense.w1.data()); // row-major [E, K, N]
  moe::ExpertWeights shard = moe::shard_weights(config, rank, dense);
  moe::GateParams gate{moe::HostMatrix("gate.weight", n, e), moe::HostVector("gate.bias", e)};
  std::copy(gate_app.begin(), gate_app.end(), gate.weight.data());
  Kokkos::deep_copy(gate.bias, 0.0f);
  // [snippet:moe-weights]

  // [snippet:moe-layer]
  // The tuning choice, explicit: the comet schedule's parameters come from the registry of tuned shapes that ships
  // with Tessel, or its documented rule for shapes it lacks; the layer spends no time tuning and writes no file.
  // (options.comet = moe::CometParams{...} fixes them; options.tune_on_first_use = true tunes on the first comet
  // forward, within options.tune_budget seconds, and keeps the result in a per-user cache file.)
  moe::LayerOptions options;
  options.tune_on_first_use = false;
  moe::MoeLayer layer(config, comm, shard, options); // collective: checks the configuration on every rank
  // [snippet:moe-layer]
  if (rank == 0)
    std::printf("layer: %s on %d rank(s); comet parameters %s (%s)\n", config.describe().c_str(), ranks,
                layer.comet_params().describe().c_str(), layer.comet_params_source().c_str());

  // This rank's tokens.
  std::vector<float> const tokens_app =
      random_array(static_cast<std::size_t>(m * n), 1.0f, 100 + static_cast<std::uint64_t>(rank));
  moe::HostMatrix tokens("tokens", m, n), out("out", m, n), out_sequential("out_sequential", m, n);
  std::copy(tokens_app.begin(), tokens_app.end(), tokens.data());

  // [snippet:moe-forward]
  layer.forward(space, tokens, gate.input(), out_sequential, moe::Schedule::sequential);
  layer.forward(space, tokens, gate.input(), out, moe::Schedule::comet); // collective; the backward uses this one
  // [snippet:moe-forward]

  // The reference runs on all ranks' tokens with all experts in double precision, taking the router's choice.
  moe::HostMatrix all_tokens("all_tokens", m * ranks, n);
  comm.allgather(tokens.data(), all_tokens.data(), static_cast<std::size_t>(m * n));
  moe::HostIndexMatrix all_chosen("all_chosen", m * ranks, config.topk);
  comm.allgather(layer.routing().experts.data(), all_chosen.data(), static_cast<std::size_t>(m * config.topk));
  moe::ReferenceResult const reference = moe::reference_forward(config, all_tokens, gate.input(), all_chosen, dense);
  double const forward_error = max_relative_difference(out, reference.out, m * rank);
  double const sequential_error = max_relative_difference(out_sequential, reference.out, m * rank);
  check(reference.routing_violations == 0, "the router chose a top-k of the probabilities");
  check(forward_error < 1e-4, "the comet forward equals the dense reference");
  check(sequential_error < 1e-4, "the sequential forward equals the dense reference");

  // Backward of L = sum over ranks of 0.5 |out - target|^2 (target: half the tokens): d_out = out - target.
  moe::HostMatrix d_out("d_out", m, n);
  auto loss_gradient = [&](moe::ConstHostMatrix output, moe::HostMatrix gradient) {
    double loss = 0;
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t c = 0; c < n; ++c) {
        double const diff = output(t, c) - 0.5 * tokens(t, c);
        gradient(t, c) = static_cast<float>(diff);
        loss += 0.5 * diff * diff;
      }
    return loss; // this rank's share
  };
  loss_gradient(out, d_out);
  // [snippet:moe-backward]
  moe::MoeGradients grads;
  layer.backward(space, d_out, grads, moe::Schedule::comet); // collective
  // [snippet:moe-backward]
  // The reference's gradients, before the optimizer changes the gate in place.
  moe::HostMatrix all_d_out("all_d_out", m * ranks, n);
  comm.allgather(d_out.data(), all_d_out.data(), static_cast<std::size_t>(m * n));
  moe::ReferenceGradients const reference_grads =
      moe::reference_backward(config, all_tokens, gate.input(), all_chosen, dense, all_d_out);
  double const backward_error = max_relative_difference(grads.tokens, reference_grads.tokens, m * rank);
  check(backward_error < 1e-3, "the token gradients equal the reference's");
  // [snippet:moe-step]
  moe::Optimizer adam({moe::OptimizerOptions::Kind::adam, /*learning_rate=*/1e-2});
  adam.begin_step();                            // every update until the next begin_step is one step
  adam.update_layer(space, layer, gate, grads); // this rank's expert shards and the (replicated) gate
  // [snippet:moe-step]
  if (rank == 0)
    std::printf("largest relative differences from the reference: forward comet %.1e, sequential %.1e; token "
                "gradients %.1e\n",
                forward_error, sequential_error, backward_error);

  // A few training steps: forward, loss, backward, optimizer step (train_step); the loss must fall.
  // [snippet:moe-train]
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step)
    losses.push_back(moe::train_step(space, layer, tokens, gate, out, loss_gradient, adam, grads));
  // [snippet:moe-train]
  if (rank == 0)
    std::printf("training: loss %.4f -> %.4f over %zu steps\n", losses.front(), losses.back(), losses.size());
  check(losses.back() < 0.9 * losses.front(), "training lowers the loss");

  int const all_failures = comm.allreduce_value(failures, tessel::ReduceOp::sum);
  if (rank == 0 && all_failures == 0)
    std::printf("moe example: all checks passed\n");
  return all_failures == 0 ? tessel::exit_success : tessel::exit_failure;
}

} // namespace

int main(int argc, char **argv) { return tessel::run_main("tessel_example_moe", argc, argv, run); }

#include <tessel/tools/moe/Train.hpp>

#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Synthetic.hpp>

#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Gemm.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif

#include <chrono>
#include <cmath>
#include <random>
#include <string>

namespace tessel::moe::app {

namespace {

std::size_t sz(std::int64_t i) { return static_cast<std::size_t>(i); }

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

HostMatrix normal_matrix(char const *label, std::int64_t rows, std::int64_t cols, std::uint64_t seed, double stddev) {
  HostMatrix m(std::string(label), sz(rows), sz(cols));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(stddev));
  for (std::size_t i = 0; i < m.size(); ++i)
    m.data()[i] = dist(rng);
  return m;
}

// Token id of the global token g of step s.
int token_id(std::uint64_t seed, int step, std::int64_t g, int vocab) {
  return static_cast<int>(splitmix(seed ^ (static_cast<std::uint64_t>(step) << 40) ^ static_cast<std::uint64_t>(g)) %
                          static_cast<std::uint64_t>(vocab));
}

// The teacher's output for every token id: its embedding through its MoE (the dense reference, in double) and its
// head. A one-token model depends on the id alone, so a table holds the whole data set.
HostMatrix teacher_targets(HostExecSpace const &space, TrainSettings const &s) {
  auto config = s.layer;
  config.tokens = s.vocab;
  config.ep = config.tp = 1;
  std::int64_t const n = config.hidden, v = s.vocab, c = s.outputs, e = config.experts;
  auto const emb = make_tokens(config, v, s.seed * 7 + 1);
  auto const experts = make_weights(config, s.seed * 7 + 2);
  auto const gate = normal_matrix("Tessel::moe::teacher_gate", n, e, s.seed * 7 + 3, 2.0 / std::sqrt(double(n)));
  auto const head = normal_matrix("Tessel::moe::teacher_head", n, c, s.seed * 7 + 4, 1.0 / std::sqrt(double(n)));
  Routing routing;
  route(space, config, emb, GateInput::from_weight(gate), routing);
  auto const ref = reference_forward(config, emb, GateInput::from_weight(gate), routing.experts, experts);
  HostMatrix targets("Tessel::moe::teacher_targets", sz(v), sz(c));
  for (std::int64_t t = 0; t < v; ++t)
    for (std::int64_t j = 0; j < c; ++j) {
      double acc = 0.0;
      for (std::int64_t i = 0; i < n; ++i)
        acc += ref.out(t, i) * static_cast<double>(head(i, j));
      targets(t, j) = static_cast<float>(acc);
    }
  return targets;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

TrainProblem make_problem(HostExecSpace const &space, TrainSettings const &s) {
  auto config = s.layer;
  std::int64_t const n = config.hidden, c = s.outputs, v = s.vocab;
  TrainProblem p;
  p.targets = teacher_targets(space, s);
  // The student: the same initial values at every rank count (dense experts, sharded to each rank by train()).
  p.embedding = make_tokens(config, v, s.seed * 7 + 11);
  p.experts = make_weights(config, s.seed * 7 + 12);
  p.gate.weight =
      normal_matrix("Tessel::moe::gate_weight", n, config.experts, s.seed * 7 + 13, 1.0 / std::sqrt(double(n)));
  p.gate.bias = HostVector("Tessel::moe::gate_bias", sz(config.experts));
  p.head = normal_matrix("Tessel::moe::head", n, c, s.seed * 7 + 14, 1.0 / std::sqrt(double(n)));
  return p;
}

std::vector<int> step_token_ids(TrainSettings const &s, int step) {
  std::vector<int> ids(sz(s.layer.tokens));
  for (std::int64_t g = 0; g < s.layer.tokens; ++g)
    ids[sz(g)] = token_id(s.seed, step, g, s.vocab);
  return ids;
}

void write_problem(std::string const &path, TrainSettings const &s, TrainProblem const &p) {
#ifndef TESSEL_ENABLE_HDF5
  (void)s;
  (void)p;
  throw UsageError("cannot write " + path + ": this Tessel was built without HDF5");
#else
  auto const &c = s.layer;
  h5::File f(path, h5::Mode::truncate);
  f.write_attribute("/", "schema", "tessel.moe.train_problem");
  f.write_attribute("/", "schema_version", std::int64_t{1});
  f.write_attribute("/", "hidden", static_cast<std::int64_t>(c.hidden));
  f.write_attribute("/", "ffn", static_cast<std::int64_t>(c.ffn));
  f.write_attribute("/", "experts", static_cast<std::int64_t>(c.experts));
  f.write_attribute("/", "topk", static_cast<std::int64_t>(c.topk));
  f.write_attribute("/", "activation", name_of(c.activation));
  f.write_attribute("/", "gated", static_cast<std::int64_t>(c.gated));
  f.write_attribute("/", "normalize_topk", static_cast<std::int64_t>(c.normalize_topk));
  f.write_attribute("/", "batch", static_cast<std::int64_t>(c.tokens));
  f.write_attribute("/", "vocab", static_cast<std::int64_t>(s.vocab));
  f.write_attribute("/", "outputs", static_cast<std::int64_t>(s.outputs));
  f.write_attribute("/", "steps", static_cast<std::int64_t>(s.steps));
  f.write_attribute("/", "seed", static_cast<std::int64_t>(s.seed));
  f.write_attribute("/", "aux_loss_coef", s.aux_loss_coef);
  f.write_attribute("/", "optimizer", name_of(s.optimizer.kind));
  f.write_attribute("/", "learning_rate", s.optimizer.learning_rate);
  f.write_attribute("/", "momentum", s.optimizer.momentum);
  f.write_attribute("/", "beta1", s.optimizer.beta1);
  f.write_attribute("/", "beta2", s.optimizer.beta2);
  f.write_attribute("/", "eps", s.optimizer.eps);
  f.write_attribute("/", "weight_decay", s.optimizer.weight_decay);
  f.write("targets", p.targets);
  f.write("embedding", p.embedding);
  // HDF5 files of Tessel hold 1-D and 2-D datasets: the experts' weights stacked, [E N, K0] and [E K, N].
  auto const &w0 = p.experts.w0, &w1 = p.experts.w1;
  f.write("experts/w0", w0.data(), {w0.extent(0) * w0.extent(1), w0.extent(2)});
  f.write("experts/w1", w1.data(), {w1.extent(0) * w1.extent(1), w1.extent(2)});
  f.write("gate/weight", p.gate.weight);
  f.write("gate/bias", p.gate.bias);
  f.write("head", p.head);
  std::vector<int> ids;
  ids.reserve(sz(s.steps * c.tokens));
  for (int step = 0; step < s.steps; ++step) {
    auto const one = step_token_ids(s, step);
    ids.insert(ids.end(), one.begin(), one.end());
  }
  f.write("token_ids", ids.data(), {sz(s.steps), sz(c.tokens)});
  f.close();
#endif
}

TrainResult train(HostExecSpace const &space, Communicator const &comm, TrainSettings const &s) {
  int const w = comm.size();
  auto const batch = s.layer.tokens;
  TESSEL_REQUIRE(batch % w == 0, "train: the batch of ", batch, " tokens does not split evenly over ", w, " ranks");
  TESSEL_REQUIRE(s.vocab >= 1 && s.outputs >= 1 && s.steps >= 0, "train: vocab, outputs must be >= 1, steps >= 0");
  auto config = s.layer;
  config.tokens = batch / w;
  std::int64_t const m = config.tokens, n = config.hidden, c = s.outputs, v = s.vocab;
  auto problem = make_problem(space, s);
  auto const &targets = problem.targets;
  auto &embedding = problem.embedding;
  auto &gate = problem.gate;
  auto &head = problem.head;
  MoeLayer layer(config, comm, shard_weights(config, comm.rank(), problem.experts), s.layer_options);
  Optimizer optimizer(s.optimizer);
  MoeGradients grads;
  HostMatrix x("Tessel::moe::train_tokens", sz(m), sz(n)), out("Tessel::moe::train_out", sz(m), sz(n)),
      y("Tessel::moe::train_head_out", sz(m), sz(c)), dy("Tessel::moe::train_head_grad", sz(m), sz(c));
  // Gradients of the replicated parameters, reduced together: [head | embedding].
  std::vector<float> replicated(sz(n * c + v * n));
  std::vector<int> ids(sz(m));
  TrainResult result;
  for (int step = 0; step < s.steps; ++step) {
    comm.barrier();
    auto const t0 = std::chrono::steady_clock::now();
    for (std::int64_t t = 0; t < m; ++t) {
      ids[sz(t)] = token_id(s.seed, step, comm.rank() * m + t, s.vocab);
      for (std::int64_t i = 0; i < n; ++i)
        x(sz(t), sz(i)) = embedding(sz(ids[sz(t)]), sz(i));
    }
    // Mean squared error over the global batch: d loss / d y = 2 (y - target) / (batch C).
    auto const loss = [&](ConstHostMatrix o, HostMatrix d_out) {
      tessel::gemm(space, Op::none, Op::none, 1.0f, MatrixRef<float const>{o.data(), m, n, n},
                   MatrixRef<float const>{head.data(), n, c, c}, 0.0f, MatrixRef<float>{y.data(), m, c, c});
      double share = 0.0;
      double const scale = 1.0 / static_cast<double>(batch * c);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t j = 0; j < c; ++j) {
          double const diff = static_cast<double>(y(sz(t), sz(j))) - targets(sz(ids[sz(t)]), sz(j));
          share += diff * diff * scale;
          dy(sz(t), sz(j)) = static_cast<float>(2.0 * diff * scale);
        }
      tessel::gemm(space, Op::none, Op::transpose, 1.0f, MatrixRef<float const>{dy.data(), m, c, c},
                   MatrixRef<float const>{head.data(), n, c, c}, 0.0f, MatrixRef<float>{d_out.data(), m, n, n});
      // The head's gradient while its input is at hand: out^T dy.
      tessel::gemm(space, Op::transpose, Op::none, 1.0f, MatrixRef<float const>{o.data(), m, n, n},
                   MatrixRef<float const>{dy.data(), m, c, c}, 0.0f, MatrixRef<float>{replicated.data(), n, c, c});
      return share;
    };
    double const value = train_step(space, layer, x, gate, out, loss, optimizer, grads, s.schedule, s.aux_loss_coef);
    result.forward_seconds.push_back(layer.stats().total);
    result.backward_seconds.push_back(layer.backward_stats().total);
    // The embedding's gradient: each token's gradient added to its id's row; then both reduced over the ranks.
    std::fill(replicated.begin() + n * c, replicated.end(), 0.0f);
    float *const demb = replicated.data() + n * c;
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t i = 0; i < n; ++i)
        demb[sz(ids[sz(t)] * n + i)] += grads.tokens(sz(t), sz(i));
    comm.allreduce(replicated.data(), replicated.data(), replicated.size(), ReduceOp::sum);
    optimizer.update(space, "head", head.data(), replicated.data(), n * c);
    optimizer.update(space, "embedding", embedding.data(), demb, v * n);
    result.loss.push_back(value);
    result.step_seconds.push_back(comm.allreduce_value(seconds_since(t0), ReduceOp::max));
  }
  return result;
}

} // namespace tessel::moe::app

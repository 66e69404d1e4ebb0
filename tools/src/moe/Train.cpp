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
#include <utility>
#include <vector>

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

// Token ids of the held-out batches: another stream of the same generator, never a training batch's.
int held_out_id(std::uint64_t seed, int batch, std::int64_t g, int vocab) {
  return token_id(seed ^ 0x5bd1e9955bd1e995ULL, batch, g, vocab);
}

// One rank's student: embedding -> MoE layer -> linear head, its optimizer, and the batch it runs.
class Student {
public:
  Student(HostExecSpace const &space, Communicator const &comm, TrainSettings const &s, TrainProblem problem)
      : _space(space), _comm(comm), _s(s), _m(s.layer.tokens / comm.size()), _n(s.layer.hidden), _c(s.outputs),
        _targets(problem.targets), _config(layer_config(s, comm.size())), _embedding(problem.embedding),
        _layer(_config, comm, shard_weights(_config, comm.rank(), problem.experts), s.layer_options),
        _head(problem.head), _gate(problem.gate), _optimizer(s.optimizer),
        _x("Tessel::moe::train_tokens", sz(_m), sz(_n)), _out("Tessel::moe::train_out", sz(_m), sz(_n)),
        _y("Tessel::moe::train_head_out", sz(_m), sz(_c)), _dy("Tessel::moe::train_head_grad", sz(_m), sz(_c)),
        _replicated(sz(_n * _c + s.vocab * _n)), _ids(sz(_m)) {}

  static MoeConfig layer_config(TrainSettings const &s, int ranks) {
    auto config = s.layer;
    config.tokens = s.layer.tokens / ranks;
    return config;
  }

  // Runs the global tokens g of this rank through the token ids \p id(g).
  template <class Id> void load(Id &&id) {
    for (std::int64_t t = 0; t < _m; ++t) {
      _ids[sz(t)] = id(_comm.rank() * _m + t);
      for (std::int64_t i = 0; i < _n; ++i)
        _x(sz(t), sz(i)) = _embedding(sz(_ids[sz(t)]), sz(i));
    }
  }

  // One training step on the loaded batch: the layer's train_step (forward, loss, backward, update of its experts
  // and gate), then the head and the embedding. Returns the loss (the same on every rank).
  double step(TrainResult &result) {
    auto const loss = [&](ConstHostMatrix o, HostMatrix d_out) { return mse(o, d_out); };
    double const value =
        train_step(_space, _layer, _x, _gate, _out, loss, _optimizer, _grads, _s.schedule, _s.aux_loss_coef);
    result.forward_seconds.push_back(_layer.stats().total);
    result.backward_seconds.push_back(_layer.backward_stats().total);
    // The embedding's gradient: each token's gradient added to its id's row; then both reduced over the ranks.
    std::fill(_replicated.begin() + _n * _c, _replicated.end(), 0.0f);
    float *const demb = _replicated.data() + _n * _c;
    for (std::int64_t t = 0; t < _m; ++t)
      for (std::int64_t i = 0; i < _n; ++i)
        demb[sz(_ids[sz(t)] * _n + i)] += _grads.tokens(sz(t), sz(i));
    _comm.allreduce(_replicated.data(), _replicated.data(), _replicated.size(), ReduceOp::sum);
    _optimizer.update(_space, "head", _head.data(), _replicated.data(), _n * _c);
    _optimizer.update(_space, "embedding", _embedding.data(), demb, _s.vocab * _n);
    return value;
  }

  // The data loss of the loaded batch (summed over the ranks), nothing updated.
  double evaluate() {
    _layer.forward(_space, _x, _gate.input(), _out, _s.schedule);
    return _comm.allreduce_value(mse(_out, HostMatrix()), ReduceOp::sum);
  }

  // Names the first parameter that is no longer finite (the training diverged), or returns an empty string.
  std::string non_finite() const {
    auto const bad = [](auto const &view) { return first_non_finite(view.data(), view.size()) != view.size(); };
    auto const &experts = _layer.weights();
    std::string const mine = bad(_embedding)                      ? "the embedding"
                             : bad(_head)                         ? "the head"
                             : bad(_gate.weight)                  ? "the gate weight"
                             : bad(_gate.bias)                    ? "the gate bias"
                             : bad(experts.w0) || bad(experts.w1) ? "the experts"
                                                                  : "";
    int const any = _comm.allreduce_value(mine.empty() ? 0 : 1, ReduceOp::max);
    return any == 0 ? std::string() : mine.empty() ? std::string("another rank's experts") : mine;
  }

private:
  // Mean squared error over the global batch: this rank's share; with \p d_out, its gradient d loss / d out (through
  // d loss / d y = 2 (y - target) / (batch C)) and the head's gradient out^T dy.
  double mse(ConstHostMatrix o, HostMatrix d_out) {
    tessel::gemm(_space, Op::none, Op::none, 1.0f, MatrixRef<float const>{o.data(), _m, _n, _n},
                 MatrixRef<float const>{_head.data(), _n, _c, _c}, 0.0f, MatrixRef<float>{_y.data(), _m, _c, _c});
    double share = 0.0;
    double const scale = 1.0 / static_cast<double>(_s.layer.tokens * _c);
    for (std::int64_t t = 0; t < _m; ++t)
      for (std::int64_t j = 0; j < _c; ++j) {
        double const diff = static_cast<double>(_y(sz(t), sz(j))) - _targets(sz(_ids[sz(t)]), sz(j));
        share += diff * diff * scale;
        _dy(sz(t), sz(j)) = static_cast<float>(2.0 * diff * scale);
      }
    if (d_out.data() == nullptr)
      return share;
    tessel::gemm(_space, Op::none, Op::transpose, 1.0f, MatrixRef<float const>{_dy.data(), _m, _c, _c},
                 MatrixRef<float const>{_head.data(), _n, _c, _c}, 0.0f, MatrixRef<float>{d_out.data(), _m, _n, _n});
    tessel::gemm(_space, Op::transpose, Op::none, 1.0f, MatrixRef<float const>{o.data(), _m, _n, _n},
                 MatrixRef<float const>{_dy.data(), _m, _c, _c}, 0.0f,
                 MatrixRef<float>{_replicated.data(), _n, _c, _c});
    return share;
  }

  HostExecSpace const &_space;
  Communicator const &_comm;
  TrainSettings const &_s;
  std::int64_t const _m, _n, _c;
  HostMatrix const _targets;
  MoeConfig const _config;
  HostMatrix _embedding;
  MoeLayer _layer;
  HostMatrix _head;
  GateParams _gate;
  Optimizer _optimizer;
  MoeGradients _grads;
  HostMatrix _x, _out, _y, _dy;
  // Gradients of the replicated parameters, reduced together: [head | embedding].
  std::vector<float> _replicated;
  std::vector<int> _ids;
};

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
  TESSEL_REQUIRE(s.layer.tokens % w == 0, "train: the batch of ", s.layer.tokens, " tokens does not split evenly over ",
                 w, " ranks");
  TESSEL_REQUIRE(s.vocab >= 1 && s.outputs >= 1 && s.steps >= 1 && s.held_out >= 2,
                 "train: vocab, outputs and steps must be >= 1, held_out >= 2");
  Student student(space, comm, s, make_problem(space, s));
  auto const held_out = [&] {
    std::vector<double> losses;
    for (int b = 0; b < s.held_out; ++b) {
      student.load([&](std::int64_t g) { return held_out_id(s.seed, b, g, s.vocab); });
      losses.push_back(student.evaluate());
    }
    return losses;
  };
  TrainResult result;
  result.held_out_before = held_out();
  for (int step = 0; step < s.steps; ++step) {
    comm.barrier();
    auto const t0 = std::chrono::steady_clock::now();
    student.load([&](std::int64_t g) { return token_id(s.seed, step, g, s.vocab); });
    double const loss = student.step(result);
    auto const diverged = student.non_finite();
    TESSEL_REQUIRE(std::isfinite(loss) && diverged.empty(), "train: the training diverged at step ", step, " (loss ",
                   loss, diverged.empty() ? std::string() : "; " + diverged + " no longer finite",
                   "): lower the learning rate (", s.optimizer.learning_rate, ") or the load-balancing coefficient (",
                   s.aux_loss_coef, ")");
    result.loss.push_back(loss);
    result.step_seconds.push_back(comm.allreduce_value(seconds_since(t0), ReduceOp::max));
  }
  result.held_out_after = held_out();
  return result;
}

LossCheck check_loss(TrainResult const &result) {
  LossCheck check;
  auto const n = result.held_out_before.size();
  if (n < 2 || result.held_out_after.size() != n)
    return check;
  for (std::size_t i = 0; i < n; ++i) {
    check.before += result.held_out_before[i] / static_cast<double>(n);
    check.after += result.held_out_after[i] / static_cast<double>(n);
  }
  double variance = 0.0;
  for (double v : result.held_out_before)
    variance += (v - check.before) * (v - check.before) / static_cast<double>(n - 1);
  check.noise = 2.0 * std::sqrt(variance / static_cast<double>(n));
  check.fell = check.before - check.after > check.noise && check.after < check.before;
  return check;
}

double train_memory_bytes(TrainSettings const &s, int ranks) {
  auto const d = [](auto v) { return static_cast<double>(v); };
  double const n = d(s.layer.hidden), k = d(s.layer.ffn), e = d(s.layer.experts), v = d(s.vocab), c = d(s.outputs);
  double const k0 = (s.layer.gated ? 2.0 : 1.0) * k, m = d(s.layer.tokens) / d(ranks), topk = d(s.layer.topk);
  double const dense = e * n * (k0 + k) * 4.0; // one model's experts, float
  // Teacher and student: dense experts each, the student's shard, the reference's double copy of one expert and
  // its output; embeddings, heads, targets; the batch through the layer (rows per token: topk).
  return 2.0 * dense + dense / d(ranks) + n * (k0 + k) * 8.0 + v * n * (4.0 + 4.0 + 8.0) + 2.0 * n * c * 4.0 +
         v * c * 4.0 + m * n * 4.0 * (6.0 + 4.0 * topk) + m * topk * k0 * 4.0 * 3.0;
}

} // namespace tessel::moe::app

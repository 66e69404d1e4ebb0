#include <tessel/moe/Reference.hpp>

#include <tessel/core/Gemm.hpp>

#include <tessel/core/Error.hpp>

#include <cmath>
#include <sstream>
#include <vector>

namespace tessel::moe {

namespace {

// Logits (from the given logits, or tokens x weight + bias) and their softmax over the experts, in double.
std::vector<double> reference_probabilities(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate) {
  auto const t_count = static_cast<std::int64_t>(tokens.extent(0));
  std::int64_t const n = config.hidden;
  int const e_count = config.experts;
  std::vector<double> probs(static_cast<std::size_t>(t_count * e_count));
  for (std::int64_t t = 0; t < t_count; ++t) {
    double *p = probs.data() + t * e_count;
    for (int e = 0; e < e_count; ++e) {
      if (gate.kind == GateInput::Kind::logits) {
        p[e] = gate.logits(t, e);
      } else {
        double acc = gate.bias.data() ? static_cast<double>(gate.bias(e)) : 0.0;
        for (std::int64_t i = 0; i < n; ++i)
          acc += static_cast<double>(tokens(t, i)) * static_cast<double>(gate.weight(i, e));
        p[e] = acc;
      }
    }
    double top = p[0];
    for (int e = 1; e < e_count; ++e)
      top = std::max(top, p[e]);
    double sum = 0.0;
    for (int e = 0; e < e_count; ++e)
      sum += (p[e] = std::exp(p[e] - top));
    for (int e = 0; e < e_count; ++e)
      p[e] /= sum;
  }
  return probs;
}

double act_of(Activation a, double g) {
  return a == Activation::silu ? g / (1.0 + std::exp(-g)) : 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
}
double act_grad(Activation a, double g) {
  if (a == Activation::silu) {
    double const s = 1.0 / (1.0 + std::exp(-g));
    return s * (1.0 + g * (1.0 - s));
  }
  return 0.5 * (1.0 + std::erf(g / std::sqrt(2.0))) + g * std::exp(-0.5 * g * g) / 2.5066282746310002 /* sqrt(2 pi) */;
}

std::size_t z(std::int64_t i) { return static_cast<std::size_t>(i); }

// Each token's combine weights [T, topk] from its chosen experts' probabilities (renormalized over the chosen, or
// not).
std::vector<double> combine_weights(MoeConfig const &config, std::vector<double> const &probs, HostIndexMatrix chosen,
                                    std::int64_t t_count) {
  int const e_count = config.experts, topk = config.topk;
  std::vector<double> weight(z(t_count * topk));
  for (std::int64_t t = 0; t < t_count; ++t) {
    double chosen_sum = 0.0;
    for (int j = 0; j < topk; ++j)
      chosen_sum += probs[z(t * e_count + chosen(t, j))];
    for (int j = 0; j < topk; ++j) {
      double const pe = probs[z(t * e_count + chosen(t, j))];
      weight[z(t * topk + j)] = config.normalize_topk ? pe / chosen_sum : pe;
    }
  }
  return weight;
}

// Counts the tokens whose chosen experts are not distinct or not a top-k of the probabilities (by more than 1e-5)
// into \p result, describing the first.
void check_topk(MoeConfig const &config, std::vector<double> const &probs, HostIndexMatrix chosen, std::int64_t t_count,
                ReferenceResult &result) {
  int const e_count = config.experts, topk = config.topk;
  for (std::int64_t t = 0; t < t_count; ++t) {
    double const *p = probs.data() + t * e_count;
    double chosen_min = 2.0, other_max = -1.0;
    bool distinct = true;
    for (int j = 0; j < topk; ++j) {
      int const e = chosen(t, j);
      TESSEL_REQUIRE(e >= 0 && e < e_count, "reference: token ", t, " is routed to expert ", e);
      for (int i = 0; i < j; ++i)
        distinct = distinct && chosen(t, i) != e;
      chosen_min = std::min(chosen_min, p[e]);
    }
    for (int e = 0; e < e_count; ++e) {
      bool is_chosen = false;
      for (int j = 0; j < topk; ++j)
        is_chosen = is_chosen || chosen(t, j) == e;
      if (!is_chosen)
        other_max = std::max(other_max, p[e]);
    }
    if ((!distinct || other_max > chosen_min + 1e-5) && result.routing_violations++ == 0) {
      std::ostringstream os;
      os << "token " << t << ": chosen experts have min probability " << chosen_min << " but an unchosen expert has "
         << other_max << (distinct ? "" : " (an expert is chosen twice)");
      result.first_violation = os.str();
    }
  }
}

// One expert in double precision: its weights, the tokens routed to it (rows, and their (token, choice) slots
// t * topk + j), and the forward of those rows: x, pre = x W0, hid = act-gated(pre), y = hid W1.
struct DenseExpert {
  MoeConfig const &config;
  std::int64_t n, k, k0, r = 0;
  std::vector<double> w0, w1;
  std::vector<std::int64_t> rows, slots;
  std::vector<double> x, pre, hid, y;

  explicit DenseExpert(MoeConfig const &c)
      : config(c), n(c.hidden), k(c.ffn), k0((c.gated ? 2 : 1) * c.ffn), w0(z(n * k0)), w1(z(k * n)) {}

  // Loads expert \p e and the tokens routed to it; false when none is.
  bool load(int e, DenseWeights const &weights, HostIndexMatrix chosen, ConstHostMatrix tokens) {
    rows.clear();
    slots.clear();
    auto const t_count = static_cast<std::int64_t>(chosen.extent(0));
    for (std::int64_t t = 0; t < t_count; ++t)
      for (int j = 0; j < config.topk; ++j)
        if (chosen(t, j) == e) {
          rows.push_back(t);
          slots.push_back(t * config.topk + j);
        }
    r = static_cast<std::int64_t>(rows.size());
    if (r == 0)
      return false;
    for (std::int64_t i = 0; i < n * k0; ++i)
      w0[z(i)] = weights.w0.data()[z(e * n * k0 + i)];
    for (std::int64_t i = 0; i < k * n; ++i)
      w1[z(i)] = weights.w1.data()[z(e * k * n + i)];
    x.assign(z(r * n), 0.0);
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        x[z(i * n + j)] = tokens(rows[z(i)], j);
    return true;
  }

  void forward() {
    pre.assign(z(r * k0), 0.0);
    hid.assign(z(r * k), 0.0);
    y.assign(z(r * n), 0.0);
    HostExecSpace const host;
    tessel::gemm<HostExecSpace, double>(host, Op::none, Op::none, 1.0, {x.data(), r, n, n}, {w0.data(), n, k0, k0}, 0.0,
                                        {pre.data(), r, k0, k0});
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < k; ++j) {
        double const a = act_of(config.activation, pre[z(i * k0 + j)]);
        hid[z(i * k + j)] = config.gated ? a * pre[z(i * k0 + k + j)] : a;
      }
    tessel::gemm<HostExecSpace, double>(host, Op::none, Op::none, 1.0, {hid.data(), r, k, k}, {w1.data(), k, n, n}, 0.0,
                                        {y.data(), r, n, n});
  }

  // The backward of the forward for the output gradient \p d_out and combine weights \p weight: each row's
  // combine-weight gradient into \p dweight, the expert's weight gradients into \p dw0, \p dw1 and the rows' token
  // gradients added into \p dtokens.
  void backward(ConstHostMatrix d_out, std::vector<double> const &weight, std::vector<double> &dweight, double *dw0,
                double *dw1, HostMatrix64 dtokens) const {
    std::vector<double> dy(z(r * n)), dh(z(r * k)), dpre(z(r * k0)), dx(z(r * n));
    for (std::int64_t i = 0; i < r; ++i) {
      double dot = 0.0;
      for (std::int64_t j = 0; j < n; ++j) {
        dy[z(i * n + j)] = weight[z(slots[z(i)])] * static_cast<double>(d_out(rows[z(i)], j));
        dot += static_cast<double>(d_out(rows[z(i)], j)) * y[z(i * n + j)];
      }
      dweight[z(slots[z(i)])] = dot;
    }
    // dW1 = hid^T dy; dhid = dy W1^T; through the activation; dW0 = x^T dpre; dx = dpre W0^T.
    HostExecSpace const host;
    tessel::gemm<HostExecSpace, double>(host, Op::transpose, Op::none, 1.0, {hid.data(), r, k, k}, {dy.data(), r, n, n},
                                        0.0, {dw1, k, n, n});
    tessel::gemm<HostExecSpace, double>(host, Op::none, Op::transpose, 1.0, {dy.data(), r, n, n}, {w1.data(), k, n, n},
                                        0.0, {dh.data(), r, k, k});
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < k; ++j) {
        double const gv = pre[z(i * k0 + j)];
        double const up = config.gated ? pre[z(i * k0 + k + j)] : 1.0;
        dpre[z(i * k0 + j)] = dh[z(i * k + j)] * up * act_grad(config.activation, gv);
        if (config.gated)
          dpre[z(i * k0 + k + j)] = dh[z(i * k + j)] * act_of(config.activation, gv);
      }
    tessel::gemm<HostExecSpace, double>(host, Op::transpose, Op::none, 1.0, {x.data(), r, n, n},
                                        {dpre.data(), r, k0, k0}, 0.0, {dw0, n, k0, k0});
    tessel::gemm<HostExecSpace, double>(host, Op::none, Op::transpose, 1.0, {dpre.data(), r, k0, k0},
                                        {w0.data(), n, k0, k0}, 0.0, {dx.data(), r, n, n});
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        dtokens(rows[z(i)], j) += dx[z(i * n + j)];
  }
};

// The logits' gradient: dL/dp (the combine weights' \p dweight, and the load-balancing loss's E f_e / T per
// token), then through the softmax.
void logit_gradients(MoeConfig const &config, std::vector<double> const &probs, HostIndexMatrix chosen,
                     std::vector<double> const &weight, std::vector<double> const &dweight, double aux_loss_coef,
                     HostMatrix64 logits) {
  auto const t_count = static_cast<std::int64_t>(chosen.extent(0));
  int const e_count = config.experts, topk = config.topk;
  std::vector<double> count(z(e_count), 0.0);
  for (std::int64_t t = 0; t < t_count; ++t)
    for (int j = 0; j < topk; ++j)
      count[z(chosen(t, j))] += 1.0;
  std::vector<double> dp(z(e_count));
  for (std::int64_t t = 0; t < t_count; ++t) {
    double const *p = probs.data() + t * e_count;
    for (int e = 0; e < e_count; ++e)
      dp[z(e)] = aux_loss_coef * e_count * (count[z(e)] / (static_cast<double>(t_count) * topk)) /
                 static_cast<double>(t_count);
    if (config.normalize_topk) {
      // w_j = p_j / S, S = sum over the chosen: dL/dp_j = (dw_j - sum_i w_i dw_i) / S for the chosen.
      double chosen_sum = 0.0, mean = 0.0;
      for (int j = 0; j < topk; ++j) {
        chosen_sum += p[chosen(t, j)];
        mean += weight[z(t * topk + j)] * dweight[z(t * topk + j)];
      }
      for (int j = 0; j < topk; ++j)
        dp[z(chosen(t, j))] += (dweight[z(t * topk + j)] - mean) / chosen_sum;
    } else {
      for (int j = 0; j < topk; ++j)
        dp[z(chosen(t, j))] += dweight[z(t * topk + j)];
    }
    double mean = 0.0;
    for (int e = 0; e < e_count; ++e)
      mean += p[e] * dp[z(e)];
    for (int e = 0; e < e_count; ++e)
      logits(t, e) = p[e] * (dp[z(e)] - mean);
  }
}

// Through a gate given as a weight: the weight's and bias's gradients, and the tokens' share.
void gate_gradients(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate, ReferenceGradients &g) {
  auto const t_count = static_cast<std::int64_t>(tokens.extent(0));
  std::int64_t const n = config.hidden;
  int const e_count = config.experts;
  g.gate_weight.assign(z(n * e_count), 0.0);
  g.bias.assign(z(e_count), 0.0);
  for (std::int64_t t = 0; t < t_count; ++t)
    for (int e = 0; e < e_count; ++e) {
      double const d = g.logits(t, e);
      g.bias[z(e)] += d;
      for (std::int64_t i = 0; i < n; ++i) {
        g.gate_weight[z(i * e_count + e)] += static_cast<double>(tokens(t, i)) * d;
        g.tokens(t, i) += d * static_cast<double>(gate.weight(i, e));
      }
    }
}

} // namespace

ReferenceResult reference_forward(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
                                  HostIndexMatrix chosen, DenseWeights const &weights) {
  auto const t_count = static_cast<std::int64_t>(tokens.extent(0));
  std::int64_t const n = config.hidden;
  TESSEL_REQUIRE(static_cast<std::int64_t>(tokens.extent(1)) == n, "reference: tokens have ", tokens.extent(1),
                 " columns, expected N=", n);
  TESSEL_REQUIRE(static_cast<std::int64_t>(chosen.extent(0)) == t_count &&
                     static_cast<int>(chosen.extent(1)) == config.topk,
                 "reference: expert choice is ", chosen.extent(0), " x ", chosen.extent(1), ", expected ", t_count,
                 " x ", config.topk);
  ReferenceResult result;
  result.out = HostMatrix64("Tessel::moe::reference_out", z(t_count), z(n));
  auto const probs = reference_probabilities(config, tokens, gate);
  check_topk(config, probs, chosen, t_count, result);
  auto const weight = combine_weights(config, probs, chosen, t_count);
  // Per expert: its rows' FFN in double (full K), added into their tokens with the combine weights.
  DenseExpert expert(config);
  for (int e = 0; e < config.experts; ++e) {
    if (!expert.load(e, weights, chosen, tokens))
      continue;
    expert.forward();
    for (std::int64_t i = 0; i < expert.r; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        result.out(expert.rows[z(i)], j) += weight[z(expert.slots[z(i)])] * expert.y[z(i * n + j)];
  }
  return result;
}

ReferenceGradients reference_backward(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
                                      HostIndexMatrix chosen, DenseWeights const &weights, ConstHostMatrix d_out,
                                      double aux_loss_coef) {
  auto const t_count = static_cast<std::int64_t>(tokens.extent(0));
  std::int64_t const n = config.hidden, k = config.ffn, k0 = (config.gated ? 2 : 1) * config.ffn;
  int const e_count = config.experts, topk = config.topk;
  TESSEL_REQUIRE(static_cast<std::int64_t>(d_out.extent(0)) == t_count &&
                     static_cast<std::int64_t>(d_out.extent(1)) == n,
                 "reference_backward: output gradient is ", d_out.extent(0), " x ", d_out.extent(1), ", expected ",
                 t_count, " x ", n);
  auto const probs = reference_probabilities(config, tokens, gate);
  ReferenceGradients g;
  g.tokens = HostMatrix64("Tessel::moe::reference_grad_tokens", z(t_count), z(n));
  g.logits = HostMatrix64("Tessel::moe::reference_grad_logits", z(t_count), z(e_count));
  g.w0.assign(z(e_count * n * k0), 0.0);
  g.w1.assign(z(e_count * k * n), 0.0);
  // Combine weights and their gradients dL/dw = d_out . FFN_e(token), expert by expert.
  auto const weight = combine_weights(config, probs, chosen, t_count);
  std::vector<double> dweight(z(t_count * topk), 0.0);
  DenseExpert expert(config);
  for (int e = 0; e < e_count; ++e) {
    if (!expert.load(e, weights, chosen, tokens))
      continue;
    expert.forward();
    expert.backward(d_out, weight, dweight, g.w0.data() + e * n * k0, g.w1.data() + e * k * n, g.tokens);
  }
  g.combine_weights = dweight;
  logit_gradients(config, probs, chosen, weight, dweight, aux_loss_coef, g.logits);
  if (gate.kind == GateInput::Kind::weight)
    gate_gradients(config, tokens, gate, g);
  return g;
}

double max_relative_error(ConstHostMatrix y, HostMatrix64 ref) {
  TESSEL_REQUIRE(y.extent(0) == ref.extent(0) && y.extent(1) == ref.extent(1), "max_relative_error: shapes differ (",
                 y.extent(0), " x ", y.extent(1), " vs ", ref.extent(0), " x ", ref.extent(1), ")");
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < y.extent(0); ++i)
    for (std::size_t j = 0; j < y.extent(1); ++j) {
      double const d = std::abs(static_cast<double>(y(i, j)) - ref(i, j));
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      scale = std::max(scale, std::abs(ref(i, j)));
    }
  return scale > 0.0 ? diff / scale : diff;
}

} // namespace tessel::moe

#ifndef TESSEL_UNIT_TESTS_MOE_TEST_UTILS_HPP
#define TESSEL_UNIT_TESTS_MOE_TEST_UTILS_HPP

// Random inputs for the moe tests: dense weights identical on every rank (same seed), tokens and logits that
// differ per rank. The seed is fresh per run, agreed on by rank 0, and printed with every failure.
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Communicator.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tessel::moe::test {

inline std::uint64_t fresh_seed(Communicator const &comm) {
  std::uint64_t seed = static_cast<std::uint64_t>(std::random_device{}()) ^
                       static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  comm.broadcast(&seed, 1, DataType::uint64, 0);
  return seed;
}

inline void fill_normal(float *data, std::size_t count, std::uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::size_t i = 0; i < count; ++i)
    data[i] = dist(rng);
}

inline DenseWeights random_weights(MoeConfig const &config, std::uint64_t seed) {
  auto w = allocate_dense_weights(config);
  // Scaled so that activations stay O(1): 1/sqrt(fan_in).
  fill_normal(w.w0.data(), w.w0.size(), seed * 3 + 1, 1.0f / std::sqrt(static_cast<float>(config.hidden)));
  fill_normal(w.w1.data(), w.w1.size(), seed * 3 + 2, 1.0f / std::sqrt(static_cast<float>(config.ffn)));
  return w;
}

inline HostMatrix random_matrix(char const *label, std::size_t rows, std::size_t cols, std::uint64_t seed,
                                float stddev = 1.0f) {
  HostMatrix m(std::string(label), rows, cols);
  fill_normal(m.data(), m.size(), seed, stddev);
  return m;
}

/// One schedule with its parameters, as the schedule tests run it (host and device).
struct Variant {
  Schedule schedule;
  CometParams comet;
  int chunks = 3;
  int pipeline_workers = 0; ///< communication threads of the pipelined schedule
  /// Sets its parameters on \p layer (any MoE layer).
  template <class Layer> void apply(Layer &layer) const {
    layer.set_comet_params(comet);
    layer.set_pipeline_chunks(chunks);
    layer.set_pipeline_comm_workers(pipeline_workers);
  }
  std::string describe() const {
    std::ostringstream os;
    os << name_of(schedule);
    if (schedule == Schedule::comet)
      os << " [" << comet.describe() << "]";
    if (schedule == Schedule::pipelined)
      os << " [chunks=" << chunks << " workers=" << pipeline_workers << "]";
    return os.str();
  }
};

/// max |a - ref| / max(max |ref|, \p floor) over \p count values (the difference alone when both are zero; NaN fails).
inline double relative_error(float const *a, double const *ref, std::size_t count, double floor = 0.0) {
  double diff = 0.0, scale = floor;
  for (std::size_t i = 0; i < count; ++i) {
    double const d = std::abs(static_cast<double>(a[i]) - ref[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

/// The scale of the logits' gradient of tokens [row0, row0 + M) (\p weights: their [M, topk] combine weights):
/// w_k (dw_k - sum_j w_j dw_j) cancels where a token's dw are close, and fp32 keeps it only to about 1e-7 of
/// max |w dw|, which is then its scale when larger than the result's (a few tokens).
inline double logit_gradient_floor(HostMatrix weights, ReferenceGradients const &ref, std::size_t row0) {
  auto const topk = weights.extent(1);
  double floor = 0.0;
  for (std::size_t t = 0; t < weights.extent(0); ++t)
    for (std::size_t k = 0; k < topk; ++k)
      floor = std::max(floor, std::abs(weights(t, k) * ref.combine_weights[(row0 + t) * topk + k]));
  return floor;
}

// The layer tests' cases (tstMoeLayer.cpp, tstMoeBackward.cpp): a shape, how the gate is given, and a skew of the
// routing.
enum class GateKind { logits, weight, weight_bias };

struct Case {
  std::string name;
  MoeConfig config; // tokens, N, K, E, topk, activation, gated, normalize (EP/TP set per layout)
  GateKind gate = GateKind::weight;
  // Logit bias per expert added to random logits (skews routing); empty: none.
  std::vector<float> skew;
};

inline MoeConfig shape(std::int64_t m, std::int64_t n, std::int64_t k, int e, int topk, bool normalize = true,
                       Activation act = Activation::silu, bool gated = true) {
  MoeConfig c;
  c.tokens = m;
  c.hidden = n;
  c.ffn = k;
  c.experts = e;
  c.topk = topk;
  c.normalize_topk = normalize;
  c.activation = act;
  c.gated = gated;
  return c;
}

// EP x TP layouts for a world size.
inline std::vector<std::pair<int, int>> layouts(int w) {
  switch (w) {
  case 1:
    return {{1, 1}};
  case 2:
    return {{2, 1}, {1, 2}};
  case 4:
    return {{4, 1}, {2, 2}, {1, 4}};
  default:
    return {{w, 1}};
  }
}

/// The schedules the device layers' tests run (forward and backward): sequential, pipelined in 3 chunks, and comet with
/// many messages per source (tile 16, 3 column blocks, critical_path) and with few (tile 128, local_first).
inline std::vector<Variant> device_variants() {
  std::vector<Variant> v;
  v.push_back({Schedule::sequential, {}, 1});
  v.push_back({Schedule::pipelined, {}, 3});
  CometParams p;
  p.comm_workers = 2;
  p.tile_m = 16; // many messages per source: layer0 GEMM blocks wait on each
  p.n_splits = 3;
  p.policy = PlanPolicy::critical_path;
  v.push_back({Schedule::comet, p, 1});
  p.comm_workers = 1;
  p.tile_m = 128;
  p.n_splits = 1;
  p.policy = PlanPolicy::local_first;
  v.push_back({Schedule::comet, p, 1});
  return v;
}

// \p base at every EP x TP layout of \p w ranks that its experts and K allow.
inline std::vector<MoeConfig> layouts_of(MoeConfig const &base, int w) {
  std::vector<MoeConfig> out;
  for (auto [ep, tp] : layouts(w)) {
    auto config = base;
    config.ep = ep;
    config.tp = tp;
    if (config.experts % ep == 0 && config.ffn % tp == 0)
      out.push_back(config);
  }
  return out;
}

struct Inputs {
  HostMatrix tokens, logits, gate_weight;
  HostVector gate_bias;
  DenseWeights dense;
  GateInput gate() const {
    if (logits.data())
      return GateInput::from_logits(logits);
    return GateInput::from_weight(gate_weight, gate_bias);
  }
};

inline Inputs make_inputs(Case const &c, MoeConfig const &config, int rank, std::uint64_t seed) {
  Inputs in;
  auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden),
             e = static_cast<std::size_t>(config.experts);
  in.tokens = random_matrix("tokens", m, n, seed + 1000 + static_cast<std::uint64_t>(rank));
  in.dense = random_weights(config, seed);
  if (c.gate == GateKind::logits) {
    in.logits = random_matrix("logits", m, e, seed + 2000 + static_cast<std::uint64_t>(rank), 2.0f);
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t j = 0; j < c.skew.size(); ++j)
        in.logits(t, j) += c.skew[j];
  } else {
    in.gate_weight = random_matrix("gate", n, e, seed + 3000, 1.0f / std::sqrt(static_cast<float>(n)));
    if (c.gate == GateKind::weight_bias || !c.skew.empty()) {
      in.gate_bias = HostVector("bias", e);
      for (std::size_t j = 0; j < e; ++j)
        in.gate_bias(j) = j < c.skew.size() ? c.skew[j] : 0.1f * static_cast<float>(j % 3);
    }
  }
  return in;
}

inline std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({Schedule::sequential, {}, 3});
  v.push_back({Schedule::pipelined, {}, 3});
  v.push_back({Schedule::pipelined, {}, 1, 1});
  CometParams p;
  p.comm_workers = 0; // the compute thread progresses the messages
  p.tile_m = 8;
  p.n_splits = 3;
  p.policy = PlanPolicy::critical_path;
  v.push_back({Schedule::comet, p, 3});
  p.policy = PlanPolicy::local_first;
  p.comm_workers = 2;
  p.in_flight = 1;
  p.tile_m = 5;
  p.n_splits = 1;
  v.push_back({Schedule::comet, p, 3});
  // Token chunks with their own layer1 and combine; uneven column blocks; sends limited in flight.
  p.policy = PlanPolicy::critical_path;
  p.comm_workers = 1;
  p.in_flight = 2;
  p.tile_m = 4;
  p.n_splits = 5;
  p.m_splits = 3;
  v.push_back({Schedule::comet, p, 3});
  return v;
}

// Communicator::alltoallv of every rank at once: rank d's send_displs[p] .. + send_counts[p] of send[d] into rank
// p's recv_displs[d] .. of recv[p]; every count must match its peer's.
template <class T, class Alltoall>
void emulate_alltoallv(std::vector<std::vector<T>> const &send, std::vector<std::vector<T>> &recv,
                       std::vector<Alltoall> const &x) {
  for (std::size_t d = 0; d < x.size(); ++d)
    for (std::size_t p = 0; p < x.size(); ++p) {
      auto const count = x[d].send_counts[p];
      ASSERT_EQ(count, x[p].recv_counts[d]) << "rank " << d << " sends " << count << " elements to rank " << p
                                            << ", which receives " << x[p].recv_counts[d];
      ASSERT_LE(x[d].send_displs[p] + count, send[d].size()) << "rank " << d << "'s send to " << p;
      ASSERT_LE(x[p].recv_displs[d] + count, recv[p].size()) << "rank " << p << "'s receive from " << d;
      std::copy(send[d].begin() + static_cast<std::ptrdiff_t>(x[d].send_displs[p]),
                send[d].begin() + static_cast<std::ptrdiff_t>(x[d].send_displs[p] + count),
                recv[p].begin() + static_cast<std::ptrdiff_t>(x[p].recv_displs[d]));
    }
}

} // namespace tessel::moe::test

#endif

// A layer's weights (Weights.hpp): the experts one rank holds, every expert at full size, the gate; each copied from
// the application's arrays with its sizes and values checked.
#include <tessel/moe/Weights.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace tessel::moe {

namespace {

std::size_t sz(std::int64_t i) { return static_cast<std::size_t>(i); }

// Refuses a weight tensor too large to address: the View would otherwise be sized by a wrapped product.
void require_addressable(char const *what, double elements) {
  TESSEL_REQUIRE(elements * sizeof(float) < 0.25 * static_cast<double>(std::numeric_limits<std::size_t>::max()), what,
                 ": ", elements, " floats (", elements * sizeof(float) / double(1 << 30), " GiB) cannot be allocated");
}

// The first value of \p rows x \p cols that is not finite, as an error naming \p what.
void require_finite(std::string const &what, float const *data, std::int64_t rows, std::int64_t cols) {
  auto const bad = first_non_finite(data, sz(rows * cols));
  TESSEL_REQUIRE(bad == sz(rows * cols), what, " holds ", data[bad < sz(rows * cols) ? bad : 0], " at row ",
                 static_cast<std::int64_t>(bad) / std::max<std::int64_t>(cols, 1), ", column ",
                 static_cast<std::int64_t>(bad) % std::max<std::int64_t>(cols, 1), " (weights must be finite)");
}

} // namespace

ExpertWeights allocate_expert_weights(MoeConfig const &config) {
  config.validate();
  auto const local_experts = sz(config.experts_per_group());
  require_addressable("allocate_expert_weights", static_cast<double>(local_experts) *
                                                     static_cast<double>(config.hidden) *
                                                     static_cast<double>(config.gemm0_cols()));
  ExpertWeights w;
  w.w0 = HostTensor(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::w0"), local_experts,
                    sz(config.hidden), sz(config.gemm0_cols()));
  w.w1 = HostTensor(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::w1"), local_experts,
                    sz(config.ffn_per_rank()), sz(config.hidden));
  return w;
}

void set_expert_weights(MoeConfig const &config, int rank, int expert, float const *w0_full, float const *w1_full,
                        ExpertWeights &weights) {
  TESSEL_REQUIRE(expert >= 0 && expert < config.experts, "expert ", expert, " outside [0, ", config.experts, ")");
  TESSEL_REQUIRE(rank >= 0 && rank < config.world(), "rank ", rank, " outside [0, ", config.world(), ")");
  if (config.group_of_expert(expert) != config.group_of_rank(rank))
    return;
  int const e = expert - config.first_expert_of_rank(rank);
  std::int64_t const n = config.hidden, k = config.ffn, ffn_per_rank = config.ffn_per_rank();
  std::int64_t const first_col = ffn_per_rank * config.tp_rank(rank);
  std::int64_t const full_cols = (config.gated ? 2 : 1) * k;
  TESSEL_REQUIRE(static_cast<std::int64_t>(weights.w0.extent(1)) == n &&
                     static_cast<std::int64_t>(weights.w0.extent(2)) == config.gemm0_cols() &&
                     static_cast<std::int64_t>(weights.w1.extent(1)) == ffn_per_rank,
                 "expert weights were allocated for another configuration");
  for (std::int64_t i = 0; i < n; ++i) {
    float const *src = w0_full + i * full_cols;
    std::memcpy(&weights.w0(e, i, 0), src + first_col, sz(ffn_per_rank) * sizeof(float));
    if (config.gated)
      std::memcpy(&weights.w0(e, i, ffn_per_rank), src + k + first_col, sz(ffn_per_rank) * sizeof(float));
  }
  for (std::int64_t i = 0; i < ffn_per_rank; ++i)
    std::memcpy(&weights.w1(e, i, 0), w1_full + (first_col + i) * n, sz(n) * sizeof(float));
}

ExpertWeights shard_from_arrays(MoeConfig const &config, int rank,
                                std::function<ExpertMatrices(int expert)> const &expert) {
  TESSEL_REQUIRE(static_cast<bool>(expert), "shard_from_arrays: no function giving the experts' matrices");
  TESSEL_REQUIRE(rank >= 0 && rank < config.world(), "shard_from_arrays: rank ", rank, " outside [0, ", config.world(),
                 ") (EP x TP = ", config.ep, " x ", config.tp, ")");
  auto weights = allocate_expert_weights(config);
  int const first = config.first_expert_of_rank(rank);
  for (int e = first; e < first + config.experts_per_group(); ++e) {
    auto const m = expert(e);
    auto const name = [&](char const *matrix) {
      return "shard_from_arrays: expert " + std::to_string(e) + "'s " + matrix;
    };
    TESSEL_REQUIRE(m.w0 != nullptr && m.w1 != nullptr, name(m.w0 == nullptr ? "w0" : "w1"), " is a null pointer");
    require_finite(name("w0"), m.w0, config.hidden, (config.gated ? 2 : 1) * config.ffn);
    require_finite(name("w1"), m.w1, config.ffn, config.hidden);
    set_expert_weights(config, rank, e, m.w0, m.w1, weights);
  }
  return weights;
}

DenseWeights allocate_dense_weights(MoeConfig const &config) {
  auto const e = sz(config.experts), n = sz(config.hidden), k = sz(config.ffn);
  require_addressable("allocate_dense_weights", static_cast<double>(e) * static_cast<double>(n) *
                                                    static_cast<double>((config.gated ? 2 : 1) * k));
  DenseWeights w;
  w.w0 = HostTensor(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::dense_w0"), e, n,
                    (config.gated ? 2 : 1) * k);
  w.w1 = HostTensor(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::dense_w1"), e, k, n);
  return w;
}

ExpertWeights shard_weights(MoeConfig const &config, int rank, DenseWeights const &dense) {
  TESSEL_REQUIRE(static_cast<int>(dense.w0.extent(0)) == config.experts &&
                     static_cast<std::int64_t>(dense.w0.extent(1)) == config.hidden &&
                     static_cast<std::int64_t>(dense.w0.extent(2)) == (config.gated ? 2 : 1) * config.ffn &&
                     static_cast<std::int64_t>(dense.w1.extent(1)) == config.ffn,
                 "shard_weights: dense weights do not match ", config.describe());
  auto weights = allocate_expert_weights(config);
  for (int e = 0; e < config.experts; ++e)
    set_expert_weights(config, rank, e, &dense.w0(e, 0, 0), &dense.w1(e, 0, 0), weights);
  return weights;
}

GateParams gate_from_arrays(MoeConfig const &config, float const *weight, float const *bias) {
  config.validate();
  TESSEL_REQUIRE(weight != nullptr, "gate_from_arrays: the gate weight is a null pointer");
  std::int64_t const n = config.hidden, e = config.experts;
  require_finite("gate_from_arrays: the gate weight", weight, n, e);
  GateParams gate;
  gate.weight = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::gate_weight"), sz(n), sz(e));
  std::memcpy(gate.weight.data(), weight, sz(n * e) * sizeof(float));
  if (bias != nullptr) {
    require_finite("gate_from_arrays: the gate bias", bias, 1, e);
    gate.bias = HostVector(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::gate_bias"), sz(e));
    std::memcpy(gate.bias.data(), bias, sz(e) * sizeof(float));
  }
  return gate;
}

} // namespace tessel::moe

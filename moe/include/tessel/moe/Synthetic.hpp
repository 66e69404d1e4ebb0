#ifndef TESSEL_MOE_SYNTHETIC_HPP
#define TESSEL_MOE_SYNTHETIC_HPP

/// \file Synthetic.hpp
/// \brief The paper's model shapes (COMET Table 2) scaled to fit a host, and synthetic layer inputs with
/// Zipf-skewed routing: what the data set generator, the benchmark and the tests build on.

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Router.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::moe {

/// \brief A model's MoE layer shape at full size.
struct ModelShape {
  std::string name;           ///< "mixtral-8x7b", "qwen2-moe", "phi-3.5-moe"
  std::int64_t hidden = 0;    ///< N
  std::int64_t ffn = 0;       ///< K
  int experts = 0;            ///< E
  int topk = 0;               ///< experts per token
  bool normalize_topk = true; ///< as MoeConfig::normalize_topk
};

/// \brief The three models of COMET's evaluation: Mixtral-8x7B (N=4096, K=14336, E=8, topk=2), Qwen2-MoE-2.7B
/// (N=2048, K=1408, E=64, topk=4, probabilities not renormalized) and Phi-3.5-MoE (N=4096, K=6400, E=16, topk=2).
std::vector<ModelShape> const &paper_models();
/// \brief Looks a model up by name or alias ("mixtral", "qwen2", "phi35"); throws listing the known names.
ModelShape const &find_model(std::string const &name);

/// \brief The layer config of \p model with N and K divided by \p scale (rounded, K kept divisible by 8),
/// \p tokens per rank, SiLU-gated experts.
MoeConfig scaled_config(ModelShape const &model, double scale, std::int64_t tokens);

/// \brief Gate weight [N, E] and a Zipf bias [E]: expert popularity follows 1 / rank^alpha (a random order of
/// the experts, from \p seed) through bias_e = -alpha log(rank_e).
struct SyntheticGate {
  HostMatrix weight;  ///< [N, E]
  HostVector bias;    ///< [E]
  double alpha = 0.0; ///< the Zipf exponent (0: uniform popularity)
};
/// \brief A synthetic gate for \p config with Zipf exponent \p alpha, deterministic in \p seed.
SyntheticGate make_gate(MoeConfig const &config, double alpha, std::uint64_t seed);

/// \brief Random tokens [rows, N] (standard normal), deterministic in \p seed.
HostMatrix make_tokens(MoeConfig const &config, std::int64_t rows, std::uint64_t seed);
/// \brief Random dense weights (normal, variance 1 / fan-in), deterministic in \p seed.
DenseWeights make_weights(MoeConfig const &config, std::uint64_t seed);

/// \brief Standard deviation over experts of the fraction of assignments each receives when \p tokens are routed
/// by \p gate (COMET's imbalance measure).
double routing_imbalance(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate);

/// \brief The Zipf exponent whose routing of \p sample (tokens from make_tokens) has imbalance std \p target
/// (bisection; 0 for target <= the imbalance at alpha = 0).
double zipf_alpha_for(MoeConfig const &config, ConstHostMatrix sample, std::uint64_t gate_seed, double target);

} // namespace tessel::moe

#endif

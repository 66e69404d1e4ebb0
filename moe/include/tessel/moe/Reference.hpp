#ifndef TESSEL_MOE_REFERENCE_HPP
#define TESSEL_MOE_REFERENCE_HPP

/// \file Reference.hpp
/// \brief The dense single-process reference the schedules are checked against: full (unsharded) expert weights
/// (DenseWeights, Weights.hpp), no communication, no sharding, no tiling, double precision.

#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Weights.hpp>

#include <string>
#include <vector>

namespace tessel::moe {

/// \brief A double-precision host matrix (the references' results).
using HostMatrix64 = Kokkos::View<double **, Kokkos::LayoutRight, Kokkos::HostSpace>;

/// \brief The reference's output and its check of the router's decisions.
struct ReferenceResult {
  HostMatrix64 out; ///< [T, N]
  /// Tokens whose chosen experts are not a top-k of the double-precision probabilities (by more than 1e-5).
  std::int64_t routing_violations = 0;
  std::string first_violation; ///< the first such token and its probabilities, for the message of a failed check
};

/// \brief Dense reference for \p tokens [T, N]: logits (from \p gate, in double), softmax, and for each token the
/// weighted sum over the experts \p chosen [T, topk] of FFN_e in double with the full weights. The expert
/// choice is taken from the router under test (so near-ties cannot flip it) and checked against the
/// double-precision probabilities; the combine weights are recomputed in double.
ReferenceResult reference_forward(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
                                  HostIndexMatrix chosen, DenseWeights const &weights);

/// \brief The reference's gradients of L = <d_out, out> + aux_loss_coef x aux_loss (double precision).
struct ReferenceGradients {
  HostMatrix64 tokens;                 ///< [T, N]
  HostMatrix64 logits;                 ///< [T, E]
  std::vector<double> w0;              ///< [E, N, (gated ? 2 : 1) K], as DenseWeights
  std::vector<double> w1;              ///< [E, K, N], as DenseWeights
  std::vector<double> gate_weight;     ///< [N, E] (gate given as a weight)
  std::vector<double> bias;            ///< [E] (gate given as a weight with a bias)
  std::vector<double> combine_weights; ///< [T, topk] dL/dw of each token's combine weights (as chosen)
};

/// \brief Dense reference backward for \p tokens [T, N] (all ranks' tokens) and their output gradient \p d_out
/// [T, N]: the analytic gradients, in double, with the expert choice \p chosen taken from the router under test.
ReferenceGradients reference_backward(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
                                      HostIndexMatrix chosen, DenseWeights const &weights, ConstHostMatrix d_out,
                                      double aux_loss_coef = 0.0);

/// \brief max |y - ref| / max |ref| (0 when both are zero).
double max_relative_error(ConstHostMatrix y, HostMatrix64 ref);

} // namespace tessel::moe

#endif

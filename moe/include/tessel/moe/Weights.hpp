#ifndef TESSEL_MOE_WEIGHTS_HPP
#define TESSEL_MOE_WEIGHTS_HPP

/// \file Weights.hpp
/// \brief A layer's weights from the application's own arrays: the experts one rank holds (its shard), every expert
/// at full size, and the gate.
///
/// Layout (row-major float, as PyTorch's `x @ W` stores W): expert e's first matrix w0 is [N, K], or [N, 2K] for
/// gated experts with the gate projection's K columns first and the up projection's K columns next ([gate | up]);
/// its second matrix w1 is [K, N]; the gate weight is [N, E] and its bias [E]. A rank holds E/EP experts (the
/// experts of its EP group: group g holds experts [g E/EP, (g + 1) E/EP)), each cut along K to its K/TP slice.
///
/// \code
/// // Every rank: the shard it holds, copied from the application's matrices (only its own experts are asked for).
/// auto shard = tessel::moe::shard_from_arrays(config, comm.rank(), [&](int e) {
///   return tessel::moe::ExpertMatrices{my_w0[e].data(), my_w1[e].data()};
/// });
/// auto gate = tessel::moe::gate_from_arrays(config, my_gate_weight.data(), my_gate_bias.data());
/// tessel::moe::MoeLayer layer(config, comm, shard);
/// layer.forward(space, tokens, gate.input(), out);
/// \endcode

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Types.hpp>

#include <functional>

namespace tessel::moe {

/// \brief The experts one rank holds: E/EP experts, each sharded to K/TP along K.
///
/// w0 is [E/EP, N, gemm0_cols]: gated, its columns are [gate shard | up shard] (K/TP each); w1 is
/// [E/EP, K/TP, N].
struct ExpertWeights {
  HostTensor w0; ///< [E/EP, N, gemm0_cols]: GEMM0's weights ([gate shard | up shard] when gated)
  HostTensor w1; ///< [E/EP, K/TP, N]: GEMM1's weights
};

/// \brief Allocates (uninitialized) the weights one rank holds under \p config.
ExpertWeights allocate_expert_weights(MoeConfig const &config);

/// \brief Copies the shard of global expert \p expert that rank \p rank holds from the full matrices
/// \p w0_full [N, (gated ? 2 : 1) K] (gated: [gate | up]) and \p w1_full [K, N] into \p weights. Does nothing
/// when the expert lives in another EP group.
void set_expert_weights(MoeConfig const &config, int rank, int expert, float const *w0_full, float const *w1_full,
                        ExpertWeights &weights);

/// \brief One expert's full matrices in the application's memory (row-major float, see the file comment).
struct ExpertMatrices {
  float const *w0 = nullptr; ///< [N, (gated ? 2 : 1) K], gated: [gate | up]
  float const *w1 = nullptr; ///< [K, N]
};

/// \brief The experts rank \p rank holds under \p config, copied from the application's full matrices: \p expert(e)
/// gives global expert e's, and is called only for the rank's own E/EP experts (so a rank may load just those).
/// A null matrix or a value that is not finite is an error naming the expert, the matrix, the row and the column.
ExpertWeights shard_from_arrays(MoeConfig const &config, int rank,
                                std::function<ExpertMatrices(int expert)> const &expert);

/// \brief Every expert's full weights: w0 [E, N, (gated ? 2 : 1) K] (gated: [gate | up]), w1 [E, K, N]; what the
/// dense reference (Reference.hpp) computes with, and what shard_weights() cuts shards from.
struct DenseWeights {
  HostTensor w0; ///< [E, N, (gated ? 2 : 1) K]
  HostTensor w1; ///< [E, K, N]
};

/// \brief Allocates (uninitialized) dense weights for \p config (EP and TP are ignored).
DenseWeights allocate_dense_weights(MoeConfig const &config);

/// \brief The shard rank \p rank holds under \p config, copied from every expert's full weights \p dense.
ExpertWeights shard_weights(MoeConfig const &config, int rank, DenseWeights const &dense);

/// \brief The gate's trainable parameters: weight [N, E] and optional bias [E], replicated on every rank.
struct GateParams {
  HostMatrix weight; ///< [N, E]
  HostVector bias;   ///< [E], or empty for a gate without bias
  /// The gate as a layer's forward takes it.
  GateInput input() const { return GateInput::from_weight(weight, bias); }
};

/// \brief The gate copied from the application's arrays: \p weight [N, E] row-major and \p bias [E] (nullptr: a gate
/// without bias). A value that is not finite is an error naming it.
GateParams gate_from_arrays(MoeConfig const &config, float const *weight, float const *bias = nullptr);

} // namespace tessel::moe

#endif

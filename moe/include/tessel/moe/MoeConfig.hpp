#ifndef TESSEL_MOE_MOECONFIG_HPP
#define TESSEL_MOE_MOECONFIG_HPP

/// \file MoeConfig.hpp
/// \brief Shape and parallel layout of one MoE layer (COMET's symbols: M, N, K, E, topk, EP, TP).

#include <tessel/core/Communicator.hpp>
#include <tessel/core/DataType.hpp>

#include <cstdint>
#include <string>

namespace tessel::moe {

/// \brief Activation between the two expert GEMMs.
enum class Activation : int { silu, gelu };
/// "silu" or "gelu".
char const *name_of(Activation activation);
/// Parses "silu" or "gelu"; throws naming the accepted values.
Activation parse_activation(std::string const &name);

/// \brief How a layer overlaps its communication with its expert GEMMs (all compute the same function).
enum class Schedule : int {
  sequential, ///< dispatch all-to-all, GroupGEMM0, GroupGEMM1, combine all-to-all (Megatron)
  pipelined,  ///< tokens cut into chunks; chunk i's communication overlaps chunk i-1's compute (Tutel, FasterMoE)
  comet       ///< tile-level overlap: M-sorted local-first layer0, N-split column-major layer1 (COMET)
};
/// "sequential", "pipelined" or "comet".
char const *name_of(Schedule schedule);
/// Parses "sequential", "pipelined" or "comet".
Schedule parse_schedule(std::string const &name);

/// \brief Configuration of an MoE layer distributed over W = EP x TP ranks.
///
/// Rank r belongs to expert-parallel group r / TP and holds experts [g E/EP, (g+1) E/EP) of that group, each
/// sharded along K: its K-slice is [t K/TP, (t+1) K/TP) with t = r % TP. Every rank brings its own M tokens.
struct MoeConfig {
  std::int64_t tokens = 0;                  ///< M: tokens per rank
  std::int64_t hidden = 0;                  ///< N: token embedding size
  std::int64_t ffn = 0;                     ///< K: expert FFN hidden size (before TP sharding)
  int experts = 0;                          ///< E
  int topk = 0;                             ///< experts per token
  int ep = 1;                               ///< expert-parallel group count
  int tp = 1;                               ///< tensor-parallel size (K shards)
  Activation activation = Activation::silu; ///< between the two expert GEMMs
  /// Mixtral-style gated FFN: act(x Wg) * (x Wu) then W1; GEMM0's weight is [N, 2K] = [Wg | Wu].
  bool gated = true;
  /// Renormalize the top-k probabilities to sum to 1 (Mixtral); false keeps the softmax probabilities (Qwen2).
  bool normalize_topk = true;
  DataType dtype = DataType::float32; ///< element type (the host layer computes in float32)

  /// \brief Throws tessel::Exception naming the first field that is out of range or inconsistent.
  void validate() const;
  /// \brief validate() and EP x TP == \p world_size.
  void validate(int world_size) const;
  /// \brief Collective: throws on every rank when any field differs across \p comm's ranks (names the field).
  void require_consistent(Communicator const &comm) const;

  /// EP x TP: the ranks of the layer.
  int world() const { return ep * tp; }
  /// E / EP: the experts each rank holds.
  int experts_per_group() const { return experts / ep; }
  /// K / TP: each expert's share of K on one rank.
  std::int64_t ffn_per_rank() const { return ffn / tp; }
  /// Columns of GEMM0's weight per rank: 2 K/TP when gated, K/TP otherwise.
  std::int64_t gemm0_cols() const { return (gated ? 2 : 1) * ffn_per_rank(); }
  /// The expert-parallel group of \p rank.
  int group_of_rank(int rank) const { return rank / tp; }
  /// The K-shard \p rank holds (its index in its group).
  int tp_rank(int rank) const { return rank % tp; }
  /// The expert-parallel group that holds \p expert.
  int group_of_expert(int expert) const { return expert / experts_per_group(); }
  /// The first (global) expert \p rank holds.
  int first_expert_of_rank(int rank) const { return group_of_rank(rank) * experts_per_group(); }
  /// "M=4096 N=512 K=1792 E=8 topk=2 EP=2 TP=1 silu gated float32"
  std::string describe() const;
};

} // namespace tessel::moe

#endif

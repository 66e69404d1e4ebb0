#ifndef TESSEL_MOE_ROUTER_HPP
#define TESSEL_MOE_ROUTER_HPP

/// \file Router.hpp
/// \brief Top-k softmax gating, the routing plan a rank's tokens follow, and the load-balancing loss.

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Types.hpp>

#include <cstdint>
#include <vector>

namespace tessel::moe {

/// \brief What the gate is given: logits [M, E], or a weight [N, E] (and optionally a bias [E]) that the router
/// applies to the tokens (logits = tokens x weight + bias).
struct GateInput {
  /// What the gate was given.
  enum class Kind : int { logits, weight };
  Kind kind = Kind::logits; ///< logits or a weight
  ConstHostMatrix logits;   ///< [M, E] when kind == logits
  ConstHostMatrix weight;   ///< [N, E] when kind == weight
  ConstHostVector bias;     ///< optional [E] added to the logits computed from the weight
  /// A gate given as precomputed logits [M, E].
  static GateInput from_logits(ConstHostMatrix logits) { return GateInput{Kind::logits, logits, {}, {}}; }
  /// A gate given as a weight [N, E] and an optional bias [E].
  static GateInput from_weight(ConstHostMatrix weight, ConstHostVector bias = {}) {
    return GateInput{Kind::weight, {}, weight, bias};
  }
};

/// \brief The gate's decision for this rank's tokens.
struct Routing {
  /// [M, E] the gate's logits (given, or computed from the gate weight and bias).
  HostMatrix logits;
  /// [M, E] softmax probabilities.
  HostMatrix probabilities;
  /// [M, topk] chosen experts per token, by decreasing probability (ties: lower expert index first).
  HostIndexMatrix experts;
  /// [M, topk] combine weights (softmax probabilities, renormalized over the top-k when the config says so).
  HostMatrix weights;
  /// [E] assignments of this rank's tokens per expert.
  std::vector<std::int64_t> tokens_per_expert;
  /// [E] sum over this rank's tokens of the softmax probability of each expert (for the auxiliary loss).
  std::vector<double> probability_sum;

  /// \brief Switch-Transformer load-balancing loss over all ranks of \p comm (collective):
  /// E * sum_e f_e * P_e, with f_e the fraction of all top-k assignments that went to expert e and P_e the mean
  /// router probability of e. It is 1 for perfectly uniform routing and grows with imbalance.
  double aux_loss(Communicator const &comm) const;
  /// \brief Standard deviation over experts of the fraction of assignments each received (over \p comm's
  /// ranks; collective): COMET's load-imbalance measure (0 when uniform).
  double imbalance_std(Communicator const &comm) const;
};

/// \brief Routes \p tokens [M, N]: logits from \p gate, softmax over experts, top-k, combine weights.
/// Allocations and kernels are labelled Tessel::moe::; all work runs on \p space.
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
void route(ExecSpace const &space, MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
           Routing &routing);

/// \brief Where this rank's (token, expert) assignments go: the rows of its dispatch, sorted by
/// (chunk, destination EP group, expert, token), where chunks cut the tokens into contiguous ranges (one chunk
/// except for the pipelined schedule). Within a group, the distinct tokens sent there are numbered by "slots"
/// in increasing token order; the expert side top-k-reduces its outputs per slot before sending them back.
struct DispatchPlan {
  int chunks = 1;                          ///< token ranges
  int groups = 1;                          ///< expert-parallel groups (destinations)
  int experts_per_group = 1;               ///< E / EP
  std::vector<std::int64_t> chunk_tokens;  ///< [chunks + 1] token boundaries
  std::vector<std::int64_t> block_offsets; ///< [chunks * E + 1] first row of each (chunk, expert) block
  std::vector<std::int32_t> row_token;     ///< token of each row
  std::vector<float> row_weight;           ///< combine weight of each row
  std::vector<std::int32_t> row_slot;      ///< slot of the row's token in the row's group
  std::vector<std::int64_t> group_slots;   ///< [groups] distinct tokens sent to each group
  /// [groups * (chunks + 1)] first slot of each chunk in each group (slots of a chunk are contiguous)
  std::vector<std::int64_t> chunk_slots;
  std::vector<std::int32_t> token_slot; ///< [groups * M] slot of token t in group g, or -1

  /// Rows of the dispatch: this rank's (token, expert) assignments.
  std::int64_t rows() const { return static_cast<std::int64_t>(row_token.size()); }
  /// First row of the (chunk, group) block; rows of one block are contiguous.
  std::int64_t block_begin(int chunk, int group) const {
    return block_offsets[static_cast<std::size_t>((chunk * groups + group) * experts_per_group)];
  }
  /// End row of the (chunk, group) block.
  std::int64_t block_end(int chunk, int group) const {
    return block_offsets[static_cast<std::size_t>((chunk * groups + group + 1) * experts_per_group)];
  }
  /// Rows of local expert \p e (0-based within the group) in the (chunk, group) block.
  std::int64_t expert_rows(int chunk, int group, int e) const {
    auto const i = static_cast<std::size_t>((chunk * groups + group) * experts_per_group + e);
    return block_offsets[i + 1] - block_offsets[i];
  }
  /// First slot of \p chunk's tokens in \p group.
  std::int64_t slot_begin(int chunk, int group) const {
    return chunk_slots[static_cast<std::size_t>(group * (chunks + 1) + chunk)];
  }
  /// Slots of \p chunk's tokens in \p group.
  std::int64_t slot_count(int chunk, int group) const {
    return chunk_slots[static_cast<std::size_t>(group * (chunks + 1) + chunk + 1)] - slot_begin(chunk, group);
  }
};

/// \brief Builds the dispatch plan of \p routing for \p chunks token chunks (chunk c holds tokens
/// [c M / chunks, (c+1) M / chunks)).
DispatchPlan make_dispatch_plan(MoeConfig const &config, Routing const &routing, int chunks = 1);

} // namespace tessel::moe

#endif

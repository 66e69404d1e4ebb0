#include <tessel/moe/Router.hpp>

#include <tessel/core/Gemm.hpp>

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <cmath>

namespace tessel::moe {

namespace {

// Reallocates \p view (without initialization) only when its shape changes, so repeated forwards reuse memory.
template <class View> void ensure_shape(View &view, char const *label, std::size_t rows, std::size_t cols) {
  if (view.extent(0) != rows || view.extent(1) != cols || view.data() == nullptr)
    view = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), rows, cols);
}

// The logits of \p tokens: the given ones copied, or tokens x gate weight (+ bias).
template <class ExecSpace>
void gate_logits(ExecSpace const &space, MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
                 HostMatrix logits) {
  auto const m = static_cast<std::int64_t>(tokens.extent(0));
  auto const n = config.hidden;
  int const e_count = config.experts;
  if (gate.kind == GateInput::Kind::logits) {
    TESSEL_REQUIRE(static_cast<std::int64_t>(gate.logits.extent(0)) == m &&
                       static_cast<int>(gate.logits.extent(1)) == e_count,
                   "route: gate logits are ", gate.logits.extent(0), " x ", gate.logits.extent(1), ", expected ", m,
                   " x ", e_count, " (tokens x experts)");
    auto const given = gate.logits;
    Kokkos::parallel_for(
        "Tessel::moe::copy_logits", Kokkos::RangePolicy<ExecSpace>(space, 0, m), KOKKOS_LAMBDA(std::int64_t t) {
          for (int e = 0; e < e_count; ++e)
            logits(t, e) = given(t, e);
        });
    return;
  }
  TESSEL_REQUIRE(static_cast<std::int64_t>(gate.weight.extent(0)) == n &&
                     static_cast<int>(gate.weight.extent(1)) == e_count,
                 "route: gate weight is ", gate.weight.extent(0), " x ", gate.weight.extent(1), ", expected ", n, " x ",
                 e_count, " (hidden x experts)");
  TESSEL_REQUIRE(gate.bias.data() == nullptr || static_cast<int>(gate.bias.extent(0)) == e_count,
                 "route: gate bias has ", gate.bias.extent(0), " entries, expected ", e_count);
  tessel::gemm<ExecSpace, float>(space, Op::none, Op::none, 1.0f, {tokens.data(), m, n, n},
                                 {gate.weight.data(), n, e_count, e_count}, 0.0f, {logits.data(), m, e_count, e_count});
  if (gate.bias.data() != nullptr) {
    auto const bias = gate.bias;
    Kokkos::parallel_for(
        "Tessel::moe::gate_bias", Kokkos::RangePolicy<ExecSpace>(space, 0, m), KOKKOS_LAMBDA(std::int64_t t) {
          for (int e = 0; e < e_count; ++e)
            logits(t, e) += bias(e);
        });
  }
}

// Per token: the softmax of its logits, its top-k experts and their weights (renormalized over the chosen or not).
template <class ExecSpace> void topk_softmax(ExecSpace const &space, MoeConfig const &config, Routing &routing) {
  auto const m = static_cast<std::int64_t>(routing.logits.extent(0));
  int const e_count = config.experts, topk = config.topk;
  auto const logits = routing.logits;
  auto const probs = routing.probabilities;
  auto const experts = routing.experts;
  auto const weights = routing.weights;
  bool const normalize = config.normalize_topk;
  Kokkos::parallel_for(
      "Tessel::moe::topk_softmax", Kokkos::RangePolicy<ExecSpace>(space, 0, m), KOKKOS_LAMBDA(std::int64_t t) {
        float top = logits(t, 0);
        for (int e = 1; e < e_count; ++e)
          top = logits(t, e) > top ? logits(t, e) : top;
        float sum = 0.0f;
        for (int e = 0; e < e_count; ++e) {
          probs(t, e) = std::exp(logits(t, e) - top);
          sum += probs(t, e);
        }
        for (int e = 0; e < e_count; ++e)
          probs(t, e) /= sum;
        // One pass with an insertion-sorted list of the best topk: an expert enters only when strictly more
        // probable than the entry it passes, so ties keep the lower index first.
        int filled = 0;
        for (int e = 0; e < e_count; ++e) {
          float const p = probs(t, e);
          if (filled == topk && !(p > weights(t, topk - 1)))
            continue;
          int j = filled < topk ? filled++ : topk - 1;
          while (j > 0 && p > weights(t, j - 1)) {
            experts(t, j) = experts(t, j - 1);
            weights(t, j) = weights(t, j - 1);
            --j;
          }
          experts(t, j) = e;
          weights(t, j) = p;
        }
        float chosen = 0.0f;
        for (int k = 0; k < topk; ++k)
          chosen += weights(t, k);
        if (normalize)
          for (int k = 0; k < topk; ++k)
            weights(t, k) /= chosen;
      });
}

} // namespace

template <class ExecSpace, class Check>
void route(ExecSpace const &space, MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate,
           Routing &routing) {
  ScopedRegion region("Tessel::moe::route");
  auto const m = static_cast<std::size_t>(tokens.extent(0));
  auto const e_count = static_cast<std::size_t>(config.experts), topk = static_cast<std::size_t>(config.topk);
  TESSEL_REQUIRE(static_cast<std::int64_t>(tokens.extent(1)) == config.hidden, "route: tokens have ", tokens.extent(1),
                 " columns, the config's hidden size is ", config.hidden);
  ensure_shape(routing.logits, "Tessel::moe::logits", m, e_count);
  ensure_shape(routing.probabilities, "Tessel::moe::probabilities", m, e_count);
  ensure_shape(routing.experts, "Tessel::moe::routing_experts", m, topk);
  ensure_shape(routing.weights, "Tessel::moe::routing_weights", m, topk);
  gate_logits(space, config, tokens, gate, routing.logits);
  topk_softmax(space, config, routing);
  compat::fence(space, "Tessel::moe::route");
  // Statistics for the auxiliary loss, summed in double in a fixed order.
  routing.tokens_per_expert.assign(e_count, 0);
  routing.probability_sum.assign(e_count, 0.0);
  for (std::size_t t = 0; t < m; ++t) {
    for (std::size_t k = 0; k < topk; ++k)
      routing.tokens_per_expert[static_cast<std::size_t>(routing.experts(t, k))] += 1;
    for (std::size_t e = 0; e < e_count; ++e)
      routing.probability_sum[e] += routing.probabilities(t, e);
  }
}

double Routing::aux_loss(Communicator const &comm) const {
  auto const e_count = tokens_per_expert.size();
  TESSEL_REQUIRE(e_count > 0, "aux_loss: no routing yet");
  std::vector<double> local(2 * e_count + 1), global(local.size());
  for (std::size_t e = 0; e < e_count; ++e) {
    local[e] = static_cast<double>(tokens_per_expert[e]);
    local[e_count + e] = probability_sum[e];
  }
  local[2 * e_count] = static_cast<double>(experts.extent(0));
  comm.allreduce(local.data(), global.data(), local.size(), ReduceOp::sum);
  double const tokens = global[2 * e_count];
  if (tokens == 0)
    return 0.0;
  double const assignments = tokens * static_cast<double>(experts.extent(1));
  double loss = 0.0;
  for (std::size_t e = 0; e < e_count; ++e)
    loss += (global[e] / assignments) * (global[e_count + e] / tokens);
  return static_cast<double>(e_count) * loss;
}

double Routing::imbalance_std(Communicator const &comm) const {
  auto const e_count = tokens_per_expert.size();
  TESSEL_REQUIRE(e_count > 0, "imbalance_std: no routing yet");
  std::vector<double> local(e_count), global(e_count);
  for (std::size_t e = 0; e < e_count; ++e)
    local[e] = static_cast<double>(tokens_per_expert[e]);
  comm.allreduce(local.data(), global.data(), e_count, ReduceOp::sum);
  double total = 0.0;
  for (double c : global)
    total += c;
  if (total == 0)
    return 0.0;
  double const mean = 1.0 / static_cast<double>(e_count);
  double var = 0.0;
  for (double c : global)
    var += (c / total - mean) * (c / total - mean);
  return std::sqrt(var / static_cast<double>(e_count));
}

DispatchPlan make_dispatch_plan(MoeConfig const &config, Routing const &routing, int chunks) {
  auto const m = static_cast<std::int64_t>(routing.experts.extent(0));
  int const topk = config.topk, e_count = config.experts;
  TESSEL_REQUIRE(static_cast<int>(routing.experts.extent(1)) == topk, "dispatch plan: routing has ",
                 routing.experts.extent(1), " experts per token, the config's topk is ", topk);
  TESSEL_REQUIRE(chunks >= 1, "dispatch plan: need at least one chunk, got ", chunks);
  DispatchPlan plan;
  plan.chunks = chunks;
  plan.groups = config.ep;
  plan.experts_per_group = config.experts_per_group();
  int const groups = plan.groups, local_experts = plan.experts_per_group;
  plan.chunk_tokens.resize(static_cast<std::size_t>(chunks) + 1);
  for (int c = 0; c <= chunks; ++c)
    plan.chunk_tokens[static_cast<std::size_t>(c)] = m * c / chunks;

  // Counting sort of the (token, k) assignments by (chunk, expert); tokens ascend within a block because they
  // are visited in order.
  std::size_t const blocks = static_cast<std::size_t>(chunks) * static_cast<std::size_t>(e_count);
  plan.block_offsets.assign(blocks + 1, 0);
  for (int c = 0; c < chunks; ++c)
    for (auto t = plan.chunk_tokens[static_cast<std::size_t>(c)];
         t < plan.chunk_tokens[static_cast<std::size_t>(c) + 1]; ++t)
      for (int k = 0; k < topk; ++k) {
        int const e = routing.experts(t, k);
        TESSEL_REQUIRE(e >= 0 && e < e_count, "dispatch plan: token ", t, " is routed to expert ", e, ", outside [0, ",
                       e_count, ")");
        plan.block_offsets[static_cast<std::size_t>(c * e_count + e) + 1] += 1;
      }
  for (std::size_t b = 0; b < blocks; ++b)
    plan.block_offsets[b + 1] += plan.block_offsets[b];

  // Slots: the distinct tokens of each group, in token order.
  plan.token_slot.assign(static_cast<std::size_t>(groups) * static_cast<std::size_t>(m), -1);
  plan.group_slots.assign(static_cast<std::size_t>(groups), 0);
  plan.chunk_slots.assign(static_cast<std::size_t>(groups) * static_cast<std::size_t>(chunks + 1), 0);
  for (int c = 0; c < chunks; ++c) {
    for (int g = 0; g < groups; ++g)
      plan.chunk_slots[static_cast<std::size_t>(g * (chunks + 1) + c)] = plan.group_slots[static_cast<std::size_t>(g)];
    for (auto t = plan.chunk_tokens[static_cast<std::size_t>(c)];
         t < plan.chunk_tokens[static_cast<std::size_t>(c) + 1]; ++t)
      for (int k = 0; k < topk; ++k) {
        int const g = routing.experts(t, k) / local_experts;
        auto &slot =
            plan.token_slot[static_cast<std::size_t>(g) * static_cast<std::size_t>(m) + static_cast<std::size_t>(t)];
        if (slot < 0)
          slot = static_cast<std::int32_t>(plan.group_slots[static_cast<std::size_t>(g)]++);
      }
  }
  for (int g = 0; g < groups; ++g)
    plan.chunk_slots[static_cast<std::size_t>(g * (chunks + 1) + chunks)] =
        plan.group_slots[static_cast<std::size_t>(g)];

  auto const rows = static_cast<std::size_t>(plan.block_offsets.back());
  plan.row_token.resize(rows);
  plan.row_weight.resize(rows);
  plan.row_slot.resize(rows);
  std::vector<std::int64_t> cursor(plan.block_offsets.begin(), plan.block_offsets.end() - 1);
  for (int c = 0; c < chunks; ++c)
    for (auto t = plan.chunk_tokens[static_cast<std::size_t>(c)];
         t < plan.chunk_tokens[static_cast<std::size_t>(c) + 1]; ++t)
      for (int k = 0; k < topk; ++k) {
        int const e = routing.experts(t, k);
        auto const row = static_cast<std::size_t>(cursor[static_cast<std::size_t>(c * e_count + e)]++);
        plan.row_token[row] = static_cast<std::int32_t>(t);
        plan.row_weight[row] = routing.weights(t, k);
        plan.row_slot[row] = plan.token_slot[static_cast<std::size_t>(e / local_experts) * static_cast<std::size_t>(m) +
                                             static_cast<std::size_t>(t)];
      }
  return plan;
}

#define TESSEL_MOE_INSTANTIATE_ROUTE(SPACE)                                                                            \
  template void route(SPACE const &, MoeConfig const &, ConstHostMatrix, GateInput const &, Routing &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_ROUTE)

} // namespace tessel::moe

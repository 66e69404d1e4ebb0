// sequential (Megatron-LM): dispatch all-to-all -> GroupGEMM0 -> GroupGEMM1 -> combine all-to-all -> top-k sum.
#include "impl/LayerState.hpp"

#include <tessel/core/Execution.hpp>

namespace tessel::moe {

using namespace Impl;

template <class ExecSpace>
void MoeLayer::State::forward_sequential(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate,
                                         HostMatrix out) {
  auto const context_text = context(Schedule::sequential);
  auto const t0 = Clock::now();
  prelude(space, tokens, gate, 1, options.check_finite, context_text);
  auto const t1 = Clock::now();
  with_context(context_text, [&] {
    exchange_routes(0);
    dispatch_alltoallv();
  });
  auto const t2 = Clock::now();
  layout_combine(source_slots());
  baseline_compute(space, 0, sequential_sources());
  auto const t3 = Clock::now();
  with_context(context_text, [&] { combine_alltoallv(); });
  auto const t4 = Clock::now();
  final_sum(space, out, {0, config.hidden}, false);
  save_for_backward(tokens, gate, [&](int, int s, int e) {
    return x.data() + x_off[sz(s)] + metas[0][sz(s)].expert_offset(e) * config.hidden;
  });
  stats = ForwardStats{};
  stats.schedule = Schedule::sequential;
  stats.route = seconds_between(t0, t1);
  stats.dispatch = seconds_between(t1, t2);
  stats.experts = seconds_between(t2, t3);
  stats.combine = seconds_between(t3, t4);
  stats.reduce = since(t4);
  stats.total = since(t0);
  stats.rows = total_rows();
}

#define TESSEL_MOE_INSTANTIATE_SEQUENTIAL(SPACE)                                                                       \
  template void MoeLayer::State::forward_sequential(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_SEQUENTIAL)

} // namespace tessel::moe

// The comet backward: tile by tile as they land (local tiles first, or with the critical_path policy landed remote
// ones first; landed tiles that follow one are computed with it), each tile's token gradients sent the moment they
// are done, and the weight-gradient GEMMs kept back to fill the time the compute thread would otherwise wait.
#include "impl/BackwardRun.hpp"

#include <tessel/core/Execution.hpp>

namespace tessel::moe::Impl {

template <class ExecSpace> void BackwardRun<ExecSpace>::compute_comet() {
  int const total_local = static_cast<int>(source_tiles[sz(me)].size());
  // comet: local tiles first (local_first) or as the filler after landed remote ones (critical_path); the
  // weight-gradient GEMMs of finished tiles fill what would be waits.
  bool const remote_first = layer.comet.policy == PlanPolicy::critical_path;
  int local_next = 0, done_remote = 0;
  std::deque<std::pair<int, int>> queue;
  while (local_next < total_local || done_remote < tiles_expected) {
    engine.progress();
    {
      std::lock_guard<std::mutex> lock(engine.notify_mutex());
      queue.insert(queue.end(), ready.begin(), ready.end());
      ready.clear();
    }
    bool const local_ready = local_next < total_local;
    if (local_ready && (!remote_first || queue.empty())) {
      tile(me, local_next++, true);
      continue;
    }
    if (!queue.empty()) {
      auto const [s, t] = queue.front();
      queue.pop_front();
      // Landed tiles that follow it are taken along: one GEMM per expert as large as what has arrived allows.
      int const end = merge_end(s, t, [&, s = s](int next) {
        auto const it = std::find(queue.begin(), queue.end(), std::pair<int, int>(s, next));
        if (it == queue.end())
          return false;
        queue.erase(it);
        return true;
      });
      tiles(s, t, end, true);
      done_remote += end - t;
      continue;
    }
    if (!pieces.empty()) {
      weight_gradient_piece();
      continue;
    }
    auto const wait0 = Clock::now();
    engine.wait([&] { return !ready.empty(); });
    layer.backward_stats.compute_wait += since(wait0);
    if (layer.options.trace)
      layer.backward_stats.trace.push_back({seconds_between(t0, wait0), since(t0), "wait"});
  }
  while (!pieces.empty())
    weight_gradient_piece();
}

#define TESSEL_MOE_INSTANTIATE(SPACE) template void BackwardRun<SPACE>::compute_comet();
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE)

} // namespace tessel::moe::Impl

// The pipelined backward: chunk by chunk (the forward's chunks), a chunk computed once its tiles landed, its replies
// sent at once; the weight gradients at the end.
#include "impl/BackwardRun.hpp"

#include <tessel/core/Execution.hpp>

namespace tessel::moe::Impl {

template <class ExecSpace> void BackwardRun<ExecSpace>::compute_pipelined() {
  for (int c = 0; c < chunks; ++c) {
    wait_until([&] {
      for (int s = 0; s < world; ++s)
        for (std::size_t t = 0; t < source_tiles[sz(s)].size(); ++t)
          if (source_tiles[sz(s)][t].chunk == c && !landed[sz(s)][t])
            return false;
      return true;
    });
    for (int s = 0; s < world; ++s)
      for (std::size_t t = 0; t < source_tiles[sz(s)].size(); ++t)
        if (source_tiles[sz(s)][t].chunk == c)
          tile(s, static_cast<int>(t), true);
    engine.progress();
  }
  weight_gradients_all();
}

#define TESSEL_MOE_INSTANTIATE(SPACE) template void BackwardRun<SPACE>::compute_pipelined();
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE)

} // namespace tessel::moe::Impl

// The sequential backward: every tile has landed before the first is computed; the replies leave after the last.
#include "impl/BackwardRun.hpp"

#include <tessel/core/Execution.hpp>

namespace tessel::moe::Impl {

template <class ExecSpace> void BackwardRun<ExecSpace>::compute_sequential() {
  wait_until([&] { return tiles_landed == tiles_expected; });
  for (int s = 0; s < world; ++s)
    for (std::size_t t = 0; t < source_tiles[sz(s)].size(); ++t)
      tile(s, static_cast<int>(t), false);
  weight_gradients_all();
  for (auto &send : deferred_sends)
    send();
  deferred_sends.clear();
}

#define TESSEL_MOE_INSTANTIATE(SPACE) template void BackwardRun<SPACE>::compute_sequential();
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE)

} // namespace tessel::moe::Impl

#include "../impl/Policies.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>

namespace tessel::sched {

double ReschedCost::of(int gpus) const {
  return std::min(tune_per_gpu * gpus, tune_max) + std::min(restore_per_gpu * gpus, restore_max);
}

std::vector<std::string> policy_names() { return {"crius", "fcfs", "elasticflow", "gavel", "sia"}; }

std::unique_ptr<Policy> make_policy(std::string const &name, PolicyOptions const &options) {
  if (name == "crius")
    return Impl::make_crius(options);
  if (name == "fcfs")
    return Impl::make_fcfs(options);
  if (name == "gavel")
    return Impl::make_gavel(options);
  if (name == "sia")
    return Impl::make_sia(options);
  if (name == "elasticflow" || name == "elasticflow-l")
    return Impl::make_elasticflow(options);
  TESSEL_THROW("unknown policy '", name, "' (known: crius, fcfs, elasticflow, gavel, sia)");
}

} // namespace tessel::sched

#include <tessel/sched/Cell.hpp>

#include <tessel/sched/Model.hpp>

#include <algorithm>
#include <sstream>

namespace tessel::sched {

namespace {
bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }
} // namespace

std::string ParallelPlan::key() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < stages.size(); ++i)
    os << (i ? "__" : "") << stages[i].dp << '_' << stages[i].tp;
  return os.str();
}

char const *strategy_name(PlanStrategy strategy) {
  switch (strategy) {
  case PlanStrategy::minimal:
    return "minimal";
  case PlanStrategy::uniform:
    return "uniform";
  case PlanStrategy::greedy:
    return "greedy";
  }
  return "?";
}

std::vector<Cell> enumerate_cells(int model, int batch_size, int gpu_type, int num_gpus, int node_capacity) {
  std::vector<Cell> cells;
  if (!is_power_of_two(num_gpus) || !is_power_of_two(node_capacity))
    return cells;
  int const layers = ModelCatalog::builtin()[model].layers;
  for (int per_host = std::min(num_gpus, node_capacity); per_host >= 1; per_host /= 2)
    for (int stages = 1; stages <= num_gpus && stages <= layers; stages *= 2)
      cells.push_back(Cell{model, batch_size, gpu_type, num_gpus / per_host, per_host, stages});
  return cells;
}

} // namespace tessel::sched

#ifndef TESSEL_SCHED_CELL_HPP
#define TESSEL_SCHED_CELL_HPP

/// \file Cell.hpp
/// \brief Parallel plans (per-stage dp x tp shapes of a pipeline) and Crius's Cells: a job on a fixed GPU type,
/// GPU count, node layout and number of pipeline stages, inside which only the per-stage shapes vary.

#include <string>
#include <vector>

namespace tessel::sched {

/// \brief Data- and tensor-parallel degree of one pipeline stage.
struct StageShape {
  int dp = 1; ///< data-parallel degree
  int tp = 1; ///< tensor-parallel degree
  /// Same degrees.
  friend bool operator==(StageShape a, StageShape b) { return a.dp == b.dp && a.tp == b.tp; }
  /// Different degrees.
  friend bool operator!=(StageShape a, StageShape b) { return !(a == b); }
};

/// \brief A pipeline of stages, each with its own dp x tp shape; micro_batches is the GPipe micro-batch count.
struct ParallelPlan {
  std::vector<StageShape> stages; ///< the stages, first to last
  int micro_batches = 1;          ///< GPipe micro-batches per iteration
  /// Pipeline stages.
  int pp() const { return static_cast<int>(stages.size()); }
  /// Crius's hash key "{dp1}_{tp1}__{dp2}_{tp2}...".
  std::string key() const;
};

/// \brief A Cell (Crius): job model and batch on `hosts x per_host` GPUs of one type with `stages` pipeline stages.
struct Cell {
  int model = -1;     ///< index in the model catalog
  int batch_size = 0; ///< global batch (samples per iteration)
  int gpu_type = -1;  ///< index of the GPU type in the cluster
  int hosts = 1;      ///< nodes
  int per_host = 1;   ///< GPUs per node
  int stages = 1;     ///< pipeline stages
  /// hosts x per_host.
  int num_gpus() const { return hosts * per_host; }
  /// GPUs of each stage (the Cell shards GPUs uniformly across stages).
  int stage_gpus() const { return num_gpus() / stages; }
};

/// \brief Crius's plan enumeration strategies inside a Cell.
enum class PlanStrategy {
  minimal, ///< pure DP in every stage and pure TP in every stage (one plan when a stage has one GPU)
  uniform, ///< every symmetric (dp, tp) with dp * tp = GPUs per stage
  greedy   ///< Crius's "auto": per stage the shape with least communication, a 1.1 penalty on shape changes
};

/// "minimal", "uniform" or "greedy".
char const *strategy_name(PlanStrategy strategy);

/// \brief Cells of a job for a GPU type and count: every node layout `hosts x per_host` with per_host a power of
/// two no larger than the node capacity, times every power-of-two stage count that divides the GPU count and does
/// not exceed the model's layers. \p node_capacity is the GPUs per node of the type.
std::vector<Cell> enumerate_cells(int model, int batch_size, int gpu_type, int num_gpus, int node_capacity);

} // namespace tessel::sched

#endif

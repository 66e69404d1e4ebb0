#ifndef TESSEL_SCHED_ESTIMATOR_HPP
#define TESSEL_SCHED_ESTIMATOR_HPP

/// \file Estimator.hpp
/// \brief Iteration time of a parallel plan inside a Cell from an analytic compute / communication / memory model,
/// combined with the GPipe formula Crius uses, and calibrated against measured plans when profile tables exist.

#include <tessel/sched/Cell.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Profile.hpp>

#include <array>
#include <string>
#include <vector>

namespace tessel::sched {

/// \brief Estimated times of one plan (seconds per iteration) and its memory.
struct PlanEstimate {
  double comp = 0;      ///< pipelined forward + backward compute
  double intra = 0;     ///< pipelined tensor-parallel communication, gradient synchronization, optimizer step
  double inter = 0;     ///< pipelined cross-stage activation transfers
  double e2e = 0;       ///< comp + intra + inter
  double tp_comm = 0;   ///< the tensor-parallel part of intra (pipelined, forward + backward)
  double dp_sync = 0;   ///< the gradient synchronization part of intra (all stages)
  double memory_gb = 0; ///< peak per-GPU memory over the stages
  bool fits = false;    ///< memory feasible (Arena's rule: 1.2 x need <= 0.8 x GPU memory)
  bool valid = false;   ///< the plan is well formed for the Cell (degrees, divisibility, batch)
  std::string why;      ///< why a plan is invalid or does not fit
};

/// \brief Calibration of the analytic model: achieved fraction of peak compute per (GPU type, model family), of
/// link bandwidth for tensor-parallel traffic per (GPU type, family), for gradient synchronization per GPU type and
/// for cross-stage transfers per GPU type; each the median of model / measured ratios over measured plans (gradient
/// synchronization from plans without tensor parallelism, tensor-parallel traffic from the rest of their
/// intra-stage time).
struct Calibration {
  std::vector<std::array<double, 4>> compute; ///< [type][family]
  std::vector<std::array<double, 4>> tp;      ///< [type][family]
  std::vector<double> dp;                     ///< [type]
  std::vector<double> pp;                     ///< [type]
  int plans_used = 0;                         ///< measured plans fitted (0: uncalibrated, 100% efficiency)
};

/// \brief The analytic estimator. Stateless apart from its calibration; cheap to copy.
class Estimator {
public:
  /// An uncalibrated estimator for \p cluster (every efficiency 1: peak compute and bandwidths).
  explicit Estimator(Cluster cluster);

  /// The cluster estimated for.
  Cluster const &cluster() const { return _cluster; }

  /// Estimates \p plan in \p cell. Invalid plans come back with valid = false and a reason.
  PlanEstimate estimate(Cell const &cell, ParallelPlan const &plan) const;

  /// Plans of \p cell under \p strategy, pruned: only valid plans that fit in memory, dp no larger than the
  /// per-replica micro-batch, tp dividing the attention heads. The micro-batch count is chosen per plan.
  std::vector<ParallelPlan> enumerate_plans(Cell const &cell, PlanStrategy strategy) const;

  /// \brief The best plan over the Cells of one allocation (all stage counts) under \p strategy.
  struct Best {
    bool feasible = false;    ///< some plan is valid and fits in memory
    Cell cell;                ///< the Cell of the best plan (its stage count)
    ParallelPlan plan;        ///< the best plan
    PlanEstimate estimate;    ///< its estimate
    int plans_considered = 0; ///< plans estimated
  };
  /// The fastest plan of \p model at \p batch_size on \p hosts x \p per_host GPUs of \p gpu_type, over every stage
  /// count, among the plans \p strategy enumerates.
  Best best(int model, int batch_size, int gpu_type, int hosts, int per_host,
            PlanStrategy strategy = PlanStrategy::greedy) const;
  /// Pure data parallelism (one stage, dp = GPUs, tp = 1).
  PlanEstimate data_parallel(int model, int batch_size, int gpu_type, int hosts, int per_host) const;

  /// Fits compute and communication efficiencies to the measured plans of \p table (types matched by name);
  /// types or families without measurements take the mean of the fitted values. Returns what was fitted.
  Calibration const &calibrate(ProfileTable const &table);
  /// What the last calibrate() fitted.
  Calibration const &calibration() const { return _cal; }

private:
  struct Efficiency {
    double compute = 1, tp = 1, dp = 1, pp = 1;
  };
  // Validity, memory and GPipe timing of a plan at the given efficiencies.
  PlanEstimate evaluate(Cell const &cell, ParallelPlan const &plan, Efficiency const &eff) const;
  int micro_batches(Cell const &cell, ParallelPlan const &plan) const;

  Cluster _cluster;
  Calibration _cal;
};

} // namespace tessel::sched

#endif

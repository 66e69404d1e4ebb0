#ifndef TESSEL_TOOLS_MOE_TRAIN_HPP
#define TESSEL_TOOLS_MOE_TRAIN_HPP

// `tessel-moe train`: a small model (token embedding -> MoE layer -> linear head) trained on data a teacher model
// of the same form generates. Every rank count sees the same global batches (token ids are a function of the seed,
// the step and the token's global index), so the loss curve is the same at every rank count and schedule.
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Training.hpp>

#include <tessel/core/Communicator.hpp>

#include <cstdint>
#include <vector>

namespace tessel::moe::app {

struct TrainSettings {
  MoeConfig layer;  ///< tokens: the global batch (split over the ranks); ep, tp: the layout
  int vocab = 256;  ///< token ids
  int outputs = 16; ///< the head's outputs (regression targets from the teacher)
  int steps = 50;
  std::uint64_t seed = 1;
  OptimizerOptions optimizer;
  double aux_loss_coef = 0.01;
  Schedule schedule = Schedule::comet;
  LayerOptions layer_options;
};

struct TrainResult {
  std::vector<double> loss;                              ///< per step, before its update (the same on every rank)
  std::vector<double> step_seconds;                      ///< per step, the slowest rank's forward + backward + update
  std::vector<double> forward_seconds, backward_seconds; ///< per step, this rank's layer forward and backward
};

/// Trains on \p comm (collective). The communicator may be paced (emulated link).
TrainResult train(HostExecSpace const &space, Communicator const &comm, TrainSettings const &settings);

} // namespace tessel::moe::app

#endif

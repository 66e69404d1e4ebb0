#ifndef TESSEL_TOOLS_MOE_TRAIN_HPP
#define TESSEL_TOOLS_MOE_TRAIN_HPP

// `tessel-moe train`: a small model (token embedding -> MoE layer -> linear head) trained on data a teacher model
// of the same form generates. Every rank count sees the same global batches (token ids are a function of the seed,
// the step and the token's global index), so the loss curve is the same at every rank count and schedule.
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Training.hpp>

#include <tessel/core/Communicator.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::moe::app {

struct TrainSettings {
  MoeConfig layer;  ///< tokens: the global batch (split over the ranks); ep, tp: the layout
  int vocab = 256;  ///< token ids
  int outputs = 16; ///< the head's outputs (regression targets from the teacher)
  int steps = 50;
  int held_out = 4; ///< held-out batches of the global batch size, evaluated before and after training
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
  /// The data loss (mean squared error, no load-balancing term) of each held-out batch before the first step and
  /// after the last: the same batches, never trained on.
  std::vector<double> held_out_before, held_out_after;
};

/// \brief The model's data and initial values, the same at every rank count: the teacher's target for each token id
/// and the student's starting parameters (dense experts, before sharding).
struct TrainProblem {
  HostMatrix targets;   ///< [vocab, outputs]
  HostMatrix embedding; ///< [vocab, hidden]
  DenseWeights experts; ///< w0 [E, N, (2 if gated else 1) K], w1 [E, K, N]
  GateParams gate;      ///< weight [N, E], bias [E] (zero)
  HostMatrix head;      ///< [hidden, outputs]
};

/// The problem \p settings describe (its seed).
TrainProblem make_problem(HostExecSpace const &space, TrainSettings const &settings);

/// The token ids of step \p step, for the global tokens [0, batch) (rank r takes [r M, (r + 1) M)).
std::vector<int> step_token_ids(TrainSettings const &settings, int step);

/// \brief Writes the problem as HDF5 (schema tessel.moe.train_problem: the settings as attributes, the datasets of
/// TrainProblem, the experts' stacked as experts/w0 [E N, K0] and experts/w1 [E K, N], and token_ids [steps, batch]),
/// so that another framework can train the same model from the same
/// values (the Python package's loss-curve test does).
void write_problem(std::string const &path, TrainSettings const &settings, TrainProblem const &problem);

/// Trains on \p comm (collective). The communicator may be paced (emulated link). Throws when the loss becomes
/// NaN or infinite, naming the step.
TrainResult train(HostExecSpace const &space, Communicator const &comm, TrainSettings const &settings);

/// \brief Whether training lowered the loss by more than noise: the mean held-out loss fell by more than twice its
/// standard error before training (the spread that another choice of held-out batches alone gives). A loss that
/// only moves with the batches (a learning rate too small to change the parameters) is not a fall.
struct LossCheck {
  double before = 0.0, after = 0.0; ///< mean held-out loss
  double noise = 0.0;               ///< twice the standard error of the mean held-out loss before training
  bool fell = false;
};
LossCheck check_loss(TrainResult const &result);

/// \brief The bytes one rank allocates for \p settings on \p ranks ranks (teacher and student, their dense experts,
/// the shard, the batch buffers), to refuse a model this machine cannot hold before allocating it.
double train_memory_bytes(TrainSettings const &settings, int ranks);

} // namespace tessel::moe::app

#endif

#ifndef TESSEL_MOE_TRAINING_HPP
#define TESSEL_MOE_TRAINING_HPP

/// \file Training.hpp
/// \brief Training an MoE layer: optimizers (SGD, Adam) that update parameters in place from their gradients, and
/// one training step (forward, the caller's loss gradient, backward, optimizer step on the expert shards and gate).

#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Weights.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace tessel::moe {

/// \brief Optimizer settings (PyTorch's torch.optim.SGD and Adam defaults where they have them).
struct OptimizerOptions {
  /// The update rule.
  enum class Kind : int { sgd, adam };
  Kind kind = Kind::adam;      ///< SGD or Adam
  double learning_rate = 1e-3; ///< step size
  double momentum = 0.0;       ///< SGD: heavy-ball momentum (0: plain SGD); Adam refuses one
  double beta1 = 0.9;          ///< Adam: decay of the first moment
  double beta2 = 0.999;        ///< Adam: decay of the second moment
  double eps = 1e-8;           ///< Adam: added to the second moment's root
  double weight_decay = 0.0;   ///< L2 penalty added to the gradient
  /// Throws naming the first field out of range.
  void validate() const;
};
/// Parses "sgd" or "adam".
OptimizerOptions::Kind parse_optimizer(std::string const &name);
/// "sgd" or "adam".
char const *name_of(OptimizerOptions::Kind kind);

/// \brief SGD (with momentum) or Adam over any number of parameter tensors, each known by a key that holds its
/// state (momentum; Adam's moments).
class Optimizer {
public:
  /// An optimizer with \p options (validated); no step begun yet.
  explicit Optimizer(OptimizerOptions options = {});

  /// \brief Starts a step: every update() until the next begin_step() belongs to it (Adam's bias correction).
  void begin_step();
  /// Steps begun so far.
  std::int64_t steps() const { return _step; }
  /// The settings.
  OptimizerOptions const &options() const { return _options; }

  /// \brief param -= the update for \p grad, on \p space (kernel Tessel::moe::optimizer_update). The first call for
  /// \p key sizes its state; a later call with another \p count is an error naming the key.
  template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
  void update(ExecSpace const &space, std::string const &key, float *param, float const *grad, std::int64_t count);

  /// \brief Updates a layer's expert shards and its gate from \p grads (keys "moe.w0", "moe.w1", "gate.weight",
  /// "gate.bias").
  template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
  void update_layer(ExecSpace const &space, MoeLayer &layer, GateParams &gate, MoeGradients const &grads);

private:
  struct State {
    Kokkos::View<float *, Kokkos::HostSpace> first, second;
  };
  OptimizerOptions _options;
  std::int64_t _step = 0;
  std::map<std::string, State> _state;
};

/// \brief What a loss gives back for a layer's output \p out [M, N]: its gradient \p d_out [M, N] (written), and
/// returns this rank's share of the loss.
using LossGradient = std::function<double(ConstHostMatrix out, HostMatrix d_out)>;

/// \brief One training step of \p layer (collective): forward of \p tokens under \p schedule into \p out, the loss
/// and its gradient from \p loss, backward (with the load-balancing loss at \p aux_loss_coef), then one optimizer
/// step on the expert shards and the gate. \p grads receives the gradients (its token gradients feed the layers
/// before). Returns the loss, the same on every rank: the sum over ranks of their shares plus aux_loss_coef x
/// Routing::aux_loss.
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
double train_step(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateParams &gate, HostMatrix out,
                  LossGradient const &loss, Optimizer &optimizer, MoeGradients &grads,
                  Schedule schedule = Schedule::comet, double aux_loss_coef = 0.0);

} // namespace tessel::moe

#endif

#include <tessel/moe/Training.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>

#include <cmath>

namespace tessel::moe {

void OptimizerOptions::validate() const {
  auto const finite_in = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  TESSEL_REQUIRE(finite_in(learning_rate, 0.0, 1e6) && learning_rate > 0.0,
                 "optimizer: learning_rate must be in (0, 1e6], got ", learning_rate);
  TESSEL_REQUIRE(finite_in(momentum, 0.0, 1.0) && momentum < 1.0, "optimizer: momentum must be in [0, 1), got ",
                 momentum);
  // Adam has no momentum of SGD's kind (its first moment is beta1): a momentum given to it would do nothing.
  TESSEL_REQUIRE(momentum == 0.0 || kind == Kind::sgd, "optimizer: momentum ", momentum,
                 " is SGD's; Adam has none (its first-moment decay is beta1)");
  TESSEL_REQUIRE(finite_in(beta1, 0.0, 1.0) && beta1 < 1.0, "optimizer: beta1 must be in [0, 1), got ", beta1);
  TESSEL_REQUIRE(finite_in(beta2, 0.0, 1.0) && beta2 < 1.0, "optimizer: beta2 must be in [0, 1), got ", beta2);
  TESSEL_REQUIRE(finite_in(eps, 0.0, 1.0) && eps > 0.0, "optimizer: eps must be in (0, 1], got ", eps);
  TESSEL_REQUIRE(finite_in(weight_decay, 0.0, 1e6), "optimizer: weight_decay must be >= 0, got ", weight_decay);
}

OptimizerOptions::Kind parse_optimizer(std::string const &name) {
  if (name == "sgd")
    return OptimizerOptions::Kind::sgd;
  if (name == "adam")
    return OptimizerOptions::Kind::adam;
  throw Exception("unknown optimizer '" + name + "' (expected sgd or adam)");
}

char const *name_of(OptimizerOptions::Kind kind) { return kind == OptimizerOptions::Kind::sgd ? "sgd" : "adam"; }

Optimizer::Optimizer(OptimizerOptions options) : _options(options) { _options.validate(); }

void Optimizer::begin_step() { ++_step; }

template <class ExecSpace, class Check>
void Optimizer::update(ExecSpace const &space, std::string const &key, float *param, float const *grad,
                       std::int64_t count) {
  TESSEL_REQUIRE(_step > 0, "Optimizer::update(", key, "): call begin_step() first");
  TESSEL_REQUIRE(count >= 0, "Optimizer::update(", key, "): negative size ", count);
  auto &state = _state[key];
  bool const adam = _options.kind == OptimizerOptions::Kind::adam;
  bool const needs_first = adam || _options.momentum > 0.0;
  auto const size = static_cast<std::size_t>(count);
  if (needs_first && state.first.extent(0) == 0 && count > 0) {
    state.first = Kokkos::View<float *, Kokkos::HostSpace>("Tessel::moe::optimizer_first_moment", size);
    if (adam)
      state.second = Kokkos::View<float *, Kokkos::HostSpace>("Tessel::moe::optimizer_second_moment", size);
  }
  TESSEL_REQUIRE(!needs_first || count == 0 || state.first.extent(0) == size, "Optimizer::update(", key, "): ", count,
                 " values, its state has ", state.first.extent(0));
  float const lr = static_cast<float>(_options.learning_rate), decay = static_cast<float>(_options.weight_decay);
  float const mom = static_cast<float>(_options.momentum), b1 = static_cast<float>(_options.beta1),
              b2 = static_cast<float>(_options.beta2), eps = static_cast<float>(_options.eps);
  // Adam's bias corrections, in double: 1 - beta^t loses all precision in float for large t.
  float const c1 = static_cast<float>(1.0 - std::pow(_options.beta1, static_cast<double>(_step)));
  float const c2 = static_cast<float>(1.0 - std::pow(_options.beta2, static_cast<double>(_step)));
  float *const m = state.first.data();
  float *const v = state.second.data();
  Kokkos::parallel_for(
      "Tessel::moe::optimizer_update", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(std::int64_t i) {
        float const g = grad[i] + decay * param[i];
        if (adam) {
          m[i] = b1 * m[i] + (1.0f - b1) * g;
          v[i] = b2 * v[i] + (1.0f - b2) * g * g;
          param[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
        } else if (mom > 0.0f) {
          m[i] = mom * m[i] + g;
          param[i] -= lr * m[i];
        } else {
          param[i] -= lr * g;
        }
      });
  compat::fence(space, "Tessel::moe::optimizer_update");
}

template <class ExecSpace, class Check>
void Optimizer::update_layer(ExecSpace const &space, MoeLayer &layer, GateParams &gate, MoeGradients const &grads) {
  auto const weights = layer.weights(); // views: the layer's own memory
  TESSEL_REQUIRE(grads.experts.w0.size() == weights.w0.size() && grads.experts.w1.size() == weights.w1.size(),
                 "Optimizer::update_layer: the gradients are not this layer's (run its backward first)");
  update(space, "moe.w0", weights.w0.data(), grads.experts.w0.data(), static_cast<std::int64_t>(weights.w0.size()));
  update(space, "moe.w1", weights.w1.data(), grads.experts.w1.data(), static_cast<std::int64_t>(weights.w1.size()));
  if (gate.weight.data() != nullptr) {
    TESSEL_REQUIRE(grads.gate_weight.size() == gate.weight.size(),
                   "Optimizer::update_layer: no gate-weight gradient (was the forward given a gate weight?)");
    update(space, "gate.weight", gate.weight.data(), grads.gate_weight.data(),
           static_cast<std::int64_t>(gate.weight.size()));
  }
  if (gate.bias.data() != nullptr) {
    TESSEL_REQUIRE(grads.gate_bias.size() == gate.bias.size(), "Optimizer::update_layer: no gate-bias gradient");
    update(space, "gate.bias", gate.bias.data(), grads.gate_bias.data(), static_cast<std::int64_t>(gate.bias.size()));
  }
}

template <class ExecSpace, class Check>
double train_step(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateParams &gate, HostMatrix out,
                  LossGradient const &loss, Optimizer &optimizer, MoeGradients &grads, Schedule schedule,
                  double aux_loss_coef) {
  layer.forward(space, tokens, gate.input(), out, schedule);
  HostMatrix d_out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::output_gradient"), out.extent(0),
                   out.extent(1));
  double value = layer.communicator().allreduce_value(loss(out, d_out), ReduceOp::sum);
  if (aux_loss_coef > 0.0)
    value += aux_loss_coef * layer.routing().aux_loss(layer.communicator());
  layer.backward(space, d_out, grads, schedule, aux_loss_coef);
  optimizer.begin_step();
  optimizer.update_layer(space, layer, gate, grads);
  return value;
}

#define TESSEL_MOE_INSTANTIATE_TRAINING(SPACE)                                                                         \
  template void Optimizer::update(SPACE const &, std::string const &, float *, float const *, std::int64_t);           \
  template void Optimizer::update_layer(SPACE const &, MoeLayer &, GateParams &, MoeGradients const &);                \
  template double train_step(SPACE const &, MoeLayer &, ConstHostMatrix, GateParams &, HostMatrix,                     \
                             LossGradient const &, Optimizer &, MoeGradients &, Schedule, double);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_TRAINING)

} // namespace tessel::moe

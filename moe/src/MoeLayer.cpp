// The host MoeLayer: construction, settings, the checks every forward makes, and the schedule it runs
// (SequentialSchedule.cpp, PipelinedSchedule.cpp, CometSchedule.cpp on the state of impl/LayerState.hpp).
#include <tessel/moe/MoeLayer.hpp>

#include "impl/LayerState.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Gemm.hpp>
#include <tessel/core/ScopeGuard.hpp>

#ifdef TESSEL_ENABLE_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tessel::moe {

using Impl::since;
using Impl::with_context;
using Clock = Impl::Clock;

MoeLayer::MoeLayer(MoeConfig const &config, Communicator const &comm, ExpertWeights weights, LayerOptions options)
    : _state(std::make_unique<State>(config, comm)) {
  config.validate(comm.size());
  config.require_consistent(comm);
  auto &state = *_state;
  state.comm.set_validation(false); // the data path checks its own message sizes
  state.weights = std::move(weights);
  state.options = std::move(options);
  auto const local_experts = static_cast<std::size_t>(config.experts_per_group());
  TESSEL_REQUIRE(state.weights.w0.extent(0) == local_experts &&
                     state.weights.w0.extent(1) == static_cast<std::size_t>(config.hidden) &&
                     state.weights.w0.extent(2) == static_cast<std::size_t>(config.gemm0_cols()),
                 "MoeLayer: w0 is ", state.weights.w0.extent(0), " x ", state.weights.w0.extent(1), " x ",
                 state.weights.w0.extent(2), ", expected E/EP x N x ", config.gated ? "2K/TP" : "K/TP", " = ",
                 local_experts, " x ", config.hidden, " x ", config.gemm0_cols());
  TESSEL_REQUIRE(state.weights.w1.extent(0) == local_experts &&
                     state.weights.w1.extent(1) == static_cast<std::size_t>(config.ffn_per_rank()) &&
                     state.weights.w1.extent(2) == static_cast<std::size_t>(config.hidden),
                 "MoeLayer: w1 is ", state.weights.w1.extent(0), " x ", state.weights.w1.extent(1), " x ",
                 state.weights.w1.extent(2), ", expected E/EP x K/TP x N = ", local_experts, " x ",
                 config.ffn_per_rank(), " x ", config.hidden);
  state.check_pipeline_comm_workers(state.options.pipeline_comm_workers);
  state.set_pipeline_chunks(state.options.pipeline_chunks);
  state.resolve_comet(config, state.options.comet, state.options.registry, state.options.backend);
  TESSEL_REQUIRE(std::isfinite(state.options.tune_budget) && state.options.tune_budget > 0.0,
                 "MoeLayer: tune_budget must be a positive number of seconds, got ", state.options.tune_budget);
  // The cache and the search wait for the first comet forward: the link the tuning must see (an emulated one is
  // calibrated on the constructed layer) is not known yet.
  state.tune_pending = state.comet_source == "fallback rule" && State::first_use_enabled(state.options);
  // The search is collective and its decisions compare times with the budget: a rank that disagrees would wait in
  // it for the others until the timeout.
  std::uint64_t budget_bits = 0;
  std::memcpy(&budget_bits, &state.options.tune_budget, sizeof(budget_bits));
  state.comm.require_same("first-use tuning (LayerOptions::tune_on_first_use, tune_budget, TESSEL_MOE_TUNE)",
                          state.tune_pending ? budget_bits : 0);
  tessel::limit_blas_threads();
  attach(state);
}

MoeLayer::~MoeLayer() = default;
MoeLayer::MoeLayer(MoeLayer &&) noexcept = default;
MoeLayer &MoeLayer::operator=(MoeLayer &&) noexcept = default;

Communicator const &MoeLayer::communicator() const { return _state->comm; }
Routing const &MoeLayer::routing() const { return _state->routing; }
ForwardStats const &MoeLayer::stats() const { return _state->stats; }
ForwardStats const &MoeLayer::backward_stats() const { return _state->backward_stats; }
FirstUseTuning const &MoeLayer::first_use_tuning() const { return _state->first_use; }
ExpertWeights const &MoeLayer::weights() const { return _state->weights; }

void MoeLayer::set_pipeline_comm_workers(int workers) {
  State::check_pipeline_comm_workers(workers);
  _state->options.pipeline_comm_workers = workers;
}

namespace {
// The overlapped schedules' communication threads need MPI thread support.
void require_thread_level(MoeLayer::State const &state, Schedule schedule, char const *what) {
  if (schedule != Schedule::sequential && state.world() > 1) {
#ifdef TESSEL_ENABLE_MPI
    int const level = ScopeGuard::mpi_thread_level();
    int const needed =
        schedule == Schedule::comet && state.comet.comm_workers > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    TESSEL_REQUIRE(level < 0 || level >= needed, "MoeLayer::", what, " (", name_of(schedule),
                   "): its communication threads need MPI thread support ", "MPI_THREAD_SERIALIZED",
                   ", MPI granted level ", level);
#else
    (void)what;
#endif
  }
}
} // namespace

template <class ExecSpace, class Check>
void MoeLayer::forward(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out,
                       Schedule schedule) {
  auto &state = *_state;
  ScopedRegion region(std::string("Tessel::moe::forward_") + name_of(schedule));
  state.check_inputs(tokens, gate, out);
  require_thread_level(state, schedule, "forward");
  state.saved.valid = false;
  bool done = false;
  if (schedule == Schedule::comet && state.tune_pending)
    with_context(state.context(schedule), [&] { done = state.comet_first_use(space, tokens, gate, out); });
  // Once per setting: every rank must cut the work the same way (a collective, hence not on every forward).
  with_context(state.context(schedule), [&] { state.check_settings_once(state.comm, schedule); });
  if (done)
    return;
  switch (schedule) {
  case Schedule::sequential:
    state.forward_sequential(space, tokens, gate, out);
    break;
  case Schedule::pipelined:
    state.forward_pipelined(space, tokens, gate, out);
    break;
  case Schedule::comet:
    state.forward_comet(space, tokens, gate, out);
    break;
  }
}

template <class ExecSpace, class Check>
void MoeLayer::backward(ExecSpace const &space, ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule,
                        double aux_loss_coef) {
  auto &state = *_state;
  ScopedRegion region(std::string("Tessel::moe::backward_") + name_of(schedule));
  TESSEL_REQUIRE(state.saved.valid,
                 "MoeLayer::backward: no forward to differentiate (call forward first; a forward that "
                 "failed keeps nothing)");
  auto const m = static_cast<std::size_t>(state.config.tokens), n = static_cast<std::size_t>(state.config.hidden);
  TESSEL_REQUIRE(d_out.extent(0) == m && d_out.extent(1) == n, "MoeLayer::backward: the output gradient is ",
                 d_out.extent(0), " x ", d_out.extent(1), ", expected M x N = ", m, " x ", n);
  TESSEL_REQUIRE(std::isfinite(aux_loss_coef) && aux_loss_coef >= 0.0,
                 "MoeLayer::backward: aux_loss_coef must be finite and >= 0, got ", aux_loss_coef);
  require_thread_level(state, schedule, "backward");
  with_context(state.backward_context(schedule), [&] {
    if (state.options.check_finite)
      state.check_finite_gradient(d_out);
    state.check_settings_once(state.comm, schedule);
  });
  state.backward(space, d_out, grads, schedule, aux_loss_coef);
}

template <class ExecSpace, class Check>
AloneTimes MoeLayer::measure_backward_alone(ExecSpace const &space, ConstHostMatrix d_out, int repeats, bool comm,
                                            bool comp) {
  auto &state = *_state;
  TESSEL_REQUIRE(repeats >= 1, "measure_backward_alone: repeats must be >= 1, got ", repeats);
  TESSEL_REQUIRE(state.saved.valid, "measure_backward_alone: no forward to differentiate (call forward first)");
  TESSEL_REQUIRE(d_out.extent(0) == static_cast<std::size_t>(state.config.tokens) &&
                     d_out.extent(1) == static_cast<std::size_t>(state.config.hidden),
                 "measure_backward_alone: the output gradient is ", d_out.extent(0), " x ", d_out.extent(1),
                 ", expected M x N");
  return state.measure_backward_alone(space, d_out, repeats, comm, comp);
}

template <class ExecSpace, class Check>
AloneTimes MoeLayer::measure_alone(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int repeats,
                                   bool comm, bool comp) {
  auto &state = *_state;
  TESSEL_REQUIRE(repeats >= 1, "measure_alone: repeats must be >= 1, got ", repeats);
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::measure_out"), tokens.extent(0),
                 tokens.extent(1));
  forward(space, tokens, gate, out, Schedule::sequential); // fills the buffers both measurements reuse
  // Median and minimum over the repetitions of the slowest rank's time.
  auto const median_of_max = [&](double &minimum, auto &&body) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      state.comm.barrier();
      auto const t0 = Clock::now();
      body();
      double const mine = since(t0);
      times.push_back(state.comm.allreduce_value(mine, ReduceOp::max));
    }
    std::sort(times.begin(), times.end());
    minimum = times.front();
    return times[times.size() / 2];
  };
  AloneTimes result;
  if (comp)
    result.comp = median_of_max(result.comp_min, [&] {
      state.prelude(space, tokens, gate, 1, false);
      state.metas.resize(1);
      state.baseline_compute(space, 0, state.sequential_sources());
      state.final_sum(space, out, {0, state.config.hidden}, false);
    });
  if (comm)
    result.comm = median_of_max(result.comm_min, [&] {
      with_context(state.context(Schedule::sequential), [&] {
        state.exchange_routes(0);
        state.dispatch_alltoallv();
        state.combine_alltoallv();
      });
    });
  return result;
}

#define TESSEL_MOE_INSTANTIATE_LAYER(SPACE)                                                                            \
  template void MoeLayer::forward(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix, Schedule);            \
  template void MoeLayer::backward(SPACE const &, ConstHostMatrix, MoeGradients &, Schedule, double);                  \
  template AloneTimes MoeLayer::measure_backward_alone(SPACE const &, ConstHostMatrix, int, bool, bool);               \
  template AloneTimes MoeLayer::measure_alone(SPACE const &, ConstHostMatrix, GateInput const &, int, bool, bool);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_LAYER)

} // namespace tessel::moe

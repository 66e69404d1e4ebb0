// The moe CUDA path across GPUs: one RankDriver per process over an NCCL transport (a symmetric window for the fused
// kernels' peer loads and stores, NCCL's all-to-alls for the baselines' messages and the backward's).
#include <tessel/core/Config.hpp>

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)

#include <tessel/moe/cuda/NcclMoeLayer.hpp>

#include "RankDriver.hpp"
#include "SymmetricWindow.hpp"

#include <tessel/core/cuda/NcclCommunicator.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace tessel::moe::cuda {

using namespace Impl;

namespace {

std::size_t z(std::int64_t i) { return static_cast<std::size_t>(i); }

// Every rank checks that the others have the same configuration before any local check can stop it alone.
MoeConfig const &consistent(MoeConfig const &config, Communicator const &comm) {
  config.require_consistent(comm);
  return config;
}

// Every rank checks the path from its GPU to every peer's (peer access, native peer atomics) before the window is
// created, and every rank stops with the same error when one pair cannot be used.
void require_peer_links(Communicator const &comm) {
  constexpr std::size_t id_bytes = 32;
  int device = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  char mine[id_bytes] = {};
  TESSEL_CUDA_CHECK(cudaDeviceGetPCIBusId(mine, static_cast<int>(id_bytes), device));
  int const world = comm.size();
  std::vector<char> ids(id_bytes * static_cast<std::size_t>(world));
  comm.host_allgather(mine, ids.data(), id_bytes);
  std::vector<std::string> bus_ids;
  for (int r = 0; r < world; ++r)
    bus_ids.emplace_back(ids.data() + id_bytes * static_cast<std::size_t>(r));
  auto const row = check_peer_links(bus_ids, comm.rank());
  PeerLinks all;
  all.world = world;
  all.links.resize(static_cast<std::size_t>(world * world));
  comm.host_allgather(row.data(), all.links.data(), row.size() * sizeof(PeerLink));
  auto const problem = all.problem(bus_ids);
  TESSEL_REQUIRE(problem.empty(), "tessel::moe::cuda::NcclMoeLayer: ", problem);
  if (all.unchecked() > 0 && comm.rank() == 0)
    std::fprintf(stderr,
                 "tessel::moe::cuda::NcclMoeLayer: %d GPU pairs could not be checked for peer access and native peer "
                 "atomics (a rank's GPU is not visible to the others: CUDA_VISIBLE_DEVICES); NCCL's load/store team "
                 "covers every rank, peer atomics are assumed\n",
                 all.unchecked());
}

/// One rank per process and GPU: the fused kernels reach the peers through the window; the baselines' and the
/// backward's messages are NCCL all-to-alls, which order the ranks themselves (a wait for a peer is a wait for
/// this rank's own event).
class NcclTransport final : public Transport {
public:
  NcclTransport(DeviceLayerCore const &core, Communicator &comm, SymmetricWindow &window, RankDriver &driver,
                std::vector<DispatchPlan> const &plans)
      : _core(core), _comm(comm), _window(window), _driver(driver), _plans(plans) {}

  char *local() const override { return _window.local(); }
  char *const *peer_table() const override { return _window.peer_table(); }
  int sharing() const override { return 1; }

  void wait_packed(cudaStream_t stream) override { _driver.state().packed.wait_on(stream); }
  void dispatch(RankWork const &work, int ch, cudaStream_t stream) override {
    auto const x = planner().forward_exchange(_driver.rank(), ch, work);
    alltoallv(local() + _core.layout.send_rows, x.rows, _driver.state().x_recv.data(),
              z(_core.config.hidden) * _core.element_bytes, stream);
  }
  void combine(RankWork const &work, int ch, cudaStream_t stream) override {
    auto const x = planner().forward_exchange(_driver.rank(), ch, work);
    alltoallv(_driver.state().combine_send.data(), x.slots, local() + _core.layout.combine,
              z(_core.config.hidden) * sizeof(float), stream);
  }
  void wait_combined(cudaStream_t stream) override { _driver.state().combined.wait_on(stream); }

  bool tile_messages() const override { return false; }
  void wait_gradients_packed(cudaStream_t stream) override { _driver.backward_state().packed.wait_on(stream); }
  /// Chunk \p ch's messages to the expert sides: this rank's output gradient per slot of each destination's group,
  /// and its plan rows' slots and combine weights.
  void gradients_in(int ch, int, cudaStream_t stream) override {
    auto &rb = _driver.backward_state();
    auto const &x = _exchange[z(ch)];
    alltoallv(rb.g_out.data(), x.slots, rb.g_in.data(), sizeof(float), stream);
    alltoallv(rb.send_slot.data(), x.rows, rb.row_slot.data(), sizeof(std::int32_t), stream);
    alltoallv(rb.send_weight.data(), x.rows, rb.row_weight.data(), sizeof(float), stream);
  }
  /// Chunk \p ch's replies: the token gradients per slot into the owners' combine regions (the forward's combine),
  /// and the rows' combine-weight gradients into the owners' dw_recv.
  void replies_out(int ch, int, cudaStream_t stream) override {
    auto &rb = _driver.backward_state();
    combine(_driver.work(), ch, stream);
    alltoallv(rb.dw.data(), _exchange[z(ch)].dw, rb.dw_recv.data(), sizeof(float), stream);
  }
  void wait_replied(cudaStream_t stream) override { _driver.backward_state().replied.wait_on(stream); }
  void prepare_backward(BackwardWork const &lists) override {
    _exchange.clear();
    for (int ch = 0; ch < _driver.forward_chunks(); ++ch)
      _exchange.push_back(planner().backward_exchange(_driver.rank(), ch, _driver.work(), lists));
    // The own plan rows' slots and weights: host vectors of the plan, alive until the synchronization in the
    // driver's prepare_backward.
    auto &rb = _driver.backward_state();
    auto const &own = _plans[z(_driver.rank())];
    cudaStream_t const stream = _driver.state().stream.get();
    upload(rb.send_slot, own.row_slot, "Tessel::moe::cuda::grad_send_slot", stream);
    upload(rb.send_weight, own.row_weight, "Tessel::moe::cuda::grad_send_weight", stream);
  }

  void synchronize(Stream const &stream) override { tessel::cuda::synchronize(_comm, stream.get()); }

private:
  WorkPlanner planner() const { return WorkPlanner(_core.config, _plans, _core.comet); }
  /// One all-to-all of \p x's element counts (elements of \p size bytes).
  void alltoallv(void const *send, Alltoall const &x, void *recv, std::size_t size, cudaStream_t stream) {
    auto bytes = [size](std::vector<std::size_t> v) {
      for (auto &e : v)
        e *= size;
      return v;
    };
    auto const sc = bytes(x.send_counts), sd = bytes(x.send_displs), rc = bytes(x.recv_counts),
               rd = bytes(x.recv_displs);
    _comm.alltoallv(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), DataType::uint8, stream);
  }

  DeviceLayerCore const &_core;
  Communicator &_comm;
  SymmetricWindow &_window;
  RankDriver &_driver;
  std::vector<DispatchPlan> const &_plans;
  std::vector<BackwardExchange> _exchange; // the last backward's, per chunk
};

} // namespace

struct NcclMoeLayer::State : DeviceLayerCore {
  Communicator comm;
  int me = 0;
  RankDriver driver;
  std::unique_ptr<SymmetricWindow> window;
  std::vector<DispatchPlan> plans;
  std::unique_ptr<NcclTransport> transport;
  DeviceStats backward_stats;

  State(MoeConfig const &c, Communicator const &world_comm, ExpertWeights const &weights, DeviceOptions o)
      : DeviceLayerCore(consistent(c, world_comm), world_comm.size(), std::move(o), "tessel::moe::cuda::NcclMoeLayer"),
        comm(world_comm), me(world_comm.rank()), driver(*this, world_comm.rank()) {
    comm.require_same("CometParams", comet.hash());
    collective = &comm; // set_comet_params checks across ranks at once
    // The all-to-all counts come from the exchanged plans and match by construction; the communicator's per-call
    // count check (a host all-gather) would add a host round trip to every baseline all-to-all.
    comm.set_validation(false);
    require_peer_links(comm);
    auto &state = driver.state();
    window = std::make_unique<SymmetricWindow>(tessel::cuda::nccl_comm_of(comm), layout.bytes, state.stream.get());
    transport = std::make_unique<NcclTransport>(*this, comm, *window, driver, plans);
    driver.set_transport(*transport);
    // Every rank's flags are zero before any rank can signal into them.
    comm.barrier();
    load_weights(state, c, me, weights, timeout());
    upload_rank_group(state.stream.get());
    state.stream.synchronize(timeout());
  }

  // Peers read this rank's window (layer0's pulls, the reductions' slot tables) and store into it (combines) until
  // their own forward ends: the window is torn down only after every rank's device work is done (stream
  // synchronization, then a barrier). A failed rank or peer cannot be waited for: the window goes anyway.
  ~State() {
    try {
      driver.state().stream.synchronize(timeout());
      driver.state().comm.synchronize(timeout());
      comm.barrier();
    } catch (std::exception const &e) {
      std::fprintf(stderr, "%s on rank %d: tearing the symmetric window down without every rank (%s)\n", name.c_str(),
                   me, e.what());
    }
  }

  std::string context(char const *what, Schedule schedule) const {
    return tessel::Impl::concat("NcclMoeLayer::", what, " (", name_of(schedule), ") on rank ", me);
  }

  /// Every rank's plan: this rank's own, the others' block and slot counts (all the work lists need of them).
  void exchange_plans(DispatchPlan own, int chunks) {
    auto const mine = plan_summary(own);
    TESSEL_REQUIRE(mine.size() == plan_summary_words(config, chunks), "internal: plan summary of ", mine.size(),
                   " words");
    std::vector<std::int64_t> all(mine.size() * z(world));
    comm.host_allgather(mine.data(), all.data(), mine.size() * sizeof(std::int64_t));
    plans.assign(z(world), DispatchPlan{});
    for (int s = 0; s < world; ++s)
      plans[z(s)] = s == me ? std::move(own) : plan_from_summary(config, chunks, all.data() + z(s) * mine.size());
  }

  /// Every rank stops alike when the tokens of any hold NaN or infinity.
  void check_tokens(std::int64_t bad) {
    std::int64_t const mn = config.tokens * config.hidden, n = config.hidden;
    std::vector<std::int64_t> bads(z(world));
    comm.host_allgather(&bad, bads.data(), sizeof(bad));
    for (int r = 0; r < world; ++r)
      TESSEL_REQUIRE(bads[z(r)] >= mn, "NcclMoeLayer::forward: the tokens of rank ", r,
                     " contain NaN or infinity at row ", bads[z(r)] / n, ", column ", bads[z(r)] % n);
  }

  void forward(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out, Schedule schedule) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    driver.drop_forward();
    int const chunks = schedule == Schedule::pipelined ? pipeline_chunks : 1;
    check_tokens(driver.check_forward(tokens, out, chunks));
    comm.require_same("NcclMoeLayer::forward schedule", static_cast<std::uint64_t>(schedule));
    exchange_plans(driver.route(tokens, gate, chunks), chunks);
    ++epoch;
    stats = DeviceStats{};
    stats.schedule = schedule;
    stats.rows = driver.prepare_forward(plans, tokens, schedule, chunks);
    stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // One rank per GPU: the whole device's co-resident blocks; peers are ordered by the window's flags only.
    auto const grid = comet_grid(config, comet, 1);
    cudaStream_t const stream = driver.state().stream.get();
    start.record(stream);
    driver.pack();
    auto const grids = driver.run_forward(schedule, grid);
    std::uint64_t expected = 0; // NCCL's all-to-alls order the baselines' final sums
    if (schedule == Schedule::comet) {
      stats.comm_blocks = grid.comm_blocks;
      stats.grid0 = grids.first;
      stats.grid1 = grids.second;
      combine_expected += static_cast<std::uint64_t>(grid.comm_blocks);
      expected = combine_expected;
    }
    driver.final_sum(expected);
    stop.record(stream);
    driver.copy_out(out);
    driver.finish_forward(schedule, context("forward", schedule));
    stats.device_ms = Event::elapsed_ms(start, stop);
    driver.keep_forward(gate);
  }

  /// Checks the backward's arguments on every rank alike; returns {gate weight, gate bias} of the forward.
  std::pair<bool, bool> check_backward(ConstHostMatrix d_out, Schedule schedule, double aux) {
    TESSEL_REQUIRE(config.dtype == DataType::float32, "NcclMoeLayer::backward: float32 layers only (this one is ",
                   name_of(config.dtype), ")");
    driver.check_backward(d_out);
    TESSEL_REQUIRE(std::isfinite(aux) && aux >= 0.0,
                   "NcclMoeLayer::backward: aux_loss_coef must be finite and >= 0, got ", aux);
    // Every rank stops alike when any has no forward to differentiate (host all-gather: the NCCL communicator's
    // collectives take device memory).
    int const mine_ready = driver.has_forward() ? 1 : 0;
    std::vector<int> ready(z(world));
    comm.host_allgather(&mine_ready, ready.data(), sizeof(int));
    for (int r = 0; r < world; ++r)
      TESSEL_REQUIRE(ready[z(r)] == 1, "NcclMoeLayer::backward: no forward to differentiate on rank ", r,
                     " (call forward first; a forward that failed does not count)");
    comm.require_same("NcclMoeLayer::backward schedule", static_cast<std::uint64_t>(schedule));
    auto const &gate = driver.forward_gate();
    bool const gate_weight = gate.kind == GateInput::Kind::weight;
    bool const gate_bias = gate_weight && gate.bias.data() != nullptr;
    comm.require_same("NcclMoeLayer::backward gate kind", (gate_weight ? 1u : 0u) + (gate_bias ? 2u : 0u));
    return {gate_weight, gate_bias};
  }

  /// dL/dp of the load-balancing loss from the expert counts over all ranks.
  std::vector<double> aux_gradient_of_all(double aux) {
    auto const &per_expert = driver.routing().tokens_per_expert;
    std::vector<std::int64_t> mine(per_expert.begin(), per_expert.end());
    std::vector<std::int64_t> every(mine.size() * z(world));
    comm.host_allgather(mine.data(), every.data(), mine.size() * sizeof(std::int64_t));
    std::vector<double> counts(mine.size(), 0.0);
    for (std::size_t i = 0; i < every.size(); ++i)
      counts[i % mine.size()] += static_cast<double>(every[i]);
    return aux_gradient(config, counts, static_cast<double>(config.tokens) * world, aux);
  }

  void backward(ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule, double aux) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    auto const [gate_weight, gate_bias] = check_backward(d_out, schedule, aux);
    auto const aux_grad = aux_gradient_of_all(aux);
    WorkPlanner const planner(config, plans, comet);
    driver.prepare_backward(planner, d_out, aux_grad, /*row_lists=*/false);
    backward_stats = DeviceStats{};
    backward_stats.schedule = schedule;
    backward_stats.rows = driver.work().rows;
    backward_stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    cudaStream_t const stream = driver.state().stream.get();
    start.record(stream);
    driver.pack_backward();
    driver.run_backward(schedule);
    driver.owner_backward(gate_weight);
    stop.record(stream);
    std::vector<float> gate_partial;
    driver.finish_backward(grads, gate_bias, gate_partial, context("backward", schedule));
    backward_stats.device_ms = Event::elapsed_ms(start, stop);
    if (gate_weight) {
      // The gate is replicated: every rank gets the sum over the ranks (rank order) of their shares.
      auto const share = gate_share(gate_partial, grads.logits);
      std::vector<float> shares(share.size() * z(world));
      comm.host_allgather(share.data(), shares.data(), share.size() * sizeof(float));
      set_gate_gradients(shares, world, grads, gate_bias);
    }
  }
};

NcclMoeLayer::NcclMoeLayer(MoeConfig const &config, Communicator const &comm, ExpertWeights const &weights,
                           DeviceOptions options)
    : _state(std::make_unique<State>(config, comm, weights, std::move(options))) {
  attach(*_state);
}
NcclMoeLayer::~NcclMoeLayer() = default;
NcclMoeLayer::NcclMoeLayer(NcclMoeLayer &&) noexcept = default;
NcclMoeLayer &NcclMoeLayer::operator=(NcclMoeLayer &&) noexcept = default;

void NcclMoeLayer::forward(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out, Schedule schedule) {
  _state->forward(tokens, gate, out, schedule);
}
Routing const &NcclMoeLayer::routing() const { return _state->driver.routing(); }
DeviceStats const &NcclMoeLayer::stats() const { return _state->stats; }
DeviceStats const &NcclMoeLayer::backward_stats() const { return _state->backward_stats; }

void NcclMoeLayer::backward(ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule, double aux_loss_coef) {
  _state->backward(d_out, grads, schedule, aux_loss_coef);
}

} // namespace tessel::moe::cuda

#endif

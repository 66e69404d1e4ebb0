// The moe device layer of W virtual ranks in one process: one RankDriver per rank, one stream and one symmetric
// allocation each, over a transport of in-process peers (device-to-device copies between the ranks' allocations,
// cross-rank events). Every step runs on every rank before the next, so each event is recorded before it is waited
// for.
#include <tessel/moe/cuda/VirtualRanksLayer.hpp>

#include "RankDriver.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/cuda/Cuda.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

namespace tessel::moe::cuda {

using namespace Impl;

bool device_available() { return tessel::cuda::device_count() > 0; }

namespace {

std::size_t z(std::int64_t i) { return static_cast<std::size_t>(i); }

// The device must be visible before the core creates its events.
MoeConfig const &on_visible_device(MoeConfig const &config) {
  TESSEL_REQUIRE(device_available(), "tessel::moe::cuda::VirtualRanksLayer: no CUDA device is visible");
  return config;
}

using Ranks = std::vector<std::unique_ptr<RankDriver>>;

/// The ranks are in this process: a message is a device-to-device copy between their allocations, a wait for a
/// peer a wait on its event.
class PeerTransport final : public Transport {
public:
  PeerTransport(DeviceLayerCore const &core, Ranks &ranks, int me, char *const *peer_table)
      : _core(core), _ranks(ranks), _me(me), _peer_table(peer_table) {}

  char *local() const override { return rank(_me).state().sym.data(); }
  char *const *peer_table() const override { return _peer_table; }
  int sharing() const override { return _core.world; }

  void wait_packed(cudaStream_t stream) override {
    for (auto &r : _ranks)
      r->state().packed.wait_on(stream);
  }
  void dispatch(RankWork const &work, int ch, cudaStream_t stream) override {
    for (int source = 0; source < _core.world; ++source)
      dispatch_copy(work, source, ch, stream);
  }
  void combine(RankWork const &work, int ch, cudaStream_t stream) override {
    for (int source = 0; source < _core.world; ++source)
      combine_copy(work, source, ch, stream);
  }
  void wait_combined(cudaStream_t stream) override {
    for (auto &r : _ranks)
      r->state().combined.wait_on(stream);
  }

  bool tile_messages() const override { return true; }
  void wait_gradients_packed(cudaStream_t stream) override {
    for (auto &r : _ranks)
      r->backward_state().packed.wait_on(stream);
  }
  void gradients_in(int ch, int source, cudaStream_t stream) override;
  void replies_out(int ch, int source, cudaStream_t stream) override;
  void wait_replied(cudaStream_t stream) override {
    for (auto &r : _ranks)
      r->backward_state().replied.wait_on(stream);
  }
  void prepare_backward(BackwardWork const &) override {}

  void synchronize(Stream const &stream) override { stream.synchronize(_core.timeout()); }

private:
  RankDriver &rank(int r) const { return *_ranks[z(r)]; }
  void dispatch_copy(RankWork const &work, int source, int ch, cudaStream_t stream);
  void combine_copy(RankWork const &work, int source, int ch, cudaStream_t stream);

  DeviceLayerCore const &_core;
  Ranks &_ranks;
  int _me = 0;
  char *const *_peer_table = nullptr;
};

/// Copies the rows of (source, chunk) from the source's send rows into this rank's x_recv.
void PeerTransport::dispatch_copy(RankWork const &work, int source, int ch, cudaStream_t stream) {
  auto const &b = work.blocks[z(source)][z(ch)];
  if (b.rows == 0)
    return;
  std::size_t const row_bytes = z(_core.config.hidden) * _core.element_bytes;
  char const *src = rank(source).state().sym.data() + _core.layout.send_rows + z(b.send_row) * row_bytes;
  char *dst = rank(_me).state().x_recv.data() + z(work.row[z(source)][z(ch)]) * row_bytes;
  TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, z(b.rows) * row_bytes, cudaMemcpyDeviceToDevice, stream));
}

/// Copies this rank's reduced rows of (source, chunk) into the source's combine buffer (region `_me`).
void PeerTransport::combine_copy(RankWork const &work, int source, int ch, cudaStream_t stream) {
  auto const &b = work.blocks[z(source)][z(ch)];
  if (b.slots == 0)
    return;
  std::int64_t const m = _core.config.tokens, n = _core.config.hidden;
  float const *src = rank(_me).state().combine_send.data() + (source * m + b.slot_begin) * n;
  char *dst = rank(source).state().sym.data() + _core.layout.combine + z((_me * m + b.slot_begin) * n) * sizeof(float);
  TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, z(b.slots * n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

void PeerTransport::gradients_in(int ch, int source, cudaStream_t stream) {
  auto const &b = rank(_me).work().blocks[z(source)][z(ch)];
  if (b.slots == 0)
    return;
  std::int64_t const n = _core.config.hidden;
  auto const group = z(_core.config.group_of_rank(_me));
  float const *src =
      rank(source).backward_state().g_out.data() + (rank(source).backward_lists().out_off[group] + b.slot_begin) * n;
  float *dst =
      rank(_me).backward_state().g_in.data() + (rank(_me).backward_lists().in_off[z(source)] + b.slot_begin) * n;
  TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, z(b.slots * n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

void PeerTransport::replies_out(int ch, int source, cudaStream_t stream) {
  auto const &work = rank(_me).work();
  combine_copy(work, source, ch, stream);
  auto const &b = work.blocks[z(source)][z(ch)];
  if (b.rows == 0)
    return;
  std::int64_t const row0 = work.row[z(source)][z(ch)];
  std::int64_t const stride = _core.config.tokens * _core.config.topk;
  TESSEL_CUDA_CHECK(cudaMemcpyAsync(rank(source).backward_state().dw_recv.data() + _me * stride + b.send_row,
                                    rank(_me).backward_state().dw.data() + row0, z(b.rows) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream));
}

} // namespace

struct VirtualRanksLayer::State : DeviceLayerCore {
  Ranks ranks;
  std::vector<std::unique_ptr<PeerTransport>> transports;
  DeviceBuffer<char *> peer_base;
  std::vector<DispatchPlan> plans;
  DeviceStats backward_stats;

  State(MoeConfig const &c, std::vector<ExpertWeights> const &weights, DeviceOptions o)
      : DeviceLayerCore(on_visible_device(c), c.world(), std::move(o), "tessel::moe::cuda::VirtualRanksLayer") {
    TESSEL_REQUIRE(static_cast<int>(weights.size()) == world, "tessel::moe::cuda::VirtualRanksLayer: ", weights.size(),
                   " weight shards for ", world, " ranks (EP x TP)");
    std::vector<char *> bases;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(std::make_unique<RankDriver>(*this, r));
      auto &state = ranks.back()->state();
      state.sym = DeviceBuffer<char>(layout.bytes, "Tessel::moe::cuda::symmetric");
      // Flags start at 0 (epochs and counts only grow); the rest is written before it is read.
      TESSEL_CUDA_CHECK(cudaMemsetAsync(state.sym.data(), 0, layout.bytes, state.stream.get()));
      bases.push_back(state.sym.data());
      load_weights(state, c, r, weights[z(r)], timeout());
    }
    cudaStream_t const stream = rank(0).state().stream.get();
    peer_base = DeviceBuffer<char *>(z(world), "Tessel::moe::cuda::peer_base");
    peer_base.copy_from_host(bases.data(), bases.size(), stream);
    for (int r = 0; r < world; ++r) {
      transports.push_back(std::make_unique<PeerTransport>(*this, ranks, r, peer_base.data()));
      rank(r).set_transport(*transports.back());
    }
    upload_rank_group(stream);
    rank(0).state().stream.synchronize(timeout());
  }

  RankDriver &rank(int r) const { return *ranks[z(r)]; }
  std::string context(char const *what, Schedule schedule, int r) const {
    return tessel::Impl::concat("VirtualRanksLayer::", what, " (", name_of(schedule), ") on virtual rank ", r);
  }

  // The timed region: every rank's stream starts after `start` on rank 0's stream, rank 0's ends after every
  // rank's work.
  void start_timing() {
    start.record(rank(0).state().stream.get());
    for (int r = 1; r < world; ++r)
      start.wait_on(rank(r).state().stream.get());
  }
  void stop_timing() {
    for (int r = 1; r < world; ++r) {
      auto &state = rank(r).state();
      state.computed.record(state.stream.get());
      state.computed.wait_on(rank(0).state().stream.get());
    }
    stop.record(rank(0).state().stream.get());
  }

  void check_forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
                     std::vector<HostMatrix> const &out, int chunks) {
    TESSEL_REQUIRE(static_cast<int>(tokens.size()) == world && static_cast<int>(gates.size()) == world &&
                       static_cast<int>(out.size()) == world,
                   "VirtualRanksLayer::forward: give tokens, gates and outputs of all ", world, " ranks (got ",
                   tokens.size(), ", ", gates.size(), ", ", out.size(), ")");
    std::int64_t const m = config.tokens, n = config.hidden;
    for (int r = 0; r < world; ++r) {
      auto const bad = rank(r).check_forward(tokens[z(r)], out[z(r)], chunks);
      TESSEL_REQUIRE(bad >= m * n, "VirtualRanksLayer::forward: the tokens of rank ", r,
                     " contain NaN or infinity at row ", bad / n, ", column ", bad % n);
    }
  }

  void forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
               std::vector<HostMatrix> const &out, Schedule schedule) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    for (auto &r : ranks)
      r->drop_forward();
    int const chunks = schedule == Schedule::pipelined ? pipeline_chunks : 1;
    check_forward(tokens, gates, out, chunks);
    plans.resize(z(world));
    for (int r = 0; r < world; ++r)
      plans[z(r)] = rank(r).route(tokens[z(r)], gates[z(r)], chunks);
    ++epoch;
    stats = DeviceStats{};
    stats.schedule = schedule;
    for (int r = 0; r < world; ++r)
      stats.rows += rank(r).prepare_forward(plans, tokens[z(r)], schedule, chunks);
    stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    auto const grid = comet_grid(config, comet, world);
    start_timing();
    for (auto &r : ranks)
      r->pack();
    for (auto &r : ranks) {
      auto const grids = r->run_forward(schedule, grid);
      stats.grid0 = std::max(stats.grid0, grids.first);
      stats.grid1 = std::max(stats.grid1, grids.second);
    }
    std::uint64_t expected = 0; // the events alone order the baselines' final sums
    if (schedule == Schedule::comet) {
      stats.comm_blocks = grid.comm_blocks;
      combine_expected += static_cast<std::uint64_t>(grid.comm_blocks);
      expected = combine_expected;
    }
    for (auto &r : ranks)
      r->final_sum(expected);
    stop_timing();
    for (int r = 0; r < world; ++r)
      rank(r).copy_out(out[z(r)]);
    for (int r = 0; r < world; ++r)
      rank(r).finish_forward(schedule, context("forward", schedule, r));
    stats.device_ms = Event::elapsed_ms(start, stop);
    for (int r = 0; r < world; ++r)
      rank(r).keep_forward(gates[z(r)]);
  }

  /// Checks the backward's arguments; returns whether the forward's gate was a weight.
  bool check_backward(std::vector<ConstHostMatrix> const &d_out, double aux) {
    TESSEL_REQUIRE(config.dtype == DataType::float32, "VirtualRanksLayer::backward: float32 layers only (this one is ",
                   name_of(config.dtype), ")");
    TESSEL_REQUIRE(rank(0).has_forward(), "VirtualRanksLayer::backward: no forward to differentiate (call forward "
                                          "first; a forward that failed does not count)");
    TESSEL_REQUIRE(static_cast<int>(d_out.size()) == world,
                   "VirtualRanksLayer::backward: give the output gradients of all ", world, " ranks (got ",
                   d_out.size(), ")");
    TESSEL_REQUIRE(std::isfinite(aux) && aux >= 0.0,
                   "VirtualRanksLayer::backward: aux_loss_coef must be finite and >= 0, got ", aux);
    for (int r = 0; r < world; ++r)
      rank(r).check_backward(d_out[z(r)]);
    bool const gate_weight = rank(0).forward_gate().kind == GateInput::Kind::weight;
    for (auto &r : ranks)
      TESSEL_REQUIRE(
          (r->forward_gate().kind == GateInput::Kind::weight) == gate_weight,
          "VirtualRanksLayer::backward: the forward's ranks were given gates of different kinds (logits and "
          "a weight); the gate weight's gradient is summed over the ranks, so give every rank the same kind");
    return gate_weight;
  }

  void backward(std::vector<ConstHostMatrix> const &d_out, std::vector<MoeGradients> &grads, Schedule schedule,
                double aux) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    bool const gate_weight = check_backward(d_out, aux);
    bool const gate_bias = gate_weight && rank(0).forward_gate().bias.data() != nullptr;
    grads.resize(z(world));
    std::vector<double> counts(z(config.experts), 0.0);
    for (auto &r : ranks)
      for (std::size_t e = 0; e < counts.size(); ++e)
        counts[e] += static_cast<double>(r->routing().tokens_per_expert[e]);
    auto const aux_grad = aux_gradient(config, counts, static_cast<double>(config.tokens) * world, aux);

    WorkPlanner const planner(config, plans, comet);
    backward_stats = DeviceStats{};
    backward_stats.schedule = schedule;
    for (int r = 0; r < world; ++r) {
      backward_stats.rows += rank(r).work().rows;
      rank(r).prepare_backward(planner, d_out[z(r)], aux_grad, /*row_lists=*/true);
    }
    backward_stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    start_timing();
    for (auto &r : ranks)
      r->pack_backward();
    for (auto &r : ranks)
      r->run_backward(schedule);
    for (auto &r : ranks)
      r->owner_backward(gate_weight);
    stop_timing();
    std::vector<std::vector<float>> gate_partial(z(world));
    for (int r = 0; r < world; ++r)
      rank(r).finish_backward(grads[z(r)], gate_bias, gate_partial[z(r)], context("backward", schedule, r));
    backward_stats.device_ms = Event::elapsed_ms(start, stop);
    if (gate_weight) {
      // The gate is replicated: its gradients are summed over the ranks (rank order); every rank gets the sum.
      std::vector<float> shares;
      for (int r = 0; r < world; ++r) {
        auto const share = gate_share(gate_partial[z(r)], grads[z(r)].logits);
        shares.insert(shares.end(), share.begin(), share.end());
      }
      for (int r = 0; r < world; ++r)
        set_gate_gradients(shares, world, grads[z(r)], gate_bias);
    }
  }
};

VirtualRanksLayer::VirtualRanksLayer(MoeConfig const &config, std::vector<ExpertWeights> const &weights,
                                     DeviceOptions options)
    : _state(std::make_unique<State>(config, weights, std::move(options))) {
  attach(*_state);
}
VirtualRanksLayer::~VirtualRanksLayer() = default;
VirtualRanksLayer::VirtualRanksLayer(VirtualRanksLayer &&) noexcept = default;
VirtualRanksLayer &VirtualRanksLayer::operator=(VirtualRanksLayer &&) noexcept = default;

void VirtualRanksLayer::forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
                                std::vector<HostMatrix> const &out, Schedule schedule) {
  _state->forward(tokens, gates, out, schedule);
}

int VirtualRanksLayer::world() const { return _state->world; }
Routing const &VirtualRanksLayer::routing(int rank) const {
  TESSEL_REQUIRE(rank >= 0 && rank < _state->world, "VirtualRanksLayer::routing: rank ", rank, " out of [0, ",
                 _state->world, ")");
  return _state->rank(rank).routing();
}
DeviceStats const &VirtualRanksLayer::stats() const { return _state->stats; }
DeviceStats const &VirtualRanksLayer::backward_stats() const { return _state->backward_stats; }

void VirtualRanksLayer::backward(std::vector<ConstHostMatrix> const &d_out, std::vector<MoeGradients> &grads,
                                 Schedule schedule, double aux_loss_coef) {
  _state->backward(d_out, grads, schedule, aux_loss_coef);
}

} // namespace tessel::moe::cuda

// The moe device layer's host driver: routing and plans on the host, one stream and one symmetric allocation per
// virtual rank, the three schedules as stream-ordered work with cross-rank events, cuBLAS for the baselines' GEMMs
// and the fused COMET kernels (Comet.cu) for comet.
#include <tessel/moe/cuda/VirtualRanksLayer.hpp>

#include "Backward.hpp"
#include "Device.hpp"
#include "DeviceLayerCore.hpp"
#include "Rank.hpp"
#include "WorkPlan.hpp"

#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/cuda/Cuda.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

namespace tessel::moe::cuda {

using namespace Impl;

bool device_available() { return tessel::cuda::device_count() > 0; }

namespace {

// The device must be visible before the core creates its events.
MoeConfig const &on_visible_device(MoeConfig const &config) {
  TESSEL_REQUIRE(device_available(), "tessel::moe::cuda::VirtualRanksLayer: no CUDA device is visible");
  return config;
}

} // namespace

struct VirtualRanksLayer::State : DeviceLayerCore {
  std::vector<RankState> ranks;
  DeviceBuffer<char *> peer_base;
  std::vector<Routing> routings;
  std::vector<DispatchPlan> plans;
  // What the backward needs from the last forward (valid once it completed).
  bool have_forward = false;
  int forward_chunks = 1;
  std::vector<RankWork> forward_work;
  std::vector<GateInput> forward_gates;
  std::vector<std::unique_ptr<RankBackward>> bwd;
  DeviceStats backward_stats;

  State(MoeConfig const &c, std::vector<ExpertWeights> const &weights, DeviceOptions o)
      : DeviceLayerCore(on_visible_device(c), c.world(), std::move(o), "tessel::moe::cuda::VirtualRanksLayer") {
    TESSEL_REQUIRE(static_cast<int>(weights.size()) == world, "tessel::moe::cuda::VirtualRanksLayer: ", weights.size(),
                   " weight shards for ", world, " ranks (EP x TP)");
    ranks.resize(static_cast<std::size_t>(world));
    std::vector<char *> bases(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.sym = DeviceBuffer<char>(layout.bytes, "Tessel::moe::cuda::symmetric");
      // Flags start at 0 (epochs and counts only grow); the rest is written before it is read.
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rs.sym.data(), 0, layout.bytes, rs.stream.get()));
      bases[static_cast<std::size_t>(r)] = rs.sym.data();
      load_weights(rs, c, r, weights[static_cast<std::size_t>(r)], timeout());
    }
    peer_base = DeviceBuffer<char *>(static_cast<std::size_t>(world), "Tessel::moe::cuda::peer_base");
    peer_base.copy_from_host(bases.data(), bases.size(), ranks[0].stream.get());
    upload_rank_group(ranks[0].stream.get());
    ranks[0].stream.synchronize(timeout());
    routings.resize(static_cast<std::size_t>(world));
  }

  RankView view(int r) const {
    return DeviceLayerCore::view(r, peer_base.data(), ranks[static_cast<std::size_t>(r)].control.data());
  }

  // ------------------------------------------------------------------------------------------------------------
  // Device steps
  // ------------------------------------------------------------------------------------------------------------

  /// Copies the rows of (source, chunk) from the source's send rows (a peer pointer) into x_recv on \p stream.
  void dispatch_copy(RankState &rs, RankWork const &w, int s, int ch, cudaStream_t stream) {
    auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    if (b.rows == 0)
      return;
    std::size_t const row_bytes = static_cast<std::size_t>(config.hidden) * es;
    char const *src = ranks[static_cast<std::size_t>(s)].sym.data() + layout.send_rows +
                      static_cast<std::size_t>(b.send_row) * row_bytes;
    char *dst = rs.x_recv.data() +
                static_cast<std::size_t>(w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)]) * row_bytes;
    TESSEL_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<std::size_t>(b.rows) * row_bytes, cudaMemcpyDeviceToDevice, stream));
  }

  /// Copies rank \p d's reduced rows of (source, chunk) into the source's combine buffer (region d).
  void combine_copy(int d, RankWork const &w, int s, int ch, cudaStream_t stream) {
    auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    if (b.slots == 0)
      return;
    std::int64_t const m = config.tokens, n = config.hidden;
    float const *src = ranks[static_cast<std::size_t>(d)].combine_send.data() + (s * m + b.slot_begin) * n;
    char *dst = ranks[static_cast<std::size_t>(s)].sym.data() + layout.combine +
                static_cast<std::size_t>((d * m + b.slot_begin) * n) * sizeof(float);
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(b.slots * n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
  }

  void wait_all(cudaStream_t stream, Event RankState::*event) {
    for (auto &rs : ranks)
      (rs.*event).wait_on(stream);
  }

  // ------------------------------------------------------------------------------------------------------------
  // forward
  // ------------------------------------------------------------------------------------------------------------

  void forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
               std::vector<HostMatrix> const &out, Schedule schedule) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    have_forward = false;
    std::int64_t const m = config.tokens, n = config.hidden;
    TESSEL_REQUIRE(static_cast<int>(tokens.size()) == world && static_cast<int>(gates.size()) == world &&
                       static_cast<int>(out.size()) == world,
                   "VirtualRanksLayer::forward: give tokens, gates and outputs of all ", world, " ranks (got ",
                   tokens.size(), ", ", gates.size(), ", ", out.size(), ")");
    for (int r = 0; r < world; ++r) {
      auto const &x = tokens[static_cast<std::size_t>(r)];
      auto const &o = out[static_cast<std::size_t>(r)];
      TESSEL_REQUIRE(x.extent(0) == static_cast<std::size_t>(m) && x.extent(1) == static_cast<std::size_t>(n),
                     "VirtualRanksLayer::forward: rank ", r, "'s tokens are ", x.extent(0), " x ", x.extent(1),
                     ", expected M x N = ", m, " x ", n);
      TESSEL_REQUIRE(o.extent(0) == static_cast<std::size_t>(m) && o.extent(1) == static_cast<std::size_t>(n),
                     "VirtualRanksLayer::forward: rank ", r, "'s output is ", o.extent(0), " x ", o.extent(1),
                     ", expected M x N = ", m, " x ", n);
      auto const bad = first_non_finite(x.data(), static_cast<std::size_t>(m * n));
      TESSEL_REQUIRE(bad >= static_cast<std::size_t>(m * n), "VirtualRanksLayer::forward: the tokens of rank ", r,
                     " contain NaN or infinity at row ", bad / static_cast<std::size_t>(n), ", column ",
                     bad % static_cast<std::size_t>(n));
    }
    int const chunks = schedule == Schedule::pipelined ? pipeline_chunks : 1;
    TESSEL_REQUIRE(chunks <= std::max<std::int64_t>(m, 1), "VirtualRanksLayer: ", chunks,
                   " pipeline chunks for M = ", m, " tokens");
    HostExecSpace space;
    plans.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      route(space, host_config, tokens[static_cast<std::size_t>(r)], gates[static_cast<std::size_t>(r)],
            routings[static_cast<std::size_t>(r)]);
      plans[static_cast<std::size_t>(r)] =
          make_dispatch_plan(host_config, routings[static_cast<std::size_t>(r)], chunks);
    }
    ++epoch;

    // Every source publishes its slot table in its symmetric allocation; every destination gets its work lists.
    WorkPlanner const planner(config, plans, comet);
    std::vector<std::vector<std::int64_t>> table_bases(static_cast<std::size_t>(world));
    std::vector<RankWork> work;
    for (int s = 0; s < world; ++s) {
      auto &rs = ranks[static_cast<std::size_t>(s)];
      std::vector<std::int32_t> rows;
      std::vector<float> weights;
      planner.slot_table(s, rows, weights, table_bases[static_cast<std::size_t>(s)]);
      if (!rows.empty()) {
        TESSEL_CUDA_CHECK(cudaMemcpyAsync(rs.sym.data() + layout.slot_rows, rows.data(),
                                          rows.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, rs.stream.get()));
        TESSEL_CUDA_CHECK(cudaMemcpyAsync(rs.sym.data() + layout.slot_weight, weights.data(),
                                          weights.size() * sizeof(float), cudaMemcpyHostToDevice, rs.stream.get()));
      }
      auto const &plan = plans[static_cast<std::size_t>(s)];
      upload(rs.row_token, plan.row_token, "Tessel::moe::cuda::row_token", rs.stream.get());
      upload(rs.token_slot, plan.token_slot, "Tessel::moe::cuda::token_slot", rs.stream.get());
      ensure(rs.tokens, static_cast<std::size_t>(m * n), "Tessel::moe::cuda::tokens");
      rs.tokens.copy_from_host(tokens[static_cast<std::size_t>(s)].data(), static_cast<std::size_t>(m * n),
                               rs.stream.get());
      ensure(rs.out, static_cast<std::size_t>(m * n), "Tessel::moe::cuda::out");
      // Host vectors die at the end of this iteration: the copies must be done by then.
      rs.stream.synchronize(timeout());
    }
    stats = DeviceStats{};
    stats.schedule = schedule;
    for (int d = 0; d < world; ++d) {
      work.push_back(planner.work_of(d, chunks, table_bases));
      auto &w = work.back();
      auto &rs = ranks[static_cast<std::size_t>(d)];
      stats.rows += w.rows;
      ensure_compute(rs, config, w.rows, schedule != Schedule::comet);
      if (schedule == Schedule::comet)
        planner.comet_work(d, w);
      else
        ensure(rs.combine_send, static_cast<std::size_t>(world) * static_cast<std::size_t>(m * n),
               "Tessel::moe::cuda::combine_send");
      upload_work(rs, config, w, schedule == Schedule::comet);
      poison(rs, rs.sym.data());
      rs.stream.synchronize(timeout());
    }
    stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Timed region: every rank's stream starts after `start` on rank 0's stream.
    start.record(ranks[0].stream.get());
    for (int r = 1; r < world; ++r)
      start.wait_on(ranks[static_cast<std::size_t>(r)].stream.get());
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      auto const v = view(r);
      TESSEL_CUDA_CHECK(pack_rows(rs.stream.get(), config.dtype, rs.tokens.data(), rs.row_token.data(),
                                  plans[static_cast<std::size_t>(r)].rows(), n, rs.sym.data() + layout.send_rows));
      TESSEL_CUDA_CHECK(signal_packed(rs.stream.get(), v, epoch));
      rs.packed.record(rs.stream.get());
    }
    switch (schedule) {
    case Schedule::sequential:
      run_sequential(work);
      break;
    case Schedule::pipelined:
      run_pipelined(work, chunks);
      break;
    case Schedule::comet:
      run_comet(work);
      break;
    }
    for (int r = 1; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.computed.record(rs.stream.get());
      rs.computed.wait_on(ranks[0].stream.get());
    }
    stop.record(ranks[0].stream.get());
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.out.copy_to_host(out[static_cast<std::size_t>(r)].data(), static_cast<std::size_t>(m * n), rs.stream.get());
    }
    for (int r = 0; r < world; ++r)
      synchronize_rank(r, schedule);
    stats.device_ms = Event::elapsed_ms(start, stop);
    forward_work = std::move(work);
    forward_gates = gates;
    forward_chunks = chunks;
    have_forward = true;
  }

  void synchronize_rank(int r, Schedule schedule) {
    auto &rs = ranks[static_cast<std::size_t>(r)];
    auto const context =
        tessel::Impl::concat("VirtualRanksLayer::forward (", name_of(schedule), ") on virtual rank ", r);
    host_wait([&] {
      try {
        rs.stream.synchronize(timeout());
        rs.comm.synchronize(timeout());
      } catch (TimeoutError const &e) {
        throw TimeoutError(tessel::Impl::concat(context, ": ", e.what()), r);
      }
    });
    if (schedule == Schedule::comet)
      check_device(rs, rs.sym.data(), context);
  }

  // sequential: dispatch copies of every source -> GEMM0 -> activation -> GEMM1 -> top-k reduce -> combine copies
  // -> (all ranks' combines) -> final sum.
  void run_sequential(std::vector<RankWork> const &work) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto const &w = work[static_cast<std::size_t>(d)];
      cudaStream_t const s = rs.stream.get();
      wait_all(s, &RankState::packed);
      for (int src = 0; src < world; ++src)
        dispatch_copy(rs, w, src, 0, s);
      chunk_ffn(rs, config, w, 0);
      TESSEL_CUDA_CHECK(topk_reduce(s, view(d), rs.y.data(), static_cast<int>(w.chunk_reduces[0].size()),
                                    rs.chunk_reduces.data(), rs.combine_send.data()));
      for (int src = 0; src < world; ++src)
        combine_copy(d, w, src, 0, s);
      rs.combined.record(s);
    }
    finish(0);
  }

  // pipelined: a copy stream moves chunk c + 1's rows while the compute stream runs chunk c; each chunk's combine
  // leaves as soon as it is reduced (Tutel's order: all dispatches first, then the combines).
  void run_pipelined(std::vector<RankWork> const &work, int chunks) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto const &w = work[static_cast<std::size_t>(d)];
      if (static_cast<int>(rs.chunk_in.size()) < chunks) {
        rs.chunk_in.resize(static_cast<std::size_t>(chunks));
        rs.chunk_out.resize(static_cast<std::size_t>(chunks));
      }
      cudaStream_t const q = rs.comm.get();
      wait_all(q, &RankState::packed);
      for (int ch = 0; ch < chunks; ++ch) {
        for (int src = 0; src < world; ++src)
          dispatch_copy(rs, w, src, ch, q);
        rs.chunk_in[static_cast<std::size_t>(ch)].record(q);
      }
      pipelined_compute(rs, config, w, view(d), chunks);
      for (int ch = 0; ch < chunks; ++ch) {
        rs.chunk_out[static_cast<std::size_t>(ch)].wait_on(q);
        for (int src = 0; src < world; ++src)
          combine_copy(d, w, src, ch, q);
      }
      rs.combined.record(q);
    }
    finish(0);
  }

  // Every rank's final sum after every rank's combine stores (\p expected: the combine-flag count to wait for on
  // the device as well; 0: the events alone order it).
  void finish(std::uint64_t expected) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      wait_all(rs.stream.get(), &RankState::combined);
      TESSEL_CUDA_CHECK(final_sum(rs.stream.get(), view(d), rs.token_slot.data(), rank_group_device.data(), expected,
                                  waiting_blocks(world), rs.out.data()));
    }
  }

  // comet: fused layer0 (pull + grouped GEMM + activation) and fused layer1 (N-split GEMM + top-k reduce + stores
  // to the owners) per rank, then the final sum once every rank's communication blocks have signalled.
  void run_comet(std::vector<RankWork> const &work) {
    auto const grid = comet_grid(config, comet, world);
    stats.comm_blocks = grid.comm_blocks;
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      // In one process, layer0's pulls start after every source has packed (stream order), so no block ever spins
      // on a kernel that may not be resident; across GPUs the packed flags alone order them.
      wait_all(rs.stream.get(), &RankState::packed);
      auto const grids =
          launch_comet(rs, config, work[static_cast<std::size_t>(d)], view(d), grid, comet.n_splits, epoch);
      rs.combined.record(rs.stream.get());
      stats.grid0 = std::max(stats.grid0, grids.first);
      stats.grid1 = std::max(stats.grid1, grids.second);
    }
    combine_expected += static_cast<std::uint64_t>(grid.comm_blocks);
    finish(combine_expected);
  }

  // ------------------------------------------------------------------------------------------------------------
  // backward (float32): the forward's messages reversed, as the host's BackwardSchedule.cpp. Each owner packs its
  // output gradient per slot of every group; each expert side copies every source's slots of its group (a tile is
  // one (source, chunk) block), gathers them per row, and per (source, chunk, expert) recomputes GEMM0, computes
  // q = g W1^T, the activation's backward and dx = dpre W0^T (cuBLAS + Backward.cu), sums dx per slot and copies
  // it back into the owner's combine region with the rows' combine-weight gradients; the owner adds the ranks'
  // token gradients in rank order (the forward's final sum) and runs the gate's backward. dW1 += (w act)^T g and
  // dW0 += x^T dpre need nothing from another rank.
  // ------------------------------------------------------------------------------------------------------------

  RankBackward &rb(int r) { return *bwd[static_cast<std::size_t>(r)]; }

  /// Source \p s's output-gradient slots of (s, ch) for rank \p d's group into d's g_in.
  void grad_copy_in(int d, std::vector<BackwardWork> const &bw, int s, int ch, cudaStream_t stream) {
    auto const &b =
        forward_work[static_cast<std::size_t>(d)].blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    if (b.slots == 0)
      return;
    std::int64_t const n = config.hidden;
    auto const g = static_cast<std::size_t>(config.group_of_rank(d));
    float const *src = rb(s).g_out.data() + (bw[static_cast<std::size_t>(s)].out_off[g] + b.slot_begin) * n;
    float *dst =
        rb(d).g_in.data() + (bw[static_cast<std::size_t>(d)].in_off[static_cast<std::size_t>(s)] + b.slot_begin) * n;
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(b.slots * n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
  }

  void grad_tile(int d, std::vector<BackwardWork> const &bw, int s, int ch) {
    backward_tile(ranks[static_cast<std::size_t>(d)], rb(d), config, view(d), forward_work[static_cast<std::size_t>(d)],
                  bw[static_cast<std::size_t>(d)], s, ch);
  }

  void grad_weights(int d, int s, int ch, cublasHandle_t handle) {
    backward_weights(ranks[static_cast<std::size_t>(d)], rb(d), config, forward_work[static_cast<std::size_t>(d)], s,
                     ch, handle);
  }

  /// Rank \p d's replies of (source s, chunk ch): the token gradients per slot into s's combine region d, and the
  /// rows' combine-weight gradients into s's dw_recv (row d, the rows of s's plan).
  void grad_reply(int d, int s, int ch, cudaStream_t stream) {
    auto const &w = forward_work[static_cast<std::size_t>(d)];
    combine_copy(d, w, s, ch, stream);
    auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    if (b.rows == 0)
      return;
    std::int64_t const row0 = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    std::int64_t const stride = config.tokens * config.topk;
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(rb(s).dw_recv.data() + d * stride + b.send_row, rb(d).dw.data() + row0,
                                      static_cast<std::size_t>(b.rows) * sizeof(float), cudaMemcpyDeviceToDevice,
                                      stream));
  }

  void backward(std::vector<ConstHostMatrix> const &d_out, std::vector<MoeGradients> &grads, Schedule schedule,
                double aux) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    TESSEL_REQUIRE(config.dtype == DataType::float32, "VirtualRanksLayer::backward: float32 layers only (this one is ",
                   name_of(config.dtype), ")");
    TESSEL_REQUIRE(have_forward, "VirtualRanksLayer::backward: no forward to differentiate (call forward first; a "
                                 "forward that failed does not count)");
    TESSEL_REQUIRE(static_cast<int>(d_out.size()) == world,
                   "VirtualRanksLayer::backward: give the output gradients of all ", world, " ranks (got ",
                   d_out.size(), ")");
    TESSEL_REQUIRE(std::isfinite(aux) && aux >= 0.0,
                   "VirtualRanksLayer::backward: aux_loss_coef must be finite and >= 0, got ", aux);
    std::int64_t const m = config.tokens, n = config.hidden, e_all = config.experts;
    for (int r = 0; r < world; ++r) {
      auto const &g = d_out[static_cast<std::size_t>(r)];
      TESSEL_REQUIRE(g.extent(0) == static_cast<std::size_t>(m) && g.extent(1) == static_cast<std::size_t>(n),
                     "VirtualRanksLayer::backward: rank ", r, "'s output gradient is ", g.extent(0), " x ", g.extent(1),
                     ", expected M x N = ", m, " x ", n);
    }
    bool const gate_weight = forward_gates[0].kind == GateInput::Kind::weight;
    for (auto const &gate : forward_gates)
      TESSEL_REQUIRE(
          (gate.kind == GateInput::Kind::weight) == gate_weight,
          "VirtualRanksLayer::backward: the forward's ranks were given gates of different kinds (logits and "
          "a weight); the gate weight's gradient is summed over the ranks, so give every rank the same kind");
    grads.resize(static_cast<std::size_t>(world));
    while (static_cast<int>(bwd.size()) < world)
      bwd.push_back(std::make_unique<RankBackward>());
    int const chunks = forward_chunks;

    std::vector<double> counts(static_cast<std::size_t>(e_all), 0.0);
    for (auto const &routing : routings)
      for (std::size_t e = 0; e < counts.size(); ++e)
        counts[e] += static_cast<double>(routing.tokens_per_expert[e]);
    auto const aux_grad = aux_gradient(config, counts, static_cast<double>(m) * world, aux);

    WorkPlanner const planner(config, plans, comet);
    std::vector<BackwardWork> bw;
    backward_stats = DeviceStats{};
    backward_stats.schedule = schedule;
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      auto &b = rb(r);
      auto const &w = forward_work[static_cast<std::size_t>(r)];
      bw.push_back(planner.backward_work(r, w, routings[static_cast<std::size_t>(r)].experts));
      backward_stats.rows += w.rows;
      BackwardInputs in;
      in.d_out = d_out[static_cast<std::size_t>(r)];
      in.routing = &routings[static_cast<std::size_t>(r)];
      in.lists = &bw.back();
      in.work = &w;
      in.aux = &aux_grad;
      if (gate_weight)
        in.gate_weight = forward_gates[static_cast<std::size_t>(r)].weight;
      in.poison = options.debug.poison_buffers;
      in.sym_base = rs.sym.data();
      in.layout = &layout;
      prepare_backward(rs, b, config, in, timeout());
      if (static_cast<int>(b.tile_in.size()) < world * chunks) {
        b.tile_in.resize(static_cast<std::size_t>(world * chunks));
        b.tile_out.resize(static_cast<std::size_t>(world * chunks));
      }
    }
    backward_stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Timed region. Every owner packs its output gradient per slot; every rank copies its own forward rows into
    // x_recv (comet's layer0 read them from the send rows, so they are not there yet).
    start.record(ranks[0].stream.get());
    for (int r = 1; r < world; ++r)
      start.wait_on(ranks[static_cast<std::size_t>(r)].stream.get());
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      pack_output_gradient(rs, rb(r), config, bw[static_cast<std::size_t>(r)]);
      for (int ch = 0; ch < chunks; ++ch)
        dispatch_copy(rs, forward_work[static_cast<std::size_t>(r)], r, ch, rs.stream.get());
      rb(r).packed.record(rs.stream.get());
    }
    switch (schedule) {
    case Schedule::sequential:
      backward_sequential(bw, chunks);
      break;
    case Schedule::pipelined:
      backward_pipelined(bw, chunks);
      break;
    case Schedule::comet:
      backward_comet(bw, chunks);
      break;
    }
    // Owners: the token gradients summed over the ranks in rank order, the gate's backward.
    for (int s = 0; s < world; ++s) {
      auto &rs = ranks[static_cast<std::size_t>(s)];
      for (int r = 0; r < world; ++r)
        rb(r).replied.wait_on(rs.stream.get());
      rb(s).wgrad_done.wait_on(rs.stream.get());
      owner_backward(rs, rb(s), config, view(s), rank_group_device.data(), gate_weight, waiting_blocks(world));
    }
    for (int r = 1; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.computed.record(rs.stream.get());
      rs.computed.wait_on(ranks[0].stream.get());
    }
    stop.record(ranks[0].stream.get());

    bool const gate_bias = gate_weight && forward_gates[0].bias.data() != nullptr;
    std::vector<std::vector<float>> gate_partial(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r)
      copy_gradients(ranks[static_cast<std::size_t>(r)], rb(r), config, grads[static_cast<std::size_t>(r)], gate_weight,
                     gate_bias, gate_partial[static_cast<std::size_t>(r)]);
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      auto const context =
          tessel::Impl::concat("VirtualRanksLayer::backward (", name_of(schedule), ") on virtual rank ", r);
      host_wait([&] {
        try {
          rs.stream.synchronize(timeout());
          rs.comm.synchronize(timeout());
          rb(r).wgrad.synchronize(timeout());
        } catch (TimeoutError const &e) {
          throw TimeoutError(tessel::Impl::concat(context, ": ", e.what()), r);
        }
      });
    }
    backward_stats.device_ms = Event::elapsed_ms(start, stop);
    if (gate_weight) {
      // The gate is replicated: its gradients are summed over the ranks (rank order); every rank gets the sum.
      std::vector<float> shares;
      for (int r = 0; r < world; ++r) {
        auto const share =
            gate_share(gate_partial[static_cast<std::size_t>(r)], grads[static_cast<std::size_t>(r)].logits);
        shares.insert(shares.end(), share.begin(), share.end());
      }
      for (int r = 0; r < world; ++r)
        set_gate_gradients(shares, world, grads[static_cast<std::size_t>(r)], gate_bias);
    }
  }

  // sequential: every rank's output-gradient tiles land, then every tile is computed, the weight gradients, and the
  // replies leave after the last.
  void backward_sequential(std::vector<BackwardWork> const &bw, int chunks) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      cudaStream_t const stream = rs.stream.get();
      for (int r = 0; r < world; ++r)
        rb(r).packed.wait_on(stream);
      for (int ch = 0; ch < chunks; ++ch)
        for (int s = 0; s < world; ++s)
          grad_copy_in(d, bw, s, ch, stream);
      for (int ch = 0; ch < chunks; ++ch)
        for (int s = 0; s < world; ++s)
          grad_tile(d, bw, s, ch);
      for (int ch = 0; ch < chunks; ++ch)
        for (int s = 0; s < world; ++s)
          grad_weights(d, s, ch, rs.cublas.get());
      for (int ch = 0; ch < chunks; ++ch)
        for (int s = 0; s < world; ++s)
          grad_reply(d, s, ch, stream);
      rb(d).replied.record(stream);
      rb(d).wgrad_done.record(stream);
    }
  }

  // pipelined: chunk by chunk (the forward's chunks): the copy stream moves chunk c + 1's tiles while the compute
  // stream runs chunk c, and each chunk's replies leave as soon as it is done; the weight gradients at the end.
  void backward_pipelined(std::vector<BackwardWork> const &bw, int chunks) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto &b = rb(d);
      cudaStream_t const stream = rs.stream.get(), q = rs.comm.get();
      for (int r = 0; r < world; ++r)
        rb(r).packed.wait_on(q);
      for (int ch = 0; ch < chunks; ++ch) {
        for (int s = 0; s < world; ++s)
          grad_copy_in(d, bw, s, ch, q);
        b.tile_in[static_cast<std::size_t>(ch)].record(q);
      }
      for (int ch = 0; ch < chunks; ++ch) {
        b.tile_in[static_cast<std::size_t>(ch)].wait_on(stream);
        for (int s = 0; s < world; ++s)
          grad_tile(d, bw, s, ch);
        b.tile_out[static_cast<std::size_t>(ch)].record(stream);
      }
      for (int ch = 0; ch < chunks; ++ch) {
        b.tile_out[static_cast<std::size_t>(ch)].wait_on(q);
        for (int s = 0; s < world; ++s)
          grad_reply(d, s, ch, q);
      }
      b.replied.record(q);
      for (int ch = 0; ch < chunks; ++ch)
        for (int s = 0; s < world; ++s)
          grad_weights(d, s, ch, rs.cublas.get());
      b.wgrad_done.record(stream);
    }
  }

  // comet: tile by tile, a tile being one source's block of a chunk, the local one first, then the remote sources
  // in the order they send (rank - 1, rank - 2, ...): the copy stream moves the tiles, the compute stream computes
  // each as it lands and the copy stream returns its replies at once, while a third stream runs each finished
  // tile's weight-gradient GEMMs beside the next tiles' token-gradient work (the host's comet fills its waits with
  // them). Stream-level overlap through events; no fused kernels.
  void backward_comet(std::vector<BackwardWork> const &bw, int chunks) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto &b = rb(d);
      cudaStream_t const stream = rs.stream.get(), q = rs.comm.get(), wq = b.wgrad.get();
      std::vector<std::pair<int, int>> order; // (source, chunk)
      for (int ch = 0; ch < chunks; ++ch)
        for (int k = 0; k < world; ++k)
          order.emplace_back((d - k + world) % world, ch);
      for (int r = 0; r < world; ++r)
        rb(r).packed.wait_on(q);
      for (std::size_t i = 0; i < order.size(); ++i) {
        grad_copy_in(d, bw, order[i].first, order[i].second, q);
        b.tile_in[i].record(q);
      }
      for (std::size_t i = 0; i < order.size(); ++i) {
        b.tile_in[i].wait_on(stream);
        grad_tile(d, bw, order[i].first, order[i].second);
        b.tile_out[i].record(stream);
      }
      for (std::size_t i = 0; i < order.size(); ++i) {
        b.tile_out[i].wait_on(wq);
        grad_weights(d, order[i].first, order[i].second, b.wgrad_blas.get());
      }
      b.wgrad_done.record(wq);
      for (std::size_t i = 0; i < order.size(); ++i) {
        b.tile_out[i].wait_on(q);
        grad_reply(d, order[i].first, order[i].second, q);
      }
      b.replied.record(q);
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
  return _state->routings[static_cast<std::size_t>(rank)];
}
DeviceStats const &VirtualRanksLayer::stats() const { return _state->stats; }
DeviceStats const &VirtualRanksLayer::backward_stats() const { return _state->backward_stats; }

void VirtualRanksLayer::backward(std::vector<ConstHostMatrix> const &d_out, std::vector<MoeGradients> &grads,
                                 Schedule schedule, double aux_loss_coef) {
  _state->backward(d_out, grads, schedule, aux_loss_coef);
}

} // namespace tessel::moe::cuda

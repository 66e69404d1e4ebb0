// The moe CUDA path across GPUs (one rank per process): the one-process driver's steps on an NCCL symmetric window
// (comet) and on NCCL's all-to-alls (sequential, pipelined).
#include <tessel/core/Config.hpp>

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)

#include <tessel/moe/cuda/NcclMoeLayer.hpp>

#include "Backward.hpp"
#include "DeviceLayerCore.hpp"
#include "Rank.hpp"
#include "SymmetricWindow.hpp"
#include "WorkPlan.hpp"

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

} // namespace

struct NcclMoeLayer::State : DeviceLayerCore {
  Communicator comm;
  int me = 0;
  RankState rs;
  std::unique_ptr<SymmetricWindow> window;
  Routing routing;
  std::vector<DispatchPlan> plans;
  // What the backward needs from the last forward (valid once it completed).
  bool have_forward = false;
  int forward_chunks = 1;
  RankWork forward_work;
  GateInput forward_gate;
  std::unique_ptr<RankBackward> rb;
  DeviceStats backward_stats;

  State(MoeConfig const &c, Communicator const &world_comm, ExpertWeights const &weights, DeviceOptions o)
      : DeviceLayerCore(consistent(c, world_comm), world_comm.size(), std::move(o), "tessel::moe::cuda::NcclMoeLayer"),
        comm(world_comm) {
    me = comm.rank();
    comm.require_same("CometParams", comet.hash());
    collective = &comm; // set_comet_params checks across ranks at once
    // The all-to-all counts come from the exchanged plans and match by construction; the communicator's per-call
    // count check (a host all-gather) would add a host round trip to every baseline all-to-all.
    comm.set_validation(false);
    require_peer_links(comm);
    window = std::make_unique<SymmetricWindow>(tessel::cuda::nccl_comm_of(comm), layout.bytes, rs.stream.get());
    // Every rank's flags are zero before any rank can signal into them.
    comm.barrier();
    load_weights(rs, c, me, weights, timeout());
    upload_rank_group(rs.stream.get());
    rs.stream.synchronize(timeout());
  }

  // Peers read this rank's window (layer0's pulls, the reductions' slot tables) and store into it (combines) until
  // their own forward ends: the window is torn down only after every rank's device work is done (stream
  // synchronization, then a barrier). A failed rank or peer cannot be waited for: the window goes anyway.
  ~State() {
    try {
      rs.stream.synchronize(timeout());
      rs.comm.synchronize(timeout());
      comm.barrier();
    } catch (std::exception const &e) {
      std::fprintf(stderr, "%s on rank %d: tearing the symmetric window down without every rank (%s)\n", name.c_str(),
                   me, e.what());
    }
  }

  RankView view() const { return DeviceLayerCore::view(me, window->peer_table(), rs.control.data()); }

  /// Every rank's plan: this rank's own, the others' block and slot counts (all the work lists need of them).
  void exchange_plans(DispatchPlan const &own, int chunks) {
    std::size_t const nb = static_cast<std::size_t>(chunks * config.experts) + 1;
    std::size_t const nc = static_cast<std::size_t>(groups * (chunks + 1)), ng = static_cast<std::size_t>(groups);
    std::vector<std::int64_t> mine;
    mine.insert(mine.end(), own.block_offsets.begin(), own.block_offsets.end());
    mine.insert(mine.end(), own.chunk_slots.begin(), own.chunk_slots.end());
    mine.insert(mine.end(), own.group_slots.begin(), own.group_slots.end());
    TESSEL_REQUIRE(mine.size() == nb + nc + ng, "internal: plan summary of ", mine.size(), " words");
    std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world));
    comm.host_allgather(mine.data(), all.data(), mine.size() * sizeof(std::int64_t));
    plans.assign(static_cast<std::size_t>(world), DispatchPlan{});
    for (int s = 0; s < world; ++s) {
      if (s == me) {
        plans[static_cast<std::size_t>(s)] = own;
        continue;
      }
      auto &p = plans[static_cast<std::size_t>(s)];
      auto const *w = all.data() + static_cast<std::size_t>(s) * mine.size();
      p.chunks = chunks;
      p.groups = groups;
      p.experts_per_group = eg;
      p.block_offsets.assign(w, w + nb);
      p.chunk_slots.assign(w + nb, w + nb + nc);
      p.group_slots.assign(w + nb + nc, w + nb + nc + ng);
    }
  }

  void alltoallv_bytes(void const *send, std::vector<std::size_t> const &sc, std::vector<std::size_t> const &sd,
                       void *recv, std::vector<std::size_t> const &rc, std::vector<std::size_t> const &rd,
                       cudaStream_t stream) {
    comm.alltoallv(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), DataType::uint8, stream);
  }

  /// NCCL all-to-all of chunk \p ch's dispatch rows: this rank's block for each destination's group into the
  /// destinations' x_recv.
  void dispatch(RankWork const &w, int ch, cudaStream_t stream) {
    auto const &plan = plans[static_cast<std::size_t>(me)];
    std::size_t const row_bytes = static_cast<std::size_t>(config.hidden) * es;
    std::vector<std::size_t> sc(static_cast<std::size_t>(world)), sd(sc.size()), rc(sc.size()), rd(sc.size());
    for (int p = 0; p < world; ++p) {
      int const g = config.group_of_rank(p);
      sc[static_cast<std::size_t>(p)] =
          static_cast<std::size_t>(plan.block_end(ch, g) - plan.block_begin(ch, g)) * row_bytes;
      sd[static_cast<std::size_t>(p)] = static_cast<std::size_t>(plan.block_begin(ch, g)) * row_bytes;
      auto const &b = w.blocks[static_cast<std::size_t>(p)][static_cast<std::size_t>(ch)];
      rc[static_cast<std::size_t>(p)] = static_cast<std::size_t>(b.rows) * row_bytes;
      rd[static_cast<std::size_t>(p)] =
          static_cast<std::size_t>(w.row[static_cast<std::size_t>(p)][static_cast<std::size_t>(ch)]) * row_bytes;
    }
    alltoallv_bytes(window->local() + layout.send_rows, sc, sd, rs.x_recv.data(), rc, rd, stream);
  }

  /// NCCL all-to-all of chunk \p ch's reduced rows: to each source its slots, into region `me` of its combine buffer.
  void combine(RankWork const &w, int ch, cudaStream_t stream) {
    auto const &plan = plans[static_cast<std::size_t>(me)];
    std::size_t const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden);
    std::vector<std::size_t> sc(static_cast<std::size_t>(world)), sd(sc.size()), rc(sc.size()), rd(sc.size());
    for (int p = 0; p < world; ++p) {
      auto const &b = w.blocks[static_cast<std::size_t>(p)][static_cast<std::size_t>(ch)];
      auto const up = static_cast<std::size_t>(p);
      sc[up] = static_cast<std::size_t>(b.slots) * n * sizeof(float);
      sd[up] = (up * m + static_cast<std::size_t>(b.slot_begin)) * n * sizeof(float);
      int const g = config.group_of_rank(p);
      rc[up] = static_cast<std::size_t>(plan.slot_count(ch, g)) * n * sizeof(float);
      rd[up] = (up * m + static_cast<std::size_t>(plan.slot_begin(ch, g))) * n * sizeof(float);
    }
    alltoallv_bytes(rs.combine_send.data(), sc, sd, window->local() + layout.combine, rc, rd, stream);
  }

  void forward(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out, Schedule schedule) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    have_forward = false;
    std::int64_t const m = config.tokens, n = config.hidden;
    TESSEL_REQUIRE(tokens.extent(0) == static_cast<std::size_t>(m) && tokens.extent(1) == static_cast<std::size_t>(n),
                   "NcclMoeLayer::forward: tokens are ", tokens.extent(0), " x ", tokens.extent(1),
                   ", expected M x N = ", m, " x ", n);
    TESSEL_REQUIRE(out.extent(0) == static_cast<std::size_t>(m) && out.extent(1) == static_cast<std::size_t>(n),
                   "NcclMoeLayer::forward: output is ", out.extent(0), " x ", out.extent(1), ", expected M x N = ", m,
                   " x ", n);
    std::int64_t const bad =
        static_cast<std::int64_t>(first_non_finite(tokens.data(), static_cast<std::size_t>(m * n)));
    std::vector<std::int64_t> bads(static_cast<std::size_t>(world));
    comm.host_allgather(&bad, bads.data(), sizeof(bad));
    for (int r = 0; r < world; ++r)
      TESSEL_REQUIRE(bads[static_cast<std::size_t>(r)] >= m * n, "NcclMoeLayer::forward: the tokens of rank ", r,
                     " contain NaN or infinity at row ", bads[static_cast<std::size_t>(r)] / n, ", column ",
                     bads[static_cast<std::size_t>(r)] % n);
    comm.require_same("NcclMoeLayer::forward schedule", static_cast<std::uint64_t>(schedule));
    int const chunks = schedule == Schedule::pipelined ? pipeline_chunks : 1;
    HostExecSpace space;
    route(space, host_config, tokens, gate, routing);
    exchange_plans(make_dispatch_plan(host_config, routing, chunks), chunks);
    ++epoch;

    WorkPlanner const planner(config, plans, comet);
    cudaStream_t const s = rs.stream.get();
    std::vector<std::int32_t> table_rows;
    std::vector<float> table_weights;
    std::vector<std::int64_t> own_base;
    planner.slot_table(me, table_rows, table_weights, own_base);
    std::vector<std::vector<std::int64_t>> table_bases;
    for (int r = 0; r < world; ++r)
      table_bases.push_back(planner.table_base(r));
    RankWork w = planner.work_of(me, chunks, table_bases);
    if (schedule == Schedule::comet)
      planner.comet_work(me, w);
    else
      ensure(rs.combine_send, static_cast<std::size_t>(world) * static_cast<std::size_t>(m * n),
             "Tessel::moe::cuda::combine_send");
    ensure_compute(rs, config, w.rows, schedule != Schedule::comet);
    auto const &own = plans[static_cast<std::size_t>(me)];
    // The slot table is read by the peers' reductions, which start after this rank's packed flag (comet) or
    // dispatch (baselines), both after these copies on the stream.
    if (!table_rows.empty()) {
      TESSEL_CUDA_CHECK(cudaMemcpyAsync(window->local() + layout.slot_rows, table_rows.data(),
                                        table_rows.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, s));
      TESSEL_CUDA_CHECK(cudaMemcpyAsync(window->local() + layout.slot_weight, table_weights.data(),
                                        table_weights.size() * sizeof(float), cudaMemcpyHostToDevice, s));
    }
    upload(rs.row_token, own.row_token, "Tessel::moe::cuda::row_token", s);
    upload(rs.token_slot, own.token_slot, "Tessel::moe::cuda::token_slot", s);
    ensure(rs.tokens, static_cast<std::size_t>(m * n), "Tessel::moe::cuda::tokens");
    rs.tokens.copy_from_host(tokens.data(), static_cast<std::size_t>(m * n), s);
    ensure(rs.out, static_cast<std::size_t>(m * n), "Tessel::moe::cuda::out");
    upload_work(rs, config, w, schedule == Schedule::comet);
    poison(rs, window->local());
    rs.stream.synchronize(timeout());
    stats = DeviceStats{};
    stats.schedule = schedule;
    stats.rows = w.rows;
    stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    auto const v = view();
    start.record(s);
    TESSEL_CUDA_CHECK(pack_rows(s, config.dtype, rs.tokens.data(), rs.row_token.data(), own.rows(), n,
                                window->local() + layout.send_rows));
    TESSEL_CUDA_CHECK(signal_packed(s, v, epoch));
    std::uint64_t expected = 0;
    switch (schedule) {
    case Schedule::sequential:
      dispatch(w, 0, s);
      chunk_ffn(rs, config, w, 0);
      TESSEL_CUDA_CHECK(topk_reduce(s, v, rs.y.data(), static_cast<int>(w.chunk_reduces[0].size()),
                                    rs.chunk_reduces.data(), rs.combine_send.data()));
      combine(w, 0, s);
      break;
    case Schedule::pipelined: {
      cudaStream_t const q = rs.comm.get();
      if (static_cast<int>(rs.chunk_in.size()) < chunks) {
        rs.chunk_in.resize(static_cast<std::size_t>(chunks));
        rs.chunk_out.resize(static_cast<std::size_t>(chunks));
      }
      rs.packed.record(s);
      rs.packed.wait_on(q);
      for (int ch = 0; ch < chunks; ++ch) {
        dispatch(w, ch, q);
        rs.chunk_in[static_cast<std::size_t>(ch)].record(q);
      }
      pipelined_compute(rs, config, w, v, chunks);
      for (int ch = 0; ch < chunks; ++ch) {
        rs.chunk_out[static_cast<std::size_t>(ch)].wait_on(q);
        combine(w, ch, q);
      }
      rs.combined.record(q);
      rs.combined.wait_on(s);
      break;
    }
    case Schedule::comet: {
      // One rank per GPU: the whole device's co-resident blocks; peers are ordered by the window's flags only.
      auto const grid = comet_grid(config, comet, 1);
      auto const grids = launch_comet(rs, config, w, v, grid, comet.n_splits, epoch);
      stats.comm_blocks = grid.comm_blocks;
      stats.grid0 = grids.first;
      stats.grid1 = grids.second;
      combine_expected += static_cast<std::uint64_t>(grid.comm_blocks);
      expected = combine_expected;
      break;
    }
    }
    TESSEL_CUDA_CHECK(
        final_sum(s, v, rs.token_slot.data(), rank_group_device.data(), expected, waiting_blocks(1), rs.out.data()));
    stop.record(s);
    rs.out.copy_to_host(out.data(), static_cast<std::size_t>(m * n), s);
    auto const context = tessel::Impl::concat("NcclMoeLayer::forward (", name_of(schedule), ") on rank ", me);
    if (schedule == Schedule::comet) {
      // No NCCL operation is in flight: the stream ends when the kernels do, which a failed wait on any rank ends
      // on every rank (the abort word); the host waits the device's timeout plus a margin.
      host_wait([&] { rs.stream.synchronize(timeout()); });
      check_device(rs, window->local(), context);
    } else {
      host_wait([&] {
        tessel::cuda::synchronize(comm, rs.comm.get());
        tessel::cuda::synchronize(comm, s);
      });
    }
    stats.device_ms = Event::elapsed_ms(start, stop);
    forward_work = std::move(w);
    forward_gate = gate;
    forward_chunks = chunks;
    have_forward = true;
  }

  // ------------------------------------------------------------------------------------------------------------
  // backward (float32): VirtualRanksLayer's steps (Backward.hpp) with the messages as NCCL all-to-alls.
  // ------------------------------------------------------------------------------------------------------------

  /// One all-to-all of \p x's element counts (elements of \p size bytes).
  void alltoallv_elements(void const *send, Alltoall const &x, void *recv, std::size_t size, cudaStream_t stream) {
    auto bytes = [size](std::vector<std::size_t> v) {
      for (auto &e : v)
        e *= size;
      return v;
    };
    alltoallv_bytes(send, bytes(x.send_counts), bytes(x.send_displs), recv, bytes(x.recv_counts), bytes(x.recv_displs),
                    stream);
  }

  /// Chunk \p ch's messages to the expert sides (WorkPlanner::backward_exchange): this rank's output gradient per
  /// slot of each destination's group, and its plan rows' slots and combine weights.
  void grad_exchange(BackwardExchange const &x, cudaStream_t stream) {
    alltoallv_elements(rb->g_out.data(), x.slots, rb->g_in.data(), sizeof(float), stream);
    alltoallv_elements(rb->send_slot.data(), x.rows, rb->row_slot.data(), sizeof(std::int32_t), stream);
    alltoallv_elements(rb->send_weight.data(), x.rows, rb->row_weight.data(), sizeof(float), stream);
  }

  /// Chunk \p ch's replies: the token gradients per slot into the owners' combine regions (the forward's combine),
  /// and the rows' combine-weight gradients into the owners' dw_recv.
  void grad_reply(BackwardExchange const &x, int ch, cudaStream_t stream) {
    combine(forward_work, ch, stream);
    alltoallv_elements(rb->dw.data(), x.dw, rb->dw_recv.data(), sizeof(float), stream);
  }

  void backward(ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule, double aux) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    TESSEL_REQUIRE(config.dtype == DataType::float32, "NcclMoeLayer::backward: float32 layers only (this one is ",
                   name_of(config.dtype), ")");
    std::int64_t const m = config.tokens, n = config.hidden;
    TESSEL_REQUIRE(d_out.extent(0) == static_cast<std::size_t>(m) && d_out.extent(1) == static_cast<std::size_t>(n),
                   "NcclMoeLayer::backward: the output gradient is ", d_out.extent(0), " x ", d_out.extent(1),
                   ", expected M x N = ", m, " x ", n);
    TESSEL_REQUIRE(std::isfinite(aux) && aux >= 0.0,
                   "NcclMoeLayer::backward: aux_loss_coef must be finite and >= 0, got ", aux);
    // Every rank stops alike when any has no forward to differentiate (host all-gather: the NCCL communicator's
    // collectives take device memory).
    int const mine_ready = have_forward ? 1 : 0;
    std::vector<int> ready(static_cast<std::size_t>(world));
    comm.host_allgather(&mine_ready, ready.data(), sizeof(int));
    for (int r = 0; r < world; ++r)
      TESSEL_REQUIRE(ready[static_cast<std::size_t>(r)] == 1,
                     "NcclMoeLayer::backward: no forward to differentiate on rank ", r,
                     " (call forward first; a forward that failed does not count)");
    comm.require_same("NcclMoeLayer::backward schedule", static_cast<std::uint64_t>(schedule));
    bool const gate_weight = forward_gate.kind == GateInput::Kind::weight;
    bool const gate_bias = gate_weight && forward_gate.bias.data() != nullptr;
    comm.require_same("NcclMoeLayer::backward gate kind", (gate_weight ? 1u : 0u) + (gate_bias ? 2u : 0u));
    if (!rb)
      rb = std::make_unique<RankBackward>();
    int const chunks = forward_chunks;

    // The load-balancing loss's expert counts over all ranks.
    std::vector<std::int64_t> mine(routing.tokens_per_expert.begin(), routing.tokens_per_expert.end());
    std::vector<std::int64_t> every(mine.size() * static_cast<std::size_t>(world));
    comm.host_allgather(mine.data(), every.data(), mine.size() * sizeof(std::int64_t));
    std::vector<double> counts(mine.size(), 0.0);
    for (std::size_t i = 0; i < every.size(); ++i)
      counts[i % mine.size()] += static_cast<double>(every[i]);
    auto const aux_grad = aux_gradient(config, counts, static_cast<double>(m) * world, aux);

    WorkPlanner const planner(config, plans, comet);
    auto const lists = planner.backward_work(me, forward_work, routing.experts, /*row_lists=*/false);
    std::vector<BackwardExchange> exchange;
    for (int ch = 0; ch < forward_chunks; ++ch)
      exchange.push_back(planner.backward_exchange(me, ch, forward_work, lists));
    BackwardInputs in;
    in.d_out = d_out;
    in.routing = &routing;
    in.lists = &lists;
    in.work = &forward_work;
    in.aux = &aux_grad;
    if (gate_weight)
      in.gate_weight = forward_gate.weight;
    in.poison = options.debug.poison_buffers;
    in.sym_base = window->local();
    in.layout = &layout;
    auto const &own = plans[static_cast<std::size_t>(me)];
    // The own plan rows' slots and weights: host vectors of the plan, alive until the synchronization in
    // prepare_backward.
    upload(rb->send_slot, own.row_slot, "Tessel::moe::cuda::grad_send_slot", rs.stream.get());
    upload(rb->send_weight, own.row_weight, "Tessel::moe::cuda::grad_send_weight", rs.stream.get());
    prepare_backward(rs, *rb, config, in, timeout());
    if (options.debug.poison_buffers) {
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rb->row_slot.data(), 0xff, rb->row_slot.bytes(), rs.stream.get()));
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rb->row_weight.data(), 0xff, rb->row_weight.bytes(), rs.stream.get()));
    }
    if (static_cast<int>(rb->tile_out.size()) < world * chunks) {
      rb->tile_in.resize(static_cast<std::size_t>(world * chunks));
      rb->tile_out.resize(static_cast<std::size_t>(world * chunks));
      rb->chunk_done.resize(static_cast<std::size_t>(world * chunks));
    }
    backward_stats = DeviceStats{};
    backward_stats.schedule = schedule;
    backward_stats.rows = forward_work.rows;
    backward_stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    cudaStream_t const s = rs.stream.get(), q = rs.comm.get(), wq = rb->wgrad.get();
    auto const v = view();
    start.record(s);
    pack_output_gradient(rs, *rb, config, lists);
    // The own rows into x_recv (comet's layer0 read them from the window's send rows).
    std::size_t const row_bytes = static_cast<std::size_t>(n) * es;
    for (int ch = 0; ch < chunks; ++ch) {
      auto const &b = forward_work.blocks[static_cast<std::size_t>(me)][static_cast<std::size_t>(ch)];
      auto const row0 = forward_work.row[static_cast<std::size_t>(me)][static_cast<std::size_t>(ch)];
      if (b.rows > 0)
        TESSEL_CUDA_CHECK(
            cudaMemcpyAsync(rs.x_recv.data() + static_cast<std::size_t>(row0) * row_bytes,
                            window->local() + layout.send_rows + static_cast<std::size_t>(b.send_row) * row_bytes,
                            static_cast<std::size_t>(b.rows) * row_bytes, cudaMemcpyDeviceToDevice, s));
    }
    // Tiles of a chunk: the local source first, then the others (rank - 1, rank - 2, ...).
    std::vector<int> sources;
    for (int k = 0; k < world; ++k)
      sources.push_back((me - k + world) % world);
    switch (schedule) {
    case Schedule::sequential:
      for (int ch = 0; ch < chunks; ++ch)
        grad_exchange(exchange[static_cast<std::size_t>(ch)], s);
      for (int ch = 0; ch < chunks; ++ch)
        for (int p : sources)
          backward_tile(rs, *rb, config, v, forward_work, lists, p, ch);
      for (int ch = 0; ch < chunks; ++ch)
        for (int p : sources)
          backward_weights(rs, *rb, config, forward_work, p, ch, rs.cublas.get());
      for (int ch = 0; ch < chunks; ++ch)
        grad_reply(exchange[static_cast<std::size_t>(ch)], ch, s);
      break;
    case Schedule::pipelined:
    case Schedule::comet: {
      // The messages on the communication stream chunk by chunk; the compute stream takes a chunk once its
      // messages are in, and its replies leave once it is done. comet: each finished tile's weight-gradient GEMMs
      // on their own stream, beside the next tiles; pipelined: all of them at the end on the compute stream.
      rb->packed.record(s);
      rb->packed.wait_on(q);
      for (int ch = 0; ch < chunks; ++ch) {
        grad_exchange(exchange[static_cast<std::size_t>(ch)], q);
        rb->tile_in[static_cast<std::size_t>(ch)].record(q);
      }
      std::size_t tile = 0;
      for (int ch = 0; ch < chunks; ++ch) {
        rb->tile_in[static_cast<std::size_t>(ch)].wait_on(s);
        for (int p : sources) {
          backward_tile(rs, *rb, config, v, forward_work, lists, p, ch);
          if (schedule == Schedule::comet) {
            rb->tile_out[tile].record(s);
            rb->tile_out[tile].wait_on(wq);
            backward_weights(rs, *rb, config, forward_work, p, ch, rb->wgrad_blas.get());
            ++tile;
          }
        }
        rb->chunk_done[static_cast<std::size_t>(ch)].record(s);
      }
      for (int ch = 0; ch < chunks; ++ch) {
        rb->chunk_done[static_cast<std::size_t>(ch)].wait_on(q);
        grad_reply(exchange[static_cast<std::size_t>(ch)], ch, q);
      }
      rb->replied.record(q);
      rb->replied.wait_on(s);
      if (schedule == Schedule::pipelined)
        for (int ch = 0; ch < chunks; ++ch)
          for (int p : sources)
            backward_weights(rs, *rb, config, forward_work, p, ch, rs.cublas.get());
      rb->wgrad_done.record(wq);
      rb->wgrad_done.wait_on(s);
      break;
    }
    }
    owner_backward(rs, *rb, config, v, rank_group_device.data(), gate_weight, waiting_blocks(1));
    stop.record(s);
    std::vector<float> gate_partial;
    copy_gradients(rs, *rb, config, grads, gate_weight, gate_bias, gate_partial);
    host_wait([&] {
      tessel::cuda::synchronize(comm, q);
      tessel::cuda::synchronize(comm, s);
      rb->wgrad.synchronize(timeout());
    });
    backward_stats.device_ms = Event::elapsed_ms(start, stop);
    if (gate_weight) {
      // The gate is replicated: every rank gets the sum over the ranks (rank order) of their shares.
      auto const share = gate_share(gate_partial, grads.logits);
      std::vector<float> shares(share.size() * static_cast<std::size_t>(world));
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
Routing const &NcclMoeLayer::routing() const { return _state->routing; }
DeviceStats const &NcclMoeLayer::stats() const { return _state->stats; }
DeviceStats const &NcclMoeLayer::backward_stats() const { return _state->backward_stats; }

void NcclMoeLayer::backward(ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule, double aux_loss_coef) {
  _state->backward(d_out, grads, schedule, aux_loss_coef);
}

} // namespace tessel::moe::cuda

#endif

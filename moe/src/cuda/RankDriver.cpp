#include "RankDriver.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <utility>

namespace tessel::moe::cuda::Impl {

namespace {

std::size_t z(std::int64_t i) { return static_cast<std::size_t>(i); }

} // namespace

RankDriver::RankDriver(DeviceLayerCore &core, int rank) : _core(core), _rank(rank) {}

RankBackward &RankDriver::backward_state() {
  if (!_backward)
    _backward = std::make_unique<RankBackward>();
  return *_backward;
}

RankView RankDriver::view() const { return _core.view(_rank, _transport->peer_table(), _state.control.data()); }

template <class F> void RankDriver::wait_named(std::string const &context, F &&wait) {
  _core.host_wait([&] {
    try {
      wait();
    } catch (TimeoutError const &e) {
      throw TimeoutError(tessel::Impl::concat(context, ": ", e.what()), _rank);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// forward
// ---------------------------------------------------------------------------------------------------------------

std::int64_t RankDriver::check_forward(ConstHostMatrix tokens, HostMatrix out, int chunks) const {
  std::int64_t const m = _core.config.tokens, n = _core.config.hidden;
  auto const who = _core.short_name() + "::forward: rank " + std::to_string(_rank) + "'s ";
  TESSEL_REQUIRE(tokens.extent(0) == z(m) && tokens.extent(1) == z(n), who, "tokens are ", tokens.extent(0), " x ",
                 tokens.extent(1), ", expected M x N = ", m, " x ", n);
  TESSEL_REQUIRE(out.extent(0) == z(m) && out.extent(1) == z(n), who, "output is ", out.extent(0), " x ", out.extent(1),
                 ", expected M x N = ", m, " x ", n);
  TESSEL_REQUIRE(chunks <= std::max<std::int64_t>(m, 1), _core.short_name(), ": ", chunks,
                 " pipeline chunks for M = ", m, " tokens");
  return static_cast<std::int64_t>(first_non_finite(tokens.data(), z(m * n)));
}

DispatchPlan RankDriver::route(ConstHostMatrix tokens, GateInput const &gate, int chunks) {
  HostExecSpace space;
  moe::route(space, _core.host_config, tokens, gate, _routing);
  return make_dispatch_plan(_core.host_config, _routing, chunks);
}

std::int64_t RankDriver::prepare_forward(std::vector<DispatchPlan> const &plans, ConstHostMatrix tokens,
                                         Schedule schedule, int chunks) {
  auto const &config = _core.config;
  std::int64_t const m = config.tokens, n = config.hidden;
  auto &rank_state = _state;
  cudaStream_t const stream = rank_state.stream.get();
  bool const comet = schedule == Schedule::comet;
  _schedule = schedule;
  _chunks = chunks;
  _plan = &plans[z(_rank)];
  WorkPlanner const planner(config, plans, _core.comet);
  // This rank's slot table, read by the peers' reductions, which start after this rank's packed flag (comet) or
  // dispatch (the baselines), both after these copies on the stream.
  std::vector<std::int32_t> table_rows;
  std::vector<float> table_weights;
  std::vector<std::int64_t> own_base;
  planner.slot_table(_rank, table_rows, table_weights, own_base);
  if (!table_rows.empty()) {
    char *const local = _transport->local();
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(local + _core.layout.slot_rows, table_rows.data(),
                                      table_rows.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(local + _core.layout.slot_weight, table_weights.data(),
                                      table_weights.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  }
  std::vector<std::vector<std::int64_t>> table_bases;
  for (int r = 0; r < _core.world; ++r)
    table_bases.push_back(planner.table_base(r));
  _work = planner.work_of(_rank, chunks, table_bases);
  if (comet)
    planner.comet_work(_rank, _work);
  else
    ensure(rank_state.combine_send, z(_core.world) * z(m * n), "Tessel::moe::cuda::combine_send");
  ensure_compute(rank_state, config, _work.rows, !comet);
  upload(rank_state.row_token, _plan->row_token, "Tessel::moe::cuda::row_token", stream);
  upload(rank_state.token_slot, _plan->token_slot, "Tessel::moe::cuda::token_slot", stream);
  ensure(rank_state.tokens, z(m * n), "Tessel::moe::cuda::tokens");
  rank_state.tokens.copy_from_host(tokens.data(), z(m * n), stream);
  ensure(rank_state.out, z(m * n), "Tessel::moe::cuda::out");
  upload_work(rank_state, config, _work, comet);
  _core.poison(rank_state, _transport->local());
  // The host vectors die at the end of this function: the copies must be done by then.
  rank_state.stream.synchronize(_core.timeout());
  return _work.rows;
}

void RankDriver::pack() {
  cudaStream_t const stream = _state.stream.get();
  TESSEL_CUDA_CHECK(pack_rows(stream, _core.config.dtype, _state.tokens.data(), _state.row_token.data(), _plan->rows(),
                              _core.config.hidden, _transport->local() + _core.layout.send_rows));
  TESSEL_CUDA_CHECK(signal_packed(stream, view(), _core.epoch));
  _state.packed.record(stream);
}

std::pair<int, int> RankDriver::run_forward(Schedule schedule, CometGrid const &grid) {
  auto &rank_state = _state;
  auto const &config = _core.config;
  cudaStream_t const stream = rank_state.stream.get(), q = rank_state.comm.get();
  switch (schedule) {
  case Schedule::sequential:
    // dispatch -> GEMM0 -> activation -> GEMM1 -> top-k reduce -> combine.
    _transport->wait_packed(stream);
    _transport->dispatch(_work, 0, stream);
    chunk_ffn(rank_state, config, _work, 0);
    TESSEL_CUDA_CHECK(topk_reduce(stream, view(), rank_state.y.data(), static_cast<int>(_work.chunk_reduces[0].size()),
                                  rank_state.chunk_reduces.data(), rank_state.combine_send.data()));
    _transport->combine(_work, 0, stream);
    rank_state.combined.record(stream);
    return {0, 0};
  case Schedule::pipelined:
    // The communication stream moves chunk c + 1's rows while the compute stream runs chunk c; each chunk's
    // combine leaves as soon as it is reduced (Tutel's order: all dispatches first, then the combines).
    if (static_cast<int>(rank_state.chunk_in.size()) < _chunks) {
      rank_state.chunk_in.resize(z(_chunks));
      rank_state.chunk_out.resize(z(_chunks));
    }
    _transport->wait_packed(q);
    for (int ch = 0; ch < _chunks; ++ch) {
      _transport->dispatch(_work, ch, q);
      rank_state.chunk_in[z(ch)].record(q);
    }
    pipelined_compute(rank_state, config, _work, view(), _chunks);
    for (int ch = 0; ch < _chunks; ++ch) {
      rank_state.chunk_out[z(ch)].wait_on(q);
      _transport->combine(_work, ch, q);
    }
    rank_state.combined.record(q);
    return {0, 0};
  case Schedule::comet: {
    // Fused layer0 (pull + grouped GEMM + activation) and layer1 (N-split GEMM + top-k reduce + stores to the
    // owners). Ranks sharing a GPU start after every source has packed (stream order), so that no block spins on a
    // kernel that may not be resident; across GPUs the packed flags alone order them.
    _transport->wait_packed(stream);
    auto const grids = launch_comet(rank_state, config, _work, view(), grid, _core.comet.n_splits, _core.epoch);
    rank_state.combined.record(stream);
    return grids;
  }
  }
  return {0, 0};
}

void RankDriver::final_sum(std::uint64_t expected) {
  cudaStream_t const stream = _state.stream.get();
  _transport->wait_combined(stream);
  TESSEL_CUDA_CHECK(Impl::final_sum(stream, view(), _state.token_slot.data(), _core.rank_group_device.data(), expected,
                                    waiting_blocks(_transport->sharing()), _state.out.data()));
}

void RankDriver::copy_out(HostMatrix out) {
  _state.out.copy_to_host(out.data(), z(_core.config.tokens * _core.config.hidden), _state.stream.get());
}

void RankDriver::finish_forward(Schedule schedule, std::string const &context) {
  if (schedule == Schedule::comet) {
    // No collective is in flight: the stream ends when the kernels do, which a failed wait on any rank ends on
    // every rank (the abort word); the host waits the device's timeout plus a margin.
    wait_named(context, [&] {
      _state.stream.synchronize(_core.timeout());
      _state.comm.synchronize(_core.timeout());
    });
    _core.check_device(_state, _transport->local(), context);
  } else {
    wait_named(context, [&] {
      _transport->synchronize(_state.comm);
      _transport->synchronize(_state.stream);
    });
  }
}

void RankDriver::keep_forward(GateInput const &gate) {
  _gate = gate;
  _has_forward = true;
}

// ---------------------------------------------------------------------------------------------------------------
// backward (float32): the forward's messages reversed, as the host's backward schedules. Each owner packs its
// output gradient per slot of every group; each expert side receives every source's slots of its group (a tile is
// one (source, chunk) block), gathers them per row, and per (source, chunk, expert) recomputes GEMM0, computes
// q = g W1^T, the activation's backward and dx = dpre W0^T (cuBLAS + Backward.cu), sums dx per slot and returns it
// to the owner's combine region with the rows' combine-weight gradients; the owner adds the ranks' token gradients
// in rank order (the forward's final sum) and runs the gate's backward. dW1 += (w act)^T g and dW0 += x^T dpre
// need nothing from another rank.
// ---------------------------------------------------------------------------------------------------------------

void RankDriver::check_backward(ConstHostMatrix d_out) const {
  std::int64_t const m = _core.config.tokens, n = _core.config.hidden;
  TESSEL_REQUIRE(d_out.extent(0) == z(m) && d_out.extent(1) == z(n), _core.short_name(), "::backward: rank ", _rank,
                 "'s output gradient is ", d_out.extent(0), " x ", d_out.extent(1), ", expected M x N = ", m, " x ", n);
}

void RankDriver::prepare_backward(WorkPlanner const &planner, ConstHostMatrix d_out,
                                  std::vector<double> const &aux_grad, bool row_lists) {
  auto &rb = backward_state();
  _lists = planner.backward_work(_rank, _work, _routing.experts, row_lists);
  BackwardInputs in;
  in.d_out = d_out;
  in.routing = &_routing;
  in.lists = &_lists;
  in.work = &_work;
  in.aux = &aux_grad;
  if (_gate.kind == GateInput::Kind::weight)
    in.gate_weight = _gate.weight;
  in.poison = _core.options.debug.poison_buffers;
  in.sym_base = _transport->local();
  in.layout = &_core.layout;
  _transport->prepare_backward(_lists);
  Impl::prepare_backward(_state, rb, _core.config, in, _core.timeout());
  auto const tiles = z(_core.world * _chunks);
  if (rb.tile_in.size() < tiles) {
    rb.tile_in.resize(tiles);
    rb.tile_out.resize(tiles);
  }
}

void RankDriver::pack_backward() {
  auto &rb = backward_state();
  cudaStream_t const stream = _state.stream.get();
  pack_output_gradient(_state, rb, _core.config, _lists);
  // The own rows into x_recv (comet's layer0 read them from the symmetric send rows, so they are not there yet).
  std::size_t const row_bytes = z(_core.config.hidden) * _core.element_bytes;
  char const *send_rows = _transport->local() + _core.layout.send_rows;
  for (int ch = 0; ch < _chunks; ++ch) {
    auto const &b = _work.blocks[z(_rank)][z(ch)];
    if (b.rows > 0)
      TESSEL_CUDA_CHECK(cudaMemcpyAsync(_state.x_recv.data() + z(_work.row[z(_rank)][z(ch)]) * row_bytes,
                                        send_rows + z(b.send_row) * row_bytes, z(b.rows) * row_bytes,
                                        cudaMemcpyDeviceToDevice, stream));
  }
  rb.packed.record(stream);
}

std::vector<std::pair<int, int>> RankDriver::tile_order() const {
  int const world = _core.world;
  std::vector<std::pair<int, int>> tiles; // (source, chunk)
  for (int ch = 0; ch < _chunks; ++ch)
    for (int k = 0; k < world; ++k)
      tiles.emplace_back((_rank - k + world) % world, ch);
  return tiles;
}

void RankDriver::run_backward(Schedule schedule) {
  auto const tiles = tile_order();
  if (schedule == Schedule::sequential)
    backward_sequential(tiles);
  else
    backward_overlapped(tiles, schedule == Schedule::comet);
}

// sequential: every output-gradient tile lands, then every tile is computed, the weight gradients, and the replies
// leave after the last.
void RankDriver::backward_sequential(std::vector<std::pair<int, int>> const &tiles) {
  auto &rb = backward_state();
  auto const &config = _core.config;
  cudaStream_t const stream = _state.stream.get();
  bool const per_tile = _transport->tile_messages();
  auto const world = z(_core.world);
  _transport->wait_gradients_packed(stream);
  for (std::size_t i = 0; i < tiles.size(); ++i)
    if (per_tile || i % world == 0)
      _transport->gradients_in(tiles[i].second, tiles[i].first, stream);
  for (auto const &[source, ch] : tiles)
    backward_tile(_state, rb, config, view(), _work, _lists, source, ch);
  for (auto const &[source, ch] : tiles)
    backward_weights(_state, rb, config, _work, source, ch, _state.cublas.get());
  for (std::size_t i = 0; i < tiles.size(); ++i)
    if (per_tile || i % world == world - 1)
      _transport->replies_out(tiles[i].second, tiles[i].first, stream);
  rb.replied.record(stream);
  rb.wgrad_done.record(stream);
}

// pipelined (comet = false): chunk by chunk, the communication stream moves chunk c + 1's messages while the
// compute stream runs chunk c, and each chunk's replies leave as soon as it is done; the weight gradients at the
// end. comet: tile by tile, the local source first, then the remote ones in the order they send; each tile's
// replies leave once it is done (where the transport moves tiles), and a third stream runs each finished tile's
// weight-gradient GEMMs beside the next tiles' token-gradient work. Stream-level overlap through events.
void RankDriver::backward_overlapped(std::vector<std::pair<int, int>> const &tiles, bool comet) {
  auto &rb = backward_state();
  auto const &config = _core.config;
  cudaStream_t const stream = _state.stream.get(), q = _state.comm.get(), wq = rb.wgrad.get();
  bool const per_tile = _transport->tile_messages();
  auto const world = z(_core.world);
  // A tile's events: its own (comet) or its chunk's (pipelined); a chunk's event is recorded at its last tile and
  // waited for at its first.
  auto event = [&](std::size_t i) { return comet ? i : i / world; };
  bool const tile_events = comet;
  auto first = [&](std::size_t i) { return tile_events || i % world == 0; };
  auto last = [&](std::size_t i) { return tile_events || i % world == world - 1; };
  _transport->wait_gradients_packed(q);
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    if (per_tile || i % world == 0)
      _transport->gradients_in(tiles[i].second, tiles[i].first, q);
    if (last(i))
      rb.tile_in[event(i)].record(q);
  }
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    if (first(i))
      rb.tile_in[event(i)].wait_on(stream);
    backward_tile(_state, rb, config, view(), _work, _lists, tiles[i].first, tiles[i].second);
    if (last(i))
      rb.tile_out[event(i)].record(stream);
    if (comet) {
      rb.tile_out[event(i)].wait_on(wq);
      backward_weights(_state, rb, config, _work, tiles[i].first, tiles[i].second, rb.wgrad_blas.get());
    }
  }
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    if (first(i))
      rb.tile_out[event(i)].wait_on(q);
    if (per_tile || i % world == world - 1)
      _transport->replies_out(tiles[i].second, tiles[i].first, q);
  }
  rb.replied.record(q);
  if (comet) {
    rb.wgrad_done.record(wq);
    return;
  }
  for (auto const &[source, ch] : tiles)
    backward_weights(_state, rb, config, _work, source, ch, _state.cublas.get());
  rb.wgrad_done.record(stream);
}

void RankDriver::owner_backward(bool gate_weight) {
  auto &rb = backward_state();
  cudaStream_t const stream = _state.stream.get();
  _transport->wait_replied(stream);
  rb.wgrad_done.wait_on(stream);
  Impl::owner_backward(_state, rb, _core.config, view(), _core.rank_group_device.data(), gate_weight,
                       waiting_blocks(_transport->sharing()));
}

void RankDriver::finish_backward(MoeGradients &grads, bool gate_bias, std::vector<float> &gate_partial,
                                 std::string const &context) {
  auto &rb = backward_state();
  copy_gradients(_state, rb, _core.config, grads, _gate.kind == GateInput::Kind::weight, gate_bias, gate_partial);
  wait_named(context, [&] {
    _transport->synchronize(_state.comm);
    _transport->synchronize(_state.stream);
    rb.wgrad.synchronize(_core.timeout());
  });
}

} // namespace tessel::moe::cuda::Impl

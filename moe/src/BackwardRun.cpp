// The host layer's backward, the parts every schedule shares (impl/BackwardRun.hpp); the order of the tiles is in
// SequentialBackward.cpp, PipelinedBackward.cpp and CometBackward.cpp.
#include "impl/BackwardRun.hpp"

#include <tessel/core/Execution.hpp>

namespace tessel::moe {

namespace Impl {

std::vector<Tile> slot_tiles(std::vector<std::pair<std::int64_t, std::int64_t>> const &chunk_slots, std::int64_t tile) {
  std::int64_t total = 0;
  for (auto const &[begin, count] : chunk_slots)
    total += count;
  // Each chunk may end in a partial tile: at most total / tile + chunks tiles, kept within the tag space.
  auto const budget = max_tiles - static_cast<std::int64_t>(chunk_slots.size());
  tile = std::max({tile, std::int64_t{1}, (total + budget - 1) / budget});
  std::vector<Tile> tiles;
  for (std::size_t c = 0; c < chunk_slots.size(); ++c)
    for (std::int64_t a = 0; a < chunk_slots[c].second; a += tile)
      tiles.push_back({static_cast<int>(c), chunk_slots[c].first + a,
                       chunk_slots[c].first + std::min(a + tile, chunk_slots[c].second)});
  return tiles;
}

// Slots per tile of the comet backward: at least the forward's M tile, and enough that each local expert gets about
// 256 rows of it (topk / (E/EP) rows per slot on average). Every (tile, expert) is a GEMM that packs the expert's
// whole weight, so smaller tiles spend their time packing; the tiles of a source still pipeline (M = 4096 at E/EP = 4,
// topk = 2 cuts a source's slots into about six).
std::int64_t comet_tile_slots(MoeConfig const &config, CometParams const &comet) {
  std::int64_t const rows_per_gemm = 256;
  return std::max<std::int64_t>({comet.tile_m, 1, rows_per_gemm * config.experts_per_group() / config.topk});
}

template <class ExecSpace> void BackwardRun<ExecSpace>::allocate_gradients() {
  auto const m = sz(layer.config.tokens), nn = sz(n), e_all = sz(layer.config.experts);
  auto const shape_is = [](auto const &v, std::size_t a, std::size_t b, std::size_t c = 0) {
    return v.extent(0) == a && v.extent(1) == b && (c == 0 || v.extent(2) == c);
  };
  if (!shape_is(grads.tokens, m, nn))
    grads.tokens = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::grad_tokens"), m, nn);
  if (!shape_is(grads.logits, m, e_all))
    grads.logits = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::grad_logits"), m, e_all);
  auto const &wt = layer.weights;
  if (!shape_is(grads.experts.w0, wt.w0.extent(0), wt.w0.extent(1), wt.w0.extent(2)))
    grads.experts.w0 = HostTensor("Tessel::moe::grad_w0", wt.w0.extent(0), wt.w0.extent(1), wt.w0.extent(2));
  if (!shape_is(grads.experts.w1, wt.w1.extent(0), wt.w1.extent(1), wt.w1.extent(2)))
    grads.experts.w1 = HostTensor("Tessel::moe::grad_w1", wt.w1.extent(0), wt.w1.extent(1), wt.w1.extent(2));
  Impl::zero(space, grads.experts.w0.data(), static_cast<std::int64_t>(grads.experts.w0.size()));
  Impl::zero(space, grads.experts.w1.data(), static_cast<std::int64_t>(grads.experts.w1.size()));
  auto const &gate = layer.saved.gate;
  if (gate.kind == GateInput::Kind::weight) {
    if (!shape_is(grads.gate_weight, nn, e_all))
      grads.gate_weight = HostMatrix("Tessel::moe::grad_gate_weight", nn, e_all);
    if (gate.bias.data() != nullptr && grads.gate_bias.extent(0) != e_all)
      grads.gate_bias = HostVector("Tessel::moe::grad_gate_bias", e_all);
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::layout() {
  auto const &plan = layer.plan;
  int const groups = plan.groups;
  // Owner side: this rank's output gradient per group's slots, and the tiles it sends each group.
  out_off = exclusive_offsets(plan.group_slots);
  owner_tiles.resize(sz(groups));
  for (int g = 0; g < groups; ++g) {
    std::vector<std::pair<std::int64_t, std::int64_t>> cs;
    for (int c = 0; c < chunks; ++c)
      cs.emplace_back(plan.slot_begin(c, g), plan.slot_count(c, g));
    owner_tiles[sz(g)] = slot_tiles(cs, tile_slots);
  }
  // Expert side: per source, its slots (all chunks), its tiles and where its rows' gradients go.
  slots_of = layer.source_slots();
  layer.layout_combine(slots_of); // token gradients per source: the forward's combine layout, one column block
  in_off.assign(sz(world) + 1, 0);
  source_tiles.resize(sz(world));
  for (int s = 0; s < world; ++s) {
    in_off[sz(s) + 1] = in_off[sz(s)] + (s == me ? 0 : slots_of[sz(s)]);
    std::vector<std::pair<std::int64_t, std::int64_t>> cs;
    for (int c = 0; c < chunks; ++c)
      cs.emplace_back(meta(c, s).slot_begin, meta(c, s).slot_count);
    source_tiles[sz(s)] = slot_tiles(cs, tile_slots);
    TESSEL_REQUIRE(static_cast<std::int64_t>(source_tiles[sz(s)].size()) <= max_tiles, context_text, ": ",
                   source_tiles[sz(s)].size(), " tiles from rank ", s, " exceed the tag space");
  }
  // Rows kept for the weight gradients: (chunk, source, expert)-major.
  rows_at.assign(sz(chunks * world * local_experts) + 1, 0);
  w_send_off.assign(sz(chunks * world) + 1, 0);
  std::int64_t max_rows = 1;
  for (int c = 0; c < chunks; ++c)
    for (int s = 0; s < world; ++s) {
      w_send_off[sz(c * world + s) + 1] = w_send_off[sz(c * world + s)] + meta(c, s).rows();
      for (int e = 0; e < local_experts; ++e) {
        auto const rows = meta(c, s).expert_rows[sz(e)];
        rows_at[block(c, s, e) + 1] = rows_at[block(c, s, e)] + rows;
        max_rows = std::max(max_rows, rows);
      }
    }
  auto const total = rows_at.back();
  gd = ensure(layer.grad_g, "Tessel::moe::grad_rows", sz(total * n));
  awd = ensure(layer.grad_aw, "Tessel::moe::grad_weighted_hidden", sz(total * ffn_per_rank));
  dhd = ensure(layer.grad_dh, "Tessel::moe::grad_pre", sz(total * c0));
  pred = ensure(layer.grad_pre, "Tessel::moe::grad_recomputed_pre", sz(max_rows * c0));
  qd = ensure(layer.grad_q, "Tessel::moe::grad_q", sz(max_rows * ffn_per_rank));
  dxd = ensure(layer.grad_dx, "Tessel::moe::grad_x_rows", sz(max_rows * n));
  wsd = ensure(layer.grad_w_send, "Tessel::moe::grad_weight_send", sz(w_send_off.back()));
  // Owner side: the combine weights' gradients each rank returns, its group's rows chunk by chunk.
  w_recv_off.assign(sz(world) + 1, 0);
  group_rows.assign(sz(groups), 0);
  for (int g = 0; g < groups; ++g)
    for (int c = 0; c < chunks; ++c)
      group_rows[sz(g)] += plan.block_end(c, g) - plan.block_begin(c, g);
  for (int r = 0; r < world; ++r)
    w_recv_off[sz(r) + 1] = w_recv_off[sz(r)] + (r == me ? 0 : group_rows[sz(layer.group_of(r))]);
  wrd = ensure(layer.grad_w_recv, "Tessel::moe::grad_weight_recv", sz(w_recv_off.back()));
  god = ensure(layer.grad_out, "Tessel::moe::grad_out", sz(out_off.back() * n));
  gid = ensure(layer.grad_in, "Tessel::moe::grad_in", sz(in_off.back() * n));
}

template <class ExecSpace> void BackwardRun<ExecSpace>::pack_output_gradient(ConstHostMatrix d_out) {
  auto const m = layer.config.tokens;
  auto const &plan = layer.plan;
  std::vector<std::int32_t> slot_token;
  for (int g = 0; g < plan.groups; ++g) {
    slot_token.assign(sz(plan.group_slots[sz(g)]), 0);
    for (std::int64_t t = 0; t < m; ++t) {
      auto const u = plan.token_slot[sz(g * m + t)];
      if (u >= 0)
        slot_token[sz(u)] = static_cast<std::int32_t>(t);
    }
    Impl::gather_rows(space, {d_out.data(), m, n, n}, slot_token.data(), plan.group_slots[sz(g)],
                      {god + out_off[sz(g)] * n, plan.group_slots[sz(g)], n, n});
    compat::fence(space, "Tessel::moe::pack_output_gradient");
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::post_receives() {
  auto const &plan = layer.plan;
  // Output-gradient tiles from each source (count first: a callback may fire as soon as its receive is posted).
  bool const no_messages = mode == Mode::compute_only;
  landed.assign(sz(world), {});
  for (int s = 0; s < world; ++s)
    landed[sz(s)].assign(source_tiles[sz(s)].size(), s == me || no_messages ? 1 : 0);
  for (int k = 1; k < world; ++k) {
    int const s = (me - k + world) % world;
    tiles_expected += static_cast<int>(source_tiles[sz(s)].size());
    if (no_messages)
      for (std::size_t t = 0; t < source_tiles[sz(s)].size(); ++t)
        ready.emplace_back(s, static_cast<int>(t));
  }
  if (no_messages) {
    tiles_landed = tiles_expected;
    Impl::zero(space, gid, in_off.back() * n); // defined values: NaN or denormal garbage would change the timing
    return;
  }
  for (int k = 1; k < world; ++k) {
    int const s = (me - k + world) % world;
    auto const &tiles = source_tiles[sz(s)];
    for (std::size_t t = 0; t < tiles.size(); ++t) {
      auto const &tile = tiles[t];
      engine.recv(s, tag_grad_out + static_cast<int>(t), gid + (in_off[sz(s)] + tile.slot_begin) * n,
                  sz((tile.slot_end - tile.slot_begin) * n), DataType::float32,
                  tessel::Impl::concat("output gradient tile ", t), [this, s, t] {
                    {
                      std::lock_guard<std::mutex> lock(engine.notify_mutex());
                      ready.emplace_back(s, static_cast<int>(t));
                      landed[sz(s)][t] = 1;
                      ++tiles_landed;
                      if (layer.options.trace)
                        landed_at.push_back({since(t0), since(t0), tessel::Impl::concat("landed s=", s, " t=", t)});
                    }
                    engine.notify();
                  });
    }
  }
  // Token gradients and combine-weight gradients from every other rank.
  for (int k = 1; k < world; ++k) {
    int const r = (me + k) % world, g = layer.group_of(r);
    auto const &tiles = owner_tiles[sz(g)];
    for (std::size_t t = 0; t < tiles.size(); ++t) {
      auto const &tile = tiles[t];
      replies_left.fetch_add(1);
      engine.recv(r, tag_grad_x + static_cast<int>(t),
                  layer.combine_recv.data() + layer.recv_off[sz(r)] + tile.slot_begin * n,
                  sz((tile.slot_end - tile.slot_begin) * n), DataType::float32,
                  tessel::Impl::concat("token gradient tile ", t), [this] {
                    replies_left.fetch_sub(1);
                    engine.notify();
                  });
    }
    std::int64_t offset = 0;
    for (int c = 0; c < chunks; ++c) {
      auto const rows = plan.block_end(c, g) - plan.block_begin(c, g);
      if (rows > 0) {
        replies_left.fetch_add(1);
        engine.recv(r, tag_grad_w + c, wrd + w_recv_off[sz(r)] + offset, sz(rows), DataType::float32,
                    tessel::Impl::concat("combine-weight gradients of chunk ", c), [this] {
                      replies_left.fetch_sub(1);
                      engine.notify();
                    });
      }
      offset += rows;
    }
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::post_sends() {
  if (mode == Mode::compute_only)
    return;
  std::size_t most = 0;
  for (auto const &tiles : owner_tiles)
    most = std::max(most, tiles.size());
  for (std::size_t t = 0; t < most; ++t)
    for (int k = 1; k < world; ++k) {
      int const d = (me + k) % world, g = layer.group_of(d);
      auto const &tiles = owner_tiles[sz(g)];
      if (t >= tiles.size())
        continue;
      auto const &tile = tiles[t];
      engine.send(d, tag_grad_out + static_cast<int>(t), god + (out_off[sz(g)] + tile.slot_begin) * n,
                  sz((tile.slot_end - tile.slot_begin) * n), DataType::float32,
                  tessel::Impl::concat("output gradient tile ", t));
    }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::compute() {
  tiles_left_of.assign(sz(chunks * world), 0);
  for (int s = 0; s < world; ++s)
    for (auto const &tile : source_tiles[sz(s)])
      ++tiles_left_of[sz(tile.chunk * world + s)];
  for (int c = 0; c < chunks; ++c)
    for (int s = 0; s < world; ++s)
      if (tiles_left_of[sz(c * world + s)] == 0)
        chunk_done(c, s); // no slots: its (empty) weight gradients are still due
  switch (schedule) {
  case Schedule::sequential:
    compute_sequential();
    break;
  case Schedule::pipelined:
    compute_pipelined();
    break;
  case Schedule::comet:
    compute_comet();
    break;
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::tiles(int s, int t_begin, int t_end, bool send_now) {
  auto const busy0 = Clock::now();
  auto const &first_tile = source_tiles[sz(s)][sz(t_begin)];
  int const c = first_tile.chunk;
  std::int64_t const slot_begin = first_tile.slot_begin, slot_end = source_tiles[sz(s)][sz(t_end - 1)].slot_end;
  auto const &ms = meta(c, s);
  float *const dx_slots = layer.combine_send.data() + layer.send_off[sz(s)];
  std::int64_t tile_rows = 0;
  if (mode != Mode::comm_only)
    Impl::zero(space, dx_slots + slot_begin * n, (slot_end - slot_begin) * n);
  for (int e = 0; e < local_experts && mode != Mode::comm_only; ++e) {
    auto const first = ms.expert_offset(e), rows = ms.expert_rows[sz(e)];
    auto const *slot = ms.slot.data();
    auto const lo = std::lower_bound(slot + first, slot + first + rows, slot_begin) - slot;
    auto const hi = std::lower_bound(slot + first, slot + first + rows, slot_end) - slot;
    auto const r = hi - lo;
    if (r == 0)
      continue;
    tile_rows += r;
    auto const at = rows_at[block(c, s, e)] + (lo - first);
    MatrixRef<float const> const x{layer.saved.rows[block(c, s, e)] + (lo - first) * n, r, n, n};
    MatrixRef<float> const g{gd + at * n, r, n, n}, aw{awd + at * ffn_per_rank, r, ffn_per_rank, ffn_per_rank},
        dpre{dhd + at * c0, r, c0, c0};
    MatrixRef<float> const pre{pred, r, c0, c0}, q{qd, r, ffn_per_rank, ffn_per_rank}, dx{dxd, r, n, n};
    MatrixRef<float const> const w0{&layer.weights.w0(e, 0, 0), n, c0, c0},
        w1{&layer.weights.w1(e, 0, 0), ffn_per_rank, n, n};
    Impl::gather_rows(space, {grad_rows_of(s), slots_of[sz(s)], n, n}, slot + lo, r, g);
    gemm_panels(Op::none, x, Op::none, w0, 0.0f, pre);
    gemm_panels(Op::none, g, Op::transpose, w1, 0.0f, q);
    Impl::activation_backward(space, layer.config, pre, q, ms.weight.data() + lo, aw, dpre,
                              wsd + w_send_off[sz(c * world + s)] + lo);
    gemm_panels(Op::none, dpre, Op::transpose, w0, 0.0f, dx);
    Impl::scatter_add(space, r, slot + lo, 0, nullptr, dx, {dx_slots, slots_of[sz(s)], n, n});
    compat::fence(space, "Tessel::moe::backward_tile");
    pieces.push_back({c, s, e, lo - first, hi - first});
    if (!engine.threaded())
      engine.progress();
  }
  layer.backward_stats.rows += tile_rows;
  for (int t = t_begin; t < t_end; ++t) {
    auto const &tl = source_tiles[sz(s)][sz(t)];
    if (s != me && tl.slot_end > tl.slot_begin && mode != Mode::compute_only) {
      auto send = [this, s, t, dx_slots, &tl] {
        engine.send(s, tag_grad_x + t, dx_slots + tl.slot_begin * n, sz((tl.slot_end - tl.slot_begin) * n),
                    DataType::float32, tessel::Impl::concat("token gradient tile ", t), {},
                    CommEngine::SendClass::urgent);
      };
      if (send_now)
        send();
      else
        deferred_sends.push_back(send);
    }
  }
  tiles_left_of[sz(c * world + s)] -= t_end - t_begin;
  if (tiles_left_of[sz(c * world + s)] == 0)
    chunk_done(c, s, send_now);
  layer.backward_stats.compute_busy += since(busy0);
  if (layer.options.trace)
    layer.backward_stats.trace.push_back(
        {seconds_between(t0, busy0), since(t0),
         tessel::Impl::concat("grad tile s=", s, " c=", c, " slots ", slot_begin, "-", slot_end)});
}

template <class ExecSpace> void BackwardRun<ExecSpace>::chunk_done(int c, int s, bool send_now) {
  auto const rows = meta(c, s).rows();
  if (s == me || rows == 0 || mode == Mode::compute_only)
    return;
  auto send = [this, c, s, rows] {
    engine.send(s, tag_grad_w + c, wsd + w_send_off[sz(c * world + s)], sz(rows), DataType::float32,
                tessel::Impl::concat("combine-weight gradients of chunk ", c), {}, CommEngine::SendClass::urgent);
  };
  if (send_now)
    send();
  else
    deferred_sends.push_back(send);
}

template <class ExecSpace>
void BackwardRun<ExecSpace>::gemm_panels(Op op_a, MatrixRef<float const> a, Op op_b, MatrixRef<float const> b,
                                         float beta, MatrixRef<float> c) {
  std::int64_t const depth = op_a == Op::none ? a.cols : a.rows;
  std::int64_t panel = c.cols;
  if (!engine.threaded() && engine.moving())
    panel = std::max<std::int64_t>(256, ((std::int64_t{1} << 28) / std::max<std::int64_t>(c.rows * depth, 1) + 63) /
                                            64 * 64);
  for (std::int64_t j = 0; j < c.cols; j += panel) {
    auto const end = std::min(j + panel, c.cols);
    auto const bp = op_b == Op::none ? b.cols_range(j, end) : b.rows_range(j, end);
    tessel::gemm(space, op_a, op_b, 1.0f, a, bp, beta, c.cols_range(j, end));
    if (end < c.cols)
      engine.progress();
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::weight_gradient_piece() {
  auto const busy0 = Clock::now();
  auto const p = pieces.front();
  pieces.pop_front();
  auto const r = p.end - p.begin, at = rows_at[block(p.c, p.s, p.e)] + p.begin;
  MatrixRef<float const> const x{layer.saved.rows[block(p.c, p.s, p.e)] + p.begin * n, r, n, n};
  gemm_panels(Op::transpose, MatrixRef<float const>{awd + at * ffn_per_rank, r, ffn_per_rank, ffn_per_rank}, Op::none,
              MatrixRef<float const>{gd + at * n, r, n, n}, 1.0f,
              MatrixRef<float>{&grads.experts.w1(p.e, 0, 0), ffn_per_rank, n, n});
  gemm_panels(Op::transpose, x, Op::none, MatrixRef<float const>{dhd + at * c0, r, c0, c0}, 1.0f,
              MatrixRef<float>{&grads.experts.w0(p.e, 0, 0), n, c0, c0});
  compat::fence(space, "Tessel::moe::weight_gradients");
  layer.backward_stats.compute_busy += since(busy0);
  if (layer.options.trace)
    layer.backward_stats.trace.push_back(
        {seconds_between(t0, busy0), since(t0),
         tessel::Impl::concat("weight grads s=", p.s, " c=", p.c, " e=", p.e, " rows ", p.begin, "-", p.end)});
}

template <class ExecSpace> void BackwardRun<ExecSpace>::weight_gradients_all() {
  while (!pieces.empty()) {
    weight_gradient_piece();
    engine.progress();
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::finish() {
  auto const wait0 = Clock::now();
  engine.wait([&] { return replies_left.load() == 0; });
  engine.join();
  layer.backward_stats.compute_wait += since(wait0);
  layer.backward_stats.comm_cpu = engine.cpu_seconds();
  if (layer.options.trace)
    layer.backward_stats.trace.push_back({seconds_between(t0, wait0), since(t0), "wait token gradients"});
  auto const busy0 = Clock::now();
  if (mode != Mode::comm_only) {
    layer.final_sum(space, grads.tokens, {0, n}, true);
    gate_backward();
  }
  layer.backward_stats.route = since(busy0);
  layer.backward_stats.compute_busy += since(busy0);
  layer.backward_stats.total = since(t0);
  if (layer.options.trace) {
    layer.backward_stats.trace.push_back({seconds_between(t0, busy0), layer.backward_stats.total, "token sum + gate"});
    layer.backward_stats.trace.insert(layer.backward_stats.trace.end(), landed_at.begin(), landed_at.end());
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::gate_backward() {
  auto const dw = combine_weight_gradients();
  logit_gradients(dw, aux_gradient());
  if (layer.saved.gate.kind == GateInput::Kind::weight)
    gate_weight_gradients();
}

template <class ExecSpace> std::vector<float> BackwardRun<ExecSpace>::combine_weight_gradients() const {
  auto const &plan = layer.plan;
  auto const &routing = layer.routing;
  auto const m = layer.config.tokens;
  int const topk = layer.config.topk, groups = plan.groups;
  std::vector<float> dw(sz(m * topk), 0.0f);
  for (int g = 0; g < groups; ++g) {
    std::int64_t in_group = 0;
    for (int c = 0; c < chunks; ++c) {
      for (int e = 0; e < local_experts; ++e) {
        auto const b = plan.block_offsets[sz((c * groups + g) * local_experts + e)],
                   end = plan.block_offsets[sz((c * groups + g) * local_experts + e + 1)];
        int const expert = g * local_experts + e;
        for (auto i = b; i < end; ++i) {
          auto const within = i - plan.block_begin(c, g);
          float sum = 0.0f;
          for (int r = g * layer.config.tp; r < (g + 1) * layer.config.tp; ++r)
            sum += r == me ? wsd[w_send_off[sz(c * world + me)] + within] : wrd[w_recv_off[sz(r)] + in_group + within];
          auto const t = plan.row_token[sz(i)];
          for (int k = 0; k < topk; ++k)
            if (routing.experts(t, k) == expert)
              dw[sz(t * topk + k)] = sum;
        }
      }
      in_group += plan.block_end(c, g) - plan.block_begin(c, g);
    }
  }
  return dw;
}

template <class ExecSpace> std::vector<double> BackwardRun<ExecSpace>::aux_gradient() const {
  // The load-balancing loss E sum_e f_e P_e: dL/dp_te = coef E f_e / T over all ranks' T tokens.
  int const e_all = layer.config.experts, topk = layer.config.topk;
  std::vector<double> aux_grad(sz(e_all), 0.0);
  if (aux <= 0.0 || mode != Mode::full)
    return aux_grad;
  std::vector<double> local(sz(e_all) + 1), global(local.size());
  for (int e = 0; e < e_all; ++e)
    local[sz(e)] = static_cast<double>(layer.routing.tokens_per_expert[sz(e)]);
  local[sz(e_all)] = static_cast<double>(layer.config.tokens);
  layer.comm.allreduce(local.data(), global.data(), local.size(), ReduceOp::sum);
  double const tokens = global[sz(e_all)];
  if (tokens > 0)
    for (int e = 0; e < e_all; ++e)
      aux_grad[sz(e)] = aux * e_all * (global[sz(e)] / (tokens * topk)) / tokens;
  return aux_grad;
}

template <class ExecSpace>
void BackwardRun<ExecSpace>::logit_gradients(std::vector<float> const &dw, std::vector<double> const &aux_grad) {
  auto const m = layer.config.tokens;
  int const topk = layer.config.topk, e_all = layer.config.experts;
  auto const logits = grads.logits;
  auto const probs = layer.routing.probabilities;
  auto const weights = layer.routing.weights;
  auto const experts = layer.routing.experts;
  bool const normalize = layer.config.normalize_topk;
  std::vector<double> dp(sz(e_all));
  for (std::int64_t t = 0; t < m; ++t) {
    // dL/dp_e, with p the softmax over all experts.
    for (int e = 0; e < e_all; ++e)
      dp[sz(e)] = aux_grad[sz(e)];
    if (normalize) {
      // w_k = p_k / sum_j p_j over the top-k: the softmax of the chosen logits, whose logit gradient is
      // w_k (dw_k - sum_j w_j dw_j), added below to the full softmax's.
      double mean = 0.0;
      for (int k = 0; k < topk; ++k)
        mean += static_cast<double>(weights(t, k)) * dw[sz(t * topk + k)];
      for (int e = 0; e < e_all; ++e)
        logits(t, e) = 0.0f;
      for (int k = 0; k < topk; ++k)
        logits(t, experts(t, k)) =
            static_cast<float>(static_cast<double>(weights(t, k)) * (dw[sz(t * topk + k)] - mean));
    } else {
      for (int k = 0; k < topk; ++k)
        dp[sz(experts(t, k))] += dw[sz(t * topk + k)];
      for (int e = 0; e < e_all; ++e)
        logits(t, e) = 0.0f;
    }
    double mean = 0.0;
    for (int e = 0; e < e_all; ++e)
      mean += static_cast<double>(probs(t, e)) * dp[sz(e)];
    for (int e = 0; e < e_all; ++e)
      logits(t, e) += static_cast<float>(static_cast<double>(probs(t, e)) * (dp[sz(e)] - mean));
  }
}

template <class ExecSpace> void BackwardRun<ExecSpace>::gate_weight_gradients() {
  auto const &gate = layer.saved.gate;
  auto const m = layer.config.tokens;
  int const e_all = layer.config.experts;
  auto const logits = grads.logits;
  // dX += dlogits Wg^T; dWg = X^T dlogits and dbias = column sums, summed over all ranks.
  MatrixRef<float const> const dl{logits.data(), m, e_all, e_all};
  tessel::gemm(space, Op::none, Op::transpose, 1.0f, dl, MatrixRef<float const>{gate.weight.data(), n, e_all, e_all},
               1.0f, MatrixRef<float>{grads.tokens.data(), m, n, n});
  tessel::gemm(space, Op::transpose, Op::none, 1.0f, MatrixRef<float const>{layer.saved.tokens.data(), m, n, n}, dl,
               0.0f, MatrixRef<float>{grads.gate_weight.data(), n, e_all, e_all});
  compat::fence(space, "Tessel::moe::gate_backward");
  std::vector<float> reduced(sz(n * e_all + e_all), 0.0f);
  std::copy(grads.gate_weight.data(), grads.gate_weight.data() + n * e_all, reduced.begin());
  for (std::int64_t t = 0; t < m; ++t)
    for (int e = 0; e < e_all; ++e)
      reduced[sz(n * e_all + e)] += logits(t, e);
  if (mode == Mode::full)
    layer.comm.allreduce(reduced.data(), reduced.data(), reduced.size(), ReduceOp::sum);
  std::copy(reduced.begin(), reduced.begin() + n * e_all, grads.gate_weight.data());
  if (gate.bias.data() != nullptr)
    for (int e = 0; e < e_all; ++e)
      grads.gate_bias(e) = reduced[sz(n * e_all + e)];
}

#define TESSEL_MOE_INSTANTIATE_BACKWARD_RUN(SPACE) template class BackwardRun<SPACE>;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_BACKWARD_RUN)

} // namespace Impl

using namespace Impl;

template <class ExecSpace>
void MoeLayer::State::backward(ExecSpace const &space, ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule,
                               double aux_loss_coef) {
  with_context(backward_context(schedule),
               [&] { BackwardRun<ExecSpace>(*this, space, schedule, grads, aux_loss_coef).run(d_out); });
}

template <class ExecSpace>
AloneTimes MoeLayer::State::measure_backward_alone(ExecSpace const &space, ConstHostMatrix d_out, int repeats,
                                                   bool comm_part, bool comp_part) {
  MoeGradients scratch;
  auto const saved_stats = backward_stats;
  auto const median_of_max = [&](double &minimum, Mode mode) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      comm.barrier();
      auto const t0 = Clock::now();
      with_context(backward_context(Schedule::sequential),
                   [&] { BackwardRun<ExecSpace>(*this, space, Schedule::sequential, scratch, 0.0, mode).run(d_out); });
      times.push_back(comm.allreduce_value(since(t0), ReduceOp::max));
    }
    std::sort(times.begin(), times.end());
    minimum = times.front();
    return times[times.size() / 2];
  };
  AloneTimes result;
  if (comp_part)
    result.comp = median_of_max(result.comp_min, Mode::compute_only);
  if (comm_part)
    result.comm = median_of_max(result.comm_min, Mode::comm_only);
  backward_stats = saved_stats;
  return result;
}

#define TESSEL_MOE_INSTANTIATE_BACKWARD(SPACE)                                                                         \
  template void MoeLayer::State::backward(SPACE const &, ConstHostMatrix, MoeGradients &, Schedule, double);           \
  template AloneTimes MoeLayer::State::measure_backward_alone(SPACE const &, ConstHostMatrix, int, bool, bool);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_BACKWARD)

} // namespace tessel::moe

#include "impl/LayerState.hpp"

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <cstring>

namespace tessel::moe {

namespace Impl {

std::vector<std::int32_t> encode_route(DispatchPlan const &plan, int chunk, int group) {
  int const local_experts = plan.experts_per_group;
  auto const begin = plan.block_begin(chunk, group), end = plan.block_end(chunk, group);
  auto const rows = static_cast<std::size_t>(end - begin);
  std::vector<std::int32_t> words(static_cast<std::size_t>(local_experts) + 2 + 2 * rows);
  for (int e = 0; e < local_experts; ++e)
    words[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(plan.expert_rows(chunk, group, e));
  words[static_cast<std::size_t>(local_experts)] = static_cast<std::int32_t>(plan.slot_begin(chunk, group));
  words[static_cast<std::size_t>(local_experts) + 1] = static_cast<std::int32_t>(plan.slot_count(chunk, group));
  auto *slots = words.data() + local_experts + 2;
  for (std::size_t r = 0; r < rows; ++r) {
    slots[r] = plan.row_slot[static_cast<std::size_t>(begin) + r];
    std::memcpy(slots + rows + r, &plan.row_weight[static_cast<std::size_t>(begin) + r], sizeof(float));
  }
  return words;
}

std::size_t route_capacity(MoeConfig const &config, std::int64_t chunk_tokens) {
  return static_cast<std::size_t>(config.experts_per_group()) + 2 +
         2 * static_cast<std::size_t>(chunk_tokens) * static_cast<std::size_t>(config.topk);
}

SourceMeta decode_route(std::vector<std::int32_t> const &words, int local_experts, int source,
                        std::string const &context) {
  SourceMeta meta;
  TESSEL_REQUIRE(words.size() >= static_cast<std::size_t>(local_experts) + 2, context, ": route message from rank ",
                 source, " is too short");
  meta.expert_rows.resize(static_cast<std::size_t>(local_experts));
  std::int64_t rows = 0;
  for (int e = 0; e < local_experts; ++e) {
    auto const r = words[static_cast<std::size_t>(e)];
    TESSEL_REQUIRE(r >= 0, context, ": route message from rank ", source, " announces ", r, " rows for expert ", e);
    meta.expert_rows[static_cast<std::size_t>(e)] = r;
    rows += r;
  }
  meta.slot_begin = words[static_cast<std::size_t>(local_experts)];
  meta.slot_count = words[static_cast<std::size_t>(local_experts) + 1];
  TESSEL_REQUIRE(static_cast<std::size_t>(local_experts) + 2 + 2 * static_cast<std::size_t>(rows) <= words.size() &&
                     meta.slot_begin >= 0 && meta.slot_count >= 0 && meta.slot_count <= rows,
                 context, ": route message from rank ", source, " is inconsistent (", rows, " rows, ", meta.slot_count,
                 " slots, ", words.size(), " words)");
  auto const *slots = words.data() + local_experts + 2;
  meta.slot.assign(slots, slots + rows);
  meta.weight.resize(static_cast<std::size_t>(rows));
  if (rows > 0) // an empty vector's data() may be null, which memcpy must not get even for zero bytes
    std::memcpy(meta.weight.data(), slots + rows, static_cast<std::size_t>(rows) * sizeof(float));
  for (auto s : meta.slot)
    TESSEL_REQUIRE(s >= meta.slot_begin && s < meta.slot_begin + meta.slot_count, context, ": route message from rank ",
                   source, " names slot ", s, " outside its range");
  return meta;
}

float *ensure(Kokkos::View<float *, Kokkos::HostSpace> &view, char const *label, std::size_t size) {
  if (view.extent(0) < std::max<std::size_t>(size, 1))
    view = Kokkos::View<float *, Kokkos::HostSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                                                    std::max<std::size_t>(size, 1));
  return view.data();
}

} // namespace Impl

using namespace Impl;

void MoeLayer::State::check_inputs(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out) const {
  auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden);
  TESSEL_REQUIRE(tokens.extent(0) == m && tokens.extent(1) == n, "MoeLayer::forward: tokens are ", tokens.extent(0),
                 " x ", tokens.extent(1), ", expected M x N = ", m, " x ", n);
  TESSEL_REQUIRE(out.extent(0) == m && out.extent(1) == n, "MoeLayer::forward: output is ", out.extent(0), " x ",
                 out.extent(1), ", expected M x N = ", m, " x ", n);
  TESSEL_REQUIRE(out.data() != tokens.data() || m * n == 0, "MoeLayer::forward: output must not alias the tokens");
  (void)gate;
}

void MoeLayer::State::check_finite(ConstHostMatrix tokens, GateInput const &gate) const {
  auto const m = static_cast<std::size_t>(tokens.extent(0)), n = static_cast<std::size_t>(tokens.extent(1));
  std::int64_t mine[2] = {-1, -1};
  auto const bad = first_non_finite(tokens.data(), m * n);
  if (bad < m * n)
    mine[0] = static_cast<std::int64_t>(bad);
  if (gate.kind == GateInput::Kind::logits) {
    auto const count = gate.logits.extent(0) * gate.logits.extent(1);
    auto const bad_logit = first_non_finite(gate.logits.data(), count);
    if (bad_logit < count)
      mine[1] = static_cast<std::int64_t>(bad_logit);
  }
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(world()));
  comm.host_allgather(mine, all.data(), sizeof(mine));
  for (int r = 0; r < world(); ++r) {
    auto const t = all[2 * static_cast<std::size_t>(r)], l = all[2 * static_cast<std::size_t>(r) + 1];
    TESSEL_REQUIRE(t < 0, "MoeLayer::forward: the tokens of rank ", r, " contain NaN or infinity at row ",
                   t / static_cast<std::int64_t>(n), ", column ", t % static_cast<std::int64_t>(n),
                   r == rank() ? tessel::Impl::concat(" (value ", tokens.data()[t < 0 ? 0 : t], ")") : std::string());
    TESSEL_REQUIRE(l < 0, "MoeLayer::forward: the gate logits of rank ", r, " contain NaN or infinity at row ",
                   l / config.experts, ", column ", l % config.experts);
  }
}

void MoeLayer::State::check_finite_gradient(ConstHostMatrix d_out) const {
  auto const count = d_out.extent(0) * d_out.extent(1), n = d_out.extent(1);
  auto const bad = first_non_finite(d_out.data(), count);
  std::int64_t const mine = bad < count ? static_cast<std::int64_t>(bad) : -1;
  std::vector<std::int64_t> all(static_cast<std::size_t>(world()));
  comm.host_allgather(&mine, all.data(), sizeof(mine));
  for (int r = 0; r < world(); ++r) {
    auto const at = all[static_cast<std::size_t>(r)];
    TESSEL_REQUIRE(at < 0, "MoeLayer::backward: the output gradient of rank ", r, " contains NaN or infinity at row ",
                   at / static_cast<std::int64_t>(n), ", column ", at % static_cast<std::int64_t>(n),
                   r == rank() ? tessel::Impl::concat(" (value ", d_out.data()[at < 0 ? 0 : at], ")") : std::string());
  }
}

template <class ExecSpace>
void MoeLayer::State::prelude(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int chunks,
                              bool finite, std::string const &context_text) {
  ScopedRegion region("Tessel::moe::prelude");
  if (finite)
    with_context(context_text, [&] { check_finite(tokens, gate); });
  route(space, config, tokens, gate, routing);
  plan = make_dispatch_plan(config, routing, chunks);
  auto const rows = plan.rows();
  std::int64_t const n = config.hidden;
  float *const packed = ensure(send_rows, "Tessel::moe::send_rows", static_cast<std::size_t>(rows * n));
  Impl::gather_rows(space, {tokens.data(), config.tokens, n, n}, plan.row_token.data(), rows, {packed, rows, n, n});
  compat::fence(space, "Tessel::moe::prelude");
}

template <class ExecSpace>
Clock::time_point MoeLayer::State::begin_overlapped(ExecSpace const &space, ConstHostMatrix tokens,
                                                    GateInput const &gate, int chunks, Schedule schedule) {
  auto const t0 = Clock::now();
  prelude(space, tokens, gate, chunks, options.check_finite, context(schedule));
  stats = ForwardStats{};
  stats.schedule = schedule;
  stats.route = since(t0);
  return t0;
}

void MoeLayer::State::layout_combine(std::vector<std::int64_t> const &source_slots) {
  std::int64_t const n = config.hidden;
  send_off = exclusive_offsets(source_slots);
  for (auto &o : send_off)
    o *= n;
  ensure(combine_send, "Tessel::moe::combine_send", static_cast<std::size_t>(send_off.back()));
  std::vector<std::int64_t> slots(static_cast<std::size_t>(world()));
  for (int r = 0; r < world(); ++r)
    slots[static_cast<std::size_t>(r)] = plan.group_slots[static_cast<std::size_t>(group_of(r))];
  recv_off = exclusive_offsets(slots);
  for (auto &o : recv_off)
    o *= n;
  ensure(combine_recv, "Tessel::moe::combine_recv", static_cast<std::size_t>(recv_off.back()));
}

template <class ExecSpace>
std::pair<Clock::time_point, Clock::time_point>
MoeLayer::State::finish_combines(ExecSpace const &space, Impl::CommEngine &engine,
                                 std::atomic<int> const &combines_left, HostMatrix out,
                                 std::vector<std::int64_t> const &split_cols) {
  auto const wait = Clock::now();
  engine.wait([&] { return combines_left.load() == 0; });
  engine.join();
  stats.comm_cpu = engine.cpu_seconds();
  stats.compute_wait += since(wait);
  auto const busy = Clock::now();
  final_sum(space, out, split_cols, true);
  stats.compute_busy += since(busy);
  return {wait, busy};
}

template <class ExecSpace>
void MoeLayer::State::final_sum(ExecSpace const &space, HostMatrix out, std::vector<std::int64_t> const &split_cols,
                                bool self_in_send) {
  std::vector<Impl::Contribution> parts;
  auto const m = static_cast<std::size_t>(config.tokens);
  for (int r = 0; r < world(); ++r) {
    int const g = group_of(r);
    Impl::Contribution c;
    c.slots = plan.group_slots[static_cast<std::size_t>(g)];
    c.token_slot = plan.token_slot.data() + static_cast<std::size_t>(g) * m;
    c.data = (r == rank() && self_in_send) ? combine_send.data() + send_off[static_cast<std::size_t>(r)]
                                           : combine_recv.data() + recv_off[static_cast<std::size_t>(r)];
    parts.push_back(c);
  }
  Impl::combine_sum(space, parts, split_cols, {out.data(), config.tokens, config.hidden, config.hidden});
  compat::fence(space, "Tessel::moe::final_sum");
}

template <class ExecSpace>
void MoeLayer::State::ffn_rows(ExecSpace const &space, int e, MatrixRef<float const> xin, MatrixRef<float> yout) {
  std::int64_t const ffn_per_rank = config.ffn_per_rank(), n = config.hidden, panel = 2048;
  float *const hp =
      ensure(h, "Tessel::moe::hidden", static_cast<std::size_t>(std::min(panel, xin.rows) * ffn_per_rank));
  for (std::int64_t r = 0; r < xin.rows; r += panel) {
    auto const end = std::min(r + panel, xin.rows);
    MatrixRef<float> const hr{hp, end - r, ffn_per_rank, ffn_per_rank};
    Impl::layer0_tile(space, config, weights, e, xin.rows_range(r, end), hr, scratch);
    compat::fence(space, "Tessel::moe::ffn");
    Impl::layer1_block(space, config, weights, e, {hp, end - r, ffn_per_rank, ffn_per_rank}, 0, n,
                       yout.rows_range(r, end));
  }
}

template <class ExecSpace>
void MoeLayer::State::baseline_compute(ExecSpace const &space, int chunk, std::vector<float const *> const &source_rows,
                                       std::function<void()> const &between_experts) {
  ScopedRegion region("Tessel::moe::experts");
  int const w = world(), local_experts = config.experts_per_group();
  std::int64_t const n = config.hidden;
  auto const &meta = metas[static_cast<std::size_t>(chunk)];
  std::int64_t total = 0;
  for (auto const &s : meta)
    total += s.rows();
  float *const xpd = ensure(xp, "Tessel::moe::permuted_rows", static_cast<std::size_t>(total * n));
  float *const yd = ensure(y, "Tessel::moe::expert_out", static_cast<std::size_t>(total * n));
  std::vector<std::vector<std::int64_t>> row_map(static_cast<std::size_t>(w));
  for (int s = 0; s < w; ++s)
    row_map[static_cast<std::size_t>(s)].resize(static_cast<std::size_t>(meta[static_cast<std::size_t>(s)].rows()));
  std::vector<std::int64_t> expert_begin(static_cast<std::size_t>(local_experts) + 1, 0);
  std::int64_t pos = 0;
  for (int e = 0; e < local_experts; ++e) {
    expert_begin[static_cast<std::size_t>(e)] = pos;
    for (int s = 0; s < w; ++s) {
      auto const &ms = meta[static_cast<std::size_t>(s)];
      auto const rows = ms.expert_rows[static_cast<std::size_t>(e)];
      auto const first = ms.expert_offset(e);
      if (rows > 0)
        Impl::copy_rows(space, {source_rows[static_cast<std::size_t>(s)] + first * n, rows, n, n},
                        {xpd + pos * n, rows, n, n});
      for (std::int64_t i = 0; i < rows; ++i)
        row_map[static_cast<std::size_t>(s)][static_cast<std::size_t>(first + i)] = pos + i;
      pos += rows;
    }
  }
  expert_begin[static_cast<std::size_t>(local_experts)] = pos;
  compat::fence(space, "Tessel::moe::permute");
  for (int e = 0; e < local_experts; ++e) {
    auto const b = expert_begin[static_cast<std::size_t>(e)], end = expert_begin[static_cast<std::size_t>(e) + 1];
    if (end > b)
      ffn_rows(space, e, {xpd + b * n, end - b, n, n}, {yd + b * n, end - b, n, n});
    if (between_experts)
      between_experts();
  }
  for (int s = 0; s < w; ++s) {
    auto const &ms = meta[static_cast<std::size_t>(s)];
    if (ms.slot_count == 0)
      continue;
    auto const slots = Impl::make_slot_rows(ms.slot_count, ms.slot, ms.weight, ms.slot_begin);
    Impl::topk_reduce(
        space, slots, row_map[static_cast<std::size_t>(s)], {yd, total, n, n},
        {combine_send.data() + send_off[static_cast<std::size_t>(s)] + ms.slot_begin * n, ms.slot_count, n, n});
  }
  compat::fence(space, "Tessel::moe::experts");
}

void MoeLayer::State::exchange_routes(int chunk) {
  int const w = world(), me = rank();
  auto const cap = route_capacity(config, plan.chunk_tokens[static_cast<std::size_t>(chunk) + 1] -
                                              plan.chunk_tokens[static_cast<std::size_t>(chunk)]);
  std::vector<std::vector<std::int32_t>> in(static_cast<std::size_t>(w)), out(static_cast<std::size_t>(w));
  std::vector<Request> requests;
  for (int k = 1; k < w; ++k) {
    int const s = (me - k + w) % w;
    in[static_cast<std::size_t>(s)].assign(cap, 0);
    requests.push_back(comm.irecv(in[static_cast<std::size_t>(s)].data(), cap, s, tag_route + chunk));
  }
  for (int k = 1; k < w; ++k) {
    int const d = (me + k) % w;
    out[static_cast<std::size_t>(d)] = encode_route(plan, chunk, group_of(d));
    requests.push_back(comm.isend(out[static_cast<std::size_t>(d)].data(), out[static_cast<std::size_t>(d)].size(), d,
                                  tag_route + chunk));
  }
  Request::wait_all(requests, comm.timeout());
  metas.assign(static_cast<std::size_t>(plan.chunks), std::vector<SourceMeta>(static_cast<std::size_t>(w)));
  for (int s = 0; s < w; ++s)
    metas[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(s)] =
        s == me ? own_meta(chunk)
                : decode_route(in[static_cast<std::size_t>(s)], config.experts_per_group(), s, "route exchange");
}

void MoeLayer::State::dispatch_alltoallv() {
  int const w = world();
  std::int64_t const n = config.hidden;
  std::vector<std::size_t> sc(static_cast<std::size_t>(w)), sd(sc.size()), rc(sc.size()), rd(sc.size());
  std::int64_t total = 0;
  for (int p = 0; p < w; ++p) {
    int const g = group_of(p);
    sc[static_cast<std::size_t>(p)] = static_cast<std::size_t>((plan.block_end(0, g) - plan.block_begin(0, g)) * n);
    sd[static_cast<std::size_t>(p)] = static_cast<std::size_t>(plan.block_begin(0, g) * n);
    rc[static_cast<std::size_t>(p)] = static_cast<std::size_t>(metas[0][static_cast<std::size_t>(p)].rows() * n);
    rd[static_cast<std::size_t>(p)] = static_cast<std::size_t>(total);
    total += metas[0][static_cast<std::size_t>(p)].rows() * n;
  }
  x_off.assign(rd.begin(), rd.end());
  float *const xd = ensure(x, "Tessel::moe::recv_rows", static_cast<std::size_t>(total));
  comm.alltoallv(send_rows.data(), sc.data(), sd.data(), xd, rc.data(), rd.data(), DataType::float32);
}

void MoeLayer::State::combine_alltoallv() {
  int const w = world();
  std::int64_t const n = config.hidden;
  std::vector<std::size_t> sc(static_cast<std::size_t>(w)), sd(sc.size()), rc(sc.size()), rd(sc.size());
  for (int p = 0; p < w; ++p) {
    sc[static_cast<std::size_t>(p)] = static_cast<std::size_t>(metas[0][static_cast<std::size_t>(p)].slot_count * n);
    sd[static_cast<std::size_t>(p)] = static_cast<std::size_t>(send_off[static_cast<std::size_t>(p)]);
    rc[static_cast<std::size_t>(p)] =
        static_cast<std::size_t>(plan.group_slots[static_cast<std::size_t>(group_of(p))] * n);
    rd[static_cast<std::size_t>(p)] = static_cast<std::size_t>(recv_off[static_cast<std::size_t>(p)]);
  }
  comm.alltoallv(combine_send.data(), sc.data(), sd.data(), combine_recv.data(), rc.data(), rd.data(),
                 DataType::float32);
}

std::vector<float const *> MoeLayer::State::sequential_sources() const {
  std::vector<float const *> src(static_cast<std::size_t>(world()));
  for (int s = 0; s < world(); ++s)
    src[static_cast<std::size_t>(s)] = x.data() + x_off[static_cast<std::size_t>(s)];
  return src;
}

std::vector<std::int64_t> MoeLayer::State::source_slots() const {
  std::vector<std::int64_t> slots(static_cast<std::size_t>(world()), 0);
  for (auto const &chunk : metas)
    for (int s = 0; s < world(); ++s)
      slots[static_cast<std::size_t>(s)] += chunk[static_cast<std::size_t>(s)].slot_count;
  return slots;
}

void MoeLayer::State::decode_metas(int chunks, std::vector<std::vector<std::int32_t>> const &route_in,
                                   std::string const &context_text) {
  int const w = world(), me = rank();
  metas.assign(sz(chunks), std::vector<SourceMeta>(sz(w)));
  for (int c = 0; c < chunks; ++c)
    for (int s = 0; s < w; ++s)
      metas[sz(c)][sz(s)] =
          s == me ? own_meta(c) : decode_route(route_in[sz(c * w + s)], config.experts_per_group(), s, context_text);
}

std::int64_t MoeLayer::State::total_rows() const {
  std::int64_t rows = 0;
  for (auto const &chunk : metas)
    for (auto const &s : chunk)
      rows += s.rows();
  return rows;
}

void MoeLayer::State::post_routes(CommEngine &engine, int chunks, RouteMessages &routes, bool destination_major) {
  int const w = world(), me = rank();
  routes.in.assign(sz(chunks * w), {});
  routes.out.assign(sz(chunks * w), {});
  for (int c = 0; c < chunks; ++c) {
    auto const cap = route_capacity(config, plan.chunk_tokens[sz(c) + 1] - plan.chunk_tokens[sz(c)]);
    for (int k = 1; k < w; ++k) {
      int const s = (me - k + w) % w;
      auto &buf = routes.in[sz(c * w + s)];
      buf.assign(cap, 0);
      engine.recv(s, tag_route + c, buf.data(), cap, DataType::int32,
                  tessel::Impl::concat("route message of chunk ", c), [&routes, &engine] {
                    routes.done.fetch_add(1);
                    engine.notify();
                  });
    }
  }
  auto const send = [&](int c, int k) {
    int const d = (me + k) % w;
    auto &buf = routes.out[sz(c * w + d)];
    buf = encode_route(plan, c, group_of(d));
    engine.send(d, tag_route + c, buf.data(), buf.size(), DataType::int32,
                tessel::Impl::concat("route message of chunk ", c), {}, CommEngine::SendClass::control);
  };
  for (int i = 0; i < chunks * (w - 1); ++i) {
    int const c = destination_major ? i % chunks : i / (w - 1);
    int const k = destination_major ? 1 + i / chunks : 1 + i % (w - 1);
    send(c, k);
  }
}

#define TESSEL_MOE_INSTANTIATE_LAYER_STEPS(SPACE)                                                                      \
  template void MoeLayer::State::prelude(SPACE const &, ConstHostMatrix, GateInput const &, int, bool,                 \
                                         std::string const &);                                                         \
  template Clock::time_point MoeLayer::State::begin_overlapped(SPACE const &, ConstHostMatrix, GateInput const &, int, \
                                                               Schedule);                                              \
  template std::pair<Clock::time_point, Clock::time_point> MoeLayer::State::finish_combines(                           \
      SPACE const &, CommEngine &, std::atomic<int> const &, HostMatrix, std::vector<std::int64_t> const &);           \
  template void MoeLayer::State::final_sum(SPACE const &, HostMatrix, std::vector<std::int64_t> const &, bool);        \
  template void MoeLayer::State::ffn_rows(SPACE const &, int, MatrixRef<float const>, MatrixRef<float>);               \
  template void MoeLayer::State::baseline_compute(SPACE const &, int, std::vector<float const *> const &,              \
                                                  std::function<void()> const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_LAYER_STEPS)

} // namespace tessel::moe

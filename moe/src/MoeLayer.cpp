#include <tessel/moe/MoeLayer.hpp>

#include "impl/CommEngine.hpp"
#include "impl/Kernels.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/ScopeGuard.hpp>

#ifdef TESSEL_ENABLE_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>

namespace tessel::moe {

namespace {

using Clock = std::chrono::steady_clock;

// Tags of one forward (the messages of a forward all complete before it returns, so forwards never mix).
constexpr int tag_route = 1;       // + chunk
constexpr int tag_data = 1024;     // + message (comet) or chunk (pipelined)
constexpr int tag_combine = 16384; // + column block (comet) or chunk (pipelined)
constexpr int max_chunks = 1000;
constexpr std::int64_t max_messages = 15000;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What a source sends along with its rows for one chunk: rows per local expert, its slot range, and per row
// the slot (distinct token) and combine weight.
struct SourceMeta {
  std::vector<std::int64_t> expert_rows;
  std::int64_t slot_begin = 0, slot_count = 0;
  std::vector<std::int32_t> slot;
  std::vector<float> weight;
  std::int64_t rows() const { return static_cast<std::int64_t>(slot.size()); }
  std::int64_t expert_offset(int e) const {
    return std::accumulate(expert_rows.begin(), expert_rows.begin() + e, std::int64_t{0});
  }
};

// Route message layout (int32 words): [E/EP row counts][slot_begin][slot_count][slot per row][weight bits per row]
std::vector<std::int32_t> encode_route(DispatchPlan const &plan, int chunk, int group) {
  int const eg = plan.experts_per_group;
  auto const begin = plan.block_begin(chunk, group), end = plan.block_end(chunk, group);
  auto const rows = static_cast<std::size_t>(end - begin);
  std::vector<std::int32_t> words(static_cast<std::size_t>(eg) + 2 + 2 * rows);
  for (int e = 0; e < eg; ++e)
    words[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(plan.expert_rows(chunk, group, e));
  words[static_cast<std::size_t>(eg)] = static_cast<std::int32_t>(plan.slot_begin(chunk, group));
  words[static_cast<std::size_t>(eg) + 1] = static_cast<std::int32_t>(plan.slot_count(chunk, group));
  auto *slots = words.data() + eg + 2;
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

SourceMeta decode_route(std::vector<std::int32_t> const &words, int eg, int source, std::string const &context) {
  SourceMeta meta;
  TESSEL_REQUIRE(words.size() >= static_cast<std::size_t>(eg) + 2, context, ": route message from rank ", source,
                 " is too short");
  meta.expert_rows.resize(static_cast<std::size_t>(eg));
  std::int64_t rows = 0;
  for (int e = 0; e < eg; ++e) {
    auto const r = words[static_cast<std::size_t>(e)];
    TESSEL_REQUIRE(r >= 0, context, ": route message from rank ", source, " announces ", r, " rows for expert ", e);
    meta.expert_rows[static_cast<std::size_t>(e)] = r;
    rows += r;
  }
  meta.slot_begin = words[static_cast<std::size_t>(eg)];
  meta.slot_count = words[static_cast<std::size_t>(eg) + 1];
  TESSEL_REQUIRE(static_cast<std::size_t>(eg) + 2 + 2 * static_cast<std::size_t>(rows) <= words.size() &&
                     meta.slot_begin >= 0 && meta.slot_count >= 0 && meta.slot_count <= rows,
                 context, ": route message from rank ", source, " is inconsistent (", rows, " rows, ", meta.slot_count,
                 " slots, ", words.size(), " words)");
  auto const *slots = words.data() + eg + 2;
  meta.slot.assign(slots, slots + rows);
  meta.weight.resize(static_cast<std::size_t>(rows));
  if (rows > 0) // an empty vector's data() may be null, which memcpy must not get even for zero bytes
    std::memcpy(meta.weight.data(), slots + rows, static_cast<std::size_t>(rows) * sizeof(float));
  for (auto s : meta.slot)
    TESSEL_REQUIRE(s >= meta.slot_begin && s < meta.slot_begin + meta.slot_count, context, ": route message from rank ",
                   source, " names slot ", s, " outside its range");
  return meta;
}

// Grow-only flat workspace: forwards of the same shape reuse their memory.
float *ensure(Kokkos::View<float *, Kokkos::HostSpace> &view, char const *label, std::size_t size) {
  if (view.extent(0) < std::max<std::size_t>(size, 1))
    view = Kokkos::View<float *, Kokkos::HostSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                                                    std::max<std::size_t>(size, 1));
  return view.data();
}

template <class T> std::vector<std::int64_t> exclusive_offsets(std::vector<T> const &sizes) {
  std::vector<std::int64_t> offsets(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    offsets[i + 1] = offsets[i] + static_cast<std::int64_t>(sizes[i]);
  return offsets;
}

// Runs \p f, prefixing the message of a tessel error with \p context (a TimeoutError keeps its type and peer).
template <class F> void with_context(std::string const &context, F &&f) {
  try {
    f();
  } catch (TimeoutError const &e) {
    throw TimeoutError(context + ": " + e.what(), e.peer());
  }
}

} // namespace

struct MoeLayer::State {
  MoeConfig config;
  Communicator comm;
  ExpertWeights weights;
  LayerOptions options;
  CometParams comet;
  std::string comet_source;
  std::uint64_t checked_comet = 0, checked_chunks = 0;
  bool comet_checked = false, chunks_checked = false;
  Routing routing;
  DispatchPlan plan;
  ForwardStats stats;
  std::vector<std::vector<SourceMeta>> metas; // [chunk][source]
  Kokkos::View<float *, Kokkos::HostSpace> send_rows, x, xp, h, y, combine_send, combine_recv;
  Impl::Layer0Scratch scratch;
  std::vector<std::int64_t> x_off, send_off, recv_off; // per source / rank, in floats

  State(MoeConfig const &c, Communicator const &world) : config(c), comm(world) {}

  int rank() const { return comm.rank(); }
  int world() const { return comm.size(); }
  int group_of(int r) const { return config.group_of_rank(r); }
  static void check_pipeline_comm_workers(int workers) {
    TESSEL_REQUIRE(workers >= 0 && workers <= 8, "MoeLayer: pipeline_comm_workers must be in [0, 8], got ", workers);
  }
  std::string context(Schedule s) const {
    return tessel::Impl::concat("MoE layer forward (", name_of(s), " schedule) on rank ", rank(), " of ", world());
  }

  // ------------------------------------------------------------------------------------------------------------
  // Shared steps
  // ------------------------------------------------------------------------------------------------------------

  void check_inputs(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out) const {
    auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden);
    TESSEL_REQUIRE(tokens.extent(0) == m && tokens.extent(1) == n, "MoeLayer::forward: tokens are ", tokens.extent(0),
                   " x ", tokens.extent(1), ", expected M x N = ", m, " x ", n);
    TESSEL_REQUIRE(out.extent(0) == m && out.extent(1) == n, "MoeLayer::forward: output is ", out.extent(0), " x ",
                   out.extent(1), ", expected M x N = ", m, " x ", n);
    TESSEL_REQUIRE(out.data() != tokens.data() || m * n == 0, "MoeLayer::forward: output must not alias the tokens");
    (void)gate;
  }

  // Collective: every rank learns the first non-finite token (and logit) of every rank.
  void check_finite(ConstHostMatrix tokens, GateInput const &gate) const {
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

  // Routing, dispatch plan and packing of the rows to send: everything before the first message.
  template <class ExecSpace>
  void prelude(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int chunks, bool finite,
               std::string const &context_text = {}) {
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

  std::vector<std::int32_t> own_route(int chunk) const { return encode_route(plan, chunk, group_of(rank())); }

  SourceMeta own_meta(int chunk) const {
    return decode_route(own_route(chunk), config.experts_per_group(), rank(), "own routing");
  }

  // Row pointer of chunk c's rows from this rank for its own group (local rows need no message).
  float const *local_rows(int chunk) const {
    return send_rows.data() + plan.block_begin(chunk, group_of(rank())) * config.hidden;
  }

  // Per source: combine send regions (slot-indexed rows of all chunks, block-major by column split).
  void layout_combine(std::vector<std::int64_t> const &source_slots) {
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

  // The tail of the overlapped schedules: wait until every combine message has landed, stop the engine, then add
  // up the contributions (waiting and summing counted apart in the stats). Returns when each began.
  template <class ExecSpace>
  std::pair<Clock::time_point, Clock::time_point> finish_combines(ExecSpace const &space, Impl::CommEngine &engine,
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

  // out[t] = sum over ranks r (in rank order, so every schedule adds in the same order) of r's rows for t.
  template <class ExecSpace>
  void final_sum(ExecSpace const &space, HostMatrix out, std::vector<std::int64_t> const &split_cols,
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

  // GroupGEMM0 -> activation -> GroupGEMM1 on rows [rows, N] of local expert e, in panels (baselines).
  template <class ExecSpace>
  void ffn_rows(ExecSpace const &space, int e, MatrixRef<float const> xin, MatrixRef<float> yout) {
    std::int64_t const kp = config.ffn_per_rank(), n = config.hidden, panel = 2048;
    float *const hp = ensure(h, "Tessel::moe::hidden", static_cast<std::size_t>(std::min(panel, xin.rows) * kp));
    for (std::int64_t r = 0; r < xin.rows; r += panel) {
      auto const end = std::min(r + panel, xin.rows);
      MatrixRef<float> const hr{hp, end - r, kp, kp};
      Impl::layer0_tile(space, config, weights, e, xin.rows_range(r, end), hr, scratch);
      compat::fence(space, "Tessel::moe::ffn");
      Impl::layer1_block(space, config, weights, e, {hp, end - r, kp, kp}, 0, n, yout.rows_range(r, end));
    }
  }

  // The baselines' expert computation of one chunk: rows of all sources permuted expert-major (Megatron's
  // permutation), one GEMM pair per expert, then the top-k reduction per source into the combine rows.
  template <class ExecSpace>
  void baseline_compute(ExecSpace const &space, int chunk, std::vector<float const *> const &source_rows,
                        std::function<void()> const &between_experts = {}) {
    ScopedRegion region("Tessel::moe::experts");
    int const w = world(), eg = config.experts_per_group();
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
    std::vector<std::int64_t> expert_begin(static_cast<std::size_t>(eg) + 1, 0);
    std::int64_t pos = 0;
    for (int e = 0; e < eg; ++e) {
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
    expert_begin[static_cast<std::size_t>(eg)] = pos;
    compat::fence(space, "Tessel::moe::permute");
    for (int e = 0; e < eg; ++e) {
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

  // Blocking route exchange of one chunk (sequential schedule and measurements).
  void exchange_routes(int chunk) {
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

  void dispatch_alltoallv() {
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

  void combine_alltoallv() {
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

  std::vector<float const *> sequential_sources() const {
    std::vector<float const *> src(static_cast<std::size_t>(world()));
    for (int s = 0; s < world(); ++s)
      src[static_cast<std::size_t>(s)] = x.data() + x_off[static_cast<std::size_t>(s)];
    return src;
  }

  std::vector<std::int64_t> source_slots() const {
    std::vector<std::int64_t> slots(static_cast<std::size_t>(world()), 0);
    for (auto const &chunk : metas)
      for (int s = 0; s < world(); ++s)
        slots[static_cast<std::size_t>(s)] += chunk[static_cast<std::size_t>(s)].slot_count;
    return slots;
  }

  // ------------------------------------------------------------------------------------------------------------
  // sequential: dispatch all-to-all -> GroupGEMM0 -> GroupGEMM1 -> combine all-to-all -> top-k sum
  // ------------------------------------------------------------------------------------------------------------

  template <class ExecSpace>
  void forward_sequential(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out) {
    auto const context_text = context(Schedule::sequential);
    auto const t0 = Clock::now();
    prelude(space, tokens, gate, 1, options.check_finite, context_text);
    auto const t1 = Clock::now();
    with_context(context_text, [&] {
      exchange_routes(0);
      dispatch_alltoallv();
    });
    auto const t2 = Clock::now();
    layout_combine(source_slots());
    baseline_compute(space, 0, sequential_sources());
    auto const t3 = Clock::now();
    with_context(context_text, [&] { combine_alltoallv(); });
    auto const t4 = Clock::now();
    final_sum(space, out, {0, config.hidden}, false);
    stats = ForwardStats{};
    stats.schedule = Schedule::sequential;
    stats.route = std::chrono::duration<double>(t1 - t0).count();
    stats.dispatch = std::chrono::duration<double>(t2 - t1).count();
    stats.experts = std::chrono::duration<double>(t3 - t2).count();
    stats.combine = std::chrono::duration<double>(t4 - t3).count();
    stats.reduce = since(t4);
    stats.total = since(t0);
    for (auto const &s : metas[0])
      stats.rows += s.rows();
  }

  // ------------------------------------------------------------------------------------------------------------
  // pipelined: C token chunks; the communication engine (pipeline_comm_workers threads, or the compute thread
  // between experts) runs the dispatches of all chunks, then each chunk's combine as soon as the compute thread
  // has produced it (Tutel's a2a_ffn_overlap_degree order).
  // ------------------------------------------------------------------------------------------------------------

  template <class ExecSpace>
  void forward_pipelined(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out) {
    auto const context_text = context(Schedule::pipelined);
    int const chunks = options.pipeline_chunks, w = world(), me = rank();
    std::int64_t const n = config.hidden;
    auto const t0 = Clock::now();
    prelude(space, tokens, gate, chunks, options.check_finite, context_text);
    stats = ForwardStats{};
    stats.schedule = Schedule::pipelined;
    stats.route = since(t0);

    // Buffers the communication threads use are declared before the engine, so they outlive it.
    std::vector<std::vector<std::int32_t>> route_in(static_cast<std::size_t>(chunks * w)),
        route_out(static_cast<std::size_t>(chunks * w));
    std::atomic<int> routes_done{0}, combines_left{0};
    std::vector<std::atomic<int>> data_left(static_cast<std::size_t>(chunks));
    Impl::CommEngine engine(comm, options.pipeline_comm_workers, 0, context_text);
    for (int c = 0; c < chunks; ++c) {
      auto const cap = route_capacity(config, plan.chunk_tokens[static_cast<std::size_t>(c) + 1] -
                                                  plan.chunk_tokens[static_cast<std::size_t>(c)]);
      for (int k = 1; k < w; ++k) {
        int const s = (me - k + w) % w;
        auto &buf = route_in[static_cast<std::size_t>(c * w + s)];
        buf.assign(cap, 0);
        engine.recv(s, tag_route + c, buf.data(), cap, DataType::int32,
                    tessel::Impl::concat("route message of chunk ", c), [&] {
                      routes_done.fetch_add(1);
                      engine.notify();
                    });
      }
    }
    for (int c = 0; c < chunks; ++c)
      for (int k = 1; k < w; ++k) {
        int const d = (me + k) % w;
        auto &buf = route_out[static_cast<std::size_t>(c * w + d)];
        buf = encode_route(plan, c, group_of(d));
        engine.send(d, tag_route + c, buf.data(), buf.size(), DataType::int32,
                    tessel::Impl::concat("route message of chunk ", c), {}, Impl::CommEngine::SendClass::control);
      }
    for (int c = 0; c < chunks; ++c)
      for (int k = 1; k < w; ++k) {
        int const d = (me + k) % w, g = group_of(d);
        auto const rows = plan.block_end(c, g) - plan.block_begin(c, g);
        if (rows > 0)
          engine.send(d, tag_data + c, send_rows.data() + plan.block_begin(c, g) * n,
                      static_cast<std::size_t>(rows * n), DataType::float32,
                      tessel::Impl::concat("dispatch rows of chunk ", c));
      }
    engine.wait([&] { return routes_done.load() == chunks * (w - 1); });

    metas.assign(static_cast<std::size_t>(chunks), std::vector<SourceMeta>(static_cast<std::size_t>(w)));
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        metas[static_cast<std::size_t>(c)][static_cast<std::size_t>(s)] =
            s == me ? own_meta(c)
                    : decode_route(route_in[static_cast<std::size_t>(c * w + s)], config.experts_per_group(), s,
                                   context_text);
    // Receive buffers: chunk-major, source-minor.
    std::vector<std::int64_t> x_rows;
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        x_rows.push_back(s == me ? 0 : metas[static_cast<std::size_t>(c)][static_cast<std::size_t>(s)].rows());
    auto const xo = exclusive_offsets(x_rows);
    float *const xd = ensure(x, "Tessel::moe::recv_rows", static_cast<std::size_t>(xo.back() * n));
    layout_combine(source_slots());
    // Counts first: a callback may fire as soon as its receive is posted.
    for (int c = 0; c < chunks; ++c) {
      int expected = 0;
      for (int s = 0; s < w; ++s)
        expected += s != me && x_rows[static_cast<std::size_t>(c * w + s)] > 0 ? 1 : 0;
      data_left[static_cast<std::size_t>(c)].store(expected);
    }
    for (int c = 0; c < chunks; ++c) {
      for (int s = 0; s < w; ++s) {
        auto const rows = x_rows[static_cast<std::size_t>(c * w + s)];
        if (s == me || rows == 0)
          continue;
        engine.recv(s, tag_data + c, xd + xo[static_cast<std::size_t>(c * w + s)] * n,
                    static_cast<std::size_t>(rows * n), DataType::float32,
                    tessel::Impl::concat("dispatch rows of chunk ", c), [&, c] {
                      data_left[static_cast<std::size_t>(c)].fetch_sub(1);
                      engine.notify();
                    });
      }
    }
    for (int c = 0; c < chunks; ++c)
      for (int k = 1; k < w; ++k) {
        int const r = (me + k) % w, g = group_of(r);
        auto const count = plan.slot_count(c, g);
        if (count == 0)
          continue;
        combines_left.fetch_add(1);
        engine.recv(r, tag_combine + c,
                    combine_recv.data() + recv_off[static_cast<std::size_t>(r)] + plan.slot_begin(c, g) * n,
                    static_cast<std::size_t>(count * n), DataType::float32,
                    tessel::Impl::concat("combine rows of chunk ", c), [&] {
                      combines_left.fetch_sub(1);
                      engine.notify();
                    });
      }

    for (int c = 0; c < chunks; ++c) {
      engine.progress();
      auto const wait0 = Clock::now();
      engine.wait([&] { return data_left[static_cast<std::size_t>(c)].load() == 0; });
      stats.compute_wait += since(wait0);
      auto const busy0 = Clock::now();
      std::vector<float const *> src(static_cast<std::size_t>(w));
      for (int s = 0; s < w; ++s)
        src[static_cast<std::size_t>(s)] = s == me ? local_rows(c) : xd + xo[static_cast<std::size_t>(c * w + s)] * n;
      baseline_compute(space, c, src, [&] { engine.progress(); });
      for (int k = 1; k < w; ++k) {
        int const s = (me - k + w) % w;
        auto const &ms = metas[static_cast<std::size_t>(c)][static_cast<std::size_t>(s)];
        if (ms.slot_count > 0)
          engine.send(s, tag_combine + c,
                      combine_send.data() + send_off[static_cast<std::size_t>(s)] + ms.slot_begin * n,
                      static_cast<std::size_t>(ms.slot_count * n), DataType::float32,
                      tessel::Impl::concat("combine rows of chunk ", c));
      }
      stats.compute_busy += since(busy0);
    }
    finish_combines(space, engine, combines_left, out, {0, n});
    stats.total = since(t0);
    for (auto const &chunk : metas)
      for (auto const &s : chunk)
        stats.rows += s.rows();
  }

  // ------------------------------------------------------------------------------------------------------------
  // comet: tile-level overlap driven by the OverlapPlan
  // ------------------------------------------------------------------------------------------------------------

  std::int64_t effective_tile_m() const {
    std::int64_t const per_pair = config.tokens * config.topk;
    return std::max(comet.tile_m, (per_pair + max_messages - 1) / max_messages);
  }

  template <class ExecSpace>
  void forward_comet(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out) {
    auto const context_text = context(Schedule::comet);
    int const w = world(), me = rank(), eg = config.experts_per_group();
    int const chunks =
        static_cast<int>(std::min<std::int64_t>(comet.m_splits, std::max<std::int64_t>(config.tokens, 1)));
    int const n_splits = comet.n_splits;
    std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), tile_m = effective_tile_m();
    // Rows above which the BLAS's packing of an expert's weights is amortized: ready tiles are merged up to it.
    std::int64_t const merge_rows = std::max<std::int64_t>(tile_m, 512);
    auto const sz = [](auto i) { return static_cast<std::size_t>(i); };
    auto const t0 = Clock::now();
    prelude(space, tokens, gate, chunks, options.check_finite, context_text);
    stats = ForwardStats{};
    stats.schedule = Schedule::comet;
    stats.route = since(t0);

    // Buffers the communication threads use are declared before the engine, so they outlive it.
    std::vector<std::vector<std::int32_t>> route_in(sz(chunks * w)), route_out(sz(chunks * w));
    std::atomic<int> routes_done{0}, combines_left{0};
    std::vector<std::pair<int, int>> landed_queue;
    std::vector<TraceEvent> landed_at;
    Impl::CommEngine engine(comm, comet.comm_workers, comet.in_flight, context_text);

    // Rows this rank sends destination group g, as [chunk * E/EP + expert].
    auto const rows_for_group = [&](int g) {
      std::vector<std::int64_t> rows(sz(chunks * eg));
      for (int c = 0; c < chunks; ++c)
        for (int e = 0; e < eg; ++e)
          rows[sz(c * eg + e)] = plan.expert_rows(c, g, e);
      return rows;
    };

    // 1. Route messages first (they size the receive buffers), then every destination's tiles in ring order:
    //    each (chunk, expert, M tile) of rows is its own message, so the receiver can start on it as soon as it
    //    lands.
    for (int c = 0; c < chunks; ++c) {
      auto const cap = route_capacity(config, plan.chunk_tokens[sz(c) + 1] - plan.chunk_tokens[sz(c)]);
      for (int k = 1; k < w; ++k) {
        int const s = (me - k + w) % w;
        auto &buf = route_in[sz(c * w + s)];
        buf.assign(cap, 0);
        engine.recv(s, tag_route + c, buf.data(), cap, DataType::int32, tessel::Impl::concat("route message ", c), [&] {
          routes_done.fetch_add(1);
          engine.notify();
        });
      }
    }
    for (int k = 1; k < w; ++k) {
      int const d = (me + k) % w;
      for (int c = 0; c < chunks; ++c) {
        auto &buf = route_out[sz(c * w + d)];
        buf = encode_route(plan, c, group_of(d));
        engine.send(d, tag_route + c, buf.data(), buf.size(), DataType::int32,
                    tessel::Impl::concat("route message ", c), {}, Impl::CommEngine::SendClass::control);
      }
    }
    for (int k = 1; k < w; ++k) {
      int const d = (me + k) % w, g = group_of(d);
      auto const messages = OverlapPlan::messages_for(rows_for_group(g), eg, tile_m);
      TESSEL_REQUIRE(static_cast<std::int64_t>(messages.size()) < max_messages, context_text, ": ", messages.size(),
                     " tile messages to rank ", d, " exceed the tag space; raise tile_m");
      for (std::size_t m = 0; m < messages.size(); ++m) {
        auto const &msg = messages[m];
        // The first row of (chunk, group, expert) in the packed rows, plus the tile's offset.
        auto const row = plan.block_offsets[sz((msg.chunk * plan.groups + g) * eg + msg.expert)] + msg.row_begin;
        engine.send(d, tag_data + static_cast<int>(m), send_rows.data() + row * n,
                    static_cast<std::size_t>((msg.row_end - msg.row_begin) * n), DataType::float32,
                    tessel::Impl::concat("dispatch tile ", m, " (chunk ", msg.chunk, ", expert ", msg.expert, ", rows ",
                                         msg.row_begin, "-", msg.row_end, ")"));
      }
    }
    auto const wait_routes = Clock::now();
    engine.wait([&] { return routes_done.load() == chunks * (w - 1); });
    stats.compute_wait += since(wait_routes);

    // 2. Plan, buffers, and the receives of tiles and combine blocks.
    metas.assign(sz(chunks), std::vector<SourceMeta>(sz(w)));
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        metas[sz(c)][sz(s)] = s == me ? own_meta(c) : decode_route(route_in[sz(c * w + s)], eg, s, context_text);
    PlanShape shape;
    shape.rank = me;
    shape.world = w;
    shape.hidden = n;
    shape.experts = eg;
    shape.chunks = chunks;
    shape.tile_m = tile_m;
    shape.n_splits = n_splits;
    shape.policy = comet.policy;
    for (int s = 0; s < w; ++s) {
      std::vector<std::int64_t> rows;
      for (int c = 0; c < chunks; ++c)
        for (int e = 0; e < eg; ++e)
          rows.push_back(metas[sz(c)][sz(s)].expert_rows[sz(e)]);
      shape.rows.push_back(std::move(rows));
    }
    auto const overlap = OverlapPlan::build(shape);
    auto const &cols = overlap.split_cols();

    std::vector<std::int64_t> rows_of(sz(w));
    for (int s = 0; s < w; ++s)
      rows_of[sz(s)] = overlap.source_rows(s);
    // Received rows (x) and hidden rows (h) are (chunk, expert)-major, the sources of one (chunk, expert) back to
    // back: the remote ones in arrival order, then (in h only) this rank. Ready remote tiles of one expert from
    // consecutive sources are then one GEMM, as large as the sequential layer's per-expert calls.
    auto const &remote = overlap.source_order();
    auto const rows_at = [&](int s, int c, int e) { return shape.rows[sz(s)][sz(c * eg + e)]; };
    auto const block = [&](int s, int c, int e) { return sz((c * eg + e) * w + s); };
    std::vector<std::int64_t> x_at(sz(chunks * eg * w), 0), h_at(x_at.size(), 0);
    std::vector<int> next_remote(sz(w), -1); // the remote source after s in the block order
    for (std::size_t k = 0; k + 1 < remote.size(); ++k)
      next_remote[sz(remote[k])] = remote[k + 1];
    std::int64_t x_total = 0, h_total = 0;
    for (int c = 0; c < chunks; ++c)
      for (int e = 0; e < eg; ++e) {
        for (int s : remote) {
          x_at[block(s, c, e)] = x_total;
          h_at[block(s, c, e)] = h_total;
          x_total += rows_at(s, c, e);
          h_total += rows_at(s, c, e);
        }
        h_at[block(me, c, e)] = h_total;
        h_total += rows_at(me, c, e);
      }
    // Layer0 tiles of each (source, chunk, expert), in row order (the plan lists them so).
    std::vector<std::vector<int>> layer0_tiles(x_at.size());
    for (std::size_t i = 0; i < overlap.tiles().size(); ++i) {
      auto const &t = overlap.tiles()[i];
      if (t.kind == PlanTile::Kind::layer0)
        layer0_tiles[block(t.source, t.chunk, t.expert)].push_back(static_cast<int>(i));
    }
    float *const xd = ensure(x, "Tessel::moe::recv_rows", sz(x_total * n));
    float *const hd = ensure(h, "Tessel::moe::hidden", sz(h_total * kp));
    std::int64_t max_rows = 0, max_width = 0;
    for (int s = 0; s < w; ++s)
      for (auto r : shape.rows[sz(s)])
        max_rows = std::max(max_rows, r);
    for (int b = 0; b < n_splits; ++b)
      max_width = std::max(max_width, cols[sz(b) + 1] - cols[sz(b)]);
    float *const yd = ensure(y, "Tessel::moe::expert_out", sz(max_rows * max_width));
    auto const slots_of = source_slots();
    layout_combine(slots_of);
    // Layer1 tiles add their experts' weighted outputs into the combine blocks.
    Impl::zero(space, combine_send.data(), send_off.back());
    // Local rows (this rank's own tokens for its own group): the packed send rows, chunk by chunk.
    std::vector<float const *> local_chunk(sz(chunks));
    for (int c = 0; c < chunks; ++c)
      local_chunk[sz(c)] = local_rows(c);
    for (int s : overlap.source_order()) {
      auto const messages = OverlapPlan::messages_for(shape.rows[sz(s)], eg, tile_m);
      for (std::size_t m = 0; m < messages.size(); ++m) {
        auto const &msg = messages[m];
        engine.recv(s, tag_data + static_cast<int>(m), xd + (x_at[block(s, msg.chunk, msg.expert)] + msg.row_begin) * n,
                    static_cast<std::size_t>((msg.row_end - msg.row_begin) * n), DataType::float32,
                    tessel::Impl::concat("dispatch tile ", m, " (chunk ", msg.chunk, ", expert ", msg.expert, ", rows ",
                                         msg.row_begin, "-", msg.row_end, ")"),
                    [&, s, m] {
                      {
                        std::lock_guard<std::mutex> lock(engine.notify_mutex());
                        landed_queue.emplace_back(s, static_cast<int>(m));
                        if (options.trace)
                          landed_at.push_back({since(t0), since(t0), tessel::Impl::concat("landed s=", s, " m=", m)});
                      }
                      engine.notify();
                    });
      }
    }
    for (int k = 1; k < w; ++k) {
      int const r = (me + k) % w, g = group_of(r);
      auto const slots = plan.group_slots[sz(g)];
      for (int c = 0; c < chunks; ++c) {
        auto const count = plan.slot_count(c, g);
        if (count == 0)
          continue;
        for (int b = 0; b < n_splits; ++b) {
          auto const cb = cols[sz(b)], width = cols[sz(b) + 1] - cb;
          combines_left.fetch_add(1);
          engine.recv(r, tag_combine + c * n_splits + b,
                      combine_recv.data() + recv_off[sz(r)] + slots * cb + plan.slot_begin(c, g) * width,
                      static_cast<std::size_t>(count * width), DataType::float32,
                      tessel::Impl::concat("combine block ", b, " of chunk ", c), [&] {
                        combines_left.fetch_sub(1);
                        engine.notify();
                      });
        }
      }
    }

    // 3. Tiles in plan order as their data lands.
    PlanScheduler scheduler(overlap);
    std::vector<int> run; // the tiles of the current GEMM
    scheduler.set_min_batch_rows(merge_rows);
    std::vector<std::pair<int, int>> drained;
    while (!scheduler.all_finished()) {
      engine.progress(); // the communication thread may be waiting for a core: progress from here too
      {
        std::lock_guard<std::mutex> lock(engine.notify_mutex());
        drained.swap(landed_queue);
      }
      for (auto const &[s, m] : drained)
        scheduler.landed(s, m);
      drained.clear();
      int const index = scheduler.next();
      if (index < 0) {
        auto const wait0 = Clock::now();
        engine.wait([&] { return !landed_queue.empty(); });
        stats.compute_wait += since(wait0);
        if (options.trace)
          stats.trace.push_back({std::chrono::duration<double>(wait0 - t0).count(), since(t0), "wait"});
        continue;
      }
      auto const tile_start = Clock::now();
      auto const &tile = overlap.tiles()[sz(index)];
      int const s = tile.source, c = tile.chunk;
      // A run of ready layer0 tiles adjacent in memory becomes one GEMM: the rest of this (source, chunk,
      // expert)'s rows, then (remote rows only) the next remote sources' rows of the same (chunk, expert).
      run.assign(1, index);
      if (tile.kind == PlanTile::Kind::layer0) {
        int const e = tile.expert;
        auto rows = tile.row_end - tile.row_begin;
        int run_source = s;
        auto run_end = tile.row_end;
        while (rows < merge_rows) {
          int more = scheduler.next_contiguous(run.back());
          if (more < 0 && s != me && run_end == rows_at(run_source, c, e)) {
            int s2 = next_remote[sz(run_source)];
            while (s2 >= 0 && rows_at(s2, c, e) == 0)
              s2 = next_remote[sz(s2)];
            if (s2 >= 0 && scheduler.claim(layer0_tiles[block(s2, c, e)].front()))
              more = layer0_tiles[block(s2, c, e)].front();
          }
          if (more < 0)
            break;
          auto const &t = overlap.tiles()[sz(more)];
          run.push_back(more);
          rows += t.row_end - t.row_begin;
          run_source = t.source;
          run_end = t.row_end;
        }
        auto const in_chunk = overlap.row_offset(s, c, e) - overlap.row_offset(s, c, 0) + tile.row_begin;
        float const *src =
            s == me ? local_chunk[sz(c)] + in_chunk * n : xd + (x_at[block(s, c, e)] + tile.row_begin) * n;
        // Without a communication thread, a transport that moves a large message only while both sides call MPI
        // (copy-in/copy-out shared memory) would stall during a long GEMM: while bytes are moving, the GEMM runs
        // in column panels of about 2^29 flops (a few ms) with progress in between.
        std::int64_t panel = 0;
        if (!engine.threaded() && engine.moving())
          panel = std::max<std::int64_t>(256, ((std::int64_t{1} << 28) / std::max<std::int64_t>(rows * n, 1) + 63) /
                                                  64 * 64);
        Impl::layer0_tile(space, config, weights, e, {src, rows, n, n},
                          {hd + (h_at[block(s, c, e)] + tile.row_begin) * kp, rows, kp, kp}, scratch, panel,
                          [&] { engine.progress(); });
      } else {
        // Expert e's slice of column block b: its rows times W1's columns, added per token into the block.
        auto const cb = tile.col_begin, width = tile.col_end - tile.col_begin;
        auto const &ms = metas[sz(c)][sz(s)];
        auto const rows = ms.expert_rows[sz(tile.expert)];
        auto const in_chunk = ms.expert_offset(tile.expert);
        Impl::layer1_block(space, config, weights, tile.expert,
                           {hd + h_at[block(s, c, tile.expert)] * kp, rows, kp, kp}, cb, tile.col_end,
                           {yd, rows, width, width});
        float *const block = combine_send.data() + send_off[sz(s)] + slots_of[sz(s)] * cb;
        Impl::scatter_add(space, rows, ms.slot.data() + in_chunk, 0, ms.weight.data() + in_chunk,
                          {yd, rows, width, width}, {block, slots_of[sz(s)], width, width});
        compat::fence(space, "Tessel::moe::layer1");
        if (tile.completes_block && s != me && ms.slot_count > 0)
          engine.send(s, tag_combine + c * n_splits + tile.split, block + ms.slot_begin * width,
                      static_cast<std::size_t>(ms.slot_count * width), DataType::float32,
                      tessel::Impl::concat("combine block ", tile.split, " of chunk ", c), {},
                      Impl::CommEngine::SendClass::urgent);
      }
      compat::fence(space, "Tessel::moe::tile");
      stats.compute_busy += since(tile_start);
      if (options.trace)
        stats.trace.push_back(
            {std::chrono::duration<double>(tile_start - t0).count(), since(t0),
             tile.kind == PlanTile::Kind::layer0
                 ? tessel::Impl::concat("layer0 s=", s, " c=", c, " e=", tile.expert, " rows ", tile.row_begin, "-",
                                        overlap.tiles()[sz(run.back())].row_end,
                                        " of s=", overlap.tiles()[sz(run.back())].source)
                 : tessel::Impl::concat("layer1 s=", s, " c=", c, " e=", tile.expert, " block ", tile.split)});
      for (int i : run)
        scheduler.finish(i);
    }
    auto const [wait1, busy1] = finish_combines(space, engine, combines_left, out, cols);
    stats.total = since(t0);
    for (auto r : rows_of)
      stats.rows += r;
    if (options.trace) {
      stats.trace.insert(stats.trace.end(), landed_at.begin(), landed_at.end());
      stats.trace.push_back({std::chrono::duration<double>(wait1 - t0).count(),
                             std::chrono::duration<double>(busy1 - t0).count(), "wait combine"});
      stats.trace.push_back({std::chrono::duration<double>(busy1 - t0).count(), stats.total, "final sum"});
    }
  }
};

MoeLayer::MoeLayer(MoeConfig const &config, Communicator const &comm, ExpertWeights weights, LayerOptions options)
    : _state(std::make_unique<State>(config, comm)) {
  config.validate(comm.size());
  config.require_consistent(comm);
  auto &st = *_state;
  st.comm.set_validation(false); // the data path checks its own message sizes
  st.weights = std::move(weights);
  st.options = std::move(options);
  auto const eg = static_cast<std::size_t>(config.experts_per_group());
  TESSEL_REQUIRE(st.weights.w0.extent(0) == eg && st.weights.w0.extent(1) == static_cast<std::size_t>(config.hidden) &&
                     st.weights.w0.extent(2) == static_cast<std::size_t>(config.gemm0_cols()),
                 "MoeLayer: w0 is ", st.weights.w0.extent(0), " x ", st.weights.w0.extent(1), " x ",
                 st.weights.w0.extent(2), ", expected E/EP x N x ", config.gated ? "2K/TP" : "K/TP", " = ", eg, " x ",
                 config.hidden, " x ", config.gemm0_cols());
  TESSEL_REQUIRE(
      st.weights.w1.extent(0) == eg && st.weights.w1.extent(1) == static_cast<std::size_t>(config.ffn_per_rank()) &&
          st.weights.w1.extent(2) == static_cast<std::size_t>(config.hidden),
      "MoeLayer: w1 is ", st.weights.w1.extent(0), " x ", st.weights.w1.extent(1), " x ", st.weights.w1.extent(2),
      ", expected E/EP x K/TP x N = ", eg, " x ", config.ffn_per_rank(), " x ", config.hidden);
  st.check_pipeline_comm_workers(st.options.pipeline_comm_workers);
  TESSEL_REQUIRE(st.options.pipeline_chunks >= 1 && st.options.pipeline_chunks <= max_chunks,
                 "MoeLayer: pipeline_chunks must be in [1, ", max_chunks, "], got ", st.options.pipeline_chunks);
  st.comet = resolve_comet_params(config, st.options.comet, st.options.registry, st.options.backend, &st.comet_source);
  tessel::limit_blas_threads();
}

MoeLayer::~MoeLayer() = default;
MoeLayer::MoeLayer(MoeLayer &&) noexcept = default;
MoeLayer &MoeLayer::operator=(MoeLayer &&) noexcept = default;

MoeConfig const &MoeLayer::config() const { return _state->config; }
Communicator const &MoeLayer::communicator() const { return _state->comm; }
Routing const &MoeLayer::routing() const { return _state->routing; }
ForwardStats const &MoeLayer::stats() const { return _state->stats; }
CometParams const &MoeLayer::comet_params() const { return _state->comet; }
std::string const &MoeLayer::comet_params_source() const { return _state->comet_source; }
int MoeLayer::pipeline_chunks() const { return _state->options.pipeline_chunks; }

void MoeLayer::set_comet_params(CometParams const &params) {
  params.validate(_state->config);
  _state->comet = params;
  _state->comet_source = "given";
  _state->comet_checked = false;
}

void MoeLayer::set_pipeline_chunks(int chunks) {
  TESSEL_REQUIRE(chunks >= 1 && chunks <= max_chunks, "MoeLayer: pipeline_chunks must be in [1, ", max_chunks,
                 "], got ", chunks);
  _state->options.pipeline_chunks = chunks;
  _state->chunks_checked = false;
}

void MoeLayer::set_pipeline_comm_workers(int workers) {
  State::check_pipeline_comm_workers(workers);
  _state->options.pipeline_comm_workers = workers;
}

template <class ExecSpace, class Check>
void MoeLayer::forward(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out,
                       Schedule schedule) {
  auto &st = *_state;
  ScopedRegion region(std::string("Tessel::moe::forward_") + name_of(schedule));
  st.check_inputs(tokens, gate, out);
  if (schedule != Schedule::sequential && st.world() > 1) {
#ifdef TESSEL_ENABLE_MPI
    int const level = ScopeGuard::mpi_thread_level();
    int const needed =
        schedule == Schedule::comet && st.comet.comm_workers > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    TESSEL_REQUIRE(level < 0 || level >= needed, "MoeLayer::forward (", name_of(schedule),
                   "): its communication threads need MPI thread support ", "MPI_THREAD_SERIALIZED",
                   ", MPI granted level ", level);
#endif
  }
  // Once per setting: every rank must cut the work the same way (a collective, hence not on every forward).
  with_context(st.context(schedule), [&] {
    if (schedule == Schedule::comet && !st.comet_checked) {
      st.comm.require_same("comet parameters (" + st.comet.describe() + ")", st.comet.hash());
      st.comet_checked = true;
    }
    if (schedule == Schedule::pipelined && !st.chunks_checked) {
      st.comm.require_same("pipeline chunk count", static_cast<std::uint64_t>(st.options.pipeline_chunks));
      st.chunks_checked = true;
    }
  });
  switch (schedule) {
  case Schedule::sequential:
    st.forward_sequential(space, tokens, gate, out);
    break;
  case Schedule::pipelined:
    st.forward_pipelined(space, tokens, gate, out);
    break;
  case Schedule::comet:
    st.forward_comet(space, tokens, gate, out);
    break;
  }
}

template <class ExecSpace, class Check>
AloneTimes MoeLayer::measure_alone(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int repeats,
                                   bool comm, bool comp) {
  auto &st = *_state;
  TESSEL_REQUIRE(repeats >= 1, "measure_alone: repeats must be >= 1, got ", repeats);
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::measure_out"), tokens.extent(0),
                 tokens.extent(1));
  forward(space, tokens, gate, out, Schedule::sequential); // fills the buffers both measurements reuse
  // Median and minimum over the repetitions of the slowest rank's time.
  auto const median_of_max = [&](double &minimum, auto &&body) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      st.comm.barrier();
      auto const t0 = Clock::now();
      body();
      double const mine = since(t0);
      times.push_back(st.comm.allreduce_value(mine, ReduceOp::max));
    }
    std::sort(times.begin(), times.end());
    minimum = times.front();
    return times[times.size() / 2];
  };
  AloneTimes result;
  if (comp)
    result.comp = median_of_max(result.comp_min, [&] {
      st.prelude(space, tokens, gate, 1, false);
      st.metas.resize(1);
      st.baseline_compute(space, 0, st.sequential_sources());
      st.final_sum(space, out, {0, st.config.hidden}, false);
    });
  if (comm)
    result.comm = median_of_max(result.comm_min, [&] {
      with_context(st.context(Schedule::sequential), [&] {
        st.exchange_routes(0);
        st.dispatch_alltoallv();
        st.combine_alltoallv();
      });
    });
  return result;
}

#define TESSEL_MOE_INSTANTIATE_LAYER(SPACE)                                                                            \
  template void MoeLayer::forward(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix, Schedule);            \
  template AloneTimes MoeLayer::measure_alone(SPACE const &, ConstHostMatrix, GateInput const &, int, bool, bool);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_LAYER)

} // namespace tessel::moe

// comet (COMET, MLSys'25): tile-level overlap driven by the OverlapPlan. layer0 is split along M into per-source
// tile messages (local tiles first, remote ones as they land); layer1 along N into column blocks, each block
// top-k-reduced into the combine rows and sent (urgent) once its last expert slice is done.
#include "impl/LayerState.hpp"

#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <mutex>
#include <optional>

namespace tessel::moe {

using namespace Impl;

namespace {

std::int64_t effective_tile_m(MoeConfig const &config, CometParams const &comet) {
  std::int64_t const per_pair = config.tokens * config.topk;
  return std::max(comet.tile_m, (per_pair + max_messages - 1) / max_messages);
}

template <class ExecSpace> class CometForward {
public:
  CometForward(MoeLayer::State &layer, ExecSpace const &space, std::string context_text, int chunks,
               Clock::time_point t0)
      : layer(layer), space(space), context_text(std::move(context_text)), w(layer.world()), me(layer.rank()),
        local_experts(layer.config.experts_per_group()), chunks(chunks), n_splits(layer.comet.n_splits),
        n(layer.config.hidden), ffn_per_rank(layer.config.ffn_per_rank()),
        tile_m(effective_tile_m(layer.config, layer.comet)), merge_rows(std::max<std::int64_t>(tile_m, 512)), t0(t0),
        engine(layer.comm, layer.comet.comm_workers, layer.comet.in_flight, this->context_text) {}

  // Returns where each (chunk, source, expert)'s input rows are.
  std::vector<float const *> run(HostMatrix out) {
    // 1. Route messages first (they size the receive buffers), then every destination's tiles in ring order.
    layer.post_routes(engine, chunks, routes, true);
    post_tiles();
    auto const wait_routes = Clock::now();
    engine.wait([&] { return routes.done.load() == chunks * (w - 1); });
    layer.stats.compute_wait += since(wait_routes);
    // 2. Plan, buffers, and the receives of tiles and combine blocks.
    layer.decode_metas(chunks, routes.in, context_text);
    build_plan();
    layout();
    post_receives();
    // 3. Tiles in plan order as their data lands.
    run_tiles();
    finish(out);
    std::vector<float const *> at(sz(chunks * w * local_experts));
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        for (int e = 0; e < local_experts; ++e)
          at[sz((c * w + s) * local_experts + e)] =
              s == me ? local_chunk[sz(c)] + (overlap->row_offset(s, c, e) - overlap->row_offset(s, c, 0)) * n
                      : xd + x_at[block(s, c, e)] * n;
    return at;
  }

private:
  // Rows this rank sends destination group g, as [chunk * E/EP + expert].
  std::vector<std::int64_t> rows_for_group(int g) const {
    std::vector<std::int64_t> rows(sz(chunks * local_experts));
    for (int c = 0; c < chunks; ++c)
      for (int e = 0; e < local_experts; ++e)
        rows[sz(c * local_experts + e)] = layer.plan.expert_rows(c, g, e);
    return rows;
  }

  static std::string tile_name(std::size_t m, OverlapPlan::Message const &msg) {
    return tessel::Impl::concat("dispatch tile ", m, " (chunk ", msg.chunk, ", expert ", msg.expert, ", rows ",
                                msg.row_begin, "-", msg.row_end, ")");
  }

  // Each (chunk, expert, M tile) of rows is its own message, so the receiver can start on it as soon as it lands.
  void post_tiles() {
    for (int k = 1; k < w; ++k) {
      int const d = (me + k) % w, g = layer.group_of(d);
      auto const messages = OverlapPlan::messages_for(rows_for_group(g), local_experts, tile_m);
      TESSEL_REQUIRE(static_cast<std::int64_t>(messages.size()) < max_messages, context_text, ": ", messages.size(),
                     " tile messages to rank ", d, " exceed the tag space; raise tile_m");
      for (std::size_t m = 0; m < messages.size(); ++m) {
        auto const &msg = messages[m];
        // The first row of (chunk, group, expert) in the packed rows, plus the tile's offset.
        auto const row =
            layer.plan.block_offsets[sz((msg.chunk * layer.plan.groups + g) * local_experts + msg.expert)] +
            msg.row_begin;
        engine.send(d, tag_data + static_cast<int>(m), layer.send_rows.data() + row * n,
                    sz((msg.row_end - msg.row_begin) * n), DataType::float32, tile_name(m, msg));
      }
    }
  }

  void build_plan() {
    // [source][chunk * E/EP + expert]: the rows each source's route message announced.
    std::vector<std::vector<std::int64_t>> rows(sz(w));
    for (int s = 0; s < w; ++s)
      for (int c = 0; c < chunks; ++c)
        for (int e = 0; e < local_experts; ++e)
          rows[sz(s)].push_back(layer.metas[sz(c)][sz(s)].expert_rows[sz(e)]);
    shape = PlanShape{me, w, n, local_experts, chunks, std::move(rows), tile_m, n_splits, layer.comet.policy};
    overlap.emplace(OverlapPlan::build(shape));
  }

  std::int64_t rows_at(int s, int c, int e) const { return shape.rows[sz(s)][sz(c * local_experts + e)]; }
  std::size_t block(int s, int c, int e) const { return sz((c * local_experts + e) * w + s); }
  std::vector<std::int64_t> const &cols() const { return overlap->split_cols(); }

  // Received rows (x) and hidden rows (h) are (chunk, expert)-major, the sources of one (chunk, expert) back to
  // back: the remote ones in arrival order, then (in h only) this rank. Ready remote tiles of one expert from
  // consecutive sources are then one GEMM, as large as the sequential layer's per-expert calls.
  void layout() {
    auto const &remote = overlap->source_order();
    x_at.assign(sz(chunks * local_experts * w), 0);
    h_at.assign(x_at.size(), 0);
    next_remote.assign(sz(w), -1); // the remote source after s in the block order
    for (std::size_t k = 0; k + 1 < remote.size(); ++k)
      next_remote[sz(remote[k])] = remote[k + 1];
    std::int64_t x_total = 0, h_total = 0;
    for (int c = 0; c < chunks; ++c)
      for (int e = 0; e < local_experts; ++e) {
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
    layer0_tiles.assign(x_at.size(), {});
    for (std::size_t i = 0; i < overlap->tiles().size(); ++i) {
      auto const &t = overlap->tiles()[i];
      if (t.kind == PlanTile::Kind::layer0)
        layer0_tiles[block(t.source, t.chunk, t.expert)].push_back(static_cast<int>(i));
    }
    xd = ensure(layer.x, "Tessel::moe::recv_rows", sz(x_total * n));
    hd = ensure(layer.h, "Tessel::moe::hidden", sz(h_total * ffn_per_rank));
    std::int64_t max_rows = 0, max_width = 0;
    for (int s = 0; s < w; ++s)
      for (auto r : shape.rows[sz(s)])
        max_rows = std::max(max_rows, r);
    for (int b = 0; b < n_splits; ++b)
      max_width = std::max(max_width, cols()[sz(b) + 1] - cols()[sz(b)]);
    yd = ensure(layer.y, "Tessel::moe::expert_out", sz(max_rows * max_width));
    slots_of = layer.source_slots();
    layer.layout_combine(slots_of);
    // Layer1 tiles add their experts' weighted outputs into the combine blocks.
    Impl::zero(space, layer.combine_send.data(), layer.send_off.back());
    // Local rows (this rank's own tokens for its own group): the packed send rows, chunk by chunk.
    local_chunk.resize(sz(chunks));
    for (int c = 0; c < chunks; ++c)
      local_chunk[sz(c)] = layer.local_rows(c);
  }

  void post_receives() {
    for (int s : overlap->source_order()) {
      auto const messages = OverlapPlan::messages_for(shape.rows[sz(s)], local_experts, tile_m);
      for (std::size_t m = 0; m < messages.size(); ++m) {
        auto const &msg = messages[m];
        engine.recv(s, tag_data + static_cast<int>(m), xd + (x_at[block(s, msg.chunk, msg.expert)] + msg.row_begin) * n,
                    sz((msg.row_end - msg.row_begin) * n), DataType::float32, tile_name(m, msg),
                    [this, s, m] { landed(s, static_cast<int>(m)); });
      }
    }
    for (int k = 1; k < w; ++k) {
      int const r = (me + k) % w, g = layer.group_of(r);
      auto const slots = layer.plan.group_slots[sz(g)];
      for (int c = 0; c < chunks; ++c) {
        auto const count = layer.plan.slot_count(c, g);
        if (count == 0)
          continue;
        for (int b = 0; b < n_splits; ++b) {
          auto const cb = cols()[sz(b)], width = cols()[sz(b) + 1] - cb;
          combines_left.fetch_add(1);
          engine.recv(
              r, tag_combine + c * n_splits + b,
              layer.combine_recv.data() + layer.recv_off[sz(r)] + slots * cb + layer.plan.slot_begin(c, g) * width,
              sz(count * width), DataType::float32, tessel::Impl::concat("combine block ", b, " of chunk ", c), [this] {
                combines_left.fetch_sub(1);
                engine.notify();
              });
        }
      }
    }
  }

  // A tile message's completion (on whichever thread progressed it).
  void landed(int s, int m) {
    {
      std::lock_guard<std::mutex> lock(engine.notify_mutex());
      landed_queue.emplace_back(s, m);
      if (layer.options.trace)
        landed_at.push_back({since(t0), since(t0), tessel::Impl::concat("landed s=", s, " m=", m)});
    }
    engine.notify();
  }

  void run_tiles() {
    PlanScheduler scheduler(*overlap);
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
        layer.stats.compute_wait += since(wait0);
        if (layer.options.trace)
          layer.stats.trace.push_back({seconds_between(t0, wait0), since(t0), "wait"});
        continue;
      }
      auto const tile_start = Clock::now();
      auto const &tile = overlap->tiles()[sz(index)];
      gemm_run.assign(1, index);
      if (tile.kind == PlanTile::Kind::layer0)
        layer0(scheduler, tile);
      else
        layer1(tile);
      compat::fence(space, "Tessel::moe::tile");
      layer.stats.compute_busy += since(tile_start);
      if (layer.options.trace)
        layer.stats.trace.push_back({seconds_between(t0, tile_start), since(t0), describe(tile)});
      for (int i : gemm_run)
        scheduler.finish(i);
    }
  }

  // A run of ready layer0 tiles adjacent in memory becomes one GEMM: the rest of this (source, chunk, expert)'s
  // rows, then (remote rows only) the next remote sources' rows of the same (chunk, expert). Returns its rows.
  std::int64_t extend_run(PlanScheduler &scheduler, PlanTile const &tile) {
    int const s = tile.source, c = tile.chunk, e = tile.expert;
    auto rows = tile.row_end - tile.row_begin;
    int run_source = s;
    auto run_end = tile.row_end;
    while (rows < merge_rows) {
      int more = scheduler.next_contiguous(gemm_run.back());
      if (more < 0 && s != me && run_end == rows_at(run_source, c, e)) {
        int s2 = next_remote[sz(run_source)];
        while (s2 >= 0 && rows_at(s2, c, e) == 0)
          s2 = next_remote[sz(s2)];
        if (s2 >= 0 && scheduler.claim(layer0_tiles[block(s2, c, e)].front()))
          more = layer0_tiles[block(s2, c, e)].front();
      }
      if (more < 0)
        break;
      auto const &t = overlap->tiles()[sz(more)];
      gemm_run.push_back(more);
      rows += t.row_end - t.row_begin;
      run_source = t.source;
      run_end = t.row_end;
    }
    return rows;
  }

  void layer0(PlanScheduler &scheduler, PlanTile const &tile) {
    int const s = tile.source, c = tile.chunk, e = tile.expert;
    auto const rows = extend_run(scheduler, tile);
    auto const in_chunk = overlap->row_offset(s, c, e) - overlap->row_offset(s, c, 0) + tile.row_begin;
    float const *src = s == me ? local_chunk[sz(c)] + in_chunk * n : xd + (x_at[block(s, c, e)] + tile.row_begin) * n;
    // Without a communication thread, a transport that moves a large message only while both sides call MPI
    // (copy-in/copy-out shared memory) would stall during a long GEMM: while bytes are moving, the GEMM runs in
    // column panels of about 2^29 flops (a few ms) with progress in between.
    std::int64_t panel = 0;
    if (!engine.threaded() && engine.moving())
      panel =
          std::max<std::int64_t>(256, ((std::int64_t{1} << 28) / std::max<std::int64_t>(rows * n, 1) + 63) / 64 * 64);
    Impl::layer0_tile(space, layer.config, layer.weights, e, {src, rows, n, n},
                      {hd + (h_at[block(s, c, e)] + tile.row_begin) * ffn_per_rank, rows, ffn_per_rank, ffn_per_rank},
                      layer.scratch, panel, [&] { engine.progress(); });
  }

  // Expert e's slice of column block b: its rows times W1's columns, added per token into the block.
  void layer1(PlanTile const &tile) {
    int const s = tile.source, c = tile.chunk;
    auto const cb = tile.col_begin, width = tile.col_end - tile.col_begin;
    auto const &ms = layer.metas[sz(c)][sz(s)];
    auto const rows = ms.expert_rows[sz(tile.expert)];
    auto const in_chunk = ms.expert_offset(tile.expert);
    Impl::layer1_block(space, layer.config, layer.weights, tile.expert,
                       {hd + h_at[block(s, c, tile.expert)] * ffn_per_rank, rows, ffn_per_rank, ffn_per_rank}, cb,
                       tile.col_end, {yd, rows, width, width});
    float *const dst = layer.combine_send.data() + layer.send_off[sz(s)] + slots_of[sz(s)] * cb;
    Impl::scatter_add(space, rows, ms.slot.data() + in_chunk, 0, ms.weight.data() + in_chunk, {yd, rows, width, width},
                      {dst, slots_of[sz(s)], width, width});
    compat::fence(space, "Tessel::moe::layer1");
    if (tile.completes_block && s != me && ms.slot_count > 0)
      engine.send(s, tag_combine + c * n_splits + tile.split, dst + ms.slot_begin * width, sz(ms.slot_count * width),
                  DataType::float32, tessel::Impl::concat("combine block ", tile.split, " of chunk ", c), {},
                  CommEngine::SendClass::urgent);
  }

  std::string describe(PlanTile const &tile) const {
    int const s = tile.source, c = tile.chunk;
    auto const &last = overlap->tiles()[sz(gemm_run.back())];
    return tile.kind == PlanTile::Kind::layer0
               ? tessel::Impl::concat("layer0 s=", s, " c=", c, " e=", tile.expert, " rows ", tile.row_begin, "-",
                                      last.row_end, " of s=", last.source)
               : tessel::Impl::concat("layer1 s=", s, " c=", c, " e=", tile.expert, " block ", tile.split);
  }

  void finish(HostMatrix out) {
    auto const [wait1, busy1] = layer.finish_combines(space, engine, combines_left, out, cols());
    auto &stats = layer.stats;
    stats.total = since(t0);
    for (int s = 0; s < w; ++s)
      stats.rows += overlap->source_rows(s);
    if (layer.options.trace) {
      stats.trace.insert(stats.trace.end(), landed_at.begin(), landed_at.end());
      stats.trace.push_back({seconds_between(t0, wait1), seconds_between(t0, busy1), "wait combine"});
      stats.trace.push_back({seconds_between(t0, busy1), stats.total, "final sum"});
    }
  }

  MoeLayer::State &layer;
  ExecSpace const &space;
  std::string const context_text;
  int const w, me, local_experts, chunks, n_splits;
  std::int64_t const n, ffn_per_rank, tile_m;
  // Rows above which the BLAS's packing of an expert's weights is amortized: ready tiles are merged up to it.
  std::int64_t const merge_rows;
  Clock::time_point const t0;
  PlanShape shape;
  std::optional<OverlapPlan> overlap;
  std::vector<std::int64_t> x_at, h_at, slots_of;
  std::vector<int> next_remote;
  std::vector<std::vector<int>> layer0_tiles;
  std::vector<float const *> local_chunk;
  float *xd = nullptr, *hd = nullptr, *yd = nullptr;
  std::vector<int> gemm_run; // the tiles of the current GEMM
  // What the communication threads use is declared before the engine, so it outlives it.
  RouteMessages routes;
  std::atomic<int> combines_left{0};
  std::vector<std::pair<int, int>> landed_queue;
  std::vector<TraceEvent> landed_at;
  CommEngine engine;
};

} // namespace

template <class ExecSpace>
void MoeLayer::State::forward_comet(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate,
                                    HostMatrix out) {
  int const chunks = static_cast<int>(std::min<std::int64_t>(comet.m_splits, std::max<std::int64_t>(config.tokens, 1)));
  auto const t0 = begin_overlapped(space, tokens, gate, chunks, Schedule::comet);
  auto const at = CometForward<ExecSpace>(*this, space, context(Schedule::comet), chunks, t0).run(out);
  save_for_backward(tokens, gate,
                    [&](int c, int s, int e) { return at[sz((c * world() + s) * config.experts_per_group() + e)]; });
}

#define TESSEL_MOE_INSTANTIATE_COMET(SPACE)                                                                            \
  template void MoeLayer::State::forward_comet(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_COMET)

} // namespace tessel::moe

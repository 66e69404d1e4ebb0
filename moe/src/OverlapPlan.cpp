#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <numeric>

namespace tessel::moe {

char const *name_of(PlanPolicy policy) {
  switch (policy) {
  case PlanPolicy::local_first:
    return "local_first";
  case PlanPolicy::critical_path:
    return "critical_path";
  }
  return "invalid";
}

PlanPolicy parse_plan_policy(std::string const &name) {
  if (name == "local_first")
    return PlanPolicy::local_first;
  if (name == "critical_path")
    return PlanPolicy::critical_path;
  TESSEL_THROW("unknown plan policy '", name, "' (expected local_first or critical_path)");
}

std::vector<OverlapPlan::Message> OverlapPlan::messages_for(std::vector<std::int64_t> const &rows, int experts,
                                                            std::int64_t tile_m) {
  TESSEL_REQUIRE(tile_m > 0, "tile_m must be positive, got ", tile_m);
  TESSEL_REQUIRE(experts > 0 && rows.size() % static_cast<std::size_t>(experts) == 0, "plan: ", rows.size(),
                 " row counts are not a whole number of chunks of ", experts, " experts");
  std::vector<Message> out;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::int64_t r = 0; r < rows[i]; r += tile_m)
      out.push_back({static_cast<int>(i / static_cast<std::size_t>(experts)),
                     static_cast<int>(i % static_cast<std::size_t>(experts)), r, std::min(r + tile_m, rows[i])});
  return out;
}

std::vector<std::int64_t> OverlapPlan::split_columns(std::int64_t hidden, int n_splits) {
  TESSEL_REQUIRE(n_splits >= 1 && n_splits <= hidden, "N-split count ", n_splits, " must be in [1, N=", hidden, "]");
  std::vector<std::int64_t> cols(static_cast<std::size_t>(n_splits) + 1, 0);
  for (int b = 0; b < n_splits; ++b)
    cols[static_cast<std::size_t>(b) + 1] =
        cols[static_cast<std::size_t>(b)] + hidden / n_splits + (b < hidden % n_splits ? 1 : 0);
  return cols;
}

namespace {

std::size_t sz(int i) { return static_cast<std::size_t>(i); }

using PerChunk = std::vector<std::vector<PlanTile>>; // one source's tiles of one layer, [chunk]

// Source \p s's layer0 tiles, one per message of \p messages (local tiles, s == rank, have no message).
PerChunk layer0_tiles(PlanShape const &shape, int s, std::vector<OverlapPlan::Message> const &messages) {
  PerChunk per_chunk(sz(shape.chunks));
  for (std::size_t m = 0; m < messages.size(); ++m) {
    PlanTile t;
    t.kind = PlanTile::Kind::layer0;
    t.source = s;
    t.chunk = messages[m].chunk;
    t.expert = messages[m].expert;
    t.row_begin = messages[m].row_begin;
    t.row_end = messages[m].row_end;
    t.message = s == shape.rank ? -1 : static_cast<int>(m);
    per_chunk[sz(t.chunk)].push_back(t);
  }
  return per_chunk;
}

// Source \p s's layer1 tiles in their natural order: expert-major (experts with rows), then column block.
PerChunk layer1_tiles(PlanShape const &shape, int s, std::vector<std::int64_t> const &split_cols) {
  auto const &rows = shape.rows[sz(s)];
  PerChunk per_chunk(sz(shape.chunks));
  for (int c = 0; c < shape.chunks; ++c) {
    std::vector<int> with_rows;
    for (int e = 0; e < shape.experts; ++e)
      if (rows[sz(c * shape.experts + e)] > 0)
        with_rows.push_back(e);
    for (std::size_t p = 0; p < with_rows.size(); ++p)
      for (int b = 0; b < shape.n_splits; ++b) {
        PlanTile t;
        t.kind = PlanTile::Kind::layer1;
        t.source = s;
        t.chunk = c;
        t.expert = with_rows[p];
        t.split = b;
        t.col_begin = split_cols[sz(b)];
        t.col_end = split_cols[sz(b) + 1];
        t.position = static_cast<int>(p);
        t.completes_block = p + 1 == with_rows.size();
        per_chunk[sz(c)].push_back(t);
      }
  }
  return per_chunk;
}

// Every source's tiles in the policy's priority order (\p layer0[s], \p layer1[s]: source s's tiles).
std::vector<PlanTile> priority_order(PlanShape const &shape, std::vector<int> const &source_order,
                                     std::vector<PerChunk> const &layer0, std::vector<PerChunk> const &layer1) {
  int const me = shape.rank;
  std::vector<PlanTile> tiles;
  auto const append_source = [&](PerChunk const &per_chunk) {
    for (auto const &part : per_chunk)
      tiles.insert(tiles.end(), part.begin(), part.end());
  };
  // COMET's column-major order: for each block, every expert, before the next block.
  auto const column_major = [&](std::vector<PlanTile> const &part, int b) {
    for (auto const &t : part)
      if (t.split == b)
        tiles.push_back(t);
  };
  if (shape.policy == PlanPolicy::local_first) {
    append_source(layer0[sz(me)]);
    for (int s : source_order)
      append_source(layer0[sz(s)]);
    // Every remote source's block b (per chunk) before block b + 1.
    for (int c = 0; c < shape.chunks; ++c)
      for (int b = 0; b < shape.n_splits; ++b)
        for (int s : source_order)
          column_major(layer1[sz(s)][sz(c)], b);
    for (int c = 0; c < shape.chunks; ++c)
      for (int b = 0; b < shape.n_splits; ++b)
        column_major(layer1[sz(me)][sz(c)], b);
  } else {
    for (int s : source_order)
      append_source(layer1[sz(s)]);
    for (int s : source_order)
      append_source(layer0[sz(s)]);
    append_source(layer0[sz(me)]);
    append_source(layer1[sz(me)]);
  }
  return tiles;
}

} // namespace

OverlapPlan OverlapPlan::build(PlanShape const &shape) {
  int const w = shape.world, me = shape.rank, chunks = shape.chunks, experts = shape.experts;
  TESSEL_REQUIRE(w >= 1 && me >= 0 && me < w, "plan: rank ", me, " of ", w);
  TESSEL_REQUIRE(chunks >= 1 && experts >= 1, "plan: need chunks >= 1 and experts >= 1, got ", chunks, " and ",
                 experts);
  TESSEL_REQUIRE(static_cast<int>(shape.rows.size()) == w, "plan: rows given for ", shape.rows.size(),
                 " sources, expected ", w);
  OverlapPlan plan;
  plan._shape = shape;
  plan._split_cols = split_columns(shape.hidden, shape.n_splits);
  for (int k = 1; k < w; ++k)
    plan._source_order.push_back((me - k + w) % w);
  plan._messages.assign(sz(w), 0);
  plan._layer0_count.assign(sz(w), std::vector<int>(sz(chunks * experts), 0));
  std::vector<PerChunk> layer0(sz(w)), layer1(sz(w));
  for (int s = 0; s < w; ++s) {
    auto const &rows = shape.rows[sz(s)];
    TESSEL_REQUIRE(rows.size() == sz(chunks * experts), "plan: source ", s, " gives ", rows.size(),
                   " row counts, expected chunks x experts = ", chunks * experts);
    for (auto r : rows)
      TESSEL_REQUIRE(r >= 0, "plan: negative row count ", r, " from source ", s);
    auto const messages = messages_for(rows, experts, shape.tile_m);
    for (auto const &m : messages)
      plan._layer0_count[sz(s)][sz(m.chunk * experts + m.expert)] += 1;
    if (s != me)
      plan._messages[sz(s)] = static_cast<int>(messages.size());
    layer0[sz(s)] = layer0_tiles(shape, s, messages);
    layer1[sz(s)] = layer1_tiles(shape, s, plan._split_cols);
  }
  plan._tiles = priority_order(shape, plan._source_order, layer0, layer1);
  plan._message_tile.assign(sz(w), {});
  for (int s = 0; s < w; ++s)
    plan._message_tile[sz(s)].assign(sz(plan._messages[sz(s)]), -1);
  for (std::size_t i = 0; i < plan._tiles.size(); ++i)
    if (plan._tiles[i].kind == PlanTile::Kind::layer0 && plan._tiles[i].message >= 0)
      plan._message_tile[sz(plan._tiles[i].source)][sz(plan._tiles[i].message)] = static_cast<int>(i);
  return plan;
}

int OverlapPlan::tile_of_message(int source, int message) const {
  return _message_tile[static_cast<std::size_t>(source)][static_cast<std::size_t>(message)];
}

int OverlapPlan::layer0_tiles_of(int source, int chunk) const {
  int n = 0;
  for (int e = 0; e < _shape.experts; ++e)
    n += layer0_tiles_of(source, chunk, e);
  return n;
}

int OverlapPlan::layer0_tiles_of(int source, int chunk, int expert) const {
  return _layer0_count[static_cast<std::size_t>(source)][static_cast<std::size_t>(chunk * _shape.experts + expert)];
}

std::int64_t OverlapPlan::row_offset(int source, int chunk, int expert) const {
  auto const &rows = _shape.rows[static_cast<std::size_t>(source)];
  return std::accumulate(rows.begin(), rows.begin() + chunk * _shape.experts + expert, std::int64_t{0});
}

std::int64_t OverlapPlan::chunk_rows(int source, int chunk) const {
  auto const &rows = _shape.rows[static_cast<std::size_t>(source)];
  auto const first = rows.begin() + chunk * _shape.experts;
  return std::accumulate(first, first + _shape.experts, std::int64_t{0});
}

std::int64_t OverlapPlan::source_rows(int source) const {
  auto const &rows = _shape.rows[static_cast<std::size_t>(source)];
  return std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
}

PlanScheduler::PlanScheduler(OverlapPlan const &plan)
    : _plan(&plan), _state(plan.tiles().size(), 0),
      _layer0_done(static_cast<std::size_t>(plan.shape().world),
                   std::vector<int>(static_cast<std::size_t>(plan.shape().chunks * plan.shape().experts), 0)),
      _layer1_done(static_cast<std::size_t>(plan.shape().world),
                   std::vector<int>(static_cast<std::size_t>(plan.shape().chunks * plan.shape().n_splits), 0)) {
  for (int s = 0; s < plan.shape().world; ++s)
    _landed.emplace_back(static_cast<std::size_t>(plan.messages_from(s)), 0);
}

void PlanScheduler::landed(int source, int message) {
  _landed[static_cast<std::size_t>(source)][static_cast<std::size_t>(message)] = 1;
}

bool PlanScheduler::ready(int tile) const {
  auto const &t = _plan->tiles()[static_cast<std::size_t>(tile)];
  if (t.kind == PlanTile::Kind::layer0)
    return t.message < 0 || _landed[static_cast<std::size_t>(t.source)][static_cast<std::size_t>(t.message)] != 0;
  auto const s = static_cast<std::size_t>(t.source);
  return _layer0_done[s][static_cast<std::size_t>(t.chunk * _plan->shape().experts + t.expert)] ==
             _plan->layer0_tiles_of(t.source, t.chunk, t.expert) &&
         _layer1_done[s][static_cast<std::size_t>(t.chunk * _plan->shape().n_splits + t.split)] == t.position;
}

bool PlanScheduler::same_run(PlanTile const &a, PlanTile const &b) const {
  return a.kind == PlanTile::Kind::layer0 && b.kind == PlanTile::Kind::layer0 && a.source == b.source &&
         a.chunk == b.chunk && a.expert == b.expert && a.row_end == b.row_begin;
}

bool PlanScheduler::batch_complete(int tile) const {
  auto const &tiles = _plan->tiles();
  std::int64_t rows = 0;
  for (auto i = static_cast<std::size_t>(tile); i < tiles.size(); ++i) {
    if (i > static_cast<std::size_t>(tile) && !same_run(tiles[i - 1], tiles[i]))
      return true; // the rest of the (source, chunk, expert) rows are all here
    // The next tile of the run was taken already (its message landed first: a small eager message can complete
    // before a larger one sent ahead of it): the run can grow no further, and waiting for it would leave this
    // tile behind all the local work (the comet forward's slow mode, 53 instead of 41 ms in the demo).
    if (i > static_cast<std::size_t>(tile) && _state[i] != 0)
      return true;
    if (_state[i] != 0 || !ready(static_cast<int>(i)))
      return false;
    rows += tiles[i].row_end - tiles[i].row_begin;
    if (rows >= _min_batch_rows)
      return true;
  }
  return true;
}

int PlanScheduler::next() {
  auto const n = static_cast<int>(_state.size());
  while (_first_open < n && _state[static_cast<std::size_t>(_first_open)] != 0)
    ++_first_open;
  int fallback = -1;
  for (int i = _first_open; i < n; ++i) {
    if (_state[static_cast<std::size_t>(i)] != 0 || !ready(i))
      continue;
    auto const &t = _plan->tiles()[static_cast<std::size_t>(i)];
    if (_min_batch_rows > 0 && t.kind == PlanTile::Kind::layer0 && t.message >= 0 && !batch_complete(i)) {
      fallback = fallback < 0 ? i : fallback;
      continue;
    }
    fallback = i;
    break;
  }
  if (fallback >= 0) {
    _state[static_cast<std::size_t>(fallback)] = 1;
    ++_started;
  }
  return fallback;
}

int PlanScheduler::next_contiguous(int tile) {
  auto const &tiles = _plan->tiles();
  auto const next = static_cast<std::size_t>(tile) + 1;
  if (next >= tiles.size() || !same_run(tiles[static_cast<std::size_t>(tile)], tiles[next]))
    return -1;
  return claim(static_cast<int>(next)) ? static_cast<int>(next) : -1;
}

bool PlanScheduler::claim(int tile) {
  auto &state = _state[static_cast<std::size_t>(tile)];
  if (state != 0 || !ready(tile))
    return false;
  state = 1;
  ++_started;
  return true;
}

void PlanScheduler::finish(int tile) {
  auto &state = _state[static_cast<std::size_t>(tile)];
  TESSEL_REQUIRE(state == 1, "plan: tile ", tile, " finished without having started");
  state = 2;
  ++_finished;
  auto const &t = _plan->tiles()[static_cast<std::size_t>(tile)];
  if (t.kind == PlanTile::Kind::layer0)
    ++_layer0_done[static_cast<std::size_t>(t.source)]
                  [static_cast<std::size_t>(t.chunk * _plan->shape().experts + t.expert)];
  else
    ++_layer1_done[static_cast<std::size_t>(t.source)]
                  [static_cast<std::size_t>(t.chunk * _plan->shape().n_splits + t.split)];
}

} // namespace tessel::moe

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

std::vector<OverlapPlan::Message> OverlapPlan::messages_for(std::vector<std::int64_t> const &rows,
                                                            std::int64_t tile_m) {
  TESSEL_REQUIRE(tile_m > 0, "tile_m must be positive, got ", tile_m);
  std::vector<Message> out;
  for (std::size_t e = 0; e < rows.size(); ++e)
    for (std::int64_t r = 0; r < rows[e]; r += tile_m)
      out.push_back({static_cast<int>(e), r, std::min(r + tile_m, rows[e])});
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

OverlapPlan OverlapPlan::build(PlanShape const &shape) {
  int const w = shape.world, me = shape.rank;
  TESSEL_REQUIRE(w >= 1 && me >= 0 && me < w, "plan: rank ", me, " of ", w);
  TESSEL_REQUIRE(static_cast<int>(shape.rows.size()) == w, "plan: rows given for ", shape.rows.size(),
                 " sources, expected ", w);
  OverlapPlan plan;
  plan._shape = shape;
  plan._split_cols = split_columns(shape.hidden, shape.n_splits);
  for (int k = 1; k < w; ++k)
    plan._source_order.push_back((me - k + w) % w);
  plan._messages.assign(static_cast<std::size_t>(w), 0);
  plan._layer0_count.assign(static_cast<std::size_t>(w), 0);
  plan._message_tile.assign(static_cast<std::size_t>(w), {});

  std::vector<std::vector<PlanTile>> layer0(static_cast<std::size_t>(w)), layer1(static_cast<std::size_t>(w));
  for (int s = 0; s < w; ++s) {
    auto const &rows = shape.rows[static_cast<std::size_t>(s)];
    for (auto r : rows)
      TESSEL_REQUIRE(r >= 0, "plan: negative row count ", r, " from source ", s);
    auto const messages = messages_for(rows, shape.tile_m);
    for (std::size_t m = 0; m < messages.size(); ++m) {
      PlanTile t;
      t.kind = PlanTile::Kind::layer0;
      t.source = s;
      t.expert = messages[m].expert;
      t.row_begin = messages[m].row_begin;
      t.row_end = messages[m].row_end;
      t.message = s == me ? -1 : static_cast<int>(m);
      layer0[static_cast<std::size_t>(s)].push_back(t);
    }
    plan._layer0_count[static_cast<std::size_t>(s)] = static_cast<int>(messages.size());
    if (s != me)
      plan._messages[static_cast<std::size_t>(s)] = static_cast<int>(messages.size());
    if (!messages.empty())
      for (int b = 0; b < shape.n_splits; ++b) {
        PlanTile t;
        t.kind = PlanTile::Kind::layer1;
        t.source = s;
        t.split = b;
        t.col_begin = plan._split_cols[static_cast<std::size_t>(b)];
        t.col_end = plan._split_cols[static_cast<std::size_t>(b) + 1];
        layer1[static_cast<std::size_t>(s)].push_back(t);
      }
  }
  auto &tiles = plan._tiles;
  auto const append = [&](std::vector<PlanTile> const &part) { tiles.insert(tiles.end(), part.begin(), part.end()); };
  auto const mine = static_cast<std::size_t>(me);
  if (shape.policy == PlanPolicy::local_first) {
    append(layer0[mine]);
    for (int s : plan._source_order)
      append(layer0[static_cast<std::size_t>(s)]);
    for (int b = 0; b < shape.n_splits; ++b)
      for (int s : plan._source_order)
        if (!layer1[static_cast<std::size_t>(s)].empty())
          tiles.push_back(layer1[static_cast<std::size_t>(s)][static_cast<std::size_t>(b)]);
    append(layer1[mine]);
  } else {
    for (int s : plan._source_order)
      append(layer1[static_cast<std::size_t>(s)]);
    for (int s : plan._source_order)
      append(layer0[static_cast<std::size_t>(s)]);
    append(layer0[mine]);
    append(layer1[mine]);
  }
  for (int s = 0; s < w; ++s)
    plan._message_tile[static_cast<std::size_t>(s)].assign(
        static_cast<std::size_t>(plan._messages[static_cast<std::size_t>(s)]), -1);
  for (std::size_t i = 0; i < tiles.size(); ++i)
    if (tiles[i].kind == PlanTile::Kind::layer0 && tiles[i].message >= 0)
      plan._message_tile[static_cast<std::size_t>(tiles[i].source)][static_cast<std::size_t>(tiles[i].message)] =
          static_cast<int>(i);
  return plan;
}

int OverlapPlan::tile_of_message(int source, int message) const {
  return _message_tile[static_cast<std::size_t>(source)][static_cast<std::size_t>(message)];
}

std::int64_t OverlapPlan::row_offset(int source, int expert) const {
  auto const &rows = _shape.rows[static_cast<std::size_t>(source)];
  return std::accumulate(rows.begin(), rows.begin() + expert, std::int64_t{0});
}

std::int64_t OverlapPlan::source_rows(int source) const {
  auto const &rows = _shape.rows[static_cast<std::size_t>(source)];
  return std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
}

PlanScheduler::PlanScheduler(OverlapPlan const &plan)
    : _plan(&plan), _state(plan.tiles().size(), 0), _layer0_done(static_cast<std::size_t>(plan.shape().world), 0) {
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
  return _layer0_done[static_cast<std::size_t>(t.source)] == _plan->layer0_tiles_of(t.source);
}

int PlanScheduler::next() {
  auto const n = static_cast<int>(_state.size());
  while (_first_open < n && _state[static_cast<std::size_t>(_first_open)] != 0)
    ++_first_open;
  for (int i = _first_open; i < n; ++i)
    if (_state[static_cast<std::size_t>(i)] == 0 && ready(i)) {
      _state[static_cast<std::size_t>(i)] = 1;
      ++_started;
      return i;
    }
  return -1;
}

void PlanScheduler::finish(int tile) {
  auto &state = _state[static_cast<std::size_t>(tile)];
  TESSEL_REQUIRE(state == 1, "plan: tile ", tile, " finished without having started");
  state = 2;
  ++_finished;
  auto const &t = _plan->tiles()[static_cast<std::size_t>(tile)];
  if (t.kind == PlanTile::Kind::layer0)
    ++_layer0_done[static_cast<std::size_t>(t.source)];
}

} // namespace tessel::moe

#include "WorkPlan.hpp"

#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <numeric>

namespace tessel::moe::cuda::Impl {

WorkPlanner::WorkPlanner(MoeConfig const &config_, std::vector<DispatchPlan> const &plans_, CometParams const &comet_)
    : _config(config_), _plans(plans_), _comet(comet_), _world(config_.world()), _groups(config_.ep),
      _experts_per_group(config_.experts_per_group()) {
  TESSEL_REQUIRE(static_cast<int>(_plans.size()) == _world, "internal: ", _plans.size(), " plans for ", _world,
                 " ranks");
}

std::vector<std::int64_t> WorkPlanner::table_base(int s) const {
  auto const &plan = _plans[static_cast<std::size_t>(s)];
  std::vector<std::int64_t> base(static_cast<std::size_t>(_groups) + 1, 0);
  for (int g = 0; g < _groups; ++g)
    base[static_cast<std::size_t>(g) + 1] =
        base[static_cast<std::size_t>(g)] + plan.group_slots[static_cast<std::size_t>(g)];
  return base;
}

void WorkPlanner::slot_table(int s, std::vector<std::int32_t> &rows, std::vector<float> &weights,
                             std::vector<std::int64_t> &table_base) const {
  auto const &plan = _plans[static_cast<std::size_t>(s)];
  int const topk = _config.topk;
  table_base = this->table_base(s);
  auto const slots = static_cast<std::size_t>(table_base.back());
  TESSEL_REQUIRE(slots <= static_cast<std::size_t>(_config.tokens * topk), "internal: ", slots, " slots");
  rows.assign(slots * static_cast<std::size_t>(topk), -1);
  weights.assign(rows.size(), 0.0f);
  std::vector<int> fill(slots, 0);
  for (int ch = 0; ch < plan.chunks; ++ch)
    for (int g = 0; g < _groups; ++g) {
      auto const begin = plan.block_begin(ch, g), end = plan.block_end(ch, g);
      for (auto i = begin; i < end; ++i) {
        auto const q = static_cast<std::size_t>(table_base[static_cast<std::size_t>(g)] +
                                                plan.row_slot[static_cast<std::size_t>(i)]);
        int const k = fill[q]++;
        TESSEL_REQUIRE(k < topk, "internal: slot with more than topk rows");
        rows[q * static_cast<std::size_t>(topk) + static_cast<std::size_t>(k)] = static_cast<std::int32_t>(i - begin);
        weights[q * static_cast<std::size_t>(topk) + static_cast<std::size_t>(k)] =
            plan.row_weight[static_cast<std::size_t>(i)];
      }
    }
}

RankWork WorkPlanner::work_of(int d, int chunks, std::vector<std::vector<std::int64_t>> const &table_bases) const {
  RankWork w;
  int const g = _config.group_of_rank(d);
  w.blocks.resize(static_cast<std::size_t>(_world));
  w.row.resize(static_cast<std::size_t>(_world));
  w.table_base.resize(static_cast<std::size_t>(_world));
  std::int64_t row = 0;
  for (int s = 0; s < _world; ++s) {
    auto const &plan = _plans[static_cast<std::size_t>(s)];
    w.table_base[static_cast<std::size_t>(s)] = table_bases[static_cast<std::size_t>(s)][static_cast<std::size_t>(g)];
    for (int ch = 0; ch < chunks; ++ch) {
      Block b;
      b.send_row = plan.block_begin(ch, g);
      b.rows = plan.block_end(ch, g) - b.send_row;
      b.expert_offset.assign(static_cast<std::size_t>(_experts_per_group) + 1, 0);
      for (int e = 0; e < _experts_per_group; ++e)
        b.expert_offset[static_cast<std::size_t>(e) + 1] =
            b.expert_offset[static_cast<std::size_t>(e)] + plan.expert_rows(ch, g, e);
      b.slot_begin = plan.slot_begin(ch, g);
      b.slots = plan.slot_count(ch, g);
      w.row[static_cast<std::size_t>(s)].push_back(row);
      row += b.rows;
      w.blocks[static_cast<std::size_t>(s)].push_back(std::move(b));
    }
  }
  w.rows = row;
  w.gemms.resize(static_cast<std::size_t>(chunks));
  for (int ch = 0; ch < chunks; ++ch) {
    auto &gemms = w.gemms[static_cast<std::size_t>(ch)];
    for (int s = 0; s < _world; ++s) {
      auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
      std::int64_t const base = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
      for (int e = 0; e < _experts_per_group; ++e) {
        std::int64_t const begin = b.expert_offset[static_cast<std::size_t>(e)],
                           end = b.expert_offset[static_cast<std::size_t>(e) + 1];
        if (end > begin)
          gemms.problems.push_back(ExpertGemm{e, base + begin, end - begin});
      }
    }
    std::stable_sort(gemms.problems.begin(), gemms.problems.end(),
                     [](ExpertGemm const &a, ExpertGemm const &b) { return a.rows < b.rows; });
    for (auto const &p : gemms.problems)
      if (gemms.group_rows.empty() || gemms.group_rows.back() != p.rows) {
        gemms.group_rows.push_back(p.rows);
        gemms.group_size.push_back(1);
      } else {
        ++gemms.group_size.back();
      }
  }
  w.chunk_reduces.resize(static_cast<std::size_t>(chunks));
  for (int ch = 0; ch < chunks; ++ch)
    for (int s = 0; s < _world; ++s) {
      auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
      for (std::int64_t q = 0; q < b.slots; q += reduce_slots) {
        ReduceItem it;
        it.source = s;
        it.split = 0;
        it.slot_begin = static_cast<int>(b.slot_begin + q);
        it.slot_end = static_cast<int>(b.slot_begin + std::min<std::int64_t>(q + reduce_slots, b.slots));
        it.col_begin = 0;
        it.col_end = static_cast<int>(_config.hidden);
        it.row_base = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
        it.table_base = w.table_base[static_cast<std::size_t>(s)];
        w.chunk_reduces[static_cast<std::size_t>(ch)].push_back(it);
      }
    }
  return w;
}

BackwardWork WorkPlanner::backward_work(int d, RankWork const &w, HostIndexMatrix chosen, bool row_lists) const {
  BackwardWork b;
  auto const sz = [](auto v) { return static_cast<std::size_t>(v); };
  int const g = _config.group_of_rank(d), topk = _config.topk;
  std::int64_t const m = _config.tokens;
  int const chunks = static_cast<int>(w.gemms.size());
  // Expert side.
  b.in_off.assign(sz(_world) + 1, 0);
  for (int s = 0; s < _world; ++s)
    b.in_off[sz(s) + 1] = b.in_off[sz(s)] + _plans[sz(s)].group_slots[sz(g)];
  if (row_lists) {
    b.row_slot.assign(sz(w.rows), 0);
    b.row_weight.assign(sz(w.rows), 0.0f);
  }
  for (int s = 0; s < _world && row_lists; ++s) {
    auto const &plan = _plans[sz(s)];
    for (int ch = 0; ch < chunks; ++ch) {
      auto const &blk = w.blocks[sz(s)][sz(ch)];
      auto const row0 = w.row[sz(s)][sz(ch)];
      for (std::int64_t j = 0; j < blk.rows; ++j) {
        auto const i = sz(blk.send_row + j);
        TESSEL_REQUIRE(plan.row_slot[i] >= 0 && plan.row_slot[i] < plan.group_slots[sz(g)], "internal: row ", i,
                       " of rank ", s, " names slot ", plan.row_slot[i]);
        b.row_slot[sz(row0 + j)] = plan.row_slot[i];
        b.row_weight[sz(row0 + j)] = plan.row_weight[i];
      }
    }
  }
  // Owner side.
  auto const &plan = _plans[sz(d)];
  b.out_off.assign(sz(_groups) + 1, 0);
  for (int q = 0; q < _groups; ++q)
    b.out_off[sz(q) + 1] = b.out_off[sz(q)] + plan.group_slots[sz(q)];
  b.slot_token.assign(sz(b.out_off.back()), -1);
  for (int q = 0; q < _groups; ++q)
    for (std::int64_t t = 0; t < m; ++t) {
      auto const u = plan.token_slot[sz(q * m + t)];
      if (u >= 0)
        b.slot_token[sz(b.out_off[sz(q)] + u)] = static_cast<std::int32_t>(t);
    }
  TESSEL_REQUIRE(chosen.extent(0) == sz(m) && chosen.extent(1) == sz(topk), "internal: the routing of rank ", d, " is ",
                 chosen.extent(0), " x ", chosen.extent(1));
  b.choice_row.assign(sz(m * topk), -1);
  for (int ch = 0; ch < plan.chunks; ++ch)
    for (int q = 0; q < _groups; ++q)
      for (int e = 0; e < _experts_per_group; ++e) {
        auto const at = sz((ch * _groups + q) * _experts_per_group + e);
        for (auto i = plan.block_offsets[at]; i < plan.block_offsets[at + 1]; ++i) {
          auto const t = plan.row_token[sz(i)];
          for (int k = 0; k < topk; ++k)
            if (chosen(sz(t), sz(k)) == q * _experts_per_group + e)
              b.choice_row[sz(t * topk + k)] = static_cast<std::int32_t>(i);
        }
      }
  for (auto r : b.choice_row)
    TESSEL_REQUIRE(r >= 0, "internal: a choice of rank ", d, " has no row in its dispatch plan");
  // The reduction items per (chunk, source).
  b.reduce_at.assign(sz(chunks), std::vector<std::int64_t>(sz(_world) + 1, 0));
  std::int64_t offset = 0;
  for (int ch = 0; ch < chunks; ++ch) {
    auto const &items = w.chunk_reduces[sz(ch)];
    std::size_t i = 0;
    for (int s = 0; s <= _world; ++s) {
      while (s < _world && i < items.size() && items[i].source < s)
        ++i;
      b.reduce_at[sz(ch)][sz(s)] = offset + static_cast<std::int64_t>(s < _world ? i : items.size());
    }
    offset += static_cast<std::int64_t>(items.size());
  }
  return b;
}

BackwardExchange WorkPlanner::backward_exchange(int d, int ch, RankWork const &w, BackwardWork const &lists) const {
  auto const sz = [](auto v) { return static_cast<std::size_t>(v); };
  auto const &plan = _plans[sz(d)];
  std::size_t const n = sz(_config.hidden), stride = sz(_config.tokens * _config.topk);
  BackwardExchange x;
  for (auto *a : {&x.slots, &x.rows, &x.dw}) {
    a->zero(sz(_world));
  }
  for (int p = 0; p < _world; ++p) {
    auto const up = sz(p);
    int const g = _config.group_of_rank(p);
    auto const &b = w.blocks[up][sz(ch)];
    auto const row0 = sz(w.row[up][sz(ch)]);
    auto const own_rows = sz(plan.block_end(ch, g) - plan.block_begin(ch, g)), own_row0 = sz(plan.block_begin(ch, g));
    x.slots.send_counts[up] = sz(plan.slot_count(ch, g)) * n;
    x.slots.send_displs[up] = sz(lists.out_off[sz(g)] + plan.slot_begin(ch, g)) * n;
    x.slots.recv_counts[up] = sz(b.slots) * n;
    x.slots.recv_displs[up] = sz(lists.in_off[up] + b.slot_begin) * n;
    x.rows.send_counts[up] = own_rows;
    x.rows.send_displs[up] = own_row0;
    x.rows.recv_counts[up] = sz(b.rows);
    x.rows.recv_displs[up] = row0;
    x.dw.send_counts[up] = sz(b.rows);
    x.dw.send_displs[up] = row0;
    x.dw.recv_counts[up] = own_rows;
    x.dw.recv_displs[up] = up * stride + own_row0;
  }
  return x;
}

ForwardExchange WorkPlanner::forward_exchange(int d, int ch, RankWork const &w) const {
  auto const sz = [](auto v) { return static_cast<std::size_t>(v); };
  auto const &plan = _plans[sz(d)];
  std::size_t const m = sz(_config.tokens);
  ForwardExchange x;
  for (auto *a : {&x.rows, &x.slots}) {
    a->zero(sz(_world));
  }
  for (int p = 0; p < _world; ++p) {
    auto const up = sz(p);
    int const g = _config.group_of_rank(p);
    auto const &b = w.blocks[up][sz(ch)];
    x.rows.send_counts[up] = sz(plan.block_end(ch, g) - plan.block_begin(ch, g));
    x.rows.send_displs[up] = sz(plan.block_begin(ch, g));
    x.rows.recv_counts[up] = sz(b.rows);
    x.rows.recv_displs[up] = sz(w.row[up][sz(ch)]);
    x.slots.send_counts[up] = sz(b.slots);
    x.slots.send_displs[up] = up * m + sz(b.slot_begin);
    x.slots.recv_counts[up] = sz(plan.slot_count(ch, g));
    x.slots.recv_displs[up] = up * m + sz(plan.slot_begin(ch, g));
  }
  return x;
}

std::size_t plan_summary_words(MoeConfig const &config, int chunks) {
  auto const groups = static_cast<std::size_t>(config.ep);
  return static_cast<std::size_t>(chunks * config.experts) + 1 + groups * static_cast<std::size_t>(chunks + 1) + groups;
}

std::vector<std::int64_t> plan_summary(DispatchPlan const &plan) {
  std::vector<std::int64_t> words(plan.block_offsets.begin(), plan.block_offsets.end());
  words.insert(words.end(), plan.chunk_slots.begin(), plan.chunk_slots.end());
  words.insert(words.end(), plan.group_slots.begin(), plan.group_slots.end());
  return words;
}

DispatchPlan plan_from_summary(MoeConfig const &config, int chunks, std::int64_t const *summary) {
  std::size_t const blocks = static_cast<std::size_t>(chunks * config.experts) + 1;
  std::size_t const chunk_slots = static_cast<std::size_t>(config.ep * (chunks + 1));
  std::size_t const groups = static_cast<std::size_t>(config.ep);
  DispatchPlan plan;
  plan.chunks = chunks;
  plan.groups = config.ep;
  plan.experts_per_group = config.experts_per_group();
  plan.block_offsets.assign(summary, summary + blocks);
  plan.chunk_slots.assign(summary + blocks, summary + blocks + chunk_slots);
  plan.group_slots.assign(summary + blocks + chunk_slots, summary + blocks + chunk_slots + groups);
  return plan;
}

OverlapPlan WorkPlanner::comet_plan(int d) const {
  int const g = _config.group_of_rank(d);
  PlanShape shape;
  shape.rank = d;
  shape.world = _world;
  shape.hidden = _config.hidden;
  shape.experts = _experts_per_group;
  shape.chunks = 1;
  shape.rows.resize(static_cast<std::size_t>(_world));
  for (int s = 0; s < _world; ++s)
    for (int e = 0; e < _experts_per_group; ++e)
      shape.rows[static_cast<std::size_t>(s)].push_back(_plans[static_cast<std::size_t>(s)].expert_rows(0, g, e));
  shape.tile_m = _comet.tile_m;
  shape.n_splits = _comet.n_splits;
  shape.policy = _comet.policy;
  return OverlapPlan::build(shape);
}

std::vector<std::vector<int>> WorkPlanner::comet_messages(OverlapPlan const &plan, RankWork &w) const {
  // Messages in the order the plan expects them to land: sources in source_order(), each in message order.
  std::vector<std::vector<int>> message_id(static_cast<std::size_t>(_world));
  for (int s : plan.source_order()) {
    auto &ids = message_id[static_cast<std::size_t>(s)];
    auto const &block = w.blocks[static_cast<std::size_t>(s)][0];
    for (int k = 0; k < plan.messages_from(s); ++k) {
      auto const &t = plan.tiles()[static_cast<std::size_t>(plan.tile_of_message(s, k))];
      auto const offset = plan.row_offset(s, 0, t.expert) + t.row_begin;
      Message msg;
      msg.source = s;
      msg.rows = static_cast<int>(t.row_end - t.row_begin);
      msg.src_row = block.send_row + offset;
      msg.dst_row = w.row[static_cast<std::size_t>(s)][0] + offset;
      ids.push_back(static_cast<int>(w.messages.size()));
      w.messages.push_back(msg);
    }
  }
  return message_id;
}

std::vector<std::int64_t> WorkPlanner::comet_items(int d, OverlapPlan const &plan,
                                                   std::vector<std::vector<int>> const &message_id, RankWork &w) const {
  std::int64_t const ffn_shard = _config.ffn_per_rank();
  auto const &own = w.blocks[static_cast<std::size_t>(d)][0];
  w.split_tiles.assign(static_cast<std::size_t>(_comet.n_splits), 0);
  std::vector<std::int64_t> split_last(static_cast<std::size_t>(_comet.n_splits), -1);
  for (auto const &t : plan.tiles()) {
    std::int64_t const base = w.row[static_cast<std::size_t>(t.source)][0] + plan.row_offset(t.source, 0, t.expert);
    if (t.kind == PlanTile::Kind::layer0) {
      bool const local = t.source == d;
      for (std::int64_t r0 = t.row_begin; r0 < t.row_end; r0 += item_rows)
        for (std::int64_t c0 = 0; c0 < ffn_shard; c0 += item_cols) {
          Layer0Item it;
          it.h_row = base + r0;
          it.a_row = local ? own.send_row + plan.row_offset(d, 0, t.expert) + r0 : base + r0;
          it.rows = static_cast<int>(std::min<std::int64_t>(item_rows, t.row_end - r0));
          it.expert = t.expert;
          it.col0 = static_cast<int>(c0);
          it.message = local ? -1 : message_id[static_cast<std::size_t>(t.source)][static_cast<std::size_t>(t.message)];
          w.items0.push_back(it);
        }
      continue;
    }
    std::int64_t const rows = plan.shape().rows[static_cast<std::size_t>(t.source)][static_cast<std::size_t>(t.expert)];
    for (std::int64_t r0 = 0; r0 < rows; r0 += item_rows)
      for (std::int64_t c0 = t.col_begin; c0 < t.col_end; c0 += item_cols) {
        Layer1Item it;
        it.row = base + r0;
        it.rows = static_cast<int>(std::min<std::int64_t>(item_rows, rows - r0));
        it.expert = t.expert;
        it.col0 = static_cast<int>(c0);
        it.cols = static_cast<int>(std::min<std::int64_t>(item_cols, t.col_end - c0));
        it.split = t.split;
        ++w.split_tiles[static_cast<std::size_t>(t.split)];
        split_last[static_cast<std::size_t>(t.split)] = static_cast<std::int64_t>(w.items1.size());
        w.items1.push_back(it);
      }
  }
  return split_last;
}

void WorkPlanner::comet_reduces(int d, OverlapPlan const &plan, std::vector<std::int64_t> const &split_last,
                                RankWork &w) const {
  // Splits in the order their last GEMM item comes, remote sources in the plan's order, own last.
  std::vector<int> split_order(static_cast<std::size_t>(_comet.n_splits));
  std::iota(split_order.begin(), split_order.end(), 0);
  std::stable_sort(split_order.begin(), split_order.end(), [&](int a, int b) {
    return split_last[static_cast<std::size_t>(a)] < split_last[static_cast<std::size_t>(b)];
  });
  std::vector<std::int64_t> const &cols = plan.split_cols();
  std::vector<int> sources = plan.source_order();
  sources.push_back(d);
  for (int b : split_order)
    for (int s : sources) {
      auto const &blk = w.blocks[static_cast<std::size_t>(s)][0];
      for (std::int64_t q = 0; q < blk.slots; q += reduce_slots) {
        ReduceItem it;
        it.source = s;
        it.split = b;
        it.slot_begin = static_cast<int>(blk.slot_begin + q);
        it.slot_end = static_cast<int>(blk.slot_begin + std::min<std::int64_t>(q + reduce_slots, blk.slots));
        it.col_begin = static_cast<int>(cols[static_cast<std::size_t>(b)]);
        it.col_end = static_cast<int>(cols[static_cast<std::size_t>(b) + 1]);
        it.row_base = w.row[static_cast<std::size_t>(s)][0];
        it.table_base = w.table_base[static_cast<std::size_t>(s)];
        w.reduces.push_back(it);
      }
    }
}

void WorkPlanner::comet_work(int d, RankWork &w) const {
  OverlapPlan const plan = comet_plan(d);
  auto const message_id = comet_messages(plan, w);
  auto const split_last = comet_items(d, plan, message_id, w);
  comet_reduces(d, plan, split_last, w);
}

} // namespace tessel::moe::cuda::Impl

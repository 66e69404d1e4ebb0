// Crius's placement: a job on its type and count with the best locality, defragmenting bubbles (idle GPUs of
// partially used nodes) by pairwise recursive halving/doubling (RHD) migration, relaxing locality when the profile
// says the job stays feasible. RHD stops at a fixed point (or cycle) instead of repeating up to 256 identical passes.

#include "../impl/Crius.hpp"

#include <tessel/core/Error.hpp>

namespace tessel::sched::Impl::crius {

// Arena's _sort_partial_occ_nodes: partially idle nodes of the type, most bubbles first, cut at the prefix that
// holds `num` bubbles; and the fully idle nodes in node order.
void Crius::partial_nodes(Crs const &c, int type, int num, std::vector<std::pair<int, int>> &partial,
                          std::vector<int> &idle_nodes) const {
  partial.clear();
  idle_nodes.clear();
  int const cap = _cluster->type_capacity(type);
  for (int node : _cluster->type_nodes(type)) {
    int const b = c.bubbles[static_cast<std::size_t>(node)];
    if (b > 0 && b < cap)
      partial.emplace_back(node, b);
    else if (b == cap)
      idle_nodes.push_back(node);
  }
  std::stable_sort(partial.begin(), partial.end(), [](auto const &a, auto const &b) { return a.second > b.second; });
  int sum = 0;
  for (std::size_t i = 0; i < partial.size(); ++i) {
    sum += partial[i].second;
    if (sum >= num) {
      partial.resize(i + 1);
      break;
    }
  }
}

// Arena's _place_job: `num / nodes` GPUs on each node, taken from its idle GPUs or the job's own, in GPU order.
bool Crius::place_job(Crs &c, int job, int num, std::vector<int> const &nodes) const {
  int const per = num / static_cast<int>(nodes.size());
  std::vector<std::vector<int>> blocks;
  for (int node : nodes) {
    std::vector<int> block;
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    for (int g = first; g < first + cap && static_cast<int>(block.size()) < per; ++g)
      if (c.idle[static_cast<std::size_t>(g)] || c.owner[static_cast<std::size_t>(g)] == job)
        block.push_back(g);
    if (static_cast<int>(block.size()) < per)
      return false;
    blocks.push_back(std::move(block));
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    int const first = _cluster->node_first_gpu(nodes[i]), cap = _cluster->node_capacity(nodes[i]);
    for (int g = first; g < first + cap; ++g)
      if (c.owner[static_cast<std::size_t>(g)] == job)
        free_gpu(c, g);
    for (int g : blocks[i])
      use_gpu(c, g, job);
  }
  return true;
}

// Clears the used GPUs of `nodes`; returns (job, GPUs) in first-seen order and each job's nodes among `nodes`.
void Crius::record_and_clear(Crs &c, std::vector<int> const &nodes, std::vector<std::pair<int, int>> &counts,
                             std::vector<std::pair<int, std::vector<int>>> &job_nodes) const {
  counts.clear();
  job_nodes.clear();
  for (int node : nodes) {
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    for (int g = first; g < first + cap; ++g) {
      auto const gi = static_cast<std::size_t>(g);
      if (c.idle[gi] || c.owner[gi] == kDown)
        continue;
      int const o = c.owner[gi];
      auto it = std::find_if(counts.begin(), counts.end(), [o](auto const &p) { return p.first == o; });
      if (it == counts.end()) {
        counts.emplace_back(o, 1);
        job_nodes.push_back({o, {node}});
      } else {
        ++it->second;
        auto &jn =
            std::find_if(job_nodes.begin(), job_nodes.end(), [o](auto const &p) { return p.first == o; })->second;
        if (std::find(jn.begin(), jn.end(), node) == jn.end())
          jn.push_back(node);
      }
      free_gpu(c, g);
    }
  }
}

// Arena's _rhd_bubble_migration_internal between two partially idle nodes of one type.
bool Crius::rhd_pair(Crs &c, int n1, int b1, int n2, int b2, int cap) const {
  Crs const prev = c;
  std::vector<std::pair<int, int>> counts;
  std::vector<std::pair<int, std::vector<int>>> job_nodes;
  if (b1 + b2 > cap) {
    // Everything on the emptier node fits into the other's bubbles: move it all.
    int const src = b1 >= b2 ? n1 : n2, dst = b1 >= b2 ? n2 : n1;
    record_and_clear(c, {src}, counts, job_nodes);
    for (auto const &[job, n] : counts) {
      auto const prev_nodes = nodes_of(prev, job);
      if (prev_nodes.size() > 1 && !is_fake(job) &&
          std::find(prev_nodes.begin(), prev_nodes.end(), dst) != prev_nodes.end()) {
        c = prev;
        return false;
      }
      bool const placed = place_job(c, job, n, {dst});
      TESSEL_REQUIRE(placed, "crius: RHD could not move a job into the destination bubbles");
    }
    return true;
  }
  // One node ends up full: re-place the jobs of both nodes, largest first.
  record_and_clear(c, {n1, n2}, counts, job_nodes);
  std::stable_sort(counts.begin(), counts.end(), [](auto const &a, auto const &b) { return a.second > b.second; });
  auto const &largest_nodes = std::find_if(job_nodes.begin(), job_nodes.end(), [&](auto const &p) {
                                return p.first == counts[0].first;
                              })->second;
  int first_node = largest_nodes.size() > 1 ? (b1 <= b2 ? n1 : n2) : largest_nodes[0];
  int const second_node = first_node != n1 ? n1 : n2;
  for (std::size_t idx = 0; idx < counts.size(); ++idx) {
    int const job = counts[idx].first, n = counts[idx].second;
    auto const prev_nodes = nodes_of(prev, job);
    bool const on_both = std::find(prev_nodes.begin(), prev_nodes.end(), n1) != prev_nodes.end() &&
                         std::find(prev_nodes.begin(), prev_nodes.end(), n2) != prev_nodes.end();
    if ((prev_nodes.size() > 2 && on_both && !is_fake(job)) || n > cap) {
      c = prev;
      return false;
    }
    int rest = 0;
    for (std::size_t k = idx + 1; k < counts.size(); ++k)
      rest += counts[k].second;
    int const target = rest >= c.bubbles[static_cast<std::size_t>(first_node)] ? second_node : first_node;
    int const other = target != first_node ? first_node : second_node;
    if (!place_job(c, job, n, {target})) {
      bool const placed = place_job(c, job, n, {other});
      TESSEL_REQUIRE(placed, "crius: RHD could not re-place a job on either node");
    }
  }
  return true;
}

void Crius::rhd(Crs &c, std::vector<std::pair<int, int>> const &partial, int cap) const {
  for (std::size_t i = 0; i < partial.size() / 2; ++i) {
    auto const &a = partial[i];
    auto const &b = partial[partial.size() - 1 - i];
    rhd_pair(c, a.first, a.second, b.first, b.second, cap);
  }
}

std::uint64_t Crius::type_hash(Crs const &c, int type) const {
  std::uint64_t h = 1469598103934665603ull;
  for (int node : _cluster->type_nodes(type)) {
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    for (int g = first; g < first + cap; ++g) {
      h ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.owner[static_cast<std::size_t>(g)])) * 2 +
           static_cast<std::uint64_t>(c.idle[static_cast<std::size_t>(g)]);
      h *= 1099511628211ull;
    }
  }
  return h;
}

// Arena's _place_job_with_relaxted_locality (\p holds_none: the job holds no GPU in \p c, its stat is its quota).
bool Crius::place_relaxed(Crs &c, int job, Quota const &q, bool holds_none, int &hosts, int &per_host,
                          double &gain) const {
  Stat const s = holds_none ? quota_stat(q) : stat(c, job, q);
  int const cap = _cluster->type_capacity(s.type);
  std::vector<std::pair<int, int>> partial, wide;
  std::vector<int> idle_nodes;
  partial_nodes(c, s.type, s.num, partial, idle_nodes);
  for (int n : idle_nodes)
    wide.emplace_back(n, cap);
  wide.insert(wide.end(), partial.begin(), partial.end());
  int per = s.num;
  while (per > 1) {
    per /= 2;
    if (per > cap)
      continue;
    int const h = s.num / per;
    if (!feasible(job, s.type, h, per))
      return false;
    std::vector<int> nodes;
    for (auto const &[node, b] : wide)
      if (b >= per) {
        nodes.push_back(node);
        if (static_cast<int>(nodes.size()) == h) {
          bool const placed = place_job(c, job, s.num, nodes);
          TESSEL_REQUIRE(placed, "crius: relaxed placement failed on nodes with enough bubbles");
          hosts = h;
          per_host = per;
          gain = delta(job, s.type, h, per);
          return true;
        }
      }
  }
  return false;
}

bool Crius::direct_place(Crs &c, int job, int num, int cap, std::vector<std::pair<int, int>> const &partial,
                         std::vector<int> const &idle_nodes) const {
  int const need = num <= cap ? 1 : num / cap;
  if (need <= static_cast<int>(idle_nodes.size())) {
    std::vector<int> nodes(idle_nodes.begin(), idle_nodes.begin() + need);
    bool const placed = place_job(c, job, num, nodes);
    TESSEL_REQUIRE(placed, "crius: placement on idle nodes failed");
    return true;
  }
  for (auto const &[node, b] : partial)
    if (num <= b) {
      bool const placed = place_job(c, job, num, {node});
      TESSEL_REQUIRE(placed, "crius: placement on a partially idle node failed");
      return true;
    }
  return false;
}

// Arena's _migration_search_internal (\p holds_none: the job holds no GPU in \p c, so its stat is its quota, and
// still none when the RHD passes are done: they only move the jobs they find on the nodes).
MigResult Crius::migration_internal(Crs &c, int job, Quota const &q, int gm, int lm, bool holds_none) const {
  MigResult r;
  r.gm = gm;
  Stat const s = holds_none ? quota_stat(q) : stat(c, job, q);
  int const cap = _cluster->type_capacity(s.type);
  Layout const b = best(s.num, s.type);
  std::vector<std::pair<int, int>> partial;
  std::vector<int> idle_nodes;
  partial_nodes(c, s.type, s.num, partial, idle_nodes);
  if (!feasible(job, s.type, b.hosts, b.per_host))
    return r;
  double const gain_best = delta(job, s.type, b.hosts, b.per_host);
  if (direct_place(c, job, s.num, cap, partial, idle_nodes)) {
    r.feasible = true;
    r.gain = gain_best;
    return r;
  }
  // RHD passes until the job fits with best locality, at most min(gm, lm) passes. A pass that leaves the type's
  // nodes as an earlier pass did repeats forever, so the remaining passes are skipped (same final state).
  int const bound = std::min(gm, lm);
  int cnt = 0;
  std::vector<std::uint64_t> seen;
  seen.push_back(type_hash(c, s.type));
  while (cnt < bound) {
    rhd(c, partial, cap);
    ++cnt;
    partial_nodes(c, s.type, s.num, partial, idle_nodes);
    if (direct_place(c, job, s.num, cap, partial, idle_nodes)) {
      r.feasible = true;
      r.migrated = true;
      r.gain = gain_best;
      r.gm = gm - cnt;
      return r;
    }
    std::uint64_t const h = type_hash(c, s.type);
    auto const it = std::find(seen.begin(), seen.end(), h);
    if (it != seen.end()) {
      int const period = static_cast<int>(seen.end() - it);
      for (int k = (bound - cnt) % period; k > 0; --k) {
        rhd(c, partial, cap);
        partial_nodes(c, s.type, s.num, partial, idle_nodes);
      }
      cnt = bound;
      break;
    }
    seen.push_back(h);
  }
  int hosts = 0, per = 0;
  double gain = kInfeasible;
  if (place_relaxed(c, job, q, holds_none, hosts, per, gain)) {
    r.feasible = true;
    r.migrated = cnt > 0;
    r.relaxed = true;
    r.gain = gain;
    r.gm = gm - bound;
    return r;
  }
  r.migrated = cnt > 0;
  return r;
}

// Arena's _migration_search: the gain is relative to the job's placement in the state, if any. \p holds_none: the
// caller knows the job holds no GPU in \p c (no gain to take, nothing to clear).
MigResult Crius::migration_search(Crs &c, int job, Quota const &q, int gm, int lm, bool clear, bool holds_none) const {
  if (holds_none)
    return migration_internal(c, job, q, gm, lm, true);
  double prev_gain = 0;
  Stat const s = stat(c, job, q);
  if (!s.nodes.empty())
    prev_gain = delta(job, s.type, s.hosts, s.per_host);
  if (clear)
    clear_on_nodes(c, job, s.nodes);
  MigResult r = migration_internal(c, job, q, gm, lm, clear || s.nodes.empty());
  r.gain -= prev_gain;
  return r;
}

// Arena's _introspective_migration_search: consolidate partially cross-node jobs inside their own GPUs.
void Crius::introspective_migration() {
  std::vector<int> cross;
  for (int id : _running) {
    auto const &j = _ctx->job(id);
    if (j.quota_hosts > 1 && j.quota_per_host < _cluster->type_capacity(j.quota_type))
      cross.push_back(id);
  }
  if (cross.empty())
    return;
  int gm = kGlobalEta;
  while (true) {
    double best_gain = kInfeasible;
    int best_job = -1, best_gm = gm;
    Crs best_state;
    for (int id : cross) {
      Crs c = live();
      Stat const p = stat(c, id, registered(id));
      Layout const b = best(p.num, p.type);
      if (p.hosts == b.hosts && p.per_host == b.per_host)
        continue;
      // Only the job's own GPUs are bubbles; every other idle GPU is held by a virtual job of its type.
      for (std::size_t g = 0; g < c.owner.size(); ++g) {
        int const gi = static_cast<int>(g);
        if (c.owner[g] == id)
          free_gpu(c, gi);
        else if (c.idle[g])
          use_gpu(c, gi, fake_of(_cluster->node_type(_cluster->gpu_node(gi))));
      }
      MigResult const ms = migration_search(c, id, registered(id), gm, kLocalEta, false);
      if (!ms.feasible)
        continue; // Arena asserts this cannot happen
      for (std::size_t g = 0; g < c.owner.size(); ++g)
        if (is_fake(c.owner[g]))
          free_gpu(c, static_cast<int>(g));
      Stat const n = stat(c, id, registered(id));
      double const gain = delta(id, n.type, n.hosts, n.per_host, p.type, p.hosts, p.per_host);
      if (gain > 0 && gain > best_gain) {
        best_gain = gain;
        best_job = id;
        best_state = std::move(c);
        best_gm = ms.gm;
      }
    }
    if (best_job < 0)
      break;
    apply(best_state);
    update_run_jobs();
    cross.erase(std::find(cross.begin(), cross.end(), best_job));
    gm = best_gm;
  }
}

// Arena's _eliminate_unnecessary_suspend_resume: a job that fully occupies its nodes and was only moved to other
// nodes of the same shape gets its old nodes back (the newcomer takes the new ones).
void Crius::eliminate_unnecessary_suspend_resume(Crs const &prev) {
  Crs c = live();
  bool changed = false;
  for (int id : _running) {
    auto const prev_nodes = nodes_of(prev, id);
    auto const new_nodes = nodes_of(c, id);
    if (prev_nodes.empty() || prev_nodes == new_nodes)
      continue;
    auto const &j = _ctx->job(id);
    if (j.quota_gpus / static_cast<int>(prev_nodes.size()) < _cluster->type_capacity(j.quota_type))
      continue;
    if (_cluster->node_type(new_nodes[0]) != _cluster->node_type(prev_nodes[0]))
      continue;
    auto on_node = [&](Crs const &state, int node) {
      int n = 0;
      for (int g = _cluster->node_first_gpu(node); g < _cluster->node_first_gpu(node) + _cluster->node_capacity(node);
           ++g)
        n += state.owner[static_cast<std::size_t>(g)] == id;
      return n;
    };
    if (prev_nodes.size() != new_nodes.size() || on_node(prev, prev_nodes[0]) != on_node(c, new_nodes[0]))
      continue;
    std::vector<int> switched;
    for (int s : new_nodes) {
      if (std::find(prev_nodes.begin(), prev_nodes.end(), s) != prev_nodes.end())
        continue;
      for (int p : prev_nodes) {
        if (std::find(new_nodes.begin(), new_nodes.end(), p) != new_nodes.end() ||
            std::find(switched.begin(), switched.end(), p) != switched.end())
          continue;
        int const cap = _cluster->node_capacity(p);
        bool all_used = true;
        for (int i = 0; i < cap; ++i) {
          int const gp = _cluster->node_first_gpu(p) + i;
          all_used = all_used && !c.idle[static_cast<std::size_t>(gp)] && c.owner[static_cast<std::size_t>(gp)] >= 0;
        }
        if (!all_used)
          break; // Arena asserts the old node is fully held by other jobs
        switched.push_back(p);
        for (int i = 0; i < cap; ++i) {
          int const gp = _cluster->node_first_gpu(p) + i, gs = _cluster->node_first_gpu(s) + i;
          int const other = c.owner[static_cast<std::size_t>(gp)];
          set_gpu(c, gs, other, other == kEmpty);
          use_gpu(c, gp, id);
        }
        changed = true;
        break;
      }
    }
  }
  if (changed) {
    apply(c);
    update_run_jobs();
  }
}

} // namespace tessel::sched::Impl::crius

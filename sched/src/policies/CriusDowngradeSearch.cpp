// Crius's downgrade search for a job that does not fit: a bounded breadth-first search over shrink (halve a running
// job's GPUs) and hardware-type-change moves of running jobs, scored by the summed throughput gain ("structured
// marginal gain").

#include "../impl/Crius.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>

namespace tessel::sched::Impl::crius {

// Arena's _update_crs_table_after_job_shrink.
void Crius::shrink_in_state(Crs &c, std::vector<int> nodes, int prev_hosts, int job, int new_num) const {
  if (prev_hosts == 1) {
    int cnt = 0;
    int const node = nodes[0];
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    for (int g = first; g < first + cap; ++g)
      if (c.owner[static_cast<std::size_t>(g)] == job && ++cnt > new_num)
        free_gpu(c, g);
    return;
  }
  std::stable_sort(nodes.begin(), nodes.end(), [&](int a, int b) {
    return c.bubbles[static_cast<std::size_t>(a)] < c.bubbles[static_cast<std::size_t>(b)];
  });
  nodes.resize(nodes.size() / 2);
  for (int node : nodes) {
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    for (int g = first; g < first + cap; ++g)
      if (c.owner[static_cast<std::size_t>(g)] == job)
        free_gpu(c, g);
  }
}

// Arena's choice of the job to shrink, for every GPU type in one pass over the candidates: among the candidates of
// the type holding at least half the GPUs of its largest one and more than one GPU, the first with the largest
// gain. \p idx indexes the plan's state, \p tq is the target's quota in it.
void Crius::shrink_choices(int target, Quota const &tq, std::vector<int> const &cand, StatIndex const &idx,
                           std::vector<ShrinkChoice> &out) const {
  int const ntypes = _cluster->num_types();
  out.assign(static_cast<std::size_t>(ntypes), ShrinkChoice{});
  Stat fallback;
  auto stat_of = [&](int jid) -> Stat const & {
    if (jid != target)
      if (Stat const *s = idx.find(jid))
        return *s;
    return stat_from(idx, jid, jid == target ? tq : registered(jid), fallback);
  };
  std::vector<int> max_alloc(static_cast<std::size_t>(ntypes), -1);
  for (int jid : cand) {
    Stat const &s = stat_of(jid);
    if (s.type >= 0 && s.type < ntypes)
      max_alloc[static_cast<std::size_t>(s.type)] = std::max(max_alloc[static_cast<std::size_t>(s.type)], s.num);
  }
  Crs live_state;
  Stat live_stat;
  bool have_live = false;
  auto consider = [&](int jid, Stat const &s, int type) {
    if (s.type != type || s.num == 1)
      return;
    int const nn = s.num / 2;
    int const nh = s.hosts > 2 ? s.hosts / 2 : 1;
    int const np = s.hosts > 2 ? s.per_host : nn;
    double const g = delta(jid, s.type, nh, np, s.type, s.hosts, s.per_host);
    ShrinkChoice &ch = out[static_cast<std::size_t>(type)];
    if (g > ch.gain) {
      ch.gain = g;
      ch.sid = jid;
      ch.new_num = nn;
      ch.new_hosts = nh;
      ch.new_per = np;
      ch.prev_hosts = s.hosts;
      ch.prev_nodes = s.nodes;
    }
  };
  for (int jid : cand) {
    Stat const &s = stat_of(jid);
    if (jid == target || !s.nodes.empty()) {
      // Only the shrink of the job's own type can pick it.
      if (s.type >= 0 && s.type < ntypes && s.num >= max_alloc[static_cast<std::size_t>(s.type)] / 2)
        consider(jid, s, s.type);
      continue;
    }
    // Placement cleared in this state (a reserved opportunistic job): Arena uses the cluster's, for every type
    // whose largest candidate it passes with its cleared stat.
    int const num = s.num;
    if (!have_live) {
      live_state = live();
      have_live = true;
    }
    live_stat = stat(live_state, jid, registered(jid));
    for (int t = 0; t < ntypes; ++t)
      if (num >= max_alloc[static_cast<std::size_t>(t)] / 2)
        consider(jid, live_stat, t);
  }
}

// Arena's _shrink_one_job_and_migration_search in \p src with the job \p choice picked for \p cur_type; \p c becomes
// the state after the shrink when there is one.
MoveResult Crius::shrink_one(int target, Quota &tq, int cur_type, int target_type, bool target_placed,
                             ShrinkChoice const &choice, Crs const &src, Crs &c, double gain, int gm, int lm) const {
  MoveResult r;
  r.gain = gain;
  r.gm = gm;
  r.gm_with_mgrt = gm;
  int const sid = choice.sid;
  if (sid < 0)
    return r;
  r.moved = true;
  r.gain += choice.gain;
  c = src;
  if (sid != target) {
    shrink_in_state(c, choice.prev_nodes, choice.prev_hosts, sid, choice.new_num);
  } else {
    tq.num = choice.new_num;
    if (!choice.prev_nodes.empty())
      shrink_in_state(c, choice.prev_nodes, choice.prev_hosts, sid, choice.new_num);
  }
  if (cur_type == target_type) {
    r.crs = c;
    search_after_move(r, target, tq, target_placed, sid, Mod::shrink, cur_type, gm, lm);
  } else {
    r.info = {Mod::shrink, sid, cur_type, choice.new_hosts, choice.new_per};
  }
  return r;
}

// The best throughput a migration search of \p job with \p num GPUs of \p type can give it (the best locality, or
// a relaxed one the search may fall back to), or kInfeasible when the search fails for sure.
double Crius::reachable_thr(int job, int type, int num) const {
  Layout const b = best(num, type);
  double best_thr = thr(job, type, b.hosts, b.per_host);
  if (!(best_thr > 0))
    return kInfeasible;
  int const cap = _cluster->type_capacity(type);
  for (int per = num; per > 1;) {
    per /= 2;
    if (per > cap)
      continue;
    double const t = thr(job, type, num / per, per);
    if (!(t > 0))
      break; // place_relaxed gives up at the first infeasible locality
    best_thr = std::max(best_thr, t);
  }
  return best_thr;
}

// The memo of migration searches for the GPUs of \p type in \p c: a recent state's, or a new one.
MigMemo::Snapshot &Crius::mig_snapshot(Crs const &c, int type) const {
  auto &list = _mig_memo.by_type[static_cast<std::size_t>(type)];
  auto const &nodes = _cluster->type_nodes(type);
  auto same = [&](MigMemo::Snapshot const &snap) {
    std::size_t k = 0;
    for (int node : nodes) {
      auto const first = static_cast<std::size_t>(_cluster->node_first_gpu(node));
      auto const cap = static_cast<std::size_t>(_cluster->node_capacity(node));
      if (!std::equal(c.owner.begin() + static_cast<std::ptrdiff_t>(first),
                      c.owner.begin() + static_cast<std::ptrdiff_t>(first + cap),
                      snap.owner.begin() + static_cast<std::ptrdiff_t>(k)) ||
          !std::equal(c.idle.begin() + static_cast<std::ptrdiff_t>(first),
                      c.idle.begin() + static_cast<std::ptrdiff_t>(first + cap),
                      snap.idle.begin() + static_cast<std::ptrdiff_t>(k)))
        return false;
      k += cap;
    }
    return true;
  };
  for (std::size_t i = 0; i < list.size(); ++i)
    if (same(list[i])) {
      std::rotate(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i),
                  list.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return list.front();
    }
  constexpr std::size_t kSnapshots = 4;
  if (list.size() < kSnapshots)
    list.emplace_back();
  std::rotate(list.begin(), list.end() - 1, list.end());
  MigMemo::Snapshot &snap = list.front();
  snap.owner.clear();
  snap.idle.clear();
  snap.entries.clear();
  for (int node : nodes) {
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    snap.owner.insert(snap.owner.end(), c.owner.begin() + first, c.owner.begin() + first + cap);
    snap.idle.insert(snap.idle.end(), c.idle.begin() + first, c.idle.begin() + first + cap);
  }
  return snap;
}

// Arena's _migration_search_internal of \p job (holding GPUs on \p nodes only, none of \p type, in \p c, where every
// job holds GPUs of one type) for \p num GPUs of \p type: from the memo when a state with the same GPUs of the type had
// it searched, else searched in a copy of \p c.
MigResult const &Crius::mig_internal_memo(MigMemo::Snapshot &snap, Crs const &c, int job, std::vector<int> const &nodes,
                                          int type, int num, int gm, int lm) const {
  auto const &j = _ctx->job(job);
  int const model = j.spec->model, batch = j.spec->batch_size;
  for (auto const &e : snap.entries)
    if (e.model == model && e.batch == batch && e.num == num && e.gm == gm && e.lm == lm)
      return e.result;
  _trial = c;
  clear_on_nodes(_trial, job, nodes);
  MigResult const res = migration_internal(_trial, job, Quota{type, num}, gm, lm, true);
  snap.entries.push_back({model, batch, num, gm, lm, res});
  return snap.entries.back().result;
}

// The search of htc_one: the best type change found so far over the candidates, and the memoized searches.
class Crius::HtcSearch {
public:
  HtcSearch(Crius const &crius, int target, Quota &tq, StatIndex const &idx, Crs const &src, int gm, int lm)
      : _c(crius), _target(target), _idx(idx), _src(src), _gm(gm), _lm(lm), _memo(!idx.multi_type) {
    new_gm = gm;
    Stat fallback;
    _target_type = crius.stat_from(idx, target, tq, fallback).type;
    int const ntypes = crius._cluster->num_types();
    // sufficient(src, t, n) for every t at once: the type has nodes and at least n idle GPUs.
    _idle_of.assign(static_cast<std::size_t>(ntypes), 0);
    for (int t = 0; t < ntypes; ++t)
      for (int node : crius._cluster->type_nodes(t))
        _idle_of[static_cast<std::size_t>(t)] += src.bubbles[static_cast<std::size_t>(node)];
    if (crius._mig_memo.by_type.size() != static_cast<std::size_t>(ntypes))
      crius._mig_memo.by_type.assign(static_cast<std::size_t>(ntypes), {});
    _snaps.assign(static_cast<std::size_t>(ntypes), nullptr);
  }

  // The candidates in Arena's order; the target first when it comes last in \p cand (it wins whenever feasible).
  void run(std::vector<int> const &cand) {
    bool const target_last =
        !cand.empty() && cand.back() == _target && std::find(cand.begin(), cand.end() - 1, _target) == cand.end() - 1;
    if (target_last)
      try_target();
    if (hid < 0)
      for (int jid : cand) {
        if (jid != _target)
          try_other(jid);
        else if (!target_last)
          try_target();
      }
  }

  double max_gain = kInfeasible, max_gain_mgrt = kInfeasible;
  int hid = -1, new_type = -1, prev_num = 0, new_gm = 0;
  std::vector<int> prev_nodes;

private:
  bool enough(int t, int num) const {
    return !_c._cluster->type_nodes(t).empty() && _idle_of[static_cast<std::size_t>(t)] >= num;
  }
  MigMemo::Snapshot &snapshot(int t) {
    auto &s = _snaps[static_cast<std::size_t>(t)];
    if (!s)
      s = &_c.mig_snapshot(_src, t);
    return *s;
  }
  // The migration search of \p job on \p num GPUs of type \p t (memoized when every job holds one type).
  MigResult search(int job, Stat const &s, int t) {
    if (_memo)
      return _c.mig_internal_memo(snapshot(t), _src, job, s.nodes, t, s.num, _gm, _lm);
    _c._trial = _src;
    return _c.migration_search(_c._trial, job, Quota{t, s.num}, _gm, _lm, true);
  }
  void choose(int job, int t, Stat const &s, int gm_after) {
    hid = job;
    new_type = t;
    prev_num = s.num;
    prev_nodes = s.nodes;
    new_gm = gm_after;
  }
  void try_target() {
    Stat tmp;
    Stat const &s = _c.stat_from(_idx, _target, _c.registered(_target), tmp);
    if (s.type != _target_type)
      return;
    for (int t = 0; t < static_cast<int>(_idle_of.size()); ++t) {
      if (t == _target_type || !enough(t, s.num))
        continue;
      Layout const b = _c.best(s.num, t);
      double const g = _c.delta(_target, t, b.hosts, b.per_host, s.type, s.hosts, s.per_host);
      if (!(g > max_gain) || !(_c.reachable_thr(_target, t, s.num) > 0))
        continue;
      MigResult const ms = search(_target, s, t);
      if (ms.feasible) {
        max_gain = g;
        choose(_target, t, s, ms.gm);
      }
    }
  }
  void try_other(int jid) {
    Stat tmp;
    Stat const *found = _idx.find(jid);
    Stat const &s = found ? *found : _c.stat_from(_idx, jid, _c.registered(jid), tmp);
    if (s.type != _target_type)
      return;
    // Arena's migration search first takes the gain of the job's current placement (none when it holds no GPU).
    double const prev_gain = s.nodes.empty() ? 0 : _c.delta(jid, s.type, s.hosts, s.per_host);
    for (int t = 0; t < static_cast<int>(_idle_of.size()); ++t) {
      if (t == _target_type || !enough(t, s.num))
        continue;
      Layout const b = _c.best(s.num, t);
      double const g = _c.delta(jid, t, b.hosts, b.per_host, s.type, s.hosts, s.per_host);
      double const reach = _c.reachable_thr(jid, t, s.num);
      if (!(reach > 0) || !(g + (reach - prev_gain) > max_gain_mgrt))
        continue;
      MigResult ms = search(jid, s, t);
      if (_memo)
        ms.gain -= prev_gain;
      double const gm_total = g + ms.gain;
      if (gm_total > max_gain_mgrt && ms.feasible) {
        max_gain_mgrt = gm_total;
        choose(jid, t, s, ms.gm);
      }
    }
  }

  Crius const &_c;
  int _target, _target_type = -1;
  StatIndex const &_idx;
  Crs const &_src;
  int _gm, _lm;
  bool _memo;
  std::vector<int> _idle_of;
  std::vector<MigMemo::Snapshot *> _snaps;
};

// Arena's _htc_one_job_and_migration_search in \p src (indexed by \p idx); \p c becomes the state after the move
// when there is one. Arena tries every job of the target's type on every other type with enough idle GPUs, each with
// a migration search in a copy of the state; the same choice is made here with less work:
// - the target comes last in \p cand and wins whenever one of its moves is feasible, so it is tried first and the
//   other jobs only when none is;
// - another job's move is searched only when the best throughput its search can reach could beat the best move
//   found (the gain is at most that throughput less the job's current one);
// - a search result depends only on the GPUs of the new type in the state and the job's model, batch and GPU count,
//   so results are shared between jobs and between states with the same GPUs of that type (MigMemo); the chosen
//   job's search is run again to get its state.
MoveResult Crius::htc_one(int target, Quota &tq, std::vector<int> const &cand, StatIndex const &idx, Crs const &src,
                          Crs &c, double gain, int gm, int lm) const {
  MoveResult r;
  r.gain = gain;
  r.gm = gm;
  r.gm_with_mgrt = gm;
  HtcSearch h(*this, target, tq, idx, src, gm, lm);
  h.run(cand);
  if (h.hid < 0)
    return r;
  r.moved = true;
  c = src;
  if (h.hid != target) {
    // The chosen job's migration search again, for its state.
    MigResult const ms = migration_search(c, h.hid, Quota{h.new_type, h.prev_num}, gm, lm, true);
    TESSEL_REQUIRE(ms.feasible && ms.gm == h.new_gm, "crius: repeated migration search disagrees");
    r.gain += h.max_gain_mgrt;
    r.gm = h.new_gm;
  } else {
    tq.type = h.new_type;
    tq.num = h.prev_num;
    if (!h.prev_nodes.empty())
      clear_placement(c, target);
    r.gain += h.max_gain;
  }
  r.crs = c;
  // The target holds no GPU in c: it held none in src, or was cleared (a type change of its own).
  search_after_move(r, target, tq, h.hid != target && idx.find(target), h.hid, Mod::htc, h.new_type, r.gm, lm);
  return r;
}

// The target's migration search in r.crs after the move of \p job; r.info records the move with the job's layout
// after the search. !\p target_placed: the target holds no GPU in r.crs.
void Crius::search_after_move(MoveResult &r, int target, Quota const &tq, bool target_placed, int job, Mod kind,
                              int type, int gm, int lm) const {
  MigResult const ms = migration_search(r.crs, target, tq, gm, lm, true, !target_placed);
  Stat const after = stat(r.crs, job, job == target ? tq : registered(job));
  r.feasible = ms.feasible;
  r.mgrt_gain = ms.gain;
  r.relaxed = ms.relaxed;
  r.gm_with_mgrt = ms.gm;
  r.info = {kind, job, type, after.hosts, after.per_host};
}

// Arena's _is_no_infeasible_job.
bool Crius::no_infeasible_job(std::vector<ModInfo> const &mdf) const {
  std::vector<int> bad;
  for (auto const &m : mdf) {
    bool const ok = feasible(m.job, m.type, m.hosts, m.per_host);
    auto const it = std::find(bad.begin(), bad.end(), m.job);
    if (!ok && it == bad.end())
      bad.push_back(m.job);
    else if (it != bad.end())
      bad.erase(it);
  }
  return bad.empty();
}

// Arena's _job_downgrade_search: BFS of `depth` levels; each plan tries a shrink per GPU type and one HTC.
std::vector<SearchPlan> Crius::downgrade_search(int target, Crs const &c, int depth, int gm, int lm) const {
  std::vector<SearchPlan> fsb, level;
  std::vector<int> cand;
  std::vector<ShrinkChoice> choices;
  level.push_back(SearchPlan{c, registered(target), 0.0, gm, {}});
  for (int it = 0; it < depth && !level.empty(); ++it) {
    std::vector<SearchPlan> next;
    // A feasible move is a plan; one that is infeasible or only fits relaxed is searched further.
    auto keep = [&](MoveResult &r, Crs &work, Quota const &tq, std::vector<ModInfo> mdf) {
      if (r.moved)
        mdf.push_back(r.info);
      if (r.feasible && no_infeasible_job(mdf))
        fsb.push_back(SearchPlan{std::move(r.crs), tq, r.gain + r.mgrt_gain, r.gm_with_mgrt, mdf});
      if ((!r.feasible || r.relaxed) && r.moved)
        next.push_back(SearchPlan{std::move(work), tq, r.gain, r.gm, mdf});
    };
    // Arena pops its input queue from the back. Every move of a plan starts from the plan's state: one index.
    for (auto p = level.rbegin(); p != level.rend(); ++p) {
      StatIndex const &idx = indexed(p->crs);
      cand = idx.running;
      cand.push_back(target);
      shrink_choices(target, p->target, cand, idx, choices);
      Stat fallback;
      int const target_type = stat_from(idx, target, p->target, fallback).type;
      // A shrink only frees GPUs: the target holds GPUs after one only when it holds some in the plan's state.
      bool const target_placed = idx.find(target) != nullptr;
      for (int t = 0; t < _cluster->num_types(); ++t) {
        if (_cluster->type_nodes(t).empty())
          continue;
        Crs work;
        Quota tq = p->target;
        MoveResult r = shrink_one(target, tq, t, target_type, target_placed, choices[static_cast<std::size_t>(t)],
                                  p->crs, work, p->gain, p->gm, lm);
        keep(r, work, tq, p->mdf);
      }
      Crs work;
      Quota tq = p->target;
      MoveResult r = htc_one(target, tq, cand, idx, p->crs, work, p->gain, p->gm, lm);
      keep(r, work, tq, p->mdf);
    }
    level = std::move(next);
  }
  return fsb;
}

// Arena's _fit_one_job.
bool Crius::fit_one_job(Crs const &c, int job, int gm, int lm, Crs &decision, int &gm_out) const {
  std::vector<SearchPlan> plans;
  Crs work = c;
  MigResult const ms = migration_search(work, job, registered(job), gm, lm, true);
  if (ms.feasible)
    plans.push_back(SearchPlan{std::move(work), registered(job), ms.gain, ms.gm, {}});
  if (!ms.feasible || ms.relaxed) {
    int depth = _opt.crius_search_depth > 0 ? _opt.crius_search_depth : (_running.size() <= 150 ? 3 : 2);
    auto more = downgrade_search(job, c, depth, gm, lm);
    for (auto &p : more)
      plans.push_back(std::move(p));
    int best_idx = -1;
    double best_gain = kInfeasible;
    for (std::size_t i = 0; i < plans.size(); ++i)
      if (plans[i].gain > best_gain) {
        best_gain = plans[i].gain;
        best_idx = static_cast<int>(i);
      }
    if (best_idx < 0)
      return false;
    decision = std::move(plans[static_cast<std::size_t>(best_idx)].crs);
    gm_out = plans[static_cast<std::size_t>(best_idx)].gm;
    return true;
  }
  decision = std::move(plans[0].crs);
  gm_out = plans[0].gm;
  return true;
}

} // namespace tessel::sched::Impl::crius

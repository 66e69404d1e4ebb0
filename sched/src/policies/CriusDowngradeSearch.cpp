// Crius's downgrade search for a job that does not fit: a bounded breadth-first search over shrink (halve a running
// job's GPUs) and hardware-type-change moves of running jobs, scored by the summed throughput gain ("structured
// marginal gain").

#include "../impl/Crius.hpp"

#include <tessel/core/Error.hpp>

#include <unordered_set>

namespace tessel::sched::Impl::crius {

// Running jobs in the state (GPU order of first appearance), then the target (Arena's _get_run_job_ids).
std::vector<int> Crius::run_job_ids(Crs const &c, int target) const {
  std::vector<int> ids;
  std::unordered_set<int> seen;
  for (std::size_t g = 0; g < c.owner.size(); ++g) {
    int const o = c.owner[g];
    if (o >= 0 && !c.idle[g] && seen.insert(o).second)
      ids.push_back(o);
  }
  ids.push_back(target);
  return ids;
}

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

// Arena's _shrink_one_job_and_migration_search.
MoveResult Crius::shrink_one(int target, Quota &tq, int cur_type, std::vector<int> const &cand, Crs &c, double gain,
                             int gm, int lm) const {
  MoveResult r;
  r.gain = gain;
  r.gm = gm;
  r.gm_with_mgrt = gm;
  StatIndex const idx = index_stats(c);
  Stat const tstat = stat_from(idx, target, tq);
  int const target_type = tstat.type;
  auto stat_of = [&](int jid) {
    return jid == target ? stat_from(idx, target, tq) : stat_from(idx, jid, registered(jid));
  };
  int max_alloc = -1;
  for (int jid : cand) {
    Stat const s = stat_of(jid);
    if (s.type == cur_type)
      max_alloc = std::max(max_alloc, s.num);
  }
  double max_gain = kInfeasible - 1;
  int sid = -1, new_num = 0, new_hosts = 0, new_per = 0, prev_hosts = 0;
  std::vector<int> prev_nodes;
  Crs live_state;
  bool have_live = false;
  for (int jid : cand) {
    Stat s = stat_of(jid);
    if (s.num < max_alloc / 2)
      continue;
    if (jid != target && s.nodes.empty()) {
      // Placement cleared in this state (a reserved opportunistic job): use the cluster's.
      if (!have_live) {
        live_state = live();
        have_live = true;
      }
      s = stat(live_state, jid, registered(jid));
    }
    if (s.type != cur_type || s.num == 1)
      continue;
    int const nn = s.num / 2;
    int const nh = s.hosts > 2 ? s.hosts / 2 : 1;
    int const np = s.hosts > 2 ? s.per_host : nn;
    double const g = delta(jid, s.type, nh, np, s.type, s.hosts, s.per_host);
    if (g > max_gain) {
      max_gain = g;
      sid = jid;
      new_num = nn;
      new_hosts = nh;
      new_per = np;
      prev_hosts = s.hosts;
      prev_nodes = s.nodes;
    }
  }
  if (sid < 0)
    return r;
  r.moved = true;
  r.gain += max_gain;
  if (sid != target) {
    shrink_in_state(c, prev_nodes, prev_hosts, sid, new_num);
  } else {
    tq.num = new_num;
    if (!prev_nodes.empty())
      shrink_in_state(c, prev_nodes, prev_hosts, sid, new_num);
  }
  if (cur_type == target_type) {
    r.crs = c;
    search_after_move(r, target, tq, sid, Mod::shrink, cur_type, gm, lm);
  } else {
    r.info = {Mod::shrink, sid, cur_type, new_hosts, new_per};
  }
  return r;
}

// Arena's _htc_one_job_and_migration_search.
MoveResult Crius::htc_one(int target, Quota &tq, std::vector<int> const &cand, Crs &c, double gain, int gm,
                          int lm) const {
  MoveResult r;
  r.gain = gain;
  r.gm = gm;
  r.gm_with_mgrt = gm;
  StatIndex const idx = index_stats(c);
  int const target_type = stat_from(idx, target, tq).type;
  double max_gain = kInfeasible, max_gain_mgrt = kInfeasible;
  int hid = -1, new_type = -1, prev_num = 0, new_gm = gm;
  std::vector<int> prev_nodes;
  Crs best_other; // the state after the chosen other job's migration (Arena recomputes it)
  for (int jid : cand) {
    Stat const s = stat_from(idx, jid, registered(jid));
    if (s.type != target_type)
      continue;
    for (int t = 0; t < _cluster->num_types(); ++t) {
      if (t == target_type || !sufficient(c, t, s.num))
        continue;
      Layout const b = best(s.num, t);
      double const g = delta(jid, t, b.hosts, b.per_host, s.type, s.hosts, s.per_host);
      // The candidate as a job of the new type (Arena deep-copies the registered job).
      bool const may_win = jid == target ? g > max_gain : true;
      if (!may_win)
        continue;
      Crs trial = c;
      Quota const q{t, s.num};
      MigResult const ms = migration_search(trial, jid, q, gm, lm, true);
      double const gm_total = g + ms.gain;
      if (((g > max_gain && jid == target) || (gm_total > max_gain_mgrt && jid != target)) && ms.feasible) {
        if (jid == target)
          max_gain = g;
        else
          max_gain_mgrt = gm_total;
        hid = jid;
        new_type = t;
        prev_num = s.num;
        prev_nodes = s.nodes;
        new_gm = ms.gm;
        if (jid != target)
          best_other = std::move(trial);
      }
    }
  }
  if (hid < 0)
    return r;
  r.moved = true;
  if (hid != target) {
    c = std::move(best_other);
    r.gain += max_gain_mgrt;
    r.gm = new_gm;
  } else {
    tq.type = new_type;
    tq.num = prev_num;
    if (!prev_nodes.empty())
      clear_placement(c, target);
    r.gain += max_gain;
  }
  r.crs = c;
  search_after_move(r, target, tq, hid, Mod::htc, new_type, r.gm, lm);
  return r;
}

// The target's migration search in r.crs after the move of \p job; r.info records the move with the job's layout
// after the search.
void Crius::search_after_move(MoveResult &r, int target, Quota const &tq, int job, Mod kind, int type, int gm,
                              int lm) const {
  MigResult const ms = migration_search(r.crs, target, tq, gm, lm, true);
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
    // Arena pops its input queue from the back.
    for (auto p = level.rbegin(); p != level.rend(); ++p) {
      for (int t = 0; t < _cluster->num_types(); ++t) {
        if (_cluster->type_nodes(t).empty())
          continue;
        Crs work = p->crs;
        Quota tq = p->target;
        MoveResult r = shrink_one(target, tq, t, run_job_ids(work, target), work, p->gain, p->gm, lm);
        keep(r, work, tq, p->mdf);
      }
      Crs work = p->crs;
      Quota tq = p->target;
      MoveResult r = htc_one(target, tq, run_job_ids(work, target), work, p->gain, p->gm, lm);
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

// Crius's upgrades while GPUs are free: greedy steps, each the best type change or GPU doubling of one running job.
// Moves whose best possible gain cannot beat the best found are skipped (the same decisions).

#include "../impl/Crius.hpp"

#include <tessel/core/Error.hpp>

namespace tessel::sched::Impl::crius {

// Arena's _job_upgrade_search for one running job in \p live_state (live()); `floor` prunes moves that cannot beat
// it.
bool Crius::upgrade_one(Crs const &live_state, int id, int gm, int lm, double floor, double &gain_out, Crs &state_out,
                        int &gm_out) const {
  auto const &j = _ctx->job(id);
  Crs c = live_state;
  bool const modified = clear_placement(c, id);
  TESSEL_REQUIRE(modified, "crius: running job ", j.spec->id, " holds no GPU");
  int const ttype = j.quota_type, tnum = j.quota_gpus, thosts = j.quota_hosts, tper = j.quota_per_host;
  double const cur = thr(id, ttype, thosts, tper);
  double max_gain = kInfeasible;
  bool found = false;
  // The best throughput any locality of (type, num) can give bounds the gain of a move.
  auto bound = [&](int type, int num) {
    double b = kInfeasible;
    int const cap = _cluster->type_capacity(type);
    for (int per = std::min(num, cap); per >= 1; per /= 2)
      b = std::max(b, thr(id, type, num / per, per));
    if (!(b > 0))
      return kInfeasible;
    return cur > 0 ? b - cur : b - kInfeasible;
  };
  // Keeps the move to quota q when the job migrates there with a larger gain; its new layout is read with stat_q.
  auto try_move = [&](Quota const &q, Quota const &stat_q) {
    Crs trial = c;
    MigResult const ms = migration_search(trial, id, q, gm, lm, true);
    Stat const n = stat(trial, id, stat_q);
    double const g = delta(id, q.type, n.hosts, n.per_host, ttype, thosts, tper);
    if (ms.feasible && g > max_gain) {
      max_gain = g;
      state_out = std::move(trial);
      gm_out = ms.gm;
      found = true;
    }
  };
  for (int t = 0; t < _cluster->num_types(); ++t) {
    if (t == ttype || !sufficient(c, t, tnum))
      continue;
    double const b = bound(t, tnum);
    if (!(b > 0) || b <= std::max(floor, max_gain))
      continue;
    Quota const q{t, tnum};
    try_move(q, q);
  }
  if (tnum < kMaxGpus && sufficient(c, ttype, 2 * tnum)) {
    double const b = bound(ttype, 2 * tnum);
    if (b > 0 && b > std::max(floor, max_gain))
      try_move(Quota{ttype, 2 * tnum}, registered(id));
  }
  if (found && max_gain > 0) {
    gain_out = max_gain;
    return true;
  }
  return false;
}

// Arena's _running_jobs_upgrade_trial: up to 10 greedy steps, each applying the best single upgrade.
void Crius::upgrade_trial() {
  if (_running.empty())
    return;
  int gm = kGlobalEta;
  for (int step = 0; step < _opt.crius_upgrade_steps; ++step) {
    double best_gain = kInfeasible;
    int best_job = -1, best_gm = gm;
    Crs best_state;
    Crs const live_state = live(); // nothing changes the allocation until the step's upgrade is applied
    for (int id : _running) {
      double g = 0;
      Crs state;
      int gm_after = gm;
      if (!upgrade_one(live_state, id, gm, kLocalEta, best_gain, g, state, gm_after) || !(g > best_gain))
        continue;
      Stat const n = stat(state, id, registered(id));
      if (!feasible(id, n.type, n.hosts, n.per_host))
        continue;
      best_gain = g;
      best_job = id;
      best_state = std::move(state);
      best_gm = gm_after;
    }
    if (best_job < 0)
      break;
    apply(best_state);
    update_run_jobs();
    gm = best_gm;
  }
}

} // namespace tessel::sched::Impl::crius

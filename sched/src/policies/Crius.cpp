// Crius (Arena's scheduler.py, `--policy crius --sched_with_opt`): round-based, FIFO by submission with
// opportunistic start and reservations; each job is placed on its requested GPU type and count with the best
// locality, defragmenting bubbles (idle GPUs of partially used nodes) by pairwise recursive halving/doubling (RHD)
// migration, relaxing locality when the profile says the job stays feasible; when that fails (or only a relaxed
// placement exists) a bounded breadth-first search over shrink (halve a running job's GPUs) and hardware-type-change
// moves of running jobs, scored by the summed throughput gain ("structured marginal gain"), picks the best plan.
// When jobs end: introspective migration of partially cross-node jobs, a pending-jobs restart trial with the
// resources of lower-priority opportunistic jobs reserved for blockers (conflicting opportunistic jobs are
// suspended), and greedy upgrades (type change or GPU doubling) of running jobs while GPUs are free. Throughputs
// are those of the best parallel plan of each allocation (adaptive parallelism).
//
// The search state is an indexed copy of the cluster (owner and idle status per GPU, idle count per node); per-job
// facts are computed in one pass where Arena rescans its tables per query, RHD migration stops at a fixed point
// (or cycle) instead of repeating up to 256 identical passes, and the upgrade trial prunes moves whose throughput
// gain cannot beat the best found. The downgrade search indexes each plan's state once (recent states' indexes
// are kept: the jobs of a restart pass start from the same state), picks every type's shrink in one pass, tries
// the target's own type change first (it wins when feasible), skips other jobs' type changes that cannot beat the
// best found, and shares migration-search results between jobs of one model, batch and GPU count and between
// states with the same GPUs of the new type (CriusDowngradeSearch.cpp). None of these change a decision.
//
// The policy's steps are split over the files listed in impl/Crius.hpp.

#include "../impl/Crius.hpp"
#include "../impl/Policies.hpp"

#include <tessel/core/Error.hpp>

namespace tessel::sched::Impl::crius {

void Crius::schedule(SchedContext &ctx) {
  _ctx = &ctx;
  _cluster = &ctx.cluster();
  _mig_memo.by_type.clear();
  for (auto &e : _indexes.entries)
    e.valid = false;
  // Jobs that ended leave the running queue (Arena's _update_and_check_end), in running-queue order.
  std::vector<int> ended;
  for (int id : _running)
    if (ctx.job(id).state == JobState::completed || ctx.job(id).state == JobState::rejected)
      ended.push_back(id);
  for (int id : ctx.evicted())
    if (std::find(_running.begin(), _running.end(), id) != _running.end())
      handle_eviction(id);
  remove_not_running();
  if (!ended.empty() || !ctx.evicted().empty() || !ctx.repaired().empty())
    optimize_running_jobs(ended, ctx.arrived().empty());
  if (!ctx.arrived().empty())
    fit_new_jobs(ctx.arrived());
}

void Crius::remove_not_running() {
  _running.erase(std::remove_if(_running.begin(), _running.end(),
                                [&](int id) { return _ctx->job(id).state != JobState::running; }),
                 _running.end());
}

// Untags blockers above position `idx` up to the previous opportunistic job.
void Crius::untag_blockers_above(std::size_t idx) {
  for (std::size_t k = idx; k-- > 0;) {
    auto &j = _ctx->job(_dq[k]);
    if (j.blocker)
      j.blocker = false;
    else
      break; // an opportunistic job (or, unexpectedly, a plain pending one) ends the walk
  }
}

bool Crius::opportunist_below(std::size_t idx) const {
  for (std::size_t k = idx + 1; k < _dq.size(); ++k)
    if (_ctx->job(_dq[k]).opportunism)
      return true;
  return false;
}

// The job at position `idx` of the decision queue is pending again: not opportunistic, and a blocker exactly when
// an opportunistic job is below it (otherwise the blockers above it lose their tag too).
void Crius::mark_pending_in_dq(std::size_t idx) {
  auto &j = _ctx->job(_dq[idx]);
  j.opportunism = false;
  if (!opportunist_below(idx)) {
    j.blocker = false;
    untag_blockers_above(idx);
  } else {
    j.blocker = true;
  }
}

// Arena's _suspend_one_job (decision-queue part) followed by the suspension itself.
void Crius::suspend_job(int id) {
  auto const it = std::find(_dq.begin(), _dq.end(), id);
  if (it != _dq.end())
    mark_pending_in_dq(static_cast<std::size_t>(it - _dq.begin()));
  _ctx->suspend(id);
  _running.erase(std::find(_running.begin(), _running.end(), id));
  _pending.push_back(id);
}

// A running job lost its node: it is pending again, at its FIFO position in the decision queue.
void Crius::handle_eviction(int id) {
  auto &j = _ctx->job(id);
  if (!in_dq(id)) {
    auto pos = std::find_if(_dq.begin(), _dq.end(), [&](int o) {
      auto const &x = _ctx->job(o);
      return x.submit_round > j.submit_round || (x.submit_round == j.submit_round && x.id > j.id);
    });
    pos = _dq.insert(pos, id);
    j.opportunism = false;
    j.blocker = opportunist_below(static_cast<std::size_t>(pos - _dq.begin()));
  } else {
    mark_pending_in_dq(static_cast<std::size_t>(std::find(_dq.begin(), _dq.end(), id) - _dq.begin()));
  }
  _pending.push_back(id);
}

void Crius::fit_new_jobs(std::vector<int> const &arrived) {
  Crs const prev = live();
  int gm = kGlobalEta;
  for (int id : arrived) {
    _dq.push_back(id);
    Crs decision;
    int gm_after = gm;
    bool const ok = fit_one_job(live(), id, gm, kLocalEta, decision, gm_after);
    if (ok) {
      apply(decision);
      gm = gm_after;
      if (_dq.size() == 1) {
        _dq.pop_back();
      } else {
        _ctx->job(id).opportunism = true;
        for (std::size_t k = 0; k + 1 < _dq.size(); ++k) {
          auto &o = _ctx->job(_dq[k]);
          if (!o.blocker && !o.opportunism)
            o.blocker = true;
        }
      }
      _ctx->start(id);
      _running.push_back(id);
      update_run_jobs();
    } else {
      _pending.push_back(id);
    }
  }
  upgrade_trial();
  eliminate_unnecessary_suspend_resume(prev);
}

void Crius::optimize_running_jobs(std::vector<int> const &ended, bool need_upgrade) {
  Crs const prev = live();
  // Release (already done by the simulator) and update the decision queue for ended opportunistic jobs.
  for (int id : ended) {
    auto &j = _ctx->job(id);
    auto const it = std::find(_dq.begin(), _dq.end(), id);
    if (j.opportunism && it != _dq.end()) {
      std::size_t const idx = static_cast<std::size_t>(it - _dq.begin());
      if (!opportunist_below(idx))
        untag_blockers_above(idx);
      _dq.erase(_dq.begin() + static_cast<std::ptrdiff_t>(idx));
    }
  }
  introspective_migration();
  restart_trial();
  if (need_upgrade)
    upgrade_trial();
  eliminate_unnecessary_suspend_resume(prev);
}

} // namespace tessel::sched::Impl::crius

namespace tessel::sched::Impl {

std::unique_ptr<Policy> make_crius(PolicyOptions const &options) { return std::make_unique<crius::Crius>(options); }

} // namespace tessel::sched::Impl

// Crius's pending-jobs restart trial: pending jobs in decision-queue order, a blocker taking the resources of the
// opportunistic jobs below it; the opportunistic jobs whose GPUs it takes are suspended.

#include "../impl/Crius.hpp"

#include <tessel/core/Error.hpp>

#include <unordered_set>

namespace tessel::sched::Impl::crius {

// Arena's _get_reserved_resources: a blocker may use the GPUs of the opportunistic jobs below it.
Crs Crius::reserved_for(int id) const {
  Crs c = live();
  auto const &j = _ctx->job(id);
  if (!j.blocker)
    return c;
  std::size_t const idx = static_cast<std::size_t>(std::find(_dq.begin(), _dq.end(), id) - _dq.begin());
  for (std::size_t k = idx + 1; k < _dq.size(); ++k) {
    auto const &o = _ctx->job(_dq[k]);
    if (!o.blocker && !o.opportunism)
      break;
    if (o.opportunism && o.state == JobState::running)
      for (std::size_t g = 0; g < c.owner.size(); ++g)
        if (c.owner[g] == o.id && !c.idle[g])
          set_gpu(c, static_cast<int>(g), o.id, true);
  }
  return c;
}

// Opportunistic jobs holding a different number of GPUs in \p decision than in the live allocation, in GPU order of
// their first GPU.
std::vector<int> Crius::displaced_opportunists(Crs const &decision) const {
  std::vector<int> const &owners = _ctx->alloc().owners();
  std::vector<int> prev_count(_ctx->jobs().size(), 0), cur_count(_ctx->jobs().size(), 0);
  for (std::size_t g = 0; g < owners.size(); ++g) {
    if (owners[g] >= 0)
      ++prev_count[static_cast<std::size_t>(owners[g])];
    if (decision.owner[g] >= 0)
      ++cur_count[static_cast<std::size_t>(decision.owner[g])];
  }
  std::vector<int> conflicts;
  std::unordered_set<int> seen;
  for (std::size_t g = 0; g < owners.size(); ++g) {
    int const o = owners[g];
    if (o < 0 || !seen.insert(o).second || !_ctx->job(o).opportunism)
      continue;
    if (cur_count[static_cast<std::size_t>(o)] != prev_count[static_cast<std::size_t>(o)])
      conflicts.push_back(o);
  }
  return conflicts;
}

// Arena's _pending_jobs_restart_trial.
void Crius::restart_trial() {
  if (_pending.empty())
    return;
  std::size_t restarted_idx = 0;
  bool found = true;
  for (int cnt = 0; found && cnt < _opt.crius_restart_trials; ++cnt) {
    if (_pending.empty())
      break;
    found = false;
    int gm = kGlobalEta;
    std::vector<std::pair<int, int>> infeasible_keys; // (model, batch)
    for (std::size_t i = 0; i < _dq.size(); ++i) {
      if (i < restarted_idx)
        continue;
      int const id = _dq[i];
      auto &j = _ctx->job(id);
      std::pair<int, int> const key{j.spec->model, j.spec->batch_size};
      if (std::find(infeasible_keys.begin(), infeasible_keys.end(), key) != infeasible_keys.end())
        continue;
      if (j.opportunism)
        continue;
      Crs decision;
      int gm_after = gm;
      if (!fit_one_job(reserved_for(id), id, gm, kLocalEta, decision, gm_after)) {
        infeasible_keys.push_back(key);
        continue;
      }
      found = true;
      restarted_idx = i;
      // Opportunistic jobs whose GPUs the restarted job took (even partly) are suspended.
      std::vector<int> const conflicts = displaced_opportunists(decision);
      for (std::size_t g = 0; g < decision.owner.size(); ++g)
        if (decision.idle[g] && decision.owner[g] >= 0)
          set_gpu(decision, static_cast<int>(g), decision.owner[g], false);
      for (int o : conflicts)
        clear_placement(decision, o);
      // Restart the job, suspend the conflicting opportunistic jobs, untag the head of the queue.
      _pending.erase(std::find(_pending.begin(), _pending.end(), id));
      _dq.erase(std::find(_dq.begin(), _dq.end(), id));
      j.blocker = false;
      for (int o : conflicts)
        suspend_job(o);
      while (!_dq.empty() && _ctx->job(_dq.front()).opportunism && _ctx->job(_dq.front()).state == JobState::running) {
        _ctx->job(_dq.front()).opportunism = false;
        _dq.erase(_dq.begin());
      }
      apply(decision);
      _ctx->start(id);
      _running.push_back(id);
      update_run_jobs();
      gm = gm_after;
      break;
    }
  }
}

} // namespace tessel::sched::Impl::crius

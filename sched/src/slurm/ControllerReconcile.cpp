// Every round, the controller brings its jobs up to date with Slurm: stray attempts, attempts asked to
// checkpoint, progress, completions, failures, and the nodes' states.

#include "../impl/Controller.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>

namespace tessel::sched {

void SlurmController::State::reconcile(std::vector<SlurmNode> const &nodes, std::vector<SlurmJob> const &in_slurm) {
  std::map<long, SlurmJob const *> by_id;
  slurm_states.clear();
  for (auto const &s : in_slurm) {
    by_id[s.id] = &s;
    slurm_states[s.id] = s.state;
  }
  cancel_strays(in_slurm);
  node_state.clear();
  for (auto const &n : nodes)
    node_state[n.name] = n;
  for (auto &j : records()) {
    follow_stopping(j, by_id);
    if (j.state == JobState::running)
      update_running(j, by_id);
  }
  update_nodes();
}

// Stray attempts: this controller's (its identity in the comment), alive in Slurm, but neither a job's current
// attempt nor the one checkpointing (an sbatch that outlived a killed controller, a job not in the journal). A running
// one is asked to checkpoint, a waiting one cancelled; Slurm's singleton dependency already keeps it from running
// beside the current attempt. Jobs of other controllers and users, whatever their names, are never touched.
void SlurmController::State::cancel_strays(std::vector<SlurmJob> const &in_slurm) {
  for (auto const &s : in_slurm) {
    if (!Impl::alive_state(s.state) || attempt_of(s) < 0)
      continue;
    int const id = job_of(s);
    if (id >= 0 && (s.id == live_of(id).slurm_id || s.id == live_of(id).stopping_id))
      continue;
    if (id >= 0 && (s.state == "RUNNING" || s.state == "CONFIGURING") && live_of(id).stopping_id == 0) {
      auto &l = live_of(id);
      log(tessel::Impl::concat("job ", record(id).spec->id, ": stray attempt ", attempt_of(s), " (Slurm job ", s.id,
                               ") runs: asking it to checkpoint"));
      try {
        slurm.signal(s.id, "USR1");
        l.stopping_id = s.id;
        l.stopping_round = round();
        continue;
      } catch (SlurmError const &) {
      }
    }
    log(tessel::Impl::concat(id >= 0 ? "job " + record(id).spec->id : "Slurm job " + s.name,
                             ": cancelling stray attempt ", attempt_of(s), " (Slurm job ", s.id, ")"));
    slurm.cancel(s.id);
  }
}

// An attempt asked to checkpoint: forgotten once it ended, cancelled when it takes longer than the grace rounds.
void SlurmController::State::follow_stopping(JobRecord const &j, std::map<long, SlurmJob const *> const &by_id) {
  auto &l = live_of(j.id);
  if (l.stopping_id <= 0)
    return;
  auto const it = by_id.find(l.stopping_id);
  if (it == by_id.end() || !Impl::alive_state(it->second->state)) {
    l.stopping_id = 0;
  } else if (round() - l.stopping_round >= opt.stop_grace_rounds) {
    log(tessel::Impl::concat("job ", j.spec->id, ": Slurm job ", l.stopping_id, " did not checkpoint within ",
                             opt.stop_grace_rounds, " rounds: cancelling it"));
    slurm.cancel(l.stopping_id);
    l.stopping_id = 0;
  }
}

// A running job: its progress, and whether it completed or failed since the last round.
void SlurmController::State::update_running(JobRecord &j, std::map<long, SlurmJob const *> const &by_id) {
  auto &l = live_of(j.id);
  auto const p = progress(j);
  auto const it = by_id.find(l.slurm_id);
  SlurmJob const *s = it == by_id.end() ? nullptr : it->second;
  if (!p.error.empty()) {
    // A report written half-way may be read once; one still unusable a round later is the attempt's failure.
    log(tessel::Impl::concat("job ", j.spec->id, ": ", p.error));
    if (++l.bad_progress < 2)
      return;
    if (s && Impl::alive_state(s->state))
      slurm.cancel(s->id);
    fail(j.id, "its progress report is unusable: " + p.error);
    return;
  }
  l.bad_progress = 0;
  j.remaining = static_cast<double>(j.spec->iterations - p.done);
  if (p.state == "done" && (!s || !Impl::alive_state(s->state) || s->state == "COMPLETING")) {
    // The job's own finish time: the controller only sees it at its next round.
    job_table.complete(j.id, p.now >= 0 ? p.now : now());
    j.remaining = 0;
    l.slurm_id = 0;
    journal.append({{"op", "end"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"now", j.finish_time}});
    log(tessel::Impl::concat("job ", j.spec->id, " completed (JCT ", std::lround(j.finish_time - j.submit_time),
                             " s of model time)"));
    return;
  }
  std::string const reason = failure_of(j, s);
  if (reason.empty())
    return;
  if (s && Impl::alive_state(s->state))
    slurm.cancel(s->id);
  fail(j.id, reason);
}

// Why a running job's attempt is lost (empty when it is not): a node Slurm declared failed, the attempt gone,
// requeued by Slurm, or ended before the job was done.
std::string SlurmController::State::failure_of(JobRecord const &j, SlurmJob const *s) const {
  auto const &l = live_of(j.id);
  for (int node : l.enacted.nodes) {
    SlurmNode const *n = slurm_node(node);
    if (!n || n->failed)
      return tessel::Impl::concat("node ", node_name(node), " is ", n ? n->state : std::string("gone"));
  }
  if (!s)
    return tessel::Impl::concat("its Slurm job ", l.slurm_id, " is gone");
  if (s->state == "PENDING" && s->restarts > 0)
    return tessel::Impl::concat("Slurm requeued its job ", s->id, " (", s->reason, ")");
  if (!Impl::alive_state(s->state))
    return s->state == "COMPLETED"
               ? tessel::Impl::concat("Slurm job ", s->id, " exited before its iterations were done")
               : tessel::Impl::concat("Slurm job ", s->id, " ended ", s->state, " (exit code ", s->exit_code, ")");
  return {};
}

SlurmNode const *SlurmController::State::slurm_node(int node) const {
  auto const it = node_state.find(node_name(node));
  return it == node_state.end() ? nullptr : &it->second;
}

// A node Slurm will not start jobs on takes no new job; only one Slurm declared failed (DOWN, DRAINED, FAIL) ends
// the jobs on it (above): a node not responding for a moment (a restarted slurmctld) keeps them.
void SlurmController::State::update_nodes() {
  Allocation &alloc = job_table.alloc();
  for (int n = 0; n < judge->cluster.num_nodes(); ++n) {
    SlurmNode const *s = slurm_node(n);
    bool const down = !(s && s->usable);
    if (down == alloc.node_down(n))
      continue;
    // A failed node was emptied above (its jobs failed); a node only unusable for now keeps its jobs and is
    // withheld from new ones once they are gone.
    if (down && alloc.free_on_node(n) != judge->cluster.node_capacity(n))
      continue;
    alloc.set_node_down(n, down);
    if (!down)
      job_table.node_repaired(n);
    log(tessel::Impl::concat("node ", node_name(n),
                             down ? " is out of service (" + (s ? s->state : std::string("gone")) + ")" : " is back"));
  }
}

void SlurmController::State::fail(int id, std::string const &reason) {
  auto &j = record(id);
  auto &l = live_of(id);
  Checkpoint const ck = checkpointed(j);
  std::string const why =
      ck.error.empty() ? reason
                       : reason + "; its checkpoint is unusable (" + ck.error + "): it restarts from iteration 0";
  l.last_failure = why;
  l.slurm_id = 0;
  l.enacted = {};
  l.restore = true;
  l.bad_progress = 0;
  journal.append({{"op", "fail"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"reason", why}, {"now", now()}});
  j.checkpoint_remaining = static_cast<double>(j.spec->iterations - ck.done);
  if (j.failures + 1 > opt.max_failures) {
    std::string const last = tessel::Impl::concat("failed ", j.failures + 1, " times (more than --max-failures ",
                                                  opt.max_failures, "); last: ", why);
    // Its GPUs are free: for the policy it ended like a completed job.
    j.remaining = j.checkpoint_remaining;
    job_table.give_up(id, last);
    journal.append({{"op", "reject"}, {"job", j.spec->id}, {"reason", last}, {"now", now()}});
    log(tessel::Impl::concat("job ", j.spec->id, " rejected: ", last));
    return;
  }
  job_table.fail(id);
  log(tessel::Impl::concat("job ", j.spec->id, " failed (", why, "); back to pending, resumes from iteration ",
                           ck.done));
}

// What a job reports in progress.json (written by the job: every field is checked, nothing is believed outside its
// range). No report yet is no progress.
SlurmController::State::Progress SlurmController::State::progress(JobRecord const &j) const {
  Progress p;
  p.done = j.spec->iterations - static_cast<long long>(j.remaining);
  std::string const path = dir_of(j) + "/progress.json";
  try {
    std::string const folder = Impl::not_a_folder(dir_of(j));
    TESSEL_REQUIRE(folder.empty() || !Impl::file_exists(dir_of(j)), folder);
    Impl::StateFileText const f = Impl::read_state_file(path, Impl::kMaxJobFile);
    if (!f.exists)
      return p;
    Json const doc = parse_json(f.text, path);
    TESSEL_REQUIRE(doc.is_object(), path, ": a progress report is a JSON object, got ", doc.type_name());
    p.done = Impl::done_field(doc, path, j.spec->iterations);
    p.state = doc.contains("state") ? json_get<std::string>(doc, "state", path) : std::string("running");
    TESSEL_REQUIRE(p.state == "running" || p.state == "checkpointed" || p.state == "done", path,
                   ": field 'state' must be running, checkpointed or done, got '", p.state, "'");
    TESSEL_REQUIRE(p.state != "done" || p.done == j.spec->iterations, path, ": state done with ", p.done, " of ",
                   j.spec->iterations, " iterations");
    if (doc.contains("time")) {
      double const t = json_get<double>(doc, "time", path);
      // The job's clock may be ahead of the controller's by a little (another node), not by more.
      TESSEL_REQUIRE(std::isfinite(t) && t >= t0 - 60 && t <= Impl::wall_seconds() + 600, path,
                     ": field 'time' must be a Unix time since the controller started, got ", t);
      p.now = (t - t0) * opt.time_scale;
    }
  } catch (tessel::Exception const &e) {
    p.error = e.what();
    p.state.clear();
  } catch (std::exception const &e) {
    p.error = path + ": " + e.what();
    p.state.clear();
  }
  return p;
}

SlurmController::State::Checkpoint SlurmController::State::checkpointed(JobRecord const &j) const {
  Checkpoint c;
  std::string const path = dir_of(j) + "/checkpoint.json";
  try {
    std::string const folder = Impl::not_a_folder(dir_of(j));
    TESSEL_REQUIRE(folder.empty() || !Impl::file_exists(dir_of(j)), folder);
    Impl::StateFileText const f = Impl::read_state_file(path, Impl::kMaxJobFile);
    if (f.exists) {
      Json const doc = parse_json(f.text, path);
      TESSEL_REQUIRE(doc.is_object(), path, ": a checkpoint record is a JSON object, got ", doc.type_name());
      c.done = Impl::done_field(doc, path, j.spec->iterations);
    }
  } catch (std::exception const &e) {
    c.done = 0;
    c.error = e.what();
  }
  return c;
}

} // namespace tessel::sched

// The policy's decisions carried out in Slurm: a start is an sbatch of the job's Cell; a move, shrink or type
// change asks the running attempt to checkpoint and submits the next one behind it (singleton); a suspension asks
// it to checkpoint.

#include "../impl/Controller.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/sched/Model.hpp>

#include <algorithm>

namespace tessel::sched {

SlurmController::State::Enacted SlurmController::State::enacted_of(int job) const {
  Placement const p = placement_of(job_table.alloc(), job);
  return {p.nodes, p.counts};
}

void SlurmController::State::enact(std::vector<JobState> const &before_state, std::vector<Enacted> const &before) {
  for (auto &j : records()) {
    auto const i = static_cast<std::size_t>(j.id);
    auto &l = live_of(j.id);
    bool const was_running = before_state[i] == JobState::running;
    if (j.state == JobState::running) {
      enact_running(j, was_running, before[i]);
    } else if (was_running && j.state == JobState::pending) {
      long const old = l.slurm_id;
      journal.append({{"op", "stop"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"now", now()}});
      l.slurm_id = 0;
      l.enacted = {};
      ask_to_stop(j.id, old);
      log(tessel::Impl::concat("suspended job ", j.spec->id, " (Slurm job ", old, " checkpoints)"));
    } else if (j.state == JobState::rejected && before_state[i] == JobState::pending) {
      journal.append({{"op", "reject"}, {"job", j.spec->id}, {"reason", j.reject_reason}, {"now", now()}});
      log(tessel::Impl::concat("job ", j.spec->id, " rejected by ", policy->name(), ": ", j.reject_reason));
    }
  }
}

// A job the policy runs: nothing to do where it already runs; else the attempt that runs is asked to checkpoint
// and the next attempt, on the new Cell, resumes from that checkpoint once it ended.
void SlurmController::State::enact_running(JobRecord &j, bool was_running, Enacted const &before) {
  auto &l = live_of(j.id);
  Enacted const now_at = enacted_of(j.id);
  if (was_running && now_at == before)
    return;
  long const old = was_running ? l.slurm_id : 0;
  if (old > 0) {
    ask_to_stop(j.id, old);
    // A reschedule as the simulator counts it (Arena's): the job gained a GPU it did not hold. A shrink is a new
    // Slurm attempt too, but not a reschedule.
    bool const gain = Impl::gained(before, now_at);
    if (gain)
      ++j.reschedules;
    journal.append({{"op", "move"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"gained", gain}, {"now", now()}});
  }
  launch(j.id, now_at, old > 0);
}

// The plan file of an attempt: the Cell, its best plan and its throughput.
std::string SlurmController::State::write_plan(JobRecord const &j, Enacted const &e, int attempt,
                                               double startup) const {
  Cluster const &c = judge->cluster;
  int const type = c.node_type(e.nodes[0]);
  int const hosts = static_cast<int>(e.nodes.size()), per = e.counts[0];
  double const thr = judge->oracle->adaptive(j.spec->model, j.spec->batch_size, type, hosts, per);
  auto const best = judge->estimator->best(j.spec->model, j.spec->batch_size, type, hosts, per);
  Json stages = Json::array();
  int micro = 1;
  if (best.feasible) {
    for (auto const &s : best.plan.stages)
      stages.push_back({{"dp", s.dp}, {"tp", s.tp}});
    micro = best.plan.micro_batches;
  } else {
    stages.push_back({{"dp", hosts * per}, {"tp", 1}});
  }
  std::string const path = dir_of(j) + "/plan." + std::to_string(attempt) + ".json";
  Impl::write_state_json(path, Json{{"job", j.spec->id},
                                    {"attempt", attempt},
                                    {"model", ModelCatalog::builtin()[j.spec->model].name()},
                                    {"batch_size", j.spec->batch_size},
                                    {"iterations", j.spec->iterations},
                                    {"gpu_type", c.type(type).name},
                                    {"nodes", node_names(e)},
                                    {"gpus_per_node", per},
                                    {"plan", {{"stages", stages}, {"micro_batches", micro}}},
                                    {"throughput", thr},
                                    {"time_scale", opt.time_scale},
                                    {"startup_s", startup},
                                    {"checkpoint_s", opt.checkpoint_s},
                                    {"dir", dir_of(j)}});
  return path;
}

namespace {

// \p text as one word of sh: in single quotes, each quote written '\''.
std::string sh_quoted(std::string const &text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

} // namespace

// The batch script of an attempt. The job's command runs as a script of sh (so `cd X && python train.py` works; a
// file, not an argument of `sh -c`, which the kernel limits to 128 KiB), from the job's folder; the batch script's own
// shell outlives the controller's SIGUSR1 and Slurm's SIGTERM (which reach every process of the job), waits for the
// command and exits with its status.
std::string SlurmController::State::write_script(JobRecord const &j, int attempt, std::string const &plan) const {
  std::string const stem = dir_of(j) + "/attempt." + std::to_string(attempt);
  Impl::write_state_text(stem + ".command", live_of(j.id).command + "\n");
  std::string const text = "#!/bin/sh\n"
                           "# Attempt " +
                           std::to_string(attempt) + " of job " + j.spec->id +
                           ", submitted by tessel-sched serve (controller " + controller_id +
                           ").\n"
                           "export TESSEL_SCHED_PLAN=" +
                           sh_quoted(plan) +
                           "\n"
                           "export TESSEL_SCHED_JOB_DIR=" +
                           sh_quoted(dir_of(j)) +
                           "\n"
                           "trap ':' USR1 TERM\n"
                           "/bin/sh " +
                           sh_quoted(stem + ".command") +
                           " &\n"
                           "child=$!\n"
                           "while :; do\n"
                           "  wait \"$child\"\n"
                           "  status=$?\n"
                           "  kill -0 \"$child\" 2>/dev/null || break\n"
                           "done\n"
                           "exit \"$status\"\n";
  Impl::write_state_text(stem + ".sh", text);
  return stem + ".sh";
}

// The sbatch of an attempt: its Cell's nodes and GRES, its batch script and plan (written first), its output file.
SbatchRequest SlurmController::State::attempt_request(JobRecord const &j, Enacted const &e, int attempt,
                                                      double startup) const {
  Impl::make_state_dir(opt.state_dir + "/jobs", j.spec->id);
  SbatchRequest r;
  r.name = slurm_name(j);
  r.comment = attempt_comment(attempt);
  r.singleton = true;
  r.partition = opt.partition;
  r.nodes = node_names(e);
  r.gpu_type = judge->cluster.type(judge->cluster.node_type(e.nodes[0])).name;
  r.gpus_per_node = e.counts[0];
  r.script_file = write_script(j, attempt, write_plan(j, e, attempt, startup));
  r.output = dir_of(j) + "/slurm." + std::to_string(attempt) + ".out";
  // Slurm opens the output file following links: whatever is there that is not a regular file goes first.
  Impl::remove_unless_regular(r.output);
  r.workdir = dir_of(j);
  return r;
}

// Starts (or restarts elsewhere) job `id` where the policy placed it.
void SlurmController::State::launch(int id, Enacted const &e, bool moved) {
  auto &j = record(id);
  auto &l = live_of(id);
  bool const uniform = std::all_of(e.counts.begin(), e.counts.end(), [&](int c) { return c == e.counts[0]; });
  if (!uniform)
    return not_started(id, "the policy placed it unevenly across nodes, which one sbatch cannot ask for", false);
  int const attempt = l.attempt + 1;
  int const gpus = static_cast<int>(e.nodes.size()) * e.counts[0];
  // Re-tuning on the new GPUs, as the simulator charges it, plus the restore after a failure.
  double const startup = policy->resched_cost().of(gpus) + (l.restore ? opt.restart_cost : 0.0);
  SbatchRequest r;
  try {
    r = attempt_request(j, e, attempt, startup);
    // Recorded before sbatch: a controller killed in between finds the attempt in Slurm by its comment.
    journal.append({{"op", "launch"},
                    {"job", j.spec->id},
                    {"attempt", attempt},
                    {"nodes", r.nodes},
                    {"gpu_type", r.gpu_type},
                    {"gpus_per_node", r.gpus_per_node},
                    {"now", now()}});
    l.attempt = attempt;
    l.slurm_id = slurm.submit(r);
  } catch (SlurmError const &ex) {
    return not_started(id, ex.what(), ex.unreachable());
  } catch (tessel::Exception const &ex) {
    return not_started(id, ex.what(), false);
  }
  l.enacted = l.last = e;
  l.restore = false;
  log(tessel::Impl::concat(
      moved ? "moved" : "started", " job ", j.spec->id, " on ", r.gpus_per_node * r.nodes.size(), " ", r.gpu_type,
      " GPUs (", r.nodes.size(), " nodes x ", r.gpus_per_node, ") as Slurm job ", l.slurm_id,
      l.stopping_id ? tessel::Impl::concat(" (after Slurm job ", l.stopping_id, " checkpoints)") : std::string()));
}

// An attempt that could not be submitted: a failed attempt of the job with the reason (its folder, its plan, Slurm
// refusing it), or, when Slurm did not answer, no attempt at all. Either way the job is pending again, and the policy
// sees it in the next round.
void SlurmController::State::not_started(int id, std::string const &why, bool slurm_down) {
  auto &j = record(id);
  auto &l = live_of(id);
  log(tessel::Impl::concat("job ", j.spec->id, " could not be started: ", why));
  if (!slurm_down) {
    fail(id, "its attempt could not be started: " + why);
  } else {
    journal.append({{"op", "stop"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"now", now()}});
    job_table.bounce(id);
    l.slurm_id = 0;
    l.enacted = {};
  }
}

// Asks an attempt to checkpoint and exit (SIGUSR1); one not started yet is cancelled.
void SlurmController::State::ask_to_stop(int id, long slurm_id) {
  auto &l = live_of(id);
  auto const it = slurm_states.find(slurm_id);
  std::string const state = it == slurm_states.end() ? std::string() : it->second;
  if (state == "RUNNING" || state == "CONFIGURING") {
    try {
      slurm.signal(slurm_id, "USR1");
      l.stopping_id = slurm_id;
      l.stopping_round = round();
      return;
    } catch (SlurmError const &e) {
      log(tessel::Impl::concat("job ", record(id).spec->id, ": ", e.what(), "; cancelling Slurm job ", slurm_id));
    }
  }
  // Not started yet (nothing to checkpoint; signalling a pending job blocks scancel for half a minute), or the
  // signal failed: cancel it.
  if (state.empty() || Impl::alive_state(state))
    slurm.cancel(slurm_id);
}

} // namespace tessel::sched

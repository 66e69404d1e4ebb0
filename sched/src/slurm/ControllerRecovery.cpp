// Start-up of the controller: the state folder's config (or a new one from Slurm), the journals (submitted jobs,
// the controller's own records), and the attempts still in Slurm, adopted.

#include "../impl/Controller.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

namespace tessel::sched {

template <class F> auto SlurmController::State::read_slurm_until_reachable(F &&read) {
  for (int attempt = 1;; ++attempt) {
    try {
      return read();
    } catch (SlurmError const &e) {
      opt.log(tessel::Impl::concat("Slurm not reachable at start-up (attempt ", attempt, "): ", e.what(),
                                   "; retrying in ", opt.round_seconds, " s"));
      if (opt.max_rounds > 0 && attempt >= std::max(3, opt.max_rounds))
        throw;
      std::this_thread::sleep_for(std::chrono::duration<double>(opt.round_seconds));
    }
  }
}

void SlurmController::State::recover() {
  Impl::make_dirs(opt.state_dir);
  Impl::make_state_dir(opt.state_dir, "jobs");
  std::string const config_path = opt.state_dir + "/config.json";
  Json const config = load_config();
  judge = std::make_unique<Impl::Judge>(json_member(config, "nodes", config_path), config_path, profile, source,
                                        interval());
  job_table = JobTable(judge->cluster);
  policy = make_policy(opt.policy, opt.policy_options);
  job_table.set_clock(static_cast<int>(std::floor((Impl::wall_seconds() - t0) / opt.round_seconds)), 0);
  read_submissions(true);
  std::map<int, Json> last_launch;
  replay_journal(last_launch);
  adopt(last_launch, read_slurm_until_reachable([&] { return slurm.jobs(opt.job_prefix); }));
  // Other attempts still in Slurm (asked to stop before the restart, or submitted by an sbatch that outlived the
  // controller) are dealt with by the first round's reconcile (stray attempts).
  int pending = 0, running = 0, done = 0;
  for (auto const &j : records()) {
    pending += j.state == JobState::pending;
    running += j.state == JobState::running;
    done += j.state == JobState::completed || j.state == JobState::rejected;
  }
  opt.log(tessel::Impl::concat("controller on ", judge->node_names.size(), " nodes, ", judge->cluster.num_gpus(),
                               " GPUs; policy ", policy->name(), "; rounds of ", opt.round_seconds, " s (", interval(),
                               " s of model time); recovered ", records().size(), " jobs: ", running, " running, ",
                               pending, " pending, ", done, " ended"));
}

namespace {

// A new controller's identity: 64 random bits in hex.
std::string new_identity() {
  std::random_device device;
  std::uint64_t const bits = (std::uint64_t(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

} // namespace

// The state folder's config.json: checked against this controller's options, or made from Slurm's nodes.
Json SlurmController::State::load_config() {
  std::string const config_path = opt.state_dir + "/config.json";
  if (Impl::read_state_file(config_path, Impl::kMaxConfig).exists) {
    Json config = Impl::read_state_json(config_path, Impl::kMaxConfig);
    std::string const partition = json_get<std::string>(config, "partition", config_path);
    TESSEL_REQUIRE(partition == opt.partition, config_path,
                   ": this state folder belongs to a controller of partition '", partition, "', not '", opt.partition,
                   "'");
    t0 = json_get<double>(config, "t0", config_path);
    TESSEL_REQUIRE(std::isfinite(t0) && t0 >= 0 && t0 <= Impl::wall_seconds() + 86400, config_path,
                   ": field 't0' must be the controller's start in Unix seconds, got ", t0);
    TESSEL_REQUIRE(json_get<double>(config, "time_scale", config_path) == opt.time_scale &&
                       json_get<double>(config, "round_seconds", config_path) == opt.round_seconds,
                   config_path, ": the state folder was made with another --round or --time-scale");
    std::string const id = config.value("controller_id", std::string());
    controller_id = id.size() == 16 && id.find_first_not_of("0123456789abcdef") == std::string::npos ? id : "";
    if (controller_id.empty()) {
      // A folder of an older controller: its attempts in Slurm carry no identity and are not adopted.
      controller_id = new_identity();
      config["controller_id"] = controller_id;
      Impl::write_state_json(config_path, config);
      opt.log("the state folder had no controller identity: it is now " + controller_id +
              "; attempts submitted before are not this controller's");
    }
    return config;
  }
  auto const nodes = read_slurm_until_reachable([&] { return slurm.nodes(opt.partition); });
  t0 = Impl::wall_seconds();
  controller_id = new_identity();
  Json config = {{"partition", opt.partition},
                 {"t0", t0},
                 {"round_seconds", opt.round_seconds},
                 {"time_scale", opt.time_scale},
                 {"policy", opt.policy},
                 {"source", source_name(source)},
                 {"profile", opt.profile},
                 {"controller_id", controller_id},
                 {"nodes", Impl::nodes_json(nodes)}};
  Impl::write_state_json(config_path, config);
  return config;
}

// The controller's own records: attempts, failures, moves and ends. \p last_launch gets the last launch of each
// job whose attempt may still be in Slurm.
void SlurmController::State::replay_journal(std::map<int, Json> &last_launch) {
  std::uint64_t offset = 0;
  std::string const where = journal.path();
  auto const records = Impl::journal_records(journal, offset, [&](std::string const &e) { note_input_error(e); });
  for (auto const &rec : records) {
    try {
      std::string const op = json_get<std::string>(rec, "op", where);
      auto const it = by_name.find(json_get<std::string>(rec, "job", where));
      if (it == by_name.end())
        continue;
      replay(it->second, op, rec, last_launch);
    } catch (tessel::Exception const &e) {
      note_input_error(tessel::Impl::concat(e.what(), ": record ", rec.dump().substr(0, 200), " skipped"));
    }
  }
}

void SlurmController::State::replay(int id, std::string const &op, Json const &rec, std::map<int, Json> &last_launch) {
  std::string const where = journal.path();
  auto &j = record(id);
  auto &l = live_of(id);
  if (op == "launch") {
    l.attempt = std::max(l.attempt, json_get<int>(rec, "attempt", where));
    last_launch[id] = rec;
    if (j.start_time < 0)
      j.start_time = json_get<double>(rec, "now", where);
  } else if (op == "stop") {
    last_launch.erase(id);
  } else if (op == "fail") {
    ++j.failures;
    l.restore = true;
    l.last_failure = rec.value("reason", std::string());
    last_launch.erase(id);
  } else if (op == "move") {
    j.reschedules += rec.value("gained", true) ? 1 : 0;
  } else if (op == "end" || op == "reject") {
    if (j.state == JobState::pending && op == "end")
      job_table.restore_end(id, JobState::completed, json_get<double>(rec, "now", where));
    else if (j.state == JobState::pending)
      job_table.restore_end(id, JobState::rejected, -1, json_get<std::string>(rec, "reason", where));
    last_launch.erase(id);
  }
}

// Jobs still in Slurm: the latest attempt of each job that was running is adopted; older ones are stopping.
void SlurmController::State::adopt(std::map<int, Json> const &last_launch, std::vector<SlurmJob> const &in_slurm) {
  for (auto const &[id, rec] : last_launch) {
    auto &j = record(id);
    auto &l = live_of(id);
    if (j.state != JobState::pending)
      continue;
    int const attempt = json_get<int>(rec, "attempt", journal.path());
    for (auto const &s : in_slurm)
      if (job_of(s) == id && attempt_of(s) == attempt && Impl::alive_state(s.state)) {
        try {
          l.enacted = l.last = enacted_from(rec, journal.path());
          l.slurm_id = s.id;
        } catch (tessel::Exception const &e) {
          // Not adopted: the first round cancels it as a stray, and the job is decided again.
          note_input_error(e.what());
        }
      }
    auto const p = progress(j);
    j.remaining = static_cast<double>(j.spec->iterations - p.done);
    if (l.slurm_id > 0) {
      place(id, l.enacted);
      job_table.start(id);
      log(tessel::Impl::concat("adopted job ", j.spec->id, " (Slurm job ", l.slurm_id, ")"));
    } else if (p.error.empty() && p.state == "done") {
      job_table.restore_end(id, JobState::completed, p.now >= 0 ? p.now : now());
      journal.append({{"op", "end"}, {"job", j.spec->id}, {"now", j.finish_time}});
    }
  }
}

int SlurmController::State::add_job(JobSpec spec, std::string command, double submit_time, int submit_round) {
  specs.push_back(std::move(spec));
  int const id = job_table.add(&specs.back(), static_cast<double>(specs.back().iterations));
  job_table.enter(id, submit_time, submit_round);
  Live l;
  l.command = std::move(command);
  live.push_back(std::move(l));
  by_name[specs.back().id] = id;
  return id;
}

// New submissions in the journal become pending jobs that arrive this round; a record that is not a valid spec for
// this cluster is refused and reported, and stops nothing.
void SlurmController::State::read_submissions(bool at_start) {
  std::string const where = submits.path();
  auto const records =
      Impl::journal_records(submits, submit_offset, [&](std::string const &e) { note_input_error(e); });
  for (auto const &rec : records) {
    std::string command;
    JobSpec spec;
    double submitted = 0;
    try {
      spec = Impl::parse_spec(json_member(rec, "spec", where), where + ": job", *judge, command);
      double const time = json_get<double>(rec, "time", where);
      TESSEL_REQUIRE(std::isfinite(time) && time <= Impl::wall_seconds() + 86400, where, ": job ", spec.id,
                     ": field 'time' must be the submission in Unix seconds, got ", time);
      submitted = (time - t0) * opt.time_scale;
    } catch (tessel::Exception const &e) {
      note_input_error(tessel::Impl::concat("submission refused: ", e.what()));
      continue;
    }
    if (by_name.count(spec.id)) {
      note_input_error(tessel::Impl::concat(where, ": a second submission of job ", spec.id, " ignored"));
      continue;
    }
    spec.submit_time = std::max(0.0, submitted);
    if (spec.deadline > 0)
      spec.deadline += spec.submit_time;
    // Jobs recovered at start-up arrived in the round after their submission; new ones arrive now.
    int const seen = at_start ? static_cast<int>(std::floor(std::max(0.0, submitted) / interval())) + 1 : round();
    int const id = add_job(std::move(spec), std::move(command), std::max(0.0, submitted), seen);
    if (!at_start) {
      job_table.announce(id);
      log(tessel::Impl::concat("job ", record(id).spec->id, " submitted"));
    }
  }
}

SlurmController::State::Enacted SlurmController::State::enacted_from(Json const &rec, std::string const &where) const {
  Enacted e;
  int const per = json_get<int>(rec, "gpus_per_node", where);
  for (auto const &n : json_get<std::vector<std::string>>(rec, "nodes", where)) {
    auto const it = std::find(judge->node_names.begin(), judge->node_names.end(), n);
    TESSEL_REQUIRE(it != judge->node_names.end(), where, ": node ", n, " is not in the cluster");
    e.nodes.push_back(static_cast<int>(it - judge->node_names.begin()));
    e.counts.push_back(per);
  }
  return e;
}

void SlurmController::State::place(int job, Enacted const &e) {
  Allocation &alloc = job_table.alloc();
  for (std::size_t k = 0; k < e.nodes.size(); ++k) {
    int const node = e.nodes[k];
    int left = e.counts[k];
    int const first = judge->cluster.node_first_gpu(node);
    for (int g = first; g < first + judge->cluster.node_capacity(node) && left > 0; ++g)
      if (alloc.owner(g) == kFree) {
        alloc.assign(g, job);
        --left;
      }
    TESSEL_REQUIRE(left == 0, "job ", record(job).spec->id, ": node ", node_name(node), " has no room for it");
  }
}

} // namespace tessel::sched

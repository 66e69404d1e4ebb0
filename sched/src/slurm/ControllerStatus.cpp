// What the controller publishes every round (status.json) and what `tessel-sched status` reads.

#include "../impl/Controller.hpp"
#include "../impl/Statistics.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/sched/Model.hpp>

#include <algorithm>
#include <set>

namespace tessel::sched {

namespace {

double max_of(std::vector<double> const &v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

} // namespace

Json SlurmController::State::status() const {
  Json jobs = Json::array();
  int running = 0, pending = 0, completed = 0, rejected = 0;
  for (auto const &j : records()) {
    running += j.state == JobState::running;
    pending += j.state == JobState::pending;
    completed += j.state == JobState::completed;
    rejected += j.state == JobState::rejected;
    jobs.push_back(job_status(j));
  }
  Json nodes = Json::array();
  Allocation const &alloc = job_table.alloc();
  for (int n = 0; n < judge->cluster.num_nodes(); ++n)
    nodes.push_back({{"name", node_name(n)},
                     {"gpu_type", judge->cluster.type(judge->cluster.node_type(n)).name},
                     {"gpus", judge->cluster.node_capacity(n)},
                     {"free", alloc.free_on_node(n)},
                     {"down", alloc.node_down(n)}});
  return {{"round", round()},
          {"now", now()},
          {"time_scale", opt.time_scale},
          {"policy", policy->name()},
          {"updated", Impl::wall_seconds()},
          {"controller_id", controller_id},
          {"slurm_error", slurm_error},
          {"round_error", round_error},
          {"input_errors", {{"count", input_error_count}, {"latest", input_errors}}},
          {"round_ms", last_round_ms},
          {"decide_ms", last_decide_ms},
          {"cost", cost_json()},
          {"counts", {{"running", running}, {"pending", pending}, {"completed", completed}, {"rejected", rejected}}},
          {"nodes", nodes},
          {"jobs", jobs}};
}

Json SlurmController::State::job_status(JobRecord const &j) const {
  auto const &l = live_of(j.id);
  Cluster const &c = judge->cluster;
  long long const done = j.spec->iterations - static_cast<long long>(j.remaining);
  Json job = {{"name", j.spec->id},
              {"state", state_name(j.state)},
              {"model", ModelCatalog::builtin()[j.spec->model].name()},
              {"requested", tessel::Impl::concat(j.spec->num_gpus, " ", c.type(j.spec->gpu_type).name)},
              {"done", done},
              {"iterations", j.spec->iterations},
              {"attempt", l.attempt},
              {"slurm_id", l.slurm_id},
              {"submit_time", j.submit_time},
              {"submit_round", j.submit_round},
              {"start_time", j.start_time},
              {"finish_time", j.finish_time},
              {"reschedules", j.reschedules},
              {"failures", j.failures}};
  if (j.state == JobState::running) {
    job["cell"] = {{"gpu_type", c.type(j.quota_type).name},
                   {"gpus", j.quota_gpus},
                   {"nodes", node_names(l.enacted)},
                   {"gpus_per_node", j.quota_per_host}};
    job["throughput"] = j.throughput;
    double const left = j.throughput > 0 ? j.remaining * j.spec->batch_size / j.throughput : -1;
    job["predicted_finish"] = left >= 0 ? now() + left : -1.0;
  }
  if (!l.last.nodes.empty())
    job["last_cell"] = cell_json(l.last);
  if (j.state == JobState::rejected)
    job["reason"] = j.reject_reason;
  if (!l.last_failure.empty())
    job["last_failure"] = l.last_failure;
  return job;
}

Json SlurmController::State::cell_json(Enacted const &e) const {
  Cluster const &c = judge->cluster;
  return {{"gpu_type", c.type(c.node_type(e.nodes[0])).name},
          {"gpus", e.counts[0] * static_cast<int>(e.nodes.size())},
          {"nodes", node_names(e)},
          {"gpus_per_node", e.counts[0]}};
}

// The controller's own cost: every round of this process, every decision, and the jobs the slowest one saw.
Json SlurmController::State::cost_json() const {
  Json slowest = Json::object();
  if (!decide_ms.empty()) {
    auto const k = static_cast<std::size_t>(std::max_element(decide_ms.begin(), decide_ms.end()) - decide_ms.begin());
    slowest = {{"running", decide_running[k]}, {"pending", decide_pending[k]}};
  }
  // The last 1,000 decisions: milliseconds, running and pending jobs seen.
  Json recent = Json::array();
  for (std::size_t k = decide_ms.size() > 1000 ? decide_ms.size() - 1000 : 0; k < decide_ms.size(); ++k)
    recent.push_back(Json::array({decide_ms[k], decide_running[k], decide_pending[k]}));
  return {{"rounds", round_ms.size()},          {"round_ms_median", Impl::percentile(round_ms, 50)},
          {"round_ms_max", max_of(round_ms)},   {"own_ms_median", Impl::percentile(own_ms, 50)},
          {"own_ms_max", max_of(own_ms)},       {"decide_ms_median", Impl::percentile(decide_ms, 50)},
          {"decide_ms_max", max_of(decide_ms)}, {"slowest_decision_saw", slowest},
          {"recent_decisions", recent}};
}

void SlurmController::State::publish() const {
  try {
    Impl::write_state_json(opt.state_dir + "/status.json", status());
  } catch (tessel::Exception const &e) {
    log(tessel::Impl::concat("cannot publish the status: ", e.what()));
  }
}

Json read_status(std::string const &state_dir) {
  std::string const path = state_dir + "/status.json";
  TESSEL_REQUIRE(Impl::read_state_file(path, Impl::kMaxStatus).exists, "no status in ", state_dir,
                 " (is tessel-sched serve running with --state ", state_dir, "?)");
  Json status = Impl::read_state_json(path, Impl::kMaxStatus);
  TESSEL_REQUIRE(status.is_object(), path, ": the status is a JSON object, got ", status.type_name());
  std::set<std::string> known;
  for (auto const &j : json_member(status, "jobs", path)) {
    TESSEL_REQUIRE(j.is_object() && j.contains("name") && j["name"].is_string(), path,
                   ": every entry of 'jobs' is an object with a 'name'");
    known.insert(j["name"].get<std::string>());
  }
  Impl::Journal const journal(state_dir + "/jobs.journal");
  std::uint64_t offset = 0;
  Json waiting = Json::array();
  for (auto const &rec : Impl::journal_records(journal, offset, [](std::string const &) {})) {
    auto const it = rec.find("spec");
    if (it == rec.end() || !it->is_object() || !it->contains("name") || !(*it)["name"].is_string())
      continue;
    std::string const name = (*it)["name"].get<std::string>();
    if (!known.count(name))
      waiting.push_back(name);
  }
  status["submitted_not_seen"] = waiting;
  return status;
}

} // namespace tessel::sched

#include <tessel/sched/JobContext.hpp>

#include "../impl/Files.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/Json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sys/stat.h>

namespace tessel::sched {

namespace {

std::atomic<int> g_stop{0};

extern "C" void on_stop_signal(int) { g_stop.store(1); }

} // namespace

JobPlan read_job_plan(std::string const &path) {
  Json const doc = Impl::read_state_json(path, std::size_t{1} << 20);
  JobPlan p;
  p.job = json_get<std::string>(doc, "job", path);
  p.attempt = json_get<int>(doc, "attempt", path);
  p.model = json_get<std::string>(doc, "model", path);
  p.batch_size = json_get<int>(doc, "batch_size", path);
  p.iterations = json_get<std::int64_t>(doc, "iterations", path);
  p.gpu_type = json_get<std::string>(doc, "gpu_type", path);
  p.nodes = json_get<std::vector<std::string>>(doc, "nodes", path);
  p.gpus_per_node = json_get<int>(doc, "gpus_per_node", path);
  Json const &plan = json_member(doc, "plan", path);
  p.plan.micro_batches = json_get<int>(plan, "micro_batches", path + ": plan");
  for (auto const &s : json_member(plan, "stages", path + ": plan"))
    p.plan.stages.push_back(
        {json_get<int>(s, "dp", path + ": plan.stages[]"), json_get<int>(s, "tp", path + ": plan.stages[]")});
  p.throughput = json_get<double>(doc, "throughput", path);
  p.time_scale = json_get<double>(doc, "time_scale", path);
  p.startup_s = json_get<double>(doc, "startup_s", path);
  p.checkpoint_s = json_get<double>(doc, "checkpoint_s", path);
  p.dir = json_get<std::string>(doc, "dir", path);
  TESSEL_REQUIRE(p.iterations > 0 && p.batch_size > 0 && p.throughput > 0 && p.time_scale > 0, path,
                 ": iterations, batch_size, throughput and time_scale must be positive");
  return p;
}

JobContext JobContext::from_environment() {
  char const *path = std::getenv("TESSEL_SCHED_PLAN");
  TESSEL_REQUIRE(path != nullptr && *path != '\0',
                 "TESSEL_SCHED_PLAN is not set: this program runs as a job started by tessel-sched serve");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return JobContext(read_job_plan(path));
}

JobContext::JobContext(JobPlan plan) : _plan(std::move(plan)) {}

long long JobContext::resume_from() const {
  std::string const path = _plan.dir + "/checkpoint.json";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return 0;
  Json const doc = Impl::read_state_json(path, std::size_t{1} << 20);
  long long const done = json_get<std::int64_t>(doc, "done", path);
  TESSEL_REQUIRE(done >= 0 && done <= _plan.iterations, path, ": done = ", done, " is outside [0, ", _plan.iterations,
                 "]");
  return done;
}

void JobContext::write_progress(long long done, char const *state) const {
  double const now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_json(_plan.dir + "/progress.json",
             Json{{"done", done},
                  {"iterations", _plan.iterations},
                  {"attempt", _plan.attempt},
                  {"state", state},
                  {"time", now}},
             0);
}

void JobContext::report(long long done) const { write_progress(done, "running"); }

void JobContext::checkpoint(long long done) const {
  write_json(_plan.dir + "/checkpoint.json", Json{{"done", done}, {"attempt", _plan.attempt}}, 0);
  write_progress(done, "checkpointed");
}

void JobContext::finish() const {
  write_json(_plan.dir + "/checkpoint.json", Json{{"done", _plan.iterations}, {"attempt", _plan.attempt}}, 0);
  write_progress(_plan.iterations, "done");
}

bool JobContext::stop_requested() { return g_stop.load() != 0; }

} // namespace tessel::sched

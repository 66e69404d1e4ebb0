// The controller's round (read Slurm, bring the jobs up to date, decide, enact, publish) and its loop; the steps
// are in ControllerRecovery.cpp, ControllerReconcile.cpp, ControllerEnact.cpp and ControllerStatus.cpp
// (src/impl/Controller.hpp).

#include "../impl/Controller.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace tessel::sched {

namespace Impl {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool file_exists(std::string const &path) { return std::filesystem::exists(path); }

void make_dirs(std::string const &path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  TESSEL_REQUIRE(!ec, "cannot create folder ", path, ": ", ec.message());
}

bool alive_state(std::string const &s) {
  static char const *const alive[] = {"PENDING",   "RUNNING",   "CONFIGURING", "COMPLETING",
                                      "SUSPENDED", "REQUEUED",  "REQUEUE_FED", "REQUEUE_HOLD",
                                      "RESIZING",  "SIGNALING", "STAGE_OUT",   "STOPPED"};
  return std::find(std::begin(alive), std::end(alive), s) != std::end(alive);
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool gained(Enacted const &before, Enacted const &after) {
  for (std::size_t k = 0; k < after.nodes.size(); ++k) {
    auto const it = std::find(before.nodes.begin(), before.nodes.end(), after.nodes[k]);
    if (it == before.nodes.end() ||
        before.counts[static_cast<std::size_t>(it - before.nodes.begin())] < after.counts[k])
      return true;
  }
  return false;
}

} // namespace Impl

SlurmController::State::State(ControllerOptions o, ProfileTable const *table, ThroughputSource s)
    : opt(std::move(o)), slurm(opt.slurm), profile(table), source(s), submits(opt.state_dir + "/jobs.journal"),
      journal(opt.state_dir + "/controller.journal") {
  if (!opt.log)
    opt.log = [](std::string const &line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
}

void SlurmController::State::log(std::string const &line) const {
  opt.log(tessel::Impl::concat("round ", round(), ": ", line));
}

std::vector<std::string> SlurmController::State::node_names(Enacted const &e) const {
  std::vector<std::string> names;
  for (int n : e.nodes)
    names.push_back(node_name(n));
  return names;
}

void SlurmController::State::note_input_error(std::string const &what) {
  log("bad input, skipped: " + what);
  ++input_error_count;
  input_errors.push_back(what);
  if (input_errors.size() > 50)
    input_errors.erase(input_errors.begin());
}

int SlurmController::State::attempt_of(SlurmJob const &s) const {
  std::string const mark = "tessel-sched:" + controller_id + ":";
  if (controller_id.empty() || s.comment.compare(0, mark.size(), mark) != 0)
    return -1;
  std::string const n = s.comment.substr(mark.size());
  if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(n);
}

int SlurmController::State::job_of(SlurmJob const &s) const {
  std::string const prefix = name_prefix();
  if (attempt_of(s) < 0 || s.name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  auto const it = by_name.find(s.name.substr(prefix.size()));
  return it == by_name.end() ? -1 : it->second;
}

bool SlurmController::State::step() {
  using clock = std::chrono::steady_clock;
  auto const t_start = clock::now();
  double const waited_before = slurm.waited_seconds();
  double const wall = Impl::wall_seconds();
  // Rounds are counted in an int: at rounds of 0.1 s that lasts 6.8 years from the state folder's start.
  double const rounds = std::floor((wall - t0) / opt.round_seconds);
  TESSEL_REQUIRE(rounds < 2e9, "the state folder's clock started ", wall - t0, " s ago: at rounds of ",
                 opt.round_seconds, " s that is more rounds than can be counted; start a new state folder");
  job_table.set_clock(std::max(round(), static_cast<int>(rounds)), (wall - t0) * opt.time_scale);
  std::vector<SlurmNode> nodes;
  std::vector<SlurmJob> in_slurm;
  try {
    nodes = slurm.nodes(opt.partition);
    in_slurm = slurm.jobs(name_prefix());
  } catch (SlurmError const &e) {
    if (slurm_error.empty())
      slurm_error_since = wall;
    slurm_error = e.what();
    log(tessel::Impl::concat("Slurm not reachable for ", std::lround(wall - slurm_error_since), " s: ", e.what(),
                             "; no decision this round, retrying in ", opt.round_seconds, " s"));
    publish();
    return false;
  }
  if (!slurm_error.empty())
    log(tessel::Impl::concat("Slurm reachable again after ", std::lround(wall - slurm_error_since), " s"));
  slurm_error.clear();
  job_table.clear_events();
  round_error.clear();
  try {
    reconcile(nodes, in_slurm);
    read_submissions(false);
    decide(rounds_run == 0);
  } catch (SlurmError const &e) {
    if (slurm_error.empty())
      slurm_error_since = wall;
    slurm_error = e.what();
    log(tessel::Impl::concat("Slurm failed during the round: ", e.what(), "; retrying next round"));
  } catch (tessel::Exception const &e) {
    // The controller's own files (a full disk, a folder it cannot write): the round stops, the controller does not.
    round_error = e.what();
    log(tessel::Impl::concat("the round failed: ", e.what(), "; retrying next round"));
  }
  ++rounds_run;
  last_round_ms = std::chrono::duration<double, std::milli>(clock::now() - t_start).count();
  round_ms.push_back(last_round_ms);
  own_ms.push_back(last_round_ms - 1000 * (slurm.waited_seconds() - waited_before));
  publish();
  return slurm_error.empty();
}

// The policy's round on the jobs as Slurm shows them, and its decisions enacted. A restarted controller's policy
// has not seen its jobs: in its first round every job not ended arrives again, in submission order, and a running
// job it places where it already runs keeps running.
void SlurmController::State::decide(bool first) {
  std::vector<JobState> before_state(records().size());
  std::vector<Enacted> before(records().size());
  for (auto const &j : records()) {
    before_state[static_cast<std::size_t>(j.id)] = j.state;
    if (j.state == JobState::running)
      before[static_cast<std::size_t>(j.id)] = enacted_of(j.id);
  }
  if (first)
    for (auto &j : records())
      if (j.state == JobState::running || j.state == JobState::pending) {
        if (j.state == JobState::running)
          job_table.unplace(j.id);
        job_table.announce(j.id);
      }
  account(false);
  SchedContext ctx(*this);
  int seen_running = 0, seen_pending = 0;
  for (auto const &j : records()) {
    seen_running += j.state == JobState::running;
    seen_pending += j.state == JobState::pending;
  }
  auto const t_decide = std::chrono::steady_clock::now();
  policy->schedule(ctx);
  job_table.events_presented();
  last_decide_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_decide).count();
  decide_ms.push_back(last_decide_ms);
  decide_running.push_back(seen_running);
  decide_pending.push_back(seen_pending);
  enact(before_state, before);
  account(true);
}

// Quotas and throughputs of the running jobs (the policies read them); at the end of a round also the queueing
// time of the waiting ones.
void SlurmController::State::account(bool end_of_round) {
  for (auto &j : records()) {
    if (end_of_round && j.state == JobState::pending)
      j.queue_time += interval();
    if (j.state != JobState::running)
      continue;
    Placement const p = placement_of(job_table.alloc(), j.id);
    j.quota_type = p.gpu_type;
    j.quota_gpus = p.num_gpus;
    j.quota_hosts = static_cast<int>(p.nodes.size());
    j.quota_per_host = j.quota_hosts > 0 ? p.num_gpus / j.quota_hosts : 0;
    j.throughput = std::max(
        0.0, judge->oracle->adaptive(j.spec->model, j.spec->batch_size, j.quota_type, j.quota_hosts, j.quota_per_host));
  }
}

bool SlurmController::State::all_done() const {
  if (records().empty())
    return false;
  return std::all_of(
             records().begin(), records().end(),
             [&](JobRecord const &j) { return j.state == JobState::completed || j.state == JobState::rejected; }) &&
         std::all_of(live.begin(), live.end(), [](Live const &l) { return l.stopping_id == 0; });
}

namespace {

// The options as the controller will use them: the state folder as an absolute path (Slurm resolves the jobs'
// paths elsewhere), every derived quantity in range.
ControllerOptions checked(ControllerOptions o) {
  TESSEL_REQUIRE(!o.state_dir.empty(), "the controller needs a state folder");
  o.state_dir = std::filesystem::absolute(o.state_dir).lexically_normal().string();
  while (o.state_dir.size() > 1 && o.state_dir.back() == '/')
    o.state_dir.pop_back();
  std::string const problem = Impl::state_dir_problem(o.state_dir);
  TESSEL_REQUIRE(problem.empty(), "state folder ", o.state_dir, ": ", problem);
  TESSEL_REQUIRE(o.round_seconds >= 0.1 && o.round_seconds <= 86400, "the round must be in [0.1, 86400] seconds, got ",
                 o.round_seconds);
  TESSEL_REQUIRE(o.time_scale > 0 && o.time_scale <= 1e6, "the time scale must be in (0, 1e6], got ", o.time_scale);
  double const interval = o.round_seconds * o.time_scale;
  TESSEL_REQUIRE(interval >= 1 && interval <= 1e7, "a round of ", o.round_seconds, " s at a time scale of ",
                 o.time_scale, " is ", interval, " s of model time; it must be in [1, 1e7] s");
  TESSEL_REQUIRE(!o.job_prefix.empty() && o.job_prefix.size() <= 32 &&
                     o.job_prefix.find_first_not_of(
                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos,
                 "the job prefix must be 1-32 letters, digits, '.', '-' or '_', got '", o.job_prefix, "'");
  TESSEL_REQUIRE(o.max_failures >= 0 && o.stop_grace_rounds >= 1,
                 "max_failures must be >= 0 and stop_grace_rounds >= 1");
  TESSEL_REQUIRE(std::isfinite(o.checkpoint_s) && o.checkpoint_s > 0 && std::isfinite(o.restart_cost) &&
                     o.restart_cost >= 0,
                 "the checkpoint interval must be positive and the restart cost >= 0");
  return o;
}

} // namespace

SlurmController::SlurmController(ControllerOptions options, ProfileTable const *table, ThroughputSource source)
    : _state(std::make_unique<State>(checked(std::move(options)), table, source)) {
  _state->recover();
}

SlurmController::~SlurmController() = default;

bool SlurmController::step() { return _state->step(); }

Json SlurmController::status() const { return _state->status(); }

void SlurmController::run(std::atomic<bool> const *stop) {
  auto &s = *_state;
  for (int r = 0; s.opt.max_rounds <= 0 || r < s.opt.max_rounds; ++r) {
    if (stop && stop->load())
      break;
    s.step();
    if (s.opt.until_done && s.all_done()) {
      s.opt.log(tessel::Impl::concat("round ", s.round(), ": every job ended"));
      break;
    }
    // Next round at the next multiple of the round length on the controller's clock.
    double const next =
        s.t0 + (std::floor((Impl::wall_seconds() - s.t0) / s.opt.round_seconds) + 1) * s.opt.round_seconds;
    while (Impl::wall_seconds() < next && !(stop && stop->load()))
      std::this_thread::sleep_for(std::chrono::milliseconds(
          std::max<long>(1, std::min<long>(100, std::lround((next - Impl::wall_seconds()) * 1000)))));
  }
}

} // namespace tessel::sched

// tessel-sched serve / submit / status: the controller of a live Slurm partition, its durable job intake and the
// status it publishes (sched/README.md, "Scheduling a Slurm cluster").

#include "Commands.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/sched/SlurmController.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

namespace tessel::sched::app {

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop(int) { g_stop.store(true); }

// The most bytes a job spec file may hold (a command of up to 1 MiB fits; submit_job says what is too large).
constexpr std::uint64_t kMaxSpecBytes = std::uint64_t{2} << 20;

// A job spec file: a regular file of bounded size (a FIFO or device is refused, not read without end).
std::string read_spec_file(std::string const &path) { return tessel::read_input_file(path, kMaxSpecBytes, "job spec"); }

// One line per job of a published status; every field is checked, so that a damaged status.json is an error naming
// the field, not a crash.
void print_status(Json const &s, std::string const &where) {
  Json const &c = json_member(s, "counts", where);
  std::printf("round %d (%.0f s of model time), policy %s: %d running, %d pending, %d completed, %d rejected\n",
              json_get<int>(s, "round", where), json_get<double>(s, "now", where),
              json_get<std::string>(s, "policy", where).c_str(), json_get<int>(c, "running", where + ": counts"),
              json_get<int>(c, "pending", where + ": counts"), json_get<int>(c, "completed", where + ": counts"),
              json_get<int>(c, "rejected", where + ": counts"));
  std::string const slurm_error = s.contains("slurm_error") ? json_get<std::string>(s, "slurm_error", where) : "";
  if (!slurm_error.empty())
    std::printf("Slurm not reachable: %s\n", slurm_error.c_str());
  std::string const round_error = s.contains("round_error") ? json_get<std::string>(s, "round_error", where) : "";
  if (!round_error.empty())
    std::printf("the last round failed: %s\n", round_error.c_str());
  std::printf("%-16s %-10s %-22s %-30s %9s %12s\n", "job", "state", "model", "cell", "progress", "finish (s)");
  for (auto const &j : json_member(s, "jobs", where)) {
    std::string const at = where + ": job " + json_get<std::string>(j, "name", where + ": jobs[]");
    std::string cell = "-";
    if (j.contains("cell")) {
      Json const &c = json_member(j, "cell", at);
      std::ostringstream os;
      os << json_get<int>(c, "gpus", at + ": cell") << " " << json_get<std::string>(c, "gpu_type", at + ": cell")
         << " on ";
      bool first = true;
      for (auto const &n : json_get<std::vector<std::string>>(c, "nodes", at + ": cell")) {
        os << (first ? "" : ",") << n;
        first = false;
      }
      cell = os.str();
    }
    double const done = json_get<double>(j, "done", at), total = json_get<double>(j, "iterations", at);
    std::string finish = "-";
    double const predicted = j.contains("predicted_finish") ? json_get<double>(j, "predicted_finish", at) : -1;
    double const finished = json_get<double>(j, "finish_time", at);
    if (predicted >= 0)
      finish = std::to_string(std::lround(predicted));
    else if (finished >= 0)
      finish = std::to_string(std::lround(finished));
    std::printf("%-16s %-10s %-22s %-30s %8.1f%% %12s", json_get<std::string>(j, "name", at).c_str(),
                json_get<std::string>(j, "state", at).c_str(), json_get<std::string>(j, "model", at).c_str(),
                cell.c_str(), total > 0 ? 100.0 * done / total : 0.0, finish.c_str());
    if (j.contains("reason"))
      std::printf("  %s", json_get<std::string>(j, "reason", at).c_str());
    std::printf("\n");
  }
  for (auto const &n : json_get<std::vector<std::string>>(s, "submitted_not_seen", where))
    std::printf("%-16s submitted, not yet seen by the controller\n", n.c_str());
}

} // namespace

int serve_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    std::printf(
        "usage: tessel-sched serve --backend slurm --state DIR [options]\n"
        "  Schedules the jobs submitted with `tessel-sched submit --state DIR` on a Slurm partition: every round it\n"
        "  reads nodes, GPU GRES and its jobs from Slurm, runs the policy and enacts it with sbatch / scancel.\n"
        "  --backend slurm      the live world (the simulator is `tessel-sched simulate`)\n"
        "  --state DIR          state folder: journals, status.json, the jobs' plans, checkpoints and output\n"
        "  --partition P        Slurm partition (default: every node Slurm shows)\n"
        "  --policy P           crius | fcfs | gavel | sia | elasticflow (default crius)\n"
        "  --profile F|DIR      profile tables (HDF5 or a folder of Crius files); default: the estimator alone\n"
        "  --source S           table | estimator | table+estimator (default: table with --profile)\n"
        "  --round S            wall-clock seconds per round (default 10)\n"
        "  --time-scale F       model seconds per wall-clock second, for time-compressed replays (default 1)\n"
        "  --max-failures N     a job failing more often is rejected (default 3)\n"
        "  --checkpoint S       model seconds between a job's checkpoints (default 1800)\n"
        "  --restart-cost S     model seconds to restore a failed job from its checkpoint (default 60)\n"
        "  --slurm-timeout S    deadline of every Slurm command (default 30)\n"
        "  --rounds N           stop after N rounds (default: until SIGINT / SIGTERM)\n"
        "  --until-done         stop once every submitted job completed or was rejected\n"
        "  --job-prefix P       Slurm job names are <P><job> (default tessel.)\n");
    return 0;
  }
  std::string const backend = args.require("backend");
  TESSEL_REQUIRE_USAGE(backend == "slurm", "option --backend expects slurm, got '", backend,
                       "' (the simulator is tessel-sched simulate)");
  ControllerOptions o;
  o.state_dir = args.require("state");
  o.partition = args.get("partition", "");
  o.policy = args.get("policy", "crius");
  (void)tessel::CommandLine::parse_value("--policy", o.policy, [](std::string const &n) { return make_policy(n); });
  o.profile = args.get("profile", "");
  std::string const source_arg = args.get("source", o.profile.empty() ? "estimator" : "table");
  o.round_seconds = args.get_double("round", 10, tessel::Range::closed(0.1, 86400));
  o.time_scale = args.get_double("time-scale", 1, tessel::Range::positive(1e6));
  o.max_failures = args.get_int("max-failures", 3, 0, 1000);
  o.checkpoint_s = args.get_double("checkpoint", 1800, tessel::Range::positive(1e9));
  o.restart_cost = args.get_double("restart-cost", 60, tessel::Range::at_least(0, 1e9));
  o.slurm.timeout_s = args.get_double("slurm-timeout", 30, tessel::Range::closed(1, 3600));
  o.max_rounds = args.get_int("rounds", 0, 0, 100000000);
  o.until_done = args.flag("until-done");
  o.job_prefix = args.get("job-prefix", "tessel.");
  args.finish();
  ThroughputSource const source = source_option(source_arg);
  TESSEL_REQUIRE_USAGE(source == ThroughputSource::estimator || !o.profile.empty(), "--source ", source_arg,
                       " needs --profile");
  ProfileTable table;
  if (!o.profile.empty())
    table = load_profile(o.profile);
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  SlurmController controller(o, o.profile.empty() ? nullptr : &table, source);
  controller.run(&g_stop);
  return 0;
}

int submit_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    std::printf("usage: tessel-sched submit --state DIR JOBSPEC.json|-\n"
                "  Validates the job spec against the controller's cluster and throughput source and appends it to\n"
                "  the controller's journal; returns once it is on the disk. Fields: name, model (\"bert__1.3B\", or\n"
                "  model \"bert\" with size \"1.3B\"), batch_size, iterations, gpus, gpu_type, optional deadline\n"
                "  (seconds after submission) and command (default tessel-sched-trainer).\n");
    return 0;
  }
  std::string const state = args.require("state");
  auto const files = args.positionals();
  args.finish();
  TESSEL_REQUIRE_USAGE(files.size() == 1, "submit expects one job spec file (or - for standard input), got ",
                       files.size());
  std::string const source = files[0] == "-" ? "standard input" : files[0];
  std::string text;
  if (files[0] == "-") {
    // Up to the bound of a spec: an endless stream is refused, not held in memory.
    text = tessel::read_input_file("/dev/stdin", kMaxSpecBytes, "standard input", tessel::InputKind::stream);
  } else {
    text = read_spec_file(files[0]);
  }
  std::string const name = submit_job(state, parse_job_spec(text, source), source);
  std::printf("submitted %s\n", name.c_str());
  return 0;
}

int status_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    std::printf("usage: tessel-sched status --state DIR [--json]\n"
                "  Queue, Cells, progress and predicted completion as the controller last published them.\n");
    return 0;
  }
  std::string const state = args.require("state");
  bool const as_json = args.flag("json");
  args.finish();
  Json const s = read_status(state);
  if (as_json) {
    std::printf("%s\n", s.dump(2).c_str());
    return 0;
  }
  print_status(s, state + "/status.json");
  return 0;
}

} // namespace tessel::sched::app

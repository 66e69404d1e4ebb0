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
  o.round_seconds = args.get_double("round", 10, tessel::Range::positive(86400));
  o.time_scale = args.get_double("time-scale", 1, tessel::Range::positive(1e6));
  o.max_failures = args.get_int("max-failures", 3, 0, 1000);
  o.checkpoint_s = args.get_double("checkpoint", 1800, tessel::Range::positive(1e9));
  o.restart_cost = args.get_double("restart-cost", 60, tessel::Range::at_least(0, 1e9));
  o.slurm.timeout_s = args.get_double("slurm-timeout", 30, tessel::Range::positive(3600));
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
  Json spec;
  if (files[0] == "-") {
    // Read up to the bound of a JSON file: an endless stream is refused, not held in memory.
    spec = parse_json(
        tessel::read_input_file("/dev/stdin", tessel::max_json_bytes, "standard input", tessel::InputKind::stream),
        "standard input");
  } else {
    spec = read_json(files[0]);
  }
  std::string const name = submit_job(state, spec, files[0] == "-" ? "standard input" : files[0]);
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
  auto const &c = s["counts"];
  std::printf("round %d (%.0f s of model time), policy %s: %d running, %d pending, %d completed, %d rejected\n",
              s["round"].get<int>(), s["now"].get<double>(), s["policy"].get<std::string>().c_str(),
              c["running"].get<int>(), c["pending"].get<int>(), c["completed"].get<int>(), c["rejected"].get<int>());
  if (!s["slurm_error"].get<std::string>().empty())
    std::printf("Slurm not reachable: %s\n", s["slurm_error"].get<std::string>().c_str());
  std::printf("%-16s %-10s %-22s %-30s %9s %12s\n", "job", "state", "model", "cell", "progress", "finish (s)");
  for (auto const &j : s["jobs"]) {
    std::string cell = "-";
    if (j.contains("cell")) {
      std::ostringstream os;
      os << j["cell"]["gpus"].get<int>() << " " << j["cell"]["gpu_type"].get<std::string>() << " on ";
      bool first = true;
      for (auto const &n : j["cell"]["nodes"]) {
        os << (first ? "" : ",") << n.get<std::string>();
        first = false;
      }
      cell = os.str();
    }
    double const done = j["done"].get<double>(), total = j["iterations"].get<double>();
    std::string finish = "-";
    if (j.contains("predicted_finish") && j["predicted_finish"].get<double>() >= 0)
      finish = std::to_string(std::lround(j["predicted_finish"].get<double>()));
    else if (j["finish_time"].get<double>() >= 0)
      finish = std::to_string(std::lround(j["finish_time"].get<double>()));
    std::printf("%-16s %-10s %-22s %-30s %8.1f%% %12s", j["name"].get<std::string>().c_str(),
                j["state"].get<std::string>().c_str(), j["model"].get<std::string>().c_str(), cell.c_str(),
                100.0 * done / total, finish.c_str());
    if (j.contains("reason"))
      std::printf("  %s", j["reason"].get<std::string>().c_str());
    std::printf("\n");
  }
  for (auto const &n : s["submitted_not_seen"])
    std::printf("%-16s submitted, not yet seen by the controller\n", n.get<std::string>().c_str());
  return 0;
}

} // namespace tessel::sched::app

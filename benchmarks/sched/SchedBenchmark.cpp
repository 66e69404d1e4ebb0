// tessel-sched-bench: wall time of each policy's simulation (median of repeats, side by side in one run), the
// scheduler's time per round, and what memoizing throughput lookups saves (same run with the memo off).
//
//   tessel-sched-bench [--trace F --profile DIR|F] [--cluster F|crius] [--rounds N] [--repeat R] [--arena-compat]
//                      [--policy LIST] [--jobs N] [--json F]
//
// Without --trace a synthetic trace (estimator throughputs) is used.

#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/Simulator.hpp>
#include <tessel/sched/Synthetic.hpp>

#include <tessel/core/CommandLine.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Tool.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace tessel::sched;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

struct Run {
  double wall = 0, sched_ms = 0;
  std::size_t lookups = 0, computed = 0;
  int completed = 0;
};

Run run_once(Cluster const &cluster, Trace const &trace, ProfileTable const *table, Estimator const &est,
             ThroughputSource source, std::string const &policy, SimOptions const &opt, bool memoize) {
  ThroughputOracle oracle(cluster, table, &est, source, opt.interval);
  oracle.set_memoize(memoize);
  auto p = make_policy(policy);
  auto const t0 = std::chrono::steady_clock::now();
  Simulator sim(cluster, trace, oracle, *p, opt);
  SimResult const r = sim.run();
  Run out;
  out.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.sched_ms = r.metrics.sched_ms_per_round;
  out.lookups = r.oracle_lookups;
  out.computed = r.oracle_computed;
  out.completed = r.metrics.completed;
  return out;
}

struct BenchArgs {
  std::string cluster_path, profile_path, trace_path, json_path;
  int jobs = 400, repeat = 3;
  std::vector<std::string> policies;
  SimOptions opt;
};

BenchArgs parse_args(tessel::CommandLine &args) {
  BenchArgs a;
  a.cluster_path = args.get("cluster", "crius");
  a.profile_path = args.get("profile", "");
  a.trace_path = args.get("trace", "");
  TESSEL_REQUIRE_USAGE(!(args.has("jobs") && args.has("trace")),
                       "--jobs sizes the synthetic trace; --trace replaces it: give one of them");
  a.jobs = args.get_int("jobs", 400, 1, 1000000);
  a.opt.arena_compat = args.flag("arena-compat");
  a.opt.iteration_divisor = a.opt.arena_compat ? 5 : 1;
  a.opt.max_rounds = args.get_int("rounds", 2000, 1, 100000000);
  a.repeat = args.get_int("repeat", 3, 1, 1000);
  a.policies = args.get_list("policy", policy_names());
  for (auto const &p : a.policies)
    (void)tessel::CommandLine::parse_value("--policy", p, [](std::string const &n) { return make_policy(n); });
  a.json_path = args.get("json", "");
  args.finish();
  tessel::require_writable(a.json_path);
  return a;
}

// The inputs of every run: the cluster, the profile table (if any), the calibrated estimator and the trace.
struct Inputs {
  Cluster cluster;
  std::unique_ptr<ProfileTable> table;
  Estimator est;
  ThroughputSource source;
  Trace trace;

  explicit Inputs(BenchArgs const &a)
      : cluster(load_cluster(a.cluster_path)), est(cluster), source(ThroughputSource::estimator) {
    if (!a.profile_path.empty()) {
      table = std::make_unique<ProfileTable>(load_profile(a.profile_path));
      est.calibrate(*table);
      source = ThroughputSource::table;
    }
    if (!a.trace_path.empty()) {
      trace = load_trace(a.trace_path, cluster);
    } else {
      ThroughputOracle const gen(cluster, table.get(), &est, source);
      SyntheticOptions s;
      s.jobs = a.jobs;
      s.jobs_per_hour = 20;
      trace = generate_trace(cluster, gen, s);
    }
  }
};

// One policy: `repeat` memoized runs (medians) and one with the memo off; prints its row.
tessel::Json bench_policy(BenchArgs const &a, Inputs const &in, std::string const &policy, double &median_wall) {
  std::vector<double> walls, sched;
  Run last;
  for (int r = 0; r < a.repeat; ++r) {
    last = run_once(in.cluster, in.trace, in.table.get(), in.est, in.source, policy, a.opt, true);
    walls.push_back(last.wall);
    sched.push_back(last.sched_ms);
  }
  Run const off = run_once(in.cluster, in.trace, in.table.get(), in.est, in.source, policy, a.opt, false);
  median_wall = median(walls);
  std::printf("%-12s %12.3f %14.3f %14zu %14zu %12.3f %16.2f\n", policy.c_str(), median_wall, median(sched),
              last.lookups, last.computed, off.wall, off.wall / median_wall);
  return {{"median_wall_s", median_wall}, {"sched_ms_per_round", median(sched)}, {"lookups", last.lookups},
          {"computed", last.computed},    {"memo_off_wall_s", off.wall},         {"completed", last.completed}};
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-sched-bench", argc, argv, [](tessel::CommandLine &args) {
    if (args.flag({"help", 'h'})) {
      std::printf(
          "usage: tessel-sched-bench [--trace F --profile DIR|F] [--cluster F|crius] [--rounds N] [--repeat R]\n"
          "                          [--arena-compat] [--policy LIST] [--jobs N] [--json F] [--debug]\n"
          "exit status: 0 success, 1 runtime error, 2 invalid option\n");
      return 0;
    }
    BenchArgs const a = parse_args(args);
    std::printf("%s\n", tessel::build_summary().c_str());
    Inputs const in(a);
    std::printf("trace: %s (%zu jobs), %d rounds, %d repeats, throughput from %s\n",
                a.trace_path.empty() ? "synthetic" : a.trace_path.c_str(), in.trace.jobs.size(), a.opt.max_rounds,
                a.repeat, source_name(in.source));
    std::printf("\n%-12s %12s %14s %14s %14s %12s %16s\n", "policy", "wall (s)", "sched ms/round", "lookups",
                "computed", "memo off (s)", "memo saves (x)");
    tessel::Json doc = {{"build", tessel::build_summary()}, {"repeat", a.repeat}, {"policies", tessel::Json::object()}};
    double total = 0;
    for (auto const &p : a.policies) {
      double wall = 0;
      doc["policies"][p] = bench_policy(a, in, p, wall);
      total += wall;
    }
    doc["total_median_wall_s"] = total;
    std::printf("\nsum of median wall times: %.3f s\n", total);
    if (!a.json_path.empty()) {
      tessel::write_json(a.json_path, doc);
      std::printf("results written to %s\n", a.json_path.c_str());
    }
    return 0;
  });
}

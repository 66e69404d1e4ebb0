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
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Tool.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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
  PolicyOptions po;
  po.arena_compat = opt.arena_compat;
  auto p = make_policy(policy, po);
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
    std::string const cluster_path = args.get("cluster", "crius");
    std::string const profile_path = args.get("profile", "");
    std::string const trace_path = args.get("trace", "");
    TESSEL_REQUIRE_USAGE(!(args.has("jobs") && args.has("trace")),
                         "--jobs sizes the synthetic trace; --trace replaces it: give one of them");
    int const jobs = args.get_int("jobs", 400, 1, 1000000);
    bool const arena_compat = args.flag("arena-compat");
    int const rounds = args.get_int("rounds", 2000, 1, 100000000);
    int const repeat = args.get_int("repeat", 3, 1, 1000);
    std::vector<std::string> const policies = args.get_list("policy", {"crius", "fcfs", "elasticflow", "gavel", "sia"});
    for (auto const &p : policies)
      (void)tessel::CommandLine::parse_value("--policy", p, [](std::string const &n) { return make_policy(n); });
    std::string const json_path = args.get("json", "");
    args.finish();
    tessel::require_writable(json_path);
    std::printf("%s\n", tessel::build_summary().c_str());
    Cluster const cluster = load_cluster(cluster_path);
    std::unique_ptr<ProfileTable> table;
    Estimator est(cluster);
    if (!profile_path.empty()) {
      table = std::make_unique<ProfileTable>(load_profile(profile_path));
      est.calibrate(*table);
    }
    ThroughputSource const source = table ? ThroughputSource::table : ThroughputSource::estimator;
    Trace trace;
    if (!trace_path.empty()) {
      trace = load_trace(trace_path, cluster);
    } else {
      ThroughputOracle const gen(cluster, table.get(), &est, source);
      SyntheticOptions s;
      s.jobs = jobs;
      s.jobs_per_hour = 20;
      trace = generate_trace(cluster, gen, s);
    }
    SimOptions opt;
    opt.arena_compat = arena_compat;
    opt.iteration_divisor = opt.arena_compat ? 5 : 1;
    opt.max_rounds = rounds;
    std::printf("trace: %s (%zu jobs), %d rounds, %d repeats, throughput from %s\n",
                trace_path.empty() ? "synthetic" : trace_path.c_str(), trace.jobs.size(), opt.max_rounds, repeat,
                source_name(source));
    std::printf("\n%-12s %12s %14s %14s %14s %12s %16s\n", "policy", "wall (s)", "sched ms/round", "lookups",
                "computed", "memo off (s)", "memo saves (x)");
    std::unique_ptr<tessel::OutputFile> file;
    if (!json_path.empty()) {
      file = std::make_unique<tessel::OutputFile>(json_path);
      file->stream() << "{\"build\":\"" << tessel::build_summary() << "\",\"repeat\":" << repeat << ",\"policies\":{";
    }
    double total = 0;
    for (std::size_t k = 0; k < policies.size(); ++k) {
      auto const &p = policies[k];
      std::vector<double> walls, sched;
      Run last;
      for (int r = 0; r < repeat; ++r) {
        last = run_once(cluster, trace, table.get(), est, source, p, opt, true);
        walls.push_back(last.wall);
        sched.push_back(last.sched_ms);
      }
      Run const off = run_once(cluster, trace, table.get(), est, source, p, opt, false);
      double const w = median(walls);
      total += w;
      std::printf("%-12s %12.3f %14.3f %14zu %14zu %12.3f %16.2f\n", p.c_str(), w, median(sched), last.lookups,
                  last.computed, off.wall, off.wall / w);
      if (file)
        file->stream() << (k ? "," : "") << "\"" << p << "\":{\"median_wall_s\":" << w
                       << ",\"sched_ms_per_round\":" << median(sched) << ",\"lookups\":" << last.lookups
                       << ",\"computed\":" << last.computed << ",\"memo_off_wall_s\":" << off.wall
                       << ",\"completed\":" << last.completed << "}";
    }
    std::printf("\nsum of median wall times: %.3f s\n", total);
    if (file) {
      file->stream() << "},\"total_median_wall_s\":" << total << "}\n";
      file->commit();
      std::printf("results written to %s\n", json_path.c_str());
    }
    return 0;
  });
}

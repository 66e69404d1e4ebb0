#include "Commands.hpp"
#include "JsonWriter.hpp"
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/Tool.hpp>

#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Model.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/Simulator.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace tessel::sched::app {

namespace {

void simulate_usage() {
  std::printf(
      "usage: tessel-sched simulate --trace F --policy crius|fcfs|gavel|sia|elasticflow|all [options]\n"
      "  --trace F            Crius CSV trace or HDF5 (tessel.sched.trace)\n"
      "  --cluster F|crius    cluster CSV/HDF5, or crius = the 1,280-GPU Crius cluster (default)\n"
      "  --profile F|DIR      profile tables: HDF5 (tessel.sched.profile) or a folder of Crius files\n"
      "  --source S           table | estimator | table+estimator (default: table with --profile, else estimator)\n"
      "  --rounds N           stop after N rounds (default 0: until every job completed or was rejected)\n"
      "  --interval S         seconds per round (default 300)\n"
      "  --arena-compat       reproduce Arena's accounting (README: 'Arena compatibility'); implies\n"
      "                       --iteration-divisor 5\n"
      "  --iteration-divisor D  divide trace iterations by D (Arena: 5)\n"
      "  --seed S             seed of failure injection (default 1)\n"
      "  --node-mtbf H        node mean time between failures in hours (> 0; default: no node failures)\n"
      "  --repair-rounds R    rounds a failed node stays down (default 6; needs --node-mtbf)\n"
      "  --job-mtbf H         job mean time between failures in hours (> 0; default: no job failures)\n"
      "  --checkpoint S       seconds of execution between checkpoints (default 1800; needs a failure MTBF)\n"
      "  --parallel N         simulate N policies concurrently, one thread each (default 1)\n"
      "  --check              verify conservation invariants every round\n"
      "  --json F             write metrics, per-job JCTs and per-round series as JSON\n"
      "  --quiet              no progress line\n");
}

std::string fmt(double v, int prec = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  std::string s = buf;
  if (prec == 0 && std::abs(v) >= 1000) {
    // thousands separators for readability
    std::string out;
    int const neg = s[0] == '-';
    std::string digits = s.substr(static_cast<std::size_t>(neg));
    for (std::size_t i = 0; i < digits.size(); ++i) {
      out += digits[i];
      std::size_t const left = digits.size() - i - 1;
      if (left && left % 3 == 0)
        out += ',';
    }
    return (neg ? "-" : "") + out;
  }
  return s;
}

void write_json(std::string const &path, Cluster const &cluster, std::string const &trace_path,
                std::string const &source, SimOptions const &opt, std::vector<SimResult> const &results, double pad,
                std::vector<std::pair<std::string, JctReduction>> const &reductions) {
  OutputFile file(path);
  JsonWriter w(file.stream());
  w.begin_object();
  w.field("tool", "tessel-sched simulate");
  w.field("build", tessel::build_summary());
  w.field("trace", trace_path);
  w.field("throughput_source", source);
  w.key("options").begin_object();
  w.field("interval", opt.interval).field("max_rounds", opt.max_rounds).field("arena_compat", opt.arena_compat);
  w.field("iteration_divisor", opt.iteration_divisor).field("seed", static_cast<long long>(opt.seed));
  w.field("node_mtbf_hours", opt.node_mtbf_hours).field("job_mtbf_hours", opt.job_mtbf_hours);
  w.field("checkpoint_interval", opt.checkpoint_interval);
  w.end_object();
  w.key("gpu_types").begin_array();
  for (auto const &t : cluster.types())
    w.value(t.name);
  w.end_array();
  w.field("pad_jct", pad);
  w.key("policies").begin_object();
  for (auto const &r : results) {
    auto const &m = r.metrics;
    w.key(r.policy).begin_object();
    w.field("submitted", m.submitted).field("completed", m.completed).field("rejected", m.rejected);
    w.field("unfinished", m.unfinished).field("avg_jct", m.avg_jct).field("p50_jct", m.p50_jct);
    w.field("p99_jct", m.p99_jct).field("makespan", m.makespan).field("avg_queue", m.avg_queue);
    w.field("avg_throughput", m.avg_throughput).field("peak_throughput", m.peak_throughput);
    w.field("reschedules", m.reschedules).field("failures", m.failures).field("rounds", m.rounds);
    w.field("sched_seconds", m.sched_seconds).field("sched_ms_per_round", m.sched_ms_per_round);
    w.field("sched_ms_max", m.sched_ms_max).field("wall_seconds", m.wall_seconds);
    w.field("oracle_lookups", r.oracle_lookups).field("oracle_computed", r.oracle_computed);
    w.key("utilization").begin_object();
    for (std::size_t t = 0; t < m.utilization.size(); ++t)
      w.field(cluster.type(static_cast<int>(t)).name, m.utilization[t]);
    w.end_object();
    std::vector<double> jct, queue;
    std::vector<std::string> rejected;
    for (auto const &j : r.jobs) {
      if (j.state == JobState::completed)
        jct.push_back(j.jct);
      if (j.state == JobState::rejected)
        rejected.push_back(j.id + ": " + j.reject_reason);
    }
    w.key("jct").array(jct);
    w.key("rejected").array(rejected);
    w.key("round_time").array(r.round_time);
    w.key("throughput").array(r.throughput);
    w.key("running").array(r.running);
    w.key("pending").array(r.pending);
    w.key("sched_ms").array(r.sched_ms);
    w.end_object();
  }
  w.end_object();
  w.key("crius_jct_reduction").begin_object();
  for (auto const &[name, red] : reductions) {
    w.key(name).begin_object();
    w.field("raw", red.raw);
    if (red.padded_defined)
      w.field("padded", red.padded);
    w.end_object();
  }
  w.end_object();
  w.end_object();
  file.stream() << '\n';
  file.commit();
}

} // namespace

int simulate_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    simulate_usage();
    return 0;
  }
  std::printf("%s\n", tessel::build_summary().c_str());
  std::string const trace_path = args.require("trace");
  std::string const cluster_path = args.get("cluster", "crius");
  std::string const profile_path = args.get("profile", "");
  std::string const policy_arg = args.require("policy");
  SimOptions opt;
  opt.max_rounds = args.get_int("rounds", 0, 0, 100000000);
  opt.interval = args.get_double("interval", 300, tessel::Range::closed(1, 1e7));
  opt.arena_compat = args.flag("arena-compat");
  opt.iteration_divisor = args.get_double("iteration-divisor", opt.arena_compat ? 5 : 1, tessel::Range::closed(1, 1e6));
  opt.seed = args.get_int<std::uint64_t>("seed", 1, 0, UINT64_MAX);
  opt.node_mtbf_hours = args.get_double("node-mtbf", 0, tessel::Range::positive(1e9));
  opt.node_repair_rounds = args.get_int("repair-rounds", 6, 1, 1000000);
  opt.job_mtbf_hours = args.get_double("job-mtbf", 0, tessel::Range::positive(1e9));
  opt.checkpoint_interval = args.get_double("checkpoint", 1800, tessel::Range::positive(1e9));
  TESSEL_REQUIRE_USAGE(!args.has("repair-rounds") || args.has("node-mtbf"),
                       "--repair-rounds is how long a failed node stays down: it needs --node-mtbf");
  TESSEL_REQUIRE_USAGE(!args.has("checkpoint") || args.has("node-mtbf") || args.has("job-mtbf"),
                       "--checkpoint sets where failed jobs restart from: it needs --node-mtbf or --job-mtbf");
  opt.check_invariants = args.flag("check");
  int const threads = args.get_int("parallel", 1, 1, 1024);
  std::string const json_path = args.get("json", "");
  bool const quiet = args.flag("quiet");
  std::string source_name_arg = args.get("source", profile_path.empty() ? "estimator" : "table");
  args.finish();
  tessel::require_writable(json_path);

  ThroughputSource source;
  if (source_name_arg == "table")
    source = ThroughputSource::table;
  else if (source_name_arg == "estimator")
    source = ThroughputSource::estimator;
  else if (source_name_arg == "table+estimator")
    source = ThroughputSource::table_then_estimator;
  else
    TESSEL_REQUIRE_USAGE(false, "option --source expects table, estimator or table+estimator, got '", source_name_arg,
                         "'");

  std::vector<std::string> policies;
  if (policy_arg == "all")
    policies = policy_names();
  else {
    std::stringstream ss(policy_arg);
    std::string p;
    while (std::getline(ss, p, ','))
      policies.push_back(p);
  }
  for (auto const &p : policies)
    (void)tessel::CommandLine::parse_value(
        "--policy", p, [](std::string const &n) { return make_policy(n); }); // validates the name before any work

  Cluster const cluster = load_cluster(cluster_path);
  tessel::require_same_file(tessel::Communicator::world(), "trace", trace_path);
  Trace const trace = load_trace(trace_path, cluster);
  ProfileTable table;
  if (!profile_path.empty())
    table = load_profile(profile_path);
  TESSEL_REQUIRE_USAGE(source == ThroughputSource::estimator || !profile_path.empty(), "--source ", source_name_arg,
                       " needs --profile");
  Estimator estimator(cluster);
  if (!profile_path.empty())
    estimator.calibrate(table);

  std::printf("cluster: %s, %d nodes, %d GPUs (", cluster_path.c_str(), cluster.num_nodes(), cluster.num_gpus());
  for (int t = 0; t < cluster.num_types(); ++t)
    std::printf("%s%s %d", t ? ", " : "", cluster.type(t).name.c_str(), cluster.type_gpus(t));
  std::printf(")\ntrace: %s, %zu jobs; throughput from %s%s\n", trace_path.c_str(), trace.jobs.size(),
              source_name(source), opt.arena_compat ? "; Arena-compatible accounting" : "");
  std::printf("rounds: %s of %.0f s%s\n", opt.max_rounds > 0 ? std::to_string(opt.max_rounds).c_str() : "until done",
              opt.interval, opt.node_mtbf_hours > 0 || opt.job_mtbf_hours > 0 ? "; failure injection on" : "");
  std::fflush(stdout);

  bool const tty = isatty(fileno(stderr)) != 0;
  std::vector<SimResult> results(policies.size());
  std::mutex print_mutex;
  std::atomic<std::size_t> next{0};
  auto const wall0 = std::chrono::steady_clock::now();
  auto worker = [&]() {
    for (std::size_t i = next++; i < policies.size(); i = next++) {
      SimOptions o = opt;
      std::string const name = policies[i];
      if (!quiet) {
        // On a terminal one line is rewritten in place; in a log a line is added every tenth of the run.
        int const every = tty ? 25 : (opt.max_rounds > 0 ? std::max(1, opt.max_rounds / 10) : 500);
        o.progress = [&, name, every](int round, int running, int pending, int done) {
          if (round % every != 0)
            return;
          std::lock_guard<std::mutex> lock(print_mutex);
          std::fprintf(stderr, "%s  %-12s round %6d%s  running %4d  pending %4d  done %5d%s", tty ? "\r" : "",
                       name.c_str(), round, opt.max_rounds > 0 ? ("/" + std::to_string(opt.max_rounds)).c_str() : "",
                       running, pending, done, tty ? "   " : "\n");
          std::fflush(stderr);
        };
      }
      results[i] = simulate(cluster, trace, profile_path.empty() ? nullptr : &table, &estimator, source, name, o);
      if (!quiet) {
        std::lock_guard<std::mutex> lock(print_mutex);
        std::fprintf(stderr, "%s  %-12s done: %d rounds in %.2f s (scheduler %.2f ms/round)%30s\n", tty ? "\r" : "",
                     name.c_str(), results[i].metrics.rounds, results[i].metrics.wall_seconds,
                     results[i].metrics.sched_ms_per_round, "");
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(policies.size())); ++t)
    pool.emplace_back(worker);
  worker();
  for (auto &t : pool)
    t.join();
  double const wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  // Side-by-side table.
  std::printf("\n%-26s", "metric");
  for (auto const &r : results)
    std::printf("%14s", r.policy.c_str());
  std::printf("\n");
  auto row = [&](char const *label, auto get) {
    std::printf("%-26s", label);
    for (auto const &r : results)
      std::printf("%14s", get(r).c_str());
    std::printf("\n");
  };
  row("submitted jobs", [](SimResult const &r) { return fmt(r.metrics.submitted); });
  row("finished jobs", [](SimResult const &r) { return fmt(r.metrics.completed); });
  row("rejected jobs", [](SimResult const &r) { return fmt(r.metrics.rejected); });
  row("unfinished jobs", [](SimResult const &r) { return fmt(r.metrics.unfinished); });
  row("avg JCT, finished (s)", [](SimResult const &r) { return fmt(r.metrics.avg_jct); });
  row("p50 JCT (s)", [](SimResult const &r) { return fmt(r.metrics.p50_jct); });
  row("p99 JCT (s)", [](SimResult const &r) { return fmt(r.metrics.p99_jct); });
  row("makespan (s)", [](SimResult const &r) { return fmt(r.metrics.makespan); });
  row("avg queueing (s)", [](SimResult const &r) { return fmt(r.metrics.avg_queue); });
  row("avg throughput (samp/s)", [](SimResult const &r) { return fmt(r.metrics.avg_throughput, 1); });
  row("peak throughput (samp/s)", [](SimResult const &r) { return fmt(r.metrics.peak_throughput, 1); });
  for (int t = 0; t < cluster.num_types(); ++t) {
    std::string const label = "GPU util " + cluster.type(t).name + " (%)";
    row(label.c_str(),
        [t](SimResult const &r) { return fmt(100.0 * r.metrics.utilization[static_cast<std::size_t>(t)], 1); });
  }
  row("reschedules", [](SimResult const &r) { return fmt(static_cast<double>(r.metrics.reschedules)); });
  if (opt.node_mtbf_hours > 0 || opt.job_mtbf_hours > 0)
    row("failures hitting jobs", [](SimResult const &r) { return fmt(static_cast<double>(r.metrics.failures)); });
  row("rounds", [](SimResult const &r) { return fmt(r.metrics.rounds); });
  row("scheduler ms/round", [](SimResult const &r) { return fmt(r.metrics.sched_ms_per_round, 3); });
  row("scheduler ms max", [](SimResult const &r) { return fmt(r.metrics.sched_ms_max, 1); });
  row("wall time (s)", [](SimResult const &r) { return fmt(r.metrics.wall_seconds, 2); });

  // Crius against the baselines.
  double pad = 0;
  for (auto const &r : results)
    for (auto const &j : r.jobs)
      if (j.state == JobState::completed)
        pad = std::max(pad, j.jct);
  std::vector<std::pair<std::string, JctReduction>> reductions;
  auto const crius =
      std::find_if(results.begin(), results.end(), [](SimResult const &r) { return r.policy == "crius"; });
  if (crius != results.end() && results.size() > 1) {
    std::printf("\nCrius's avg JCT reduction (raw: finished jobs only; padded: baseline padded to Crius's finished\n"
                "count with the largest JCT over all policies, %s s):\n",
                fmt(pad).c_str());
    for (auto const &r : results) {
      if (&r == &*crius)
        continue;
      auto const red = jct_reduction(*crius, r, pad);
      reductions.emplace_back(r.policy, red);
      std::printf("  vs %-12s raw %6.1f %%   padded %s\n", r.policy.c_str(), 100 * red.raw,
                  red.padded_defined ? (fmt(100 * red.padded, 1) + " %").c_str() : "n/a (baseline finished more jobs)");
    }
  }
  std::printf("\ntotal wall time %.2f s for %zu polic%s (%d thread%s)\n", wall, results.size(),
              results.size() == 1 ? "y" : "ies", threads, threads == 1 ? "" : "s");
  if (!json_path.empty()) {
    write_json(json_path, cluster, trace_path, source_name(source), opt, results, pad, reductions);
    std::printf("results written to %s\n", json_path.c_str());
  }
  return 0;
}

} // namespace tessel::sched::app

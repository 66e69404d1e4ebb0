#include "Commands.hpp"
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>

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
      "  --rounds N           stop after N rounds, or once every job ended (default 0: until every job ended, or\n"
      "                       until no job progresses any more, which leaves the jobs unfinished and says so)\n"
      "  --interval S         seconds per round (default 300)\n"
      "  --arena-compat       reproduce Arena's accounting (README: 'Arena compatibility'); implies\n"
      "                       --iteration-divisor 5\n"
      "  --iteration-divisor D  divide trace iterations by D (Arena: 5)\n"
      "  --seed S             seed of failure injection (default 1)\n"
      "  --node-mtbf H        node mean time between failures in hours (> 0; default: no node failures)\n"
      "  --repair-rounds R    rounds a failed node stays down (default 6; needs --node-mtbf)\n"
      "  --job-mtbf H         job mean time between failures in hours (> 0; default: no job failures)\n"
      "  --checkpoint S       seconds of execution between checkpoints (default 1800; needs a failure MTBF)\n"
      "  --start-latency S    seconds without progress at every start, move or shrink of a job: a cluster\n"
      "                       manager's launch latency (default 0; exact accounting only)\n"
      "  --parallel N         simulate N policies concurrently, one thread each (default 1)\n"
      "  --check              verify conservation and progress invariants every round\n"
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

Json metrics_json(Cluster const &cluster, SimResult const &r) {
  auto const &m = r.metrics;
  Json out = {{"submitted", m.submitted},
              {"completed", m.completed},
              {"rejected", m.rejected},
              {"unfinished", m.unfinished},
              {"avg_jct", m.avg_jct},
              {"p50_jct", m.p50_jct},
              {"p99_jct", m.p99_jct},
              {"makespan", m.makespan},
              {"avg_queue", m.avg_queue},
              {"avg_throughput", m.avg_throughput},
              {"peak_throughput", m.peak_throughput},
              {"reschedules", m.reschedules},
              {"failures", m.failures},
              {"rounds", m.rounds},
              {"sched_seconds", m.sched_seconds},
              {"sched_ms_per_round", m.sched_ms_per_round},
              {"sched_ms_max", m.sched_ms_max},
              {"wall_seconds", m.wall_seconds},
              {"oracle_lookups", r.oracle_lookups},
              {"oracle_computed", r.oracle_computed}};
  Json &utilization = out["utilization"] = Json::object();
  for (std::size_t t = 0; t < m.utilization.size(); ++t)
    utilization[cluster.type(static_cast<int>(t)).name] = m.utilization[t];
  std::vector<double> jct;
  std::vector<std::string> rejected;
  for (auto const &j : r.jobs) {
    if (j.state == JobState::completed)
      jct.push_back(j.jct);
    if (j.state == JobState::rejected)
      rejected.push_back(j.id + ": " + j.reject_reason);
  }
  out["jct"] = jct;
  out["rejected"] = rejected;
  // Per job, the outcome and the last allocation (what a live run of the same trace is compared with).
  Json &jobs = out["jobs"] = Json::array();
  for (auto const &j : r.jobs)
    jobs.push_back({{"id", j.id},
                    {"state", state_name(j.state)},
                    {"submit_time", j.submit_time},
                    {"start_time", j.start_time},
                    {"finish_time", j.finish_time},
                    {"jct", j.jct},
                    {"gpu_type", j.gpu_type >= 0 ? cluster.type(j.gpu_type).name : std::string()},
                    {"num_gpus", j.num_gpus},
                    {"reschedules", j.reschedules},
                    {"failures", j.failures}});
  out["stalls"] = r.stalls;
  out["end_reason"] = r.end_reason;
  out["round_time"] = r.round_time;
  out["throughput"] = r.throughput;
  out["running"] = r.running;
  out["pending"] = r.pending;
  out["sched_ms"] = r.sched_ms;
  return out;
}

struct SimulateArgs {
  std::string trace_path, cluster_path, profile_path, json_path, source_arg;
  std::vector<std::string> policies;
  ThroughputSource source = ThroughputSource::table;
  SimOptions opt;
  int threads = 1;
  bool quiet = false;
};

} // namespace

ThroughputSource source_option(std::string const &name) {
  ThroughputSource source = ThroughputSource::table;
  TESSEL_REQUIRE_USAGE(parse_source(name, source), "option --source expects table, estimator or table+estimator, got '",
                       name, "'");
  return source;
}

namespace {

std::vector<std::string> parse_policies(std::string const &list) {
  std::vector<std::string> policies;
  if (list == "all") {
    policies = policy_names();
  } else {
    std::stringstream ss(list);
    std::string p;
    while (std::getline(ss, p, ','))
      policies.push_back(p);
  }
  for (auto const &p : policies)
    (void)tessel::CommandLine::parse_value(
        "--policy", p, [](std::string const &n) { return make_policy(n); }); // validates the name before any work
  return policies;
}

SimulateArgs parse_simulate_args(tessel::CommandLine &args) {
  SimulateArgs a;
  a.trace_path = args.require("trace");
  a.cluster_path = args.get("cluster", "crius");
  a.profile_path = args.get("profile", "");
  std::string const policy_arg = args.require("policy");
  SimOptions &opt = a.opt;
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
  opt.start_latency = args.get_double("start-latency", 0, tessel::Range::at_least(0, 1e7));
  TESSEL_REQUIRE_USAGE(!(opt.arena_compat && opt.start_latency > 0),
                       "--start-latency is a cost of exact accounting: it does not combine with --arena-compat");
  opt.check_invariants = args.flag("check");
  a.threads = args.get_int("parallel", 1, 1, 1024);
  a.json_path = args.get("json", "");
  a.quiet = args.flag("quiet");
  a.source_arg = args.get("source", a.profile_path.empty() ? "estimator" : "table");
  args.finish();
  tessel::require_distinct_files(
      {{"--trace", a.trace_path}, {"--cluster", a.cluster_path}, {"--profile", a.profile_path}},
      {{"--json", a.json_path}});
  tessel::require_writable(a.json_path);
  a.source = source_option(a.source_arg);
  a.policies = parse_policies(policy_arg);
  return a;
}

void print_setup(SimulateArgs const &a, Cluster const &cluster, Trace const &trace) {
  std::printf("cluster: %s, %d nodes, %d GPUs (", a.cluster_path.c_str(), cluster.num_nodes(), cluster.num_gpus());
  for (int t = 0; t < cluster.num_types(); ++t)
    std::printf("%s%s %d", t ? ", " : "", cluster.type(t).name.c_str(), cluster.type_gpus(t));
  std::printf(")\ntrace: %s, %zu jobs; throughput from %s%s\n", a.trace_path.c_str(), trace.jobs.size(),
              source_name(a.source), a.opt.arena_compat ? "; Arena-compatible accounting" : "");
  std::printf("rounds: %s of %.0f s%s\n",
              a.opt.max_rounds > 0 ? std::to_string(a.opt.max_rounds).c_str() : "until done", a.opt.interval,
              a.opt.node_mtbf_hours > 0 || a.opt.job_mtbf_hours > 0 ? "; failure injection on" : "");
  std::fflush(stdout);
}

// Progress on stderr: on a terminal one line is rewritten in place; in a log a line is added every tenth of the run.
class Progress {
public:
  Progress(bool quiet, int max_rounds) : _quiet(quiet), _max_rounds(max_rounds), _tty(isatty(fileno(stderr)) != 0) {}

  void attach(SimOptions &o, std::string const &name) {
    if (_quiet)
      return;
    int const every = _tty ? 25 : (_max_rounds > 0 ? std::max(1, _max_rounds / 10) : 500);
    o.progress = [this, name, every](int round, int running, int pending, int done) {
      if (round % every != 0)
        return;
      std::lock_guard<std::mutex> lock(_mutex);
      std::fprintf(stderr, "%s  %-12s round %6d%s  running %4d  pending %4d  done %5d%s", _tty ? "\r" : "",
                   name.c_str(), round, _max_rounds > 0 ? ("/" + std::to_string(_max_rounds)).c_str() : "", running,
                   pending, done, _tty ? "   " : "\n");
      std::fflush(stderr);
    };
  }

  void done(std::string const &name, SimMetrics const &m) {
    if (_quiet)
      return;
    std::lock_guard<std::mutex> lock(_mutex);
    std::fprintf(stderr, "%s  %-12s done: %d rounds in %.2f s (scheduler %.2f ms/round)%30s\n", _tty ? "\r" : "",
                 name.c_str(), m.rounds, m.wall_seconds, m.sched_ms_per_round, "");
  }

private:
  bool _quiet;
  int _max_rounds;
  bool _tty;
  std::mutex _mutex;
};

// Simulates every policy, `threads` of them concurrently.
std::vector<SimResult> run_policies(SimulateArgs const &a, Cluster const &cluster, Trace const &trace,
                                    ProfileTable const *table, Estimator const &estimator) {
  std::vector<SimResult> results(a.policies.size());
  Progress progress(a.quiet, a.opt.max_rounds);
  std::atomic<std::size_t> next{0};
  auto worker = [&]() {
    for (std::size_t i = next++; i < a.policies.size(); i = next++) {
      SimOptions o = a.opt;
      progress.attach(o, a.policies[i]);
      results[i] = simulate(cluster, trace, table, &estimator, a.source, a.policies[i], o);
      progress.done(a.policies[i], results[i].metrics);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(a.threads, static_cast<int>(a.policies.size())); ++t)
    pool.emplace_back(worker);
  worker();
  for (auto &t : pool)
    t.join();
  return results;
}

void print_metrics(Cluster const &cluster, SimOptions const &opt, std::vector<SimResult> const &results) {
  std::printf("\n%-26s", "metric");
  for (auto const &r : results)
    std::printf("%14s", r.policy.c_str());
  std::printf("\n");
  auto row = [&](char const *label, auto get) {
    std::printf("%-26s", label);
    for (auto const &r : results)
      std::printf("%14s", get(r.metrics).c_str());
    std::printf("\n");
  };
  row("submitted jobs", [](SimMetrics const &m) { return fmt(m.submitted); });
  row("finished jobs", [](SimMetrics const &m) { return fmt(m.completed); });
  row("rejected jobs", [](SimMetrics const &m) { return fmt(m.rejected); });
  row("unfinished jobs", [](SimMetrics const &m) { return fmt(m.unfinished); });
  row("avg JCT, finished (s)", [](SimMetrics const &m) { return fmt(m.avg_jct); });
  row("p50 JCT (s)", [](SimMetrics const &m) { return fmt(m.p50_jct); });
  row("p99 JCT (s)", [](SimMetrics const &m) { return fmt(m.p99_jct); });
  row("makespan (s)", [](SimMetrics const &m) { return fmt(m.makespan); });
  row("avg queueing (s)", [](SimMetrics const &m) { return fmt(m.avg_queue); });
  row("avg throughput (samp/s)", [](SimMetrics const &m) { return fmt(m.avg_throughput, 1); });
  row("peak throughput (samp/s)", [](SimMetrics const &m) { return fmt(m.peak_throughput, 1); });
  for (int t = 0; t < cluster.num_types(); ++t) {
    std::string const label = "GPU util " + cluster.type(t).name + " (%)";
    row(label.c_str(), [t](SimMetrics const &m) { return fmt(100.0 * m.utilization[static_cast<std::size_t>(t)], 1); });
  }
  row("reschedules", [](SimMetrics const &m) { return fmt(static_cast<double>(m.reschedules)); });
  if (opt.node_mtbf_hours > 0 || opt.job_mtbf_hours > 0)
    row("failures hitting jobs", [](SimMetrics const &m) { return fmt(static_cast<double>(m.failures)); });
  row("rounds", [](SimMetrics const &m) { return fmt(m.rounds); });
  row("scheduler ms/round", [](SimMetrics const &m) { return fmt(m.sched_ms_per_round, 3); });
  row("scheduler ms max", [](SimMetrics const &m) { return fmt(m.sched_ms_max, 1); });
  row("wall time (s)", [](SimMetrics const &m) { return fmt(m.wall_seconds, 2); });
  for (auto const &r : results)
    std::printf("%s: ended: %s\n", r.policy.c_str(), r.end_reason.c_str());
  for (auto const &r : results)
    if (!r.stalls.empty())
      std::printf("%s: %zu times a running job made no progress for longer than re-tuning explains (--json lists "
                  "them); first: %s\n",
                  r.policy.c_str(), r.stalls.size(), r.stalls.front().c_str());
}

// The largest finished JCT over all policies (Arena pads the baselines' finished lists with it).
double pad_jct(std::vector<SimResult> const &results) {
  double pad = 0;
  for (auto const &r : results)
    for (auto const &j : r.jobs)
      if (j.state == JobState::completed)
        pad = std::max(pad, j.jct);
  return pad;
}

// Crius against each baseline, printed; empty when Crius did not run or ran alone.
std::vector<std::pair<std::string, JctReduction>> crius_reductions(std::vector<SimResult> const &results, double pad) {
  std::vector<std::pair<std::string, JctReduction>> reductions;
  auto const crius =
      std::find_if(results.begin(), results.end(), [](SimResult const &r) { return r.policy == "crius"; });
  if (crius == results.end() || results.size() <= 1)
    return reductions;
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
  return reductions;
}

void write_results(SimulateArgs const &a, Cluster const &cluster, std::vector<SimResult> const &results, double pad,
                   std::vector<std::pair<std::string, JctReduction>> const &reductions) {
  SimOptions const &opt = a.opt;
  Json doc = {{"tool", "tessel-sched simulate"},
              {"build", tessel::build_summary()},
              {"trace", a.trace_path},
              {"throughput_source", source_name(a.source)}};
  doc["options"] = {{"interval", opt.interval},
                    {"max_rounds", opt.max_rounds},
                    {"arena_compat", opt.arena_compat},
                    {"iteration_divisor", opt.iteration_divisor},
                    {"seed", opt.seed},
                    {"node_mtbf_hours", opt.node_mtbf_hours},
                    {"job_mtbf_hours", opt.job_mtbf_hours},
                    {"checkpoint_interval", opt.checkpoint_interval},
                    {"start_latency", opt.start_latency}};
  Json &types = doc["gpu_types"] = Json::array();
  for (auto const &t : cluster.types())
    types.push_back(t.name);
  doc["pad_jct"] = pad;
  Json &policies = doc["policies"] = Json::object();
  for (auto const &r : results)
    policies[r.policy] = metrics_json(cluster, r);
  Json &red = doc["crius_jct_reduction"] = Json::object();
  for (auto const &[name, rd] : reductions) {
    red[name] = {{"raw", rd.raw}};
    if (rd.padded_defined)
      red[name]["padded"] = rd.padded;
  }
  write_json(a.json_path, doc);
  std::printf("results written to %s\n", a.json_path.c_str());
}

} // namespace

int simulate_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    simulate_usage();
    return 0;
  }
  std::printf("%s\n", tessel::build_summary().c_str());
  SimulateArgs const a = parse_simulate_args(args);
  Cluster const cluster = load_cluster(a.cluster_path);
  tessel::require_same_file(tessel::Communicator::world(), "trace", a.trace_path);
  Trace const trace = load_trace(a.trace_path, cluster);
  ProfileTable table;
  if (!a.profile_path.empty())
    table = load_profile(a.profile_path);
  TESSEL_REQUIRE_USAGE(a.source == ThroughputSource::estimator || !a.profile_path.empty(), "--source ", a.source_arg,
                       " needs --profile");
  Estimator estimator(cluster);
  if (!a.profile_path.empty())
    estimator.calibrate(table);
  print_setup(a, cluster, trace);

  auto const wall0 = std::chrono::steady_clock::now();
  std::vector<SimResult> const results =
      run_policies(a, cluster, trace, a.profile_path.empty() ? nullptr : &table, estimator);
  double const wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  print_metrics(cluster, a.opt, results);
  double const pad = pad_jct(results);
  auto const reductions = crius_reductions(results, pad);
  std::printf("\ntotal wall time %.2f s for %zu polic%s (%d thread%s)\n", wall, results.size(),
              results.size() == 1 ? "y" : "ies", a.threads, a.threads == 1 ? "" : "s");
  if (!a.json_path.empty())
    write_results(a, cluster, results, pad, reductions);
  return 0;
}

} // namespace tessel::sched::app

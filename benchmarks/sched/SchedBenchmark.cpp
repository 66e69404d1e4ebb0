// tessel-sched-bench: wall time of each policy's simulation (median of repeats, side by side in one run), the
// scheduler's time per round, and what memoizing throughput lookups saves (same run with the memo off).
//
//   tessel-sched-bench [--trace F --profile DIR|F] [--cluster F|crius] [--rounds N] [--repeat R] [--arena-compat]
//                      [--policy LIST] [--jobs N] [--seed S] [--json F]
//   tessel-sched-bench --load RUNNING,PENDING [--profile DIR|F] [--cluster F|crius] [--rounds N] [--repeat R]
//                      [--arena-compat] [--policy LIST] [--seed S] [--json F]
//   tessel-sched-bench --decisions F [--trace F --profile DIR|F] [--cluster F|crius] [--rounds N] [--arena-compat]
//                      [--policy LIST] [--jobs N | --load RUNNING,PENDING [--seed S]]
//
// Without --trace a synthetic trace (estimator throughputs) is used. --load times each policy's decisions per round
// at a load of about RUNNING running and PENDING pending jobs: a synthetic trace (Arena's job mix, GPU counts chosen
// so that about RUNNING jobs fill the cluster under Crius) submits RUNNING + PENDING jobs at once and then about as
// many jobs per round as complete; the real simulator runs the policy, and each call of its schedule() is timed with
// the number of running and pending jobs it saw. Rounds where both are at least 90 % of the target count as "at load".
// --decisions runs each policy once (on the trace, the synthetic trace or --load's) and writes its decisions as JSON:
// every job's outcome (state, start, finish, GPU type and count, reschedules) and per round a hash of the GPU owners
// (placements) and the scheduler's ms; two builds decide the same when the files agree apart from the times.

#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/Simulator.hpp>
#include <tessel/sched/Synthetic.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
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
  std::string cluster_path, profile_path, trace_path, json_path, decisions_path;
  int jobs = 400, repeat = 3;
  int load_running = 0, load_pending = 0; // --load: 0 = the whole-trace benchmark
  std::uint64_t seed = 1;
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
  if (args.has("load")) {
    TESSEL_REQUIRE_USAGE(!args.has("trace") && !args.has("jobs"), "--load builds its own trace: drop --trace/--jobs");
    auto const load = args.get_int_list<int>("load", {}, 1, 100000);
    TESSEL_REQUIRE_USAGE(load.size() == 2, "--load takes RUNNING,PENDING");
    a.load_running = load[0];
    a.load_pending = load[1];
  }
  a.seed = args.get_int<std::uint64_t>("seed", 1, 0, ~std::uint64_t{0});
  a.opt.arena_compat = args.flag("arena-compat");
  a.opt.iteration_divisor = a.opt.arena_compat ? 5 : 1;
  a.opt.max_rounds = args.get_int("rounds", a.load_running > 0 ? 60 : 2000, 1, 100000000);
  a.repeat = args.get_int("repeat", 3, 1, 1000);
  a.policies = args.get_list("policy", policy_names());
  for (auto const &p : a.policies)
    (void)tessel::CommandLine::parse_value("--policy", p, [](std::string const &n) { return make_policy(n); });
  a.json_path = args.get("json", "");
  a.decisions_path = args.get("decisions", "");
  args.finish();
  tessel::require_distinct_files(
      {{"--cluster", a.cluster_path}, {"--profile", a.profile_path}, {"--trace", a.trace_path}},
      {{"--json", a.json_path}, {"--decisions", a.decisions_path}});
  tessel::require_writable(a.json_path);
  tessel::require_writable(a.decisions_path);
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
    } else if (a.load_running > 0) {
      trace = load_trace_for(a);
    } else {
      ThroughputOracle const gen(cluster, table.get(), &est, source);
      SyntheticOptions s;
      s.seed = a.seed;
      s.jobs = a.jobs;
      s.jobs_per_hour = 20;
      trace = generate_trace(cluster, gen, s);
    }
  }

  // --load: RUNNING + PENDING jobs at time 0, then about RUNNING / (mean duration in rounds) jobs per round. Jobs of
  // synthetic pools are taken in order when they keep the mean requested GPU count near the target below.
  Trace load_trace_for(BenchArgs const &a) const {
    ThroughputOracle const gen(cluster, table.get(), &est, source);
    SyntheticOptions s;
    s.median_hours = 2;
    s.sigma = 0.5;
    double const interval = a.opt.interval;
    double const mean_rounds = s.median_hours * std::exp(0.5 * s.sigma * s.sigma) * 3600.0 / interval;
    double const per_round = std::max(1.0, a.load_running / mean_rounds);
    std::size_t const burst = static_cast<std::size_t>(a.load_running + a.load_pending);
    std::size_t const want = burst + static_cast<std::size_t>(per_round * (a.opt.max_rounds + 1));
    s.jobs = static_cast<int>(4 * want + 100);
    s.jobs_per_hour = 1000;
    // Crius shrinks jobs to start them: with the requested mean at GPUs / RUNNING, about 1.9 x RUNNING jobs run.
    double const target = std::clamp(1.9 * double(cluster.num_gpus()) / a.load_running, 1.0, 16.0);
    Trace t;
    t.source = "synthetic load " + std::to_string(a.load_running) + "," + std::to_string(a.load_pending);
    double sum = 0;
    for (int pool_no = 0; pool_no < 16 && t.jobs.size() < want; ++pool_no) {
      s.seed = a.seed + static_cast<std::uint64_t>(pool_no) * 1000003;
      Trace const pool = generate_trace(cluster, gen, s);
      t.type_names = pool.type_names;
      for (auto const &j : pool.jobs) {
        if (t.jobs.size() == want)
          break;
        double const n = double(t.jobs.size());
        if (std::abs(sum + j.num_gpus - target * (n + 1)) > std::max(std::abs(sum - target * n), 8.0))
          continue;
        sum += j.num_gpus;
        JobSpec spec = j;
        std::size_t const k = t.jobs.size();
        spec.id = "load" + std::to_string(k);
        spec.submit_time = k < burst ? 0 : std::floor(interval * (1 + double(k - burst) / per_round));
        t.jobs.push_back(std::move(spec));
      }
    }
    return t;
  }
};

// Times each call of a policy's schedule() with the running and pending jobs it saw.
class TimedPolicy final : public Policy {
public:
  explicit TimedPolicy(std::unique_ptr<Policy> inner) : _inner(std::move(inner)) {}
  std::string name() const override { return _inner->name(); }
  ReschedCost resched_cost() const override { return _inner->resched_cost(); }
  void schedule(SchedContext &ctx) override {
    int running = 0, pending = 0;
    for (auto const &j : ctx.jobs()) {
      running += j.state == JobState::running;
      pending += j.state == JobState::pending;
    }
    auto const t0 = std::chrono::steady_clock::now();
    _inner->schedule(ctx);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    this->running.push_back(running);
    this->pending.push_back(pending);
  }
  std::vector<double> ms;
  std::vector<int> running, pending;

private:
  std::unique_ptr<Policy> _inner;
};

// --load, one policy: `repeat` runs; per round the median time over the runs (the decisions are deterministic).
tessel::Json bench_load(BenchArgs const &a, Inputs const &in, std::string const &policy, double &median_wall) {
  std::vector<std::vector<double>> per_round;
  std::vector<double> walls;
  std::vector<int> running, pending;
  for (int r = 0; r < a.repeat; ++r) {
    ThroughputOracle oracle(in.cluster, in.table.get(), &in.est, in.source, a.opt.interval);
    TimedPolicy p(make_policy(policy));
    auto const t0 = std::chrono::steady_clock::now();
    Simulator sim(in.cluster, in.trace, oracle, p, a.opt);
    (void)sim.run();
    walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    per_round.resize(p.ms.size());
    for (std::size_t i = 0; i < p.ms.size(); ++i)
      per_round[i].push_back(p.ms[i]);
    running = p.running;
    pending = p.pending;
  }
  median_wall = median(walls);
  std::vector<double> at_load, after_first;
  double first = 0;
  int loaded_running = 0, loaded_pending = 0;
  tessel::Json rounds = tessel::Json::array();
  for (std::size_t i = 0; i < per_round.size(); ++i) {
    double const ms = median(per_round[i]);
    rounds.push_back(tessel::Json{{"running", running[i]}, {"pending", pending[i]}, {"ms", ms}});
    if (i == 0) {
      first = ms;
      continue;
    }
    after_first.push_back(ms);
    if (running[i] >= 0.9 * a.load_running && pending[i] >= 0.9 * a.load_pending) {
      at_load.push_back(ms);
      loaded_running += running[i];
      loaded_pending += pending[i];
    }
  }
  auto max_of = [](std::vector<double> const &v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  double const n = std::max<double>(1, double(at_load.size()));
  std::printf("%-12s %8zu %10.0f %10.0f %12.2f %12.2f %12.2f %12.2f %10.2f\n", policy.c_str(), at_load.size(),
              loaded_running / n, loaded_pending / n, median(at_load), max_of(at_load), max_of(after_first), first,
              median_wall);
  return {{"rounds_at_load", at_load.size()},
          {"mean_running_at_load", loaded_running / n},
          {"mean_pending_at_load", loaded_pending / n},
          {"median_ms_at_load", median(at_load)},
          {"max_ms_at_load", max_of(at_load)},
          {"max_ms_after_first_round", max_of(after_first)},
          {"first_round_ms", first},
          {"median_wall_s", median_wall},
          {"rounds", rounds}};
}

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

// --decisions: one run of each policy, its per-job outcomes and per-round placement hashes.
tessel::Json record_decisions(BenchArgs const &a, Inputs const &in, std::string const &policy) {
  ThroughputOracle oracle(in.cluster, in.table.get(), &in.est, in.source, a.opt.interval);
  auto p = make_policy(policy);
  SimOptions opt = a.opt;
  tessel::Json hashes = tessel::Json::array();
  opt.observer = [&](int, Allocation const &alloc, std::vector<JobRecord> const &) {
    std::uint64_t h = 1469598103934665603ull;
    for (int o : alloc.owners()) {
      h ^= static_cast<std::uint32_t>(o);
      h *= 1099511628211ull;
    }
    hashes.push_back(std::to_string(h));
  };
  Simulator sim(in.cluster, in.trace, oracle, *p, opt);
  SimResult const r = sim.run();
  tessel::Json jobs = tessel::Json::array();
  for (auto const &j : r.jobs)
    jobs.push_back(tessel::Json{{"id", j.id},
                                {"state", state_name(j.state)},
                                {"start", j.start_time},
                                {"finish", j.finish_time},
                                {"gpu_type", j.gpu_type},
                                {"num_gpus", j.num_gpus},
                                {"reschedules", j.reschedules}});
  std::printf("%-12s %d rounds, %d completed, sched ms/round %.3f, max %.1f\n", policy.c_str(), r.metrics.rounds,
              r.metrics.completed, r.metrics.sched_ms_per_round, r.metrics.sched_ms_max);
  return {{"jobs", jobs},         {"placements", hashes},   {"running", r.running},
          {"pending", r.pending}, {"sched_ms", r.sched_ms}, {"wall_s", r.metrics.wall_seconds}};
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-sched-bench", argc, argv, [](tessel::CommandLine &args) {
    if (args.flag({"help", 'h'})) {
      std::printf(
          "usage: tessel-sched-bench [--trace F --profile DIR|F] [--cluster F|crius] [--rounds N] [--repeat R]\n"
          "                          [--arena-compat] [--policy LIST] [--jobs N] [--seed S] [--json F] [--debug]\n"
          "       tessel-sched-bench --load RUNNING,PENDING [--profile DIR|F] [--cluster F|crius] [--rounds N]\n"
          "                          [--repeat R] [--arena-compat] [--policy LIST] [--seed S] [--json F]\n"
          "       tessel-sched-bench --decisions F [--trace F --profile DIR|F] [--rounds N] [--arena-compat] ...\n"
          "  --load R,P     decision time per round at about R running and P pending jobs (synthetic trace)\n"
          "  --decisions F  write each policy's per-job outcomes and per-round placement hashes\n"
          "exit status: 0 success, 1 runtime error, 2 invalid option\n");
      return 0;
    }
    BenchArgs const a = parse_args(args);
    std::printf("%s\n", tessel::build_summary().c_str());
    Inputs const in(a);
    std::printf("trace: %s (%zu jobs), %d rounds, %d repeats, throughput from %s\n",
                a.trace_path.empty() ? "synthetic" : a.trace_path.c_str(), in.trace.jobs.size(), a.opt.max_rounds,
                a.repeat, source_name(in.source));
    tessel::Json doc = {{"build", tessel::build_summary()}, {"repeat", a.repeat}, {"policies", tessel::Json::object()}};
    double total = 0;
    if (!a.decisions_path.empty()) {
      for (auto const &p : a.policies)
        doc["policies"][p] = record_decisions(a, in, p);
      tessel::write_json(a.decisions_path, doc);
      std::printf("decisions written to %s\n", a.decisions_path.c_str());
      return 0;
    }
    if (a.load_running > 0) {
      doc["load"] = {{"running", a.load_running}, {"pending", a.load_pending}};
      std::printf("\n%-12s %8s %10s %10s %12s %12s %12s %12s %10s\n", "policy", "at load", "running", "pending",
                  "median ms", "max ms", "max ms >r0", "round 0 ms", "wall (s)");
      for (auto const &p : a.policies) {
        double wall = 0;
        doc["policies"][p] = bench_load(a, in, p, wall);
        total += wall;
      }
    } else {
      std::printf("\n%-12s %12s %14s %14s %14s %12s %16s\n", "policy", "wall (s)", "sched ms/round", "lookups",
                  "computed", "memo off (s)", "memo saves (x)");
      for (auto const &p : a.policies) {
        double wall = 0;
        doc["policies"][p] = bench_policy(a, in, p, wall);
        total += wall;
      }
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

#include "Commands.hpp"
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Model.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/tools/Files.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>

namespace tessel::sched::app {

namespace {

struct ErrorStats {
  std::vector<double> rel; // signed relative errors (estimate - measured) / measured
  int infeasible = 0;      // measured but estimated infeasible
  void add(double est, double meas) { rel.push_back((est - meas) / meas); }
  std::size_t n() const { return rel.size(); }
  double quantile_abs(double q) const {
    if (rel.empty())
      return 0;
    std::vector<double> a;
    for (double r : rel)
      a.push_back(std::fabs(r));
    std::sort(a.begin(), a.end());
    double const pos = q * double(a.size() - 1);
    std::size_t const lo = static_cast<std::size_t>(pos);
    std::size_t const hi = std::min(a.size() - 1, lo + 1);
    return a[lo] + (a[hi] - a[lo]) * (pos - double(lo));
  }
  double mean_abs() const {
    double s = 0;
    for (double r : rel)
      s += std::fabs(r);
    return rel.empty() ? 0 : s / double(rel.size());
  }
  double within(double tol) const {
    if (rel.empty())
      return 0;
    std::size_t k = 0;
    for (double r : rel)
      k += std::fabs(r) <= tol;
    return double(k) / double(rel.size());
  }
};

void print_stats(char const *label, ErrorStats const &s) {
  std::printf(
      "  %-34s n=%4zu  median %5.1f %%  mean %5.1f %%  p90 %6.1f %%  within 25 %%: %5.1f %%  within 50 %%: %5.1f %%",
      label, s.n(), 100 * s.quantile_abs(0.5), 100 * s.mean_abs(), 100 * s.quantile_abs(0.9), 100 * s.within(0.25),
      100 * s.within(0.5));
  if (s.infeasible)
    std::printf("  (+%d estimated infeasible)", s.infeasible);
  std::printf("\n");
}

Json stats_json(ErrorStats const &s) {
  return {{"n", s.n()},
          {"median_abs", s.quantile_abs(0.5)},
          {"mean_abs", s.mean_abs()},
          {"p90_abs", s.quantile_abs(0.9)},
          {"within_25", s.within(0.25)},
          {"within_50", s.within(0.5)},
          {"estimated_infeasible", s.infeasible}};
}

// Errors of per-plan estimates against the measured plans of `test` (estimator calibrated on `fit`); rows go to
// \p dump as CSV when given.
ErrorStats plan_errors(Cluster const &cluster, ProfileTable const &fit, ProfileTable const &test,
                       std::ostream *dump = nullptr) {
  Estimator est(cluster);
  est.calibrate(fit);
  ErrorStats s;
  for (auto const &p : test.plans()) {
    int const t = cluster.find_type(p.gpu);
    if (t < 0 || p.e2e <= 0)
      continue;
    Cell const cell{p.model, p.batch_size, t, p.hosts, p.per_host, p.pp};
    ParallelPlan plan{std::vector<StageShape>(static_cast<std::size_t>(p.pp), StageShape{p.dp, p.tp}), 1};
    // The micro-batch count the estimator would pick for this plan.
    auto const plans = est.enumerate_plans(cell, PlanStrategy::uniform);
    for (auto const &q : plans)
      if (q.stages == plan.stages)
        plan.micro_batches = q.micro_batches;
    if (plan.micro_batches == 1 && p.pp > 1) {
      int max_dp = p.dp;
      int m = 1;
      while (m * 2 <= 16 && m * 2 <= p.batch_size / max_dp)
        m *= 2;
      plan.micro_batches = m;
    }
    auto const e = est.estimate(cell, plan);
    if (!e.valid)
      continue;
    s.add(e.e2e, p.e2e);
    if (dump)
      *dump << ModelCatalog::builtin()[p.model].name() << ',' << p.batch_size << ',' << p.gpu << ',' << p.hosts << ','
            << p.per_host << ',' << p.pp << ',' << p.dp << ',' << p.tp << ',' << plan.micro_batches << ',' << p.comp
            << ',' << p.intra << ',' << p.inter << ',' << p.e2e << ',' << e.comp << ',' << e.intra << ',' << e.inter
            << ',' << e.e2e << ',' << e.memory_gb << '\n';
  }
  return s;
}

void print_calibration(Cluster const &cluster, Calibration const &cal) {
  std::printf("calibration on %d measured plans: fraction of peak compute and of tensor-parallel link bandwidth per\n"
              "family (wide_resnet, bert, moe, gpt); gradient-sync and cross-stage link efficiency per type:\n",
              cal.plans_used);
  for (int t = 0; t < cluster.num_types(); ++t) {
    auto const ti = static_cast<std::size_t>(t);
    auto const &c = cal.compute[ti];
    auto const &p = cal.tp[ti];
    std::printf("  %-6s compute %.3f %.3f %.3f %.3f   tp %.3f %.3f %.3f %.3f   dp %.3f   pp %.3f\n",
                cluster.type(t).name.c_str(), c[0], c[1], c[2], c[3], p[0], p[1], p[2], p[3], cal.dp[ti], cal.pp[ti]);
  }
}

// What the estimator's error is measured on: per plan, best plan, data-parallel memory.
struct EstimateReport {
  ErrorStats in_sample, cv, opt_all, mem;
  std::map<std::string, ErrorStats> opt_by_type;
  int mem_agree = 0, mem_total = 0;
};

// 1. Per-plan e2e against prof_database_est: in-sample (rows to \p dump_path when given) and 2-fold by model
// configuration.
void add_plan_errors(EstimateReport &rep, Cluster const &cluster, ProfileTable const &table,
                     std::string const &dump_path) {
  std::unique_ptr<OutputFile> dump_file;
  if (!dump_path.empty()) {
    dump_file = std::make_unique<OutputFile>(dump_path);
    dump_file->stream()
        << "model,batch_size,gpu_type,num_hosts,gpus_per_host,pp,dp,tp,micro_batches,comp,intra,inter,e2e,"
           "est_comp,est_intra,est_inter,est_e2e,est_memory_gb\n";
  }
  rep.in_sample = plan_errors(cluster, table, table, dump_file ? &dump_file->stream() : nullptr);
  if (dump_file)
    dump_file->commit();
  ProfileTable half[2];
  for (auto const &p : table.plans()) {
    int const fold = (p.model * 7 + p.batch_size / 128) % 2;
    half[fold].add(p);
  }
  for (int f = 0; f < 2; ++f) {
    auto const s = plan_errors(cluster, half[1 - f], half[f]);
    rep.cv.rel.insert(rep.cv.rel.end(), s.rel.begin(), s.rel.end());
  }
}

// 2. Best plan against the optimal (Alpa-searched) iteration times, per GPU type.
void add_best_plan_errors(EstimateReport &rep, Cluster const &cluster, ProfileTable const &table,
                          Estimator const &est) {
  for (auto const &e : table.entries()) {
    int const t = cluster.find_type(e.gpu);
    if (t < 0 || !(e.iter_time > 0))
      continue;
    auto const a = est.best(e.model, e.batch_size, t, e.hosts, e.per_host, PlanStrategy::uniform);
    auto const b = est.best(e.model, e.batch_size, t, e.hosts, e.per_host, PlanStrategy::greedy);
    auto &by = rep.opt_by_type[e.gpu];
    if (!a.feasible && !b.feasible) {
      ++rep.opt_all.infeasible;
      ++by.infeasible;
      continue;
    }
    double const v = !a.feasible   ? b.estimate.e2e
                     : !b.feasible ? a.estimate.e2e
                                   : std::min(a.estimate.e2e, b.estimate.e2e);
    rep.opt_all.add(v, e.iter_time);
    by.add(v, e.iter_time);
  }
}

// 3. Data-parallel memory against dp_mem.json (entries the source measured, i.e. > 0).
void add_memory_errors(EstimateReport &rep, Cluster const &cluster, ProfileTable const &table, Estimator const &est) {
  for (auto const &m : table.dp_memory()) {
    for (int k = 0; k < 5; ++k) {
      int const n = 1 << k;
      // memory does not depend on the GPU type; use the largest-memory type to avoid the fit check
      int t_big = 0;
      for (int t = 0; t < cluster.num_types(); ++t)
        if (cluster.type(t).memory_gb > cluster.type(t_big).memory_gb)
          t_big = t;
      int const cap = cluster.type_capacity(t_big);
      int const per = std::min(n, cap), hosts = n / per;
      auto const e = est.data_parallel(m.model, m.batch_size, t_big, hosts, per);
      double const meas = m.gb[static_cast<std::size_t>(k)];
      if (e.valid && meas > 0)
        rep.mem.add(e.memory_gb, meas);
      // Feasibility on a 40 GB A100 (Arena's DP rule) from measured vs estimated memory.
      int const a100 = cluster.find_type("a100");
      if (a100 >= 0 && meas != 0 && e.valid) {
        bool const meas_fit = meas > 0 && meas * 1.2 <= 0.8 * cluster.type(a100).memory_gb;
        bool const est_fit = e.memory_gb * 1.2 <= 0.8 * cluster.type(a100).memory_gb;
        rep.mem_agree += meas_fit == est_fit;
        ++rep.mem_total;
      }
    }
  }
}

void print_report(EstimateReport const &rep) {
  std::printf("\nestimator error against the profile tables (|estimate - measured| / measured):\n");
  print_stats("plans, in-sample", rep.in_sample);
  print_stats("plans, 2-fold by model config", rep.cv);
  print_stats("best plan vs Alpa optimum", rep.opt_all);
  for (auto const &[gpu, s] : rep.opt_by_type)
    print_stats(("  " + gpu).c_str(), s);
  print_stats("DP memory vs dp_mem.json", rep.mem);
  if (rep.mem_total)
    std::printf("  DP fits-in-A100 decisions agreeing with dp_mem.json: %d of %d (%.1f %%)\n", rep.mem_agree,
                rep.mem_total, 100.0 * rep.mem_agree / rep.mem_total);
}

void write_report(std::string const &path, std::string const &profile_path, int calibration_plans,
                  EstimateReport const &rep) {
  Json doc = {{"tool", "tessel-sched estimate"},
              {"build", tessel::build_summary()},
              {"profile", profile_path},
              {"calibration_plans", calibration_plans},
              {"plans_in_sample", stats_json(rep.in_sample)},
              {"plans_cross_validated", stats_json(rep.cv)},
              {"best_plan_vs_optimal", stats_json(rep.opt_all)}};
  Json &by_type = doc["best_plan_vs_optimal_by_type"] = Json::object();
  for (auto const &[gpu, s] : rep.opt_by_type)
    by_type[gpu] = stats_json(s);
  doc["dp_memory"] = stats_json(rep.mem);
  doc["dp_fit_agreement"] = rep.mem_total ? double(rep.mem_agree) / rep.mem_total : 0.0;
  write_json(path, doc);
  std::printf("results written to %s\n", path.c_str());
}

std::vector<PlanStrategy> parse_strategies(std::string const &arg) {
  if (arg == "all")
    return {PlanStrategy::minimal, PlanStrategy::uniform, PlanStrategy::greedy};
  for (auto s : {PlanStrategy::minimal, PlanStrategy::uniform, PlanStrategy::greedy})
    if (arg == strategy_name(s))
      return {s};
  TESSEL_REQUIRE_USAGE(false, "option --strategy expects minimal, uniform, greedy or all, got '", arg, "'");
  return {};
}

void print_cells(Estimator const &est, std::vector<Cell> const &cells, std::vector<PlanStrategy> const &strategies) {
  for (auto const &cell : cells) {
    std::printf("Cell %d host%s x %d GPU%s, %d stage%s\n", cell.hosts, cell.hosts > 1 ? "s" : "", cell.per_host,
                cell.per_host > 1 ? "s" : "", cell.stages, cell.stages > 1 ? "s" : "");
    for (auto s : strategies) {
      auto const plans = est.enumerate_plans(cell, s);
      if (plans.empty())
        std::printf("  %-8s (no plan fits)\n", strategy_name(s));
      for (auto const &p : plans) {
        auto const e = est.estimate(cell, p);
        std::printf("  %-8s %-24s micro-batches %2d  iter %8.3f s (comp %.3f, intra %.3f, inter %.3f)  %6.1f GB/GPU\n",
                    strategy_name(s), p.key().c_str(), p.micro_batches, e.e2e, e.comp, e.intra, e.inter, e.memory_gb);
      }
    }
  }
}

} // namespace

int estimate_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    std::printf("usage: tessel-sched estimate --profile F|DIR [--cluster F|crius] [--json F] [--dump F.csv]\n"
                "  Calibrates the analytic estimator on the measured plans of the profile (prof_database_est) and\n"
                "  reports its error: per plan (in-sample and 2-fold cross-validated by model configuration), best\n"
                "  plan against the Alpa-searched optimum (prof_database, not used for calibration), and the\n"
                "  data-parallel memory against dp_mem.json.\n");
    return 0;
  }
  std::printf("%s\n", tessel::build_summary().c_str());
  std::string const profile_path = args.require("profile");
  std::string const cluster_path = args.get("cluster", "crius");
  std::string const json_path = args.get("json", "");
  std::string const dump_path = args.get("dump", "");
  args.finish();
  tessel::require_distinct_files({{"--profile", profile_path}, {"--cluster", cluster_path}},
                                 {{"--json", json_path}, {"--dump", dump_path}});
  tessel::require_writable(json_path);
  tessel::require_writable(dump_path);
  Cluster const cluster = load_cluster(cluster_path);
  ProfileTable const table = load_profile(profile_path);

  Estimator est(cluster);
  auto const &cal = est.calibrate(table);
  print_calibration(cluster, cal);
  EstimateReport rep;
  add_plan_errors(rep, cluster, table, dump_path);
  add_best_plan_errors(rep, cluster, table, est);
  add_memory_errors(rep, cluster, table, est);
  print_report(rep);
  if (!json_path.empty())
    write_report(json_path, profile_path, cal.plans_used, rep);
  return 0;
}

int cells_command(tessel::CommandLine &args) {
  if (args.flag("help")) {
    std::printf(
        "usage: tessel-sched cells --model M --batch B --gpu TYPE --gpus N [--cluster F|crius] [--profile F|DIR]\n"
        "                          [--strategy minimal|uniform|greedy|all]\n"
        "  Lists the Cells (node layout x pipeline stages) of the job on N GPUs of TYPE and, per Cell, the\n"
        "  pruned parallel plans with their estimated iteration time and memory.\n");
    return 0;
  }
  std::string const model_name = args.require("model");
  int const batch = args.require_int("batch", 1, 1 << 24);
  std::string const gpu = args.require("gpu");
  int const gpus = args.require_int("gpus", 1, 1 << 20);
  std::string const cluster_path = args.get("cluster", "crius");
  std::string const profile_path = args.get("profile", "");
  std::string const strategy_arg = args.get("strategy", "all");
  args.finish();
  Cluster const cluster = load_cluster(cluster_path);
  int const model = ModelCatalog::builtin().find(model_name);
  TESSEL_REQUIRE_USAGE(model >= 0, "option --model: unknown model '", model_name, "'");
  int const type = cluster.find_type(gpu);
  TESSEL_REQUIRE_USAGE(type >= 0, "option --gpu: the cluster has no type '", gpu, "'");
  TESSEL_REQUIRE_USAGE((gpus & (gpus - 1)) == 0, "option --gpus expects a power of two, got ", gpus);
  Estimator est(cluster);
  if (!profile_path.empty())
    est.calibrate(load_profile(profile_path));
  std::vector<PlanStrategy> const strategies = parse_strategies(strategy_arg);
  auto const cells = enumerate_cells(model, batch, type, gpus, cluster.type_capacity(type));
  std::printf("%s, batch %d, %d x %s: %zu Cells\n", model_name.c_str(), batch, gpus, gpu.c_str(), cells.size());
  print_cells(est, cells, strategies);
  return 0;
}

} // namespace tessel::sched::app

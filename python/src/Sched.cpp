// tessel._tessel.sched: clusters, traces and profile tables loaded by the C++ loaders, the trace-driven simulator
// (the same calls as `tessel-sched simulate`) and the plan estimator, with results as plain Python objects.
#include "Bindings.hpp"
#include "Runtime.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/sched/Cell.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Model.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/Simulator.hpp>
#include <tessel/sched/Throughput.hpp>
#include <tessel/sched/Trace.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

namespace tessel::python {

namespace {

using namespace tessel::sched;

int model_index(std::string const &name) {
  auto const &catalog = ModelCatalog::builtin();
  int const m = catalog.find(name);
  if (m >= 0)
    return m;
  std::string known;
  for (int i = 0; i < catalog.size(); ++i)
    known += (i ? ", " : "") + catalog[i].name();
  throw nb::value_error(("unknown model '" + name + "' (known: " + known + ")").c_str());
}

int gpu_index(Cluster const &cluster, std::string const &name) {
  int const t = cluster.find_type(name);
  if (t >= 0)
    return t;
  std::string known;
  for (int i = 0; i < cluster.num_types(); ++i)
    known += (i ? ", " : "") + cluster.type(i).name;
  throw nb::value_error(("GPU type '" + name + "' is not in the cluster (its types: " + known + ")").c_str());
}

PlanStrategy parse_strategy(std::string const &name) {
  for (auto s : {PlanStrategy::minimal, PlanStrategy::uniform, PlanStrategy::greedy})
    if (name == strategy_name(s))
      return s;
  throw nb::value_error(("unknown plan strategy '" + name + "' (expected minimal, uniform or greedy)").c_str());
}

nb::dict gpu_dict(GpuSpec const &g) {
  nb::dict d;
  d["name"] = g.name;
  d["memory_gb"] = g.memory_gb;
  d["peak_tflops"] = g.peak_tflops;
  d["mem_bandwidth_gbps"] = g.mem_bandwidth_gbps;
  d["intra_node_gbps"] = g.intra_node_gbps;
  d["inter_node_gbps"] = g.inter_node_gbps;
  return d;
}

nb::list trace_jobs(Trace const &trace) {
  auto const &catalog = ModelCatalog::builtin();
  nb::list jobs;
  for (auto const &j : trace.jobs) {
    nb::dict d;
    d["id"] = j.id;
    d["submit_time"] = j.submit_time;
    d["iterations"] = j.iterations;
    d["model"] = j.model >= 0 ? catalog[j.model].name() : std::string();
    d["batch_size"] = j.batch_size;
    d["num_gpus"] = j.num_gpus;
    d["gpu_type"] = j.gpu_type >= 0 && j.gpu_type < static_cast<int>(trace.type_names.size())
                        ? trace.type_names[static_cast<std::size_t>(j.gpu_type)]
                        : std::string();
    d["deadline"] = j.deadline;
    jobs.append(d);
  }
  return jobs;
}

nb::dict estimate_dict(PlanEstimate const &e) {
  nb::dict d;
  d["comp"] = e.comp;
  d["intra"] = e.intra;
  d["inter"] = e.inter;
  d["e2e"] = e.e2e;
  d["tp_comm"] = e.tp_comm;
  d["dp_sync"] = e.dp_sync;
  d["memory_gb"] = e.memory_gb;
  d["fits"] = e.fits;
  d["valid"] = e.valid;
  d["why"] = e.why;
  return d;
}

nb::dict plan_dict(ParallelPlan const &p) {
  nb::dict d;
  nb::list stages;
  for (auto const &s : p.stages)
    stages.append(nb::make_tuple(s.dp, s.tp));
  d["stages"] = stages;
  d["micro_batches"] = p.micro_batches;
  d["key"] = p.key();
  return d;
}

nb::dict cell_dict(Cluster const &cluster, Cell const &c) {
  nb::dict d;
  d["model"] = c.model >= 0 ? ModelCatalog::builtin()[c.model].name() : std::string();
  d["batch_size"] = c.batch_size;
  d["gpu_type"] = c.gpu_type >= 0 ? cluster.type(c.gpu_type).name : std::string();
  d["hosts"] = c.hosts;
  d["per_host"] = c.per_host;
  d["stages"] = c.stages;
  d["num_gpus"] = c.num_gpus();
  return d;
}

Estimator make_estimator(Cluster const &cluster, ProfileTable const *profile) {
  Estimator est(cluster);
  if (profile != nullptr && !profile->empty())
    est.calibrate(*profile);
  return est;
}

nb::dict simulate(Cluster const &cluster, Trace const &trace, ProfileTable const *profile, std::string const &policy,
                  std::optional<std::string> const &source_arg, double interval, int max_rounds, bool arena_compat,
                  std::optional<double> iteration_divisor, std::uint64_t seed, double node_mtbf_hours,
                  int node_repair_rounds, double job_mtbf_hours, double checkpoint_interval, double start_latency,
                  bool check_invariants, int crius_search_depth, int crius_upgrade_steps, int crius_restart_trials) {
  // The choices and defaults of `tessel-sched simulate` (apps/sched/Simulate.cpp).
  std::string const source_name_arg = source_arg.value_or(profile ? "table" : "estimator");
  ThroughputSource source = ThroughputSource::table;
  TESSEL_REQUIRE_USAGE(parse_source(source_name_arg, source),
                       "source expects table, estimator or table+estimator, got '", source_name_arg, "'");
  TESSEL_REQUIRE_USAGE(source == ThroughputSource::estimator || profile != nullptr, "source ", source_name_arg,
                       " needs a profile");
  TESSEL_REQUIRE_USAGE(!(arena_compat && start_latency > 0),
                       "start_latency is a cost of exact accounting: it does not combine with arena_compat");
  SimOptions opt;
  opt.interval = interval;
  opt.max_rounds = max_rounds;
  opt.arena_compat = arena_compat;
  opt.iteration_divisor = iteration_divisor.value_or(arena_compat ? 5 : 1);
  opt.seed = seed;
  opt.node_mtbf_hours = node_mtbf_hours;
  opt.node_repair_rounds = node_repair_rounds;
  opt.job_mtbf_hours = job_mtbf_hours;
  opt.checkpoint_interval = checkpoint_interval;
  opt.start_latency = start_latency;
  opt.check_invariants = check_invariants;
  // Ctrl-C is looked at every round.
  opt.progress = [](int, int, int, int) { check_signals(); };
  PolicyOptions popt;
  popt.crius_search_depth = crius_search_depth;
  popt.crius_upgrade_steps = crius_upgrade_steps;
  popt.crius_restart_trials = crius_restart_trials;
  SimResult r;
  {
    nb::gil_scoped_release unlocked;
    Estimator const estimator = make_estimator(cluster, profile);
    r = sched::simulate(cluster, trace, profile, &estimator, source, policy, opt, popt);
  }
  auto const &m = r.metrics;
  nb::dict metrics;
  metrics["submitted"] = m.submitted;
  metrics["completed"] = m.completed;
  metrics["rejected"] = m.rejected;
  metrics["unfinished"] = m.unfinished;
  metrics["avg_jct"] = m.avg_jct;
  metrics["p50_jct"] = m.p50_jct;
  metrics["p99_jct"] = m.p99_jct;
  metrics["makespan"] = m.makespan;
  metrics["avg_queue"] = m.avg_queue;
  metrics["avg_throughput"] = m.avg_throughput;
  metrics["peak_throughput"] = m.peak_throughput;
  metrics["reschedules"] = m.reschedules;
  metrics["failures"] = m.failures;
  metrics["rounds"] = m.rounds;
  metrics["sched_seconds"] = m.sched_seconds;
  metrics["sched_ms_per_round"] = m.sched_ms_per_round;
  metrics["sched_ms_max"] = m.sched_ms_max;
  metrics["wall_seconds"] = m.wall_seconds;
  metrics["oracle_lookups"] = r.oracle_lookups;
  metrics["oracle_computed"] = r.oracle_computed;
  metrics["end_reason"] = r.end_reason; // why the run ended (every job ended, the round limit, no progress)
  nb::dict utilization;
  for (std::size_t t = 0; t < m.utilization.size(); ++t)
    utilization[cluster.type(static_cast<int>(t)).name.c_str()] = m.utilization[t];
  metrics["utilization"] = utilization;
  nb::list jobs;
  for (auto const &j : r.jobs) {
    nb::dict d;
    d["id"] = j.id;
    d["state"] = state_name(j.state);
    d["submit_time"] = j.submit_time;
    d["start_time"] = j.start_time;
    d["finish_time"] = j.finish_time;
    d["jct"] = j.jct;
    d["queue_time"] = j.queue_time;
    d["gpu_type"] = j.gpu_type >= 0 ? cluster.type(j.gpu_type).name : std::string();
    d["num_gpus"] = j.num_gpus;
    d["reschedules"] = j.reschedules;
    d["failures"] = j.failures;
    d["reject_reason"] = j.reject_reason;
    jobs.append(d);
  }
  nb::dict rounds;
  rounds["round_time"] = r.round_time;
  rounds["throughput"] = r.throughput;
  rounds["running"] = r.running;
  rounds["pending"] = r.pending;
  rounds["sched_ms"] = r.sched_ms;
  nb::dict out;
  out["policy"] = r.policy;
  out["metrics"] = metrics;
  out["jobs"] = jobs;
  out["rounds"] = rounds;
  out["stalls"] = r.stalls;
  out["throughput_source"] = source_name(source);
  return out;
}

} // namespace

void bind_sched(nb::module_ &m) {
  nb::class_<Cluster>(m, "Cluster", "Typed GPUs on nodes")
      .def_static(
          "load", [](std::string const &path) { return load_cluster(path); }, nb::arg("path"),
          "Cluster from HDF5 or CSV, or 'crius' for Crius's simulated 1,280-GPU cluster")
      .def_static(
          "from_groups",
          [](std::vector<std::pair<std::string, std::pair<int, int>>> const &groups) {
            std::vector<GpuSpec> types;
            std::vector<NodeGroup> node_groups;
            for (auto const &[name, shape] : groups) {
              int t = -1;
              for (std::size_t i = 0; i < types.size(); ++i)
                if (types[i].name == name)
                  t = static_cast<int>(i);
              if (t < 0) {
                types.push_back(Cluster::known_gpu(name));
                t = static_cast<int>(types.size()) - 1;
              }
              node_groups.push_back(NodeGroup{t, shape.first, shape.second});
            }
            return Cluster(types, node_groups);
          },
          nb::arg("groups"), "From [(gpu_type, (num_nodes, gpus_per_node)), ...] with the known specs of each type")
      .def_prop_ro("num_nodes", &Cluster::num_nodes)
      .def_prop_ro("num_gpus", &Cluster::num_gpus)
      .def_prop_ro("types",
                   [](Cluster const &c) {
                     nb::list l;
                     for (auto const &t : c.types())
                       l.append(gpu_dict(t));
                     return l;
                   })
      .def_prop_ro("groups",
                   [](Cluster const &c) {
                     nb::list l;
                     for (auto const &g : c.groups()) {
                       nb::dict d;
                       d["gpu_type"] = c.type(g.gpu_type).name;
                       d["num_nodes"] = g.num_nodes;
                       d["gpus_per_node"] = g.gpus_per_node;
                       l.append(d);
                     }
                     return l;
                   })
      .def(
          "type_gpus", [](Cluster const &c, std::string const &name) { return c.type_gpus(gpu_index(c, name)); },
          nb::arg("gpu_type"));

  nb::class_<Trace>(m, "Trace", "Jobs as submitted")
      .def_static(
          "load",
          [](std::string const &path, Cluster const &cluster) {
            nb::gil_scoped_release unlocked;
            return load_trace(path, cluster);
          },
          nb::arg("path"), nb::arg("cluster"),
          "Crius CSV or tessel.sched.trace HDF5; GPU types resolved against the cluster")
      .def_prop_ro("jobs", &trace_jobs, "The jobs as dicts, in submission order")
      .def_prop_ro("source", [](Trace const &t) { return t.source; })
      .def("__len__", [](Trace const &t) { return t.jobs.size(); });

  nb::class_<ProfileTable>(m, "ProfileTable", "Measured iteration times (Crius/Arena profile tables)")
      .def_static(
          "load",
          [](std::string const &path) {
            nb::gil_scoped_release unlocked;
            return load_profile(path);
          },
          nb::arg("path"), "HDF5 (tessel.sched.profile) or a folder of Crius's files")
      .def_prop_ro("entries",
                   [](ProfileTable const &t) {
                     auto const &catalog = ModelCatalog::builtin();
                     nb::list l;
                     for (auto const &e : t.entries()) {
                       nb::dict d;
                       d["model"] = e.model >= 0 ? catalog[e.model].name() : std::string();
                       d["batch_size"] = e.batch_size;
                       d["gpu"] = e.gpu;
                       d["hosts"] = e.hosts;
                       d["per_host"] = e.per_host;
                       d["iter_time"] = e.iter_time;
                       l.append(d);
                     }
                     return l;
                   })
      .def_prop_ro("skipped", [](ProfileTable const &t) { return t.skipped; })
      .def("__len__", [](ProfileTable const &t) { return t.entries().size(); });

  m.def("policy_names", &policy_names);
  m.def(
      "model_names",
      []() {
        std::vector<std::string> names;
        for (int i = 0; i < ModelCatalog::builtin().size(); ++i)
          names.push_back(ModelCatalog::builtin()[i].name());
        return names;
      },
      "The models traces may name (\"<family>__<size>\")");
  m.def("simulate", &simulate, nb::arg("cluster"), nb::arg("trace"), nb::arg("profile").none() = nb::none(),
        nb::arg("policy") = "crius", nb::arg("source") = nb::none(), nb::arg("interval") = 300.0,
        nb::arg("max_rounds") = 0, nb::arg("arena_compat") = false, nb::arg("iteration_divisor") = nb::none(),
        nb::arg("seed") = 1, nb::arg("node_mtbf_hours") = 0.0, nb::arg("node_repair_rounds") = 6,
        nb::arg("job_mtbf_hours") = 0.0, nb::arg("checkpoint_interval") = 1800.0, nb::arg("start_latency") = 0.0,
        nb::arg("check_invariants") = false, nb::arg("crius_search_depth") = 0, nb::arg("crius_upgrade_steps") = 10,
        nb::arg("crius_restart_trials") = 100,
        "One policy on a trace, as `tessel-sched simulate` runs it; returns metrics, jobs and per-round series");
  m.def(
      "estimate",
      [](Cluster const &cluster, std::string const &model, int batch_size, std::string const &gpu_type, int hosts,
         int per_host, std::vector<std::pair<int, int>> const &stages, int micro_batches, ProfileTable const *profile) {
        Estimator const est = make_estimator(cluster, profile);
        Cell cell;
        cell.model = model_index(model);
        cell.batch_size = batch_size;
        cell.gpu_type = gpu_index(cluster, gpu_type);
        cell.hosts = hosts;
        cell.per_host = per_host;
        cell.stages = static_cast<int>(stages.size());
        ParallelPlan plan;
        for (auto const &[dp, tp] : stages)
          plan.stages.push_back(StageShape{dp, tp});
        plan.micro_batches = micro_batches;
        return estimate_dict(est.estimate(cell, plan));
      },
      nb::arg("cluster"), nb::arg("model"), nb::arg("batch_size"), nb::arg("gpu_type"), nb::arg("hosts"),
      nb::arg("per_host"), nb::arg("stages"), nb::arg("micro_batches") = 1, nb::arg("profile").none() = nb::none(),
      "Iteration time and memory of one plan ([(dp, tp) per stage]) on hosts x per_host GPUs");
  m.def(
      "best",
      [](Cluster const &cluster, std::string const &model, int batch_size, std::string const &gpu_type, int hosts,
         int per_host, std::string const &strategy, ProfileTable const *profile) {
        Estimator const est = make_estimator(cluster, profile);
        auto const b = est.best(model_index(model), batch_size, gpu_index(cluster, gpu_type), hosts, per_host,
                                parse_strategy(strategy));
        nb::dict d;
        d["feasible"] = b.feasible;
        d["cell"] = cell_dict(cluster, b.cell);
        d["plan"] = plan_dict(b.plan);
        d["estimate"] = estimate_dict(b.estimate);
        d["plans_considered"] = b.plans_considered;
        d["strategy"] = strategy;
        return d;
      },
      nb::arg("cluster"), nb::arg("model"), nb::arg("batch_size"), nb::arg("gpu_type"), nb::arg("hosts"),
      nb::arg("per_host"), nb::arg("strategy") = "greedy", nb::arg("profile").none() = nb::none(),
      "The best plan over the Cells of one allocation (every stage count) under a strategy");
  m.def(
      "cells",
      [](Cluster const &cluster, std::string const &model, int batch_size, std::string const &gpu_type, int num_gpus,
         std::vector<std::string> const &strategies, ProfileTable const *profile) {
        int const type = gpu_index(cluster, gpu_type);
        if (num_gpus < 1 || (num_gpus & (num_gpus - 1)) != 0)
          throw nb::value_error(("num_gpus must be a power of two, got " + std::to_string(num_gpus)).c_str());
        std::vector<PlanStrategy> chosen;
        for (auto const &s : strategies)
          chosen.push_back(parse_strategy(s));
        Estimator const est = make_estimator(cluster, profile);
        nb::list cells;
        for (auto const &cell :
             enumerate_cells(model_index(model), batch_size, type, num_gpus, cluster.type_capacity(type))) {
          nb::dict c = cell_dict(cluster, cell);
          nb::list plans;
          for (auto s : chosen)
            for (auto const &p : est.enumerate_plans(cell, s)) {
              nb::dict d = plan_dict(p);
              d["strategy"] = strategy_name(s);
              d["estimate"] = estimate_dict(est.estimate(cell, p));
              plans.append(d);
            }
          c["plans"] = plans;
          cells.append(c);
        }
        return cells;
      },
      nb::arg("cluster"), nb::arg("model"), nb::arg("batch_size"), nb::arg("gpu_type"), nb::arg("num_gpus"),
      nb::arg("strategies"), nb::arg("profile").none() = nb::none(),
      "The Cells of a job on num_gpus GPUs of a type and, per Cell and strategy, the pruned plans with their "
      "estimates (`tessel-sched cells`)");
  m.def(
      "node_layouts",
      [](Cluster const &cluster, std::string const &gpu_type, int num_gpus) {
        int const t = gpu_index(cluster, gpu_type);
        int const cap = cluster.type_capacity(t);
        std::vector<std::pair<int, int>> layouts;
        for (int per_host = 1; per_host <= cap && per_host <= num_gpus; per_host *= 2)
          if (num_gpus % per_host == 0)
            layouts.emplace_back(num_gpus / per_host, per_host);
        return layouts;
      },
      nb::arg("cluster"), nb::arg("gpu_type"), nb::arg("num_gpus"),
      "(hosts, per_host) layouts of num_gpus GPUs of a type: per_host a power of two up to the node size");
}

} // namespace tessel::python

// tessel-sched-data: converters to the sched package's HDF5 schemas (datasets/sched/README.md) and a generator of
// synthetic traces.
//
//   tessel-sched-data crius-trace IN.csv OUT.h5 [--cluster F|crius]
//   tessel-sched-data elasticflow-trace IN.csv OUT.h5|.csv [--profile DIR|F] [--cluster F|crius] [--seed S]
//                     [--keep-gpus] [--from SECONDS] [--sample N]
//   tessel-sched-data profile DIR|F OUT.h5
//   tessel-sched-data cluster (crius | IN.csv | IN.h5 | --crius-spec F [--device-infos F]) OUT.h5|.csv
//   tessel-sched-data synth OUT.h5|.csv [--jobs N] [--rate JOBS_PER_HOUR] [--seed S] [--median-hours H]
//                     [--sigma S] [--gpt-share X] [--cluster F|crius] [--profile DIR|F]

#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/Synthetic.hpp>
#include <tessel/sched/Throughput.hpp>
#include <tessel/sched/Trace.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace tessel::sched;

struct Options {
  std::vector<std::string> positional;
  std::map<std::string, std::string> named;
  std::map<std::string, bool> used;

  Options(int argc, char **argv) {
    for (int i = 0; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) == 0) {
        a = a.substr(2);
        auto const eq = a.find('=');
        if (eq != std::string::npos)
          named[a.substr(0, eq)] = a.substr(eq + 1);
        else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0 && a != "keep-gpus")
          named[a] = argv[++i];
        else
          named[a] = "";
      } else {
        positional.push_back(a);
      }
    }
  }
  std::string get(std::string const &k, std::string const &fallback) {
    used[k] = true;
    auto const it = named.find(k);
    return it == named.end() ? fallback : it->second;
  }
  bool flag(std::string const &k) {
    used[k] = true;
    return named.count(k) > 0;
  }
  double number(std::string const &k, double fallback) {
    std::string const v = get(k, "");
    if (v.empty())
      return fallback;
    char *end = nullptr;
    double const d = std::strtod(v.c_str(), &end);
    TESSEL_REQUIRE(end && *end == '\0', "--", k, " expects a number, got '", v, "'");
    return d;
  }
  void finish(std::size_t positional_count) const {
    TESSEL_REQUIRE(positional.size() == positional_count, "expected ", positional_count, " file argument",
                   positional_count == 1 ? "" : "s", ", got ", positional.size());
    for (auto const &kv : named)
      TESSEL_REQUIRE(used.count(kv.first), "unknown option --", kv.first);
  }
};

bool is_h5(std::string const &p) {
  return (p.size() > 3 && p.compare(p.size() - 3, 3, ".h5") == 0) ||
         (p.size() > 5 && p.compare(p.size() - 5, 5, ".hdf5") == 0);
}

void write_trace(Trace const &trace, std::string const &out) {
  if (is_h5(out))
    save_trace(trace, out);
  else
    save_trace_csv(trace, out);
  std::printf("wrote %zu jobs to %s\n", trace.jobs.size(), out.c_str());
}

void usage() {
  std::printf(
      "usage: tessel-sched-data <command> ...\n"
      "  crius-trace IN.csv OUT.h5 [--cluster F|crius]          Crius trace CSV -> tessel.sched.trace\n"
      "  elasticflow-trace IN.csv OUT.h5|.csv [--profile DIR|F] [--cluster F|crius] [--seed S] [--keep-gpus]\n"
      "                    [--from SECONDS] [--sample N]        ElasticFlow trace, jobs regenerated as Arena does\n"
      "  profile DIR|F OUT.h5                                   Crius profile tables -> tessel.sched.profile\n"
      "  cluster crius|IN.csv|IN.h5|--crius-spec F [--device-infos F] OUT.h5|.csv\n"
      "                                                         cluster spec -> tessel.sched.cluster (or CSV)\n"
      "  synth OUT.h5|.csv [--jobs N] [--rate JOBS_PER_HOUR] [--seed S] [--median-hours H] [--sigma S]\n"
      "        [--gpt-share X] [--cluster F|crius] [--profile DIR|F]  synthetic trace (Arena's job mix)\n");
}

int run(std::string const &cmd, Options &o) {
  if (cmd == "crius-trace") {
    std::string const cluster_path = o.get("cluster", "crius");
    o.finish(2);
    Cluster const cluster = load_cluster(cluster_path);
    Trace trace = load_trace(o.positional[0], cluster);
    trace.source = o.positional[0] + " (Crius trace CSV)";
    save_trace(trace, o.positional[1]);
    std::printf("wrote %zu jobs to %s\n", trace.jobs.size(), o.positional[1].c_str());
    return 0;
  }
  if (cmd == "profile") {
    o.finish(2);
    ProfileTable const table = load_profile(o.positional[0]);
    save_profile(table, o.positional[1], o.positional[0] + " (Crius profile tables)");
    std::printf("wrote %zu best-plan entries, %zu plan records, %zu DP-memory rows to %s (%zu source rows skipped)\n",
                table.entries().size(), table.plans().size(), table.dp_memory().size(), o.positional[1].c_str(),
                table.skipped.size());
    return 0;
  }
  if (cmd == "cluster") {
    std::string const spec = o.get("crius-spec", "");
    std::string const infos = o.get("device-infos", "");
    o.finish(spec.empty() ? 2 : 1);
    Cluster const cluster = spec.empty() ? load_cluster(o.positional[0]) : load_crius_cluster_spec(spec, infos);
    std::string const &out = o.positional.back();
    if (is_h5(out))
      save_cluster(cluster, out, spec.empty() ? o.positional[0] : spec);
    else
      save_cluster_csv(cluster, out);
    std::printf("wrote %d nodes, %d GPUs to %s\n", cluster.num_nodes(), cluster.num_gpus(), out.c_str());
    return 0;
  }
  if (cmd == "elasticflow-trace" || cmd == "synth") {
    std::string const cluster_path = o.get("cluster", "crius");
    std::string const profile_path = o.get("profile", "");
    auto const seed = static_cast<std::uint64_t>(o.number("seed", 1));
    Cluster const cluster = load_cluster(cluster_path);
    std::unique_ptr<ProfileTable> table;
    Estimator estimator(cluster);
    if (!profile_path.empty()) {
      table = std::make_unique<ProfileTable>(load_profile(profile_path));
      estimator.calibrate(*table);
    }
    ThroughputOracle const oracle(cluster, table.get(), &estimator,
                                  table ? ThroughputSource::table : ThroughputSource::estimator);
    if (cmd == "elasticflow-trace") {
      bool const keep = o.flag("keep-gpus");
      double const from = o.number("from", 0);
      int const sample = static_cast<int>(o.number("sample", 1));
      o.finish(2);
      write_trace(convert_elasticflow_trace(o.positional[0], cluster, oracle, seed, keep, from, sample),
                  o.positional[1]);
      return 0;
    }
    SyntheticOptions s;
    s.seed = seed;
    s.jobs = static_cast<int>(o.number("jobs", 100));
    s.jobs_per_hour = o.number("rate", 10);
    s.median_hours = o.number("median-hours", 1);
    s.sigma = o.number("sigma", 1);
    s.gpt_share = o.number("gpt-share", 0);
    o.finish(1);
    write_trace(generate_trace(cluster, oracle, s), o.positional[0]);
    return 0;
  }
  std::fprintf(stderr, "tessel-sched-data: unknown command '%s'\n", cmd.c_str());
  usage();
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  tessel::ScopeGuard guard(argc, argv);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::string const cmd = argv[1];
  try {
    Options o(argc - 2, argv + 2);
    return run(cmd, o);
  } catch (std::exception const &e) {
    std::fprintf(stderr, "tessel-sched-data %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}

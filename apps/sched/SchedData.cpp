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
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace tessel::sched;

/// The \p count file arguments of a sub-command, after every option was read (unknown ones fail first).
std::vector<std::string> files(tessel::CommandLine &o, std::size_t count) {
  std::vector<std::string> f = o.positionals();
  TESSEL_REQUIRE_USAGE(f.size() == count, "expected ", count, " file argument", count == 1 ? "" : "s", ", got ",
                       f.size());
  return f;
}

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
      "        [--gpt-share X] [--cluster F|crius] [--profile DIR|F]  synthetic trace (Arena's job mix)\n"
      "--debug (or TESSEL_DEBUG=1) adds source locations to errors; exit status: 0 success, 1 runtime error,\n"
      "2 invalid option or argument\n");
}

int run(std::string const &cmd, tessel::CommandLine &o) {
  if (cmd == "crius-trace") {
    std::string const cluster_path = o.get("cluster", "crius");
    auto const f = files(o, 2);
    tessel::require_distinct_files({{"IN.csv", f[0]}, {"--cluster", cluster_path}}, {{"OUT.h5", f[1]}});
    Cluster const cluster = load_cluster(cluster_path);
    Trace trace = load_trace(f[0], cluster);
    trace.source = f[0] + " (Crius trace CSV)";
    save_trace(trace, f[1]);
    std::printf("wrote %zu jobs to %s\n", trace.jobs.size(), f[1].c_str());
    return 0;
  }
  if (cmd == "profile") {
    auto const f = files(o, 2);
    tessel::require_distinct_files({{"DIR|F", f[0]}}, {{"OUT.h5", f[1]}});
    ProfileTable const table = load_profile(f[0]);
    save_profile(table, f[1], f[0] + " (Crius profile tables)");
    std::printf("wrote %zu best-plan entries, %zu plan records, %zu DP-memory rows to %s (%zu source rows skipped)\n",
                table.entries().size(), table.plans().size(), table.dp_memory().size(), f[1].c_str(),
                table.skipped.size());
    return 0;
  }
  if (cmd == "cluster") {
    std::string const spec = o.get("crius-spec", "");
    std::string const infos = o.get("device-infos", "");
    auto const f = files(o, spec.empty() ? 2 : 1);
    tessel::require_distinct_files(
        {{"--crius-spec", spec}, {"--device-infos", infos}, {"IN", spec.empty() ? f[0] : ""}}, {{"OUT", f.back()}});
    Cluster const cluster = spec.empty() ? load_cluster(f[0]) : load_crius_cluster_spec(spec, infos);
    std::string const &out = f.back();
    if (is_h5(out))
      save_cluster(cluster, out, spec.empty() ? f[0] : spec);
    else
      save_cluster_csv(cluster, out);
    std::printf("wrote %d nodes, %d GPUs to %s\n", cluster.num_nodes(), cluster.num_gpus(), out.c_str());
    return 0;
  }
  if (cmd == "elasticflow-trace" || cmd == "synth") {
    std::string const cluster_path = o.get("cluster", "crius");
    std::string const profile_path = o.get("profile", "");
    auto const seed = o.get_int<std::uint64_t>("seed", 1, 0, UINT64_MAX);
    // Every option is read before any file is, so that a bad value is reported as such.
    bool const keep = o.flag("keep-gpus");
    double const from = o.get_double("from", 0, tessel::Range::closed(0, 1e9));
    int const sample = o.get_int("sample", 1, 1, 1000000);
    SyntheticOptions s;
    s.seed = seed;
    s.jobs = o.get_int("jobs", 100, 1, 1000000);
    s.jobs_per_hour = o.get_double("rate", 10, tessel::Range::positive(1e6));
    s.median_hours = o.get_double("median-hours", 1, tessel::Range::positive(1e5));
    s.sigma = o.get_double("sigma", 1, tessel::Range::closed(0, 10));
    s.gpt_share = o.get_double("gpt-share", 0, tessel::Range::closed(0, 1));
    TESSEL_REQUIRE_USAGE(cmd == "synth" || !(o.has("jobs") || o.has("rate") || o.has("median-hours") ||
                                             o.has("sigma") || o.has("gpt-share")),
                         "--jobs, --rate, --median-hours, --sigma and --gpt-share are options of synth");
    TESSEL_REQUIRE_USAGE(cmd != "synth" || !(keep || o.has("from") || o.has("sample")),
                         "--keep-gpus, --from and --sample are options of elasticflow-trace");
    auto const f = files(o, cmd == "synth" ? 1 : 2);
    tessel::require_distinct_files(
        {{"--cluster", cluster_path}, {"--profile", profile_path}, {"IN.csv", cmd == "synth" ? "" : f[0]}},
        {{"OUT", f.back()}});
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
      write_trace(convert_elasticflow_trace(f[0], cluster, oracle, seed, keep, from, sample), f[1]);
      return 0;
    }
    write_trace(generate_trace(cluster, oracle, s), f[0]);
    return 0;
  }
  TESSEL_REQUIRE_USAGE(false, "unknown command '", cmd, "' (see --help)");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-sched-data", argc, argv, [](tessel::CommandLine &o) {
    std::string const cmd = o.subcommand();
    if (cmd.empty()) {
      bool const help = o.flag({"help", 'h'});
      usage();
      TESSEL_REQUIRE_USAGE(help, "no command given");
      return 0;
    }
    return run(cmd, o);
  });
}

// tessel-moe: runs an MoE layer stored in an HDF5 file (schema tessel.moe.layer) under its three schedules on
// W = EP x TP ranks, on an emulated link whose bandwidth is calibrated so that communication is a chosen share of
// the sequential layer, and reports per schedule the median layer time, the communication and computation
// alone, the hidden-communication fraction (T_sequential - T) / T_comm and, with --verify, the error against the
// dense single-process reference.
//
//   mpiexec -n 2 tessel-moe layer.h5 --verify --json moe.json
#include <tessel/moe/Calibration.hpp>
#include <tessel/moe/MoeFile.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>

#include <tessel/core/CommandLine.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/PacedCommunicator.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Tool.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace tessel::moe;
using tessel::Communicator;

struct Options {
  std::string file;
  std::vector<Schedule> schedules{Schedule::sequential, Schedule::pipelined, Schedule::comet};
  int ep = 0, tp = 1;
  int iters = 5, warmup = 1, chunks = 4;
  double share = 0.47;
  double bandwidth_mbps = 0.0; // fixed link instead of calibration
  double latency_us = 10.0;
  bool emulate = true;
  bool verify = false;
  bool tune = false;
  std::string registry = "moe/tuning/host.registry";
  std::string tuning;
  std::string json;
  double timeout_s = 0.0;
  bool stats = false;
  bool verbose = false;
};

void usage() {
  std::printf(
      "usage: mpiexec -n W tessel-moe FILE [options]\n"
      "Runs the MoE layer in FILE (an HDF5 file of schema tessel.moe.layer, see datasets/moe/README.md; written by\n"
      "tessel-moe-gen) on W ranks: each rank takes T / W of the file's T tokens.\n"
      "  --schedule S      all (default), sequential, pipelined or comet (comma-separated list allowed)\n"
      "  --ep E --tp T     expert- and tensor-parallel sizes, E x T = W (default: EP = W, TP = 1)\n"
      "  --iters N         timed runs per schedule, median reported (default 5); --warmup N (default 1)\n"
      "  --chunks C        token chunks of the pipelined schedule (default 4)\n"
      "  --comm-share S    calibrate the emulated link so communication is the share S of the sequential layer\n"
      "                    (default 0.47, COMET's measurement on 8 x H800)\n"
      "  --bandwidth MB/s  emulate a link of this bandwidth instead of calibrating\n"
      "  --latency US      emulated latency per message in microseconds (default 10)\n"
      "  --no-emulation    plain MPI, no link emulation\n"
      "  --verify          compare every schedule with the dense single-process reference (double precision)\n"
      "  --tune            measure comet parameter candidates (--iters runs each) and merge the best into\n"
      "                    --registry FILE\n"
      "  --registry FILE   registry written by --tune (default moe/tuning/host.registry)\n"
      "  --tuning FILE     use this registry's entries (over the built-in one) for the comet parameters\n"
      "  --timeout SEC     communication timeout (default: TESSEL_COMM_TIMEOUT or 120 s)\n"
      "  --json FILE       write the results as JSON\n"
      "  --stats           print each rank's phase times of the last run of every schedule\n"
      "  --verbose         also print Kokkos' configuration\n"
      "  --version         print the version and exit; --help this text\n"
      "  --debug           add source locations to error messages (or TESSEL_DEBUG=1)\n"
      "Kokkos options (--kokkos-help) are accepted too.\n"
      "exit status: 0 success, 1 runtime error or failed verification, 2 invalid option or argument\n");
}

Options parse(tessel::CommandLine &cl) {
  Options o;
  auto const schedules = cl.get_list("schedule", {"all"});
  if (schedules != std::vector<std::string>{"all"}) {
    o.schedules.clear();
    for (auto const &item : schedules)
      o.schedules.push_back(tessel::CommandLine::parse_value("--schedule", item, parse_schedule));
  }
  o.ep = cl.get_int("ep", o.ep, 0, 1 << 16);
  o.tp = cl.get_int("tp", o.tp, 1, 1 << 16);
  o.iters = cl.get_int("iters", o.iters, 1, 1000000);
  o.warmup = cl.get_int("warmup", o.warmup, 0, 1000000);
  o.chunks = cl.get_int("chunks", o.chunks, 1, 1 << 16);
  o.share = cl.get_double("comm-share", o.share, tessel::Range{0, 1, true, true});
  o.bandwidth_mbps = cl.get_double("bandwidth", o.bandwidth_mbps, tessel::Range::positive(1e9));
  o.latency_us = cl.get_double("latency", o.latency_us, tessel::Range::closed(0, 1e7));
  o.emulate = !cl.flag("no-emulation");
  // Link options that would silently do nothing are errors: each names the option that overrides it.
  TESSEL_REQUIRE_USAGE(o.emulate || (!cl.has("bandwidth") && !cl.has("latency") && !cl.has("comm-share")),
                       "--bandwidth, --latency and --comm-share describe the emulated link; --no-emulation has none");
  TESSEL_REQUIRE_USAGE(!(cl.has("bandwidth") && cl.has("comm-share")),
                       "--bandwidth fixes the link and --comm-share calibrates it: give one of them");
  o.verify = cl.flag("verify");
  o.tune = cl.flag("tune");
  o.registry = cl.get("registry", o.registry);
  o.tuning = cl.get("tuning", o.tuning);
  o.json = cl.get("json", o.json);
  o.verbose = cl.flag("verbose");
  o.stats = cl.flag("stats");
  o.timeout_s = cl.get_double("timeout", o.timeout_s, tessel::Range::closed(0.001, 1e6));
  TESSEL_REQUIRE_USAGE(!cl.has("registry") || o.tune, "--registry is where --tune writes; give --tune too");
  auto const files = cl.positionals();
  TESSEL_REQUIRE_USAGE(files.size() <= 1, "more than one input file given ('", files.size() > 1 ? files[0] : "",
                       "' and '", files.size() > 1 ? files[1] : "", "')");
  if (!files.empty())
    o.file = files[0];
  TESSEL_REQUIRE_USAGE(!o.file.empty(), "no input file given (see --help)");
  TESSEL_REQUIRE_USAGE(!o.schedules.empty(), "--schedule names no schedule");
  tessel::require_writable(o.json);
  if (o.tune)
    tessel::require_writable(o.registry);
  return o;
}

struct Row {
  Schedule schedule;
  double median = 0.0, max_rel_error = -1.0;
  std::int64_t routing_violations = 0;
};

int run(Options const &o) {
  auto const world = Communicator::world();
  int const w = world.size(), me = world.rank();
  auto const say = [&](std::string const &line) {
    if (me == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  say("tessel-moe " + tessel::build_summary());
  if (me == 0 && o.verbose)
    Kokkos::print_configuration(std::cout, false);

  // Loading may fail on some ranks only (a NaN in one rank's tokens): every rank learns it and stops, instead of
  // the others waiting for it in the first collective.
  std::unique_ptr<MoeFile> file_ptr;
  MoeConfig config;
  HostMatrix tokens;
  GateData gate_data;
  ExpertWeights weights;
  std::string load_error;
  tessel::require_same_file(world, "input file", o.file);
  try {
    file_ptr = std::make_unique<MoeFile>(o.file);
    auto const &info = file_ptr->info();
    TESSEL_REQUIRE(info.total_tokens % w == 0, o.file, ": ", info.total_tokens, " tokens cannot be split evenly over ",
                   w, " ranks (T % W must be 0)");
    config = info.config;
    config.tokens = info.total_tokens / w;
    config.tp = o.tp;
    config.ep = o.ep > 0 ? o.ep : w / std::max(o.tp, 1);
    config.validate(w);
    tokens = file_ptr->tokens(static_cast<std::int64_t>(me) * config.tokens, config.tokens);
    gate_data = file_ptr->gate(static_cast<std::int64_t>(me) * config.tokens, config.tokens);
    weights = file_ptr->shard(config, me);
  } catch (std::exception const &e) {
    load_error = e.what();
  }
  int const failed_ranks = world.allreduce_value(load_error.empty() ? 0 : 1, tessel::ReduceOp::sum);
  if (!load_error.empty())
    TESSEL_THROW(load_error);
  TESSEL_REQUIRE(failed_ranks == 0, failed_ranks, " other rank(s) could not load their input (see their messages)");
  auto &file = *file_ptr;
  auto const &info = file.info();
  {
    std::ostringstream os;
    os << "input " << o.file << ": " << (info.model.empty() ? "model ?" : info.model) << " (N, K scaled 1/"
       << info.scale << "), " << info.total_tokens << " tokens, gate "
       << (info.has_logits ? "logits" : (info.has_bias ? "weight + bias" : "weight"))
       << "\nlayer: " << config.describe() << " on " << w << " ranks";
    say(os.str());
  }
  auto const gate = gate_data.input();

  auto base = world.split(0, me);
  if (o.timeout_s > 0)
    base.set_timeout(tessel::Timeout(static_cast<std::int64_t>(o.timeout_s * 1000)));
  auto const comm =
      o.emulate ? tessel::make_paced_communicator(base, tessel::LinkModel{0.0, o.latency_us * 1e-6}) : base;
  TuningRegistry registry = TuningRegistry::builtin();
  if (!o.tuning.empty())
    registry.merge(TuningRegistry::load(o.tuning));
  LayerOptions options;
  options.pipeline_chunks = o.chunks;
  options.registry = &registry;
  MoeLayer layer(config, comm, std::move(weights), options);
  say("comet parameters: " + layer.comet_params().describe() + " (" + layer.comet_params_source() + ")");
  HostExecSpace space;

  Calibration cal;
  if (o.emulate) {
    if (o.bandwidth_mbps > 0) {
      tessel::paced_backend_of(comm)->set_link(tessel::LinkModel{o.bandwidth_mbps * 1e6, o.latency_us * 1e-6});
      say("link: " + std::to_string(o.bandwidth_mbps) + " MB/s, " + std::to_string(o.latency_us) + " us");
    } else {
      say("calibrating the emulated link to a communication share of " + std::to_string(o.share) + " ...");
      cal = calibrate_comm_share(space, layer, tokens, gate, o.share, o.latency_us * 1e-6, 3, say);
      std::ostringstream os;
      os << "link: " << cal.link.bandwidth / 1e6 << " MB/s, " << o.latency_us << " us latency";
      say(os.str());
    }
  }
  if (o.tune) {
    say("tuning the comet parameters ...");
    auto const result = tune_comet(space, layer, tokens, gate, o.iters, say);
    std::ostringstream note;
    note << (info.model.empty() ? o.file : info.model) << " W=" << w << ": comet " << 1e3 * result.best_seconds
         << " ms";
    if (me == 0) {
      TuningRegistry reg;
      if (std::ifstream(o.registry).good())
        reg = TuningRegistry::load(o.registry);
      reg.set(TuningKey::of(config), result.best, note.str());
      reg.save(o.registry);
    }
    say("tuned: " + result.best.describe() + " -> " + o.registry);
  }

  say("measuring communication alone and computation alone (" + std::to_string(o.iters) + " runs) ...");
  auto const alone = layer.measure_alone(space, tokens, gate, o.iters);
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::app_out"),
                 static_cast<std::size_t>(config.tokens), static_cast<std::size_t>(config.hidden));
  DenseWeights dense;
  if (o.verify)
    dense = file.dense_weights();
  std::vector<Row> rows;
  for (auto s : o.schedules) {
    say(std::string("timing ") + name_of(s) + " (" + std::to_string(o.warmup) + " warm-up + " +
        std::to_string(o.iters) + " runs) ...");
    Row row;
    row.schedule = s;
    row.median = time_schedule(space, layer, tokens, gate, out, s, o.iters, o.warmup);
    if (o.stats) {
      auto const &st = layer.stats();
      char line[512];
      std::snprintf(
          line, sizeof(line),
          "  [rank %d] %s: total %.2f ms; route %.2f, dispatch %.2f, experts %.2f, combine %.2f, reduce %.2f; "
          "compute busy %.2f, waiting %.2f; comm threads %.2f ms CPU; %lld expert rows",
          me, name_of(s), 1e3 * st.total, 1e3 * st.route, 1e3 * st.dispatch, 1e3 * st.experts, 1e3 * st.combine,
          1e3 * st.reduce, 1e3 * st.compute_busy, 1e3 * st.compute_wait, 1e3 * st.comm_cpu,
          static_cast<long long>(st.rows));
      std::vector<char> all(sizeof(line) * static_cast<std::size_t>(w));
      world.host_allgather(line, all.data(), sizeof(line));
      for (int r = 0; r < w; ++r)
        say(all.data() + sizeof(line) * static_cast<std::size_t>(r));
    }
    if (o.verify) {
      layer.forward(space, tokens, gate, out, s);
      auto const ref = reference_forward(config, tokens, gate, layer.routing().experts, dense);
      row.max_rel_error = world.allreduce_value(max_relative_error(out, ref.out), tessel::ReduceOp::max);
      row.routing_violations = world.allreduce_value(ref.routing_violations, tessel::ReduceOp::sum);
      if (ref.routing_violations > 0)
        std::fprintf(stderr, "[rank %d] routing check: %s\n", me, ref.first_violation.c_str());
    }
    rows.push_back(row);
  }
  double t_seq = -1.0;
  for (auto const &r : rows)
    if (r.schedule == Schedule::sequential)
      t_seq = r.median;
  // The hidden fraction divides by T_comm: it means something only when communication takes a measurable share
  // of the layer (not on one rank, or without emulation on a fast interconnect).
  bool const hidden_defined = t_seq > 0 && alone.comm > 0.01 * t_seq;
  auto const hidden = [&](double t) { return hidden_defined ? (t_seq - t) / alone.comm : 0.0; };

  if (me == 0) {
    std::printf("\nT_comm alone %.2f ms, T_comp alone %.2f ms (share %.2f)%s\n", 1e3 * alone.comm, 1e3 * alone.comp,
                alone.comm / (alone.comm + alone.comp), o.emulate ? "" : " (no link emulation)");
    std::printf("%-11s %12s %10s %10s %12s %14s\n", "schedule", "median (ms)", "speedup", "hidden", "max rel err",
                "routing check");
    for (auto const &r : rows) {
      std::printf("%-11s %12.2f %9.2fx", name_of(r.schedule), 1e3 * r.median, t_seq > 0 ? t_seq / r.median : 0.0);
      if (hidden_defined)
        std::printf(" %9.1f%%", 100 * hidden(r.median));
      else
        std::printf(" %10s", "n/a");
      if (o.verify)
        std::printf(" %12.2e %14s\n", r.max_rel_error, r.routing_violations == 0 ? "ok" : "VIOLATED");
      else
        std::printf(" %12s %14s\n", "-", "-");
    }
    // No schedule can beat computation alone; when one appears to, the runs were disturbed (other processes on
    // the cores) and the fractions above are not measurements of overlap.
    if (!hidden_defined)
      std::printf("note: communication alone (%.3f ms) is under 1%% of the sequential layer: there is nothing to "
                  "hide, so no hidden fraction is given\n",
                  1e3 * alone.comm);
    for (auto const &r : rows)
      if (r.median < alone.comp)
        std::printf("note: %s ran faster than computation alone (%.2f < %.2f ms): the timings were disturbed; rerun "
                    "with more --iters on a quiet machine\n",
                    name_of(r.schedule), 1e3 * r.median, 1e3 * alone.comp);
    if (!o.json.empty()) {
      tessel::OutputFile file(o.json);
      auto &js = file.stream();
      js << "{\n  \"app\": \"tessel-moe\",\n  \"build\": \"" << tessel::build_summary() << "\",\n  \"file\": \""
         << o.file << "\",\n  \"model\": \"" << info.model << "\",\n  \"config\": \"" << config.describe()
         << "\",\n  \"ranks\": " << w << ",\n  \"emulation\": " << (o.emulate ? "true" : "false")
         << ",\n  \"link_bandwidth_Bps\": "
         << tessel::LinkModel(o.emulate ? tessel::paced_backend_of(comm)->link() : tessel::LinkModel{}).bandwidth
         << ",\n  \"link_latency_s\": " << o.latency_us * 1e-6 << ",\n  \"t_comm_alone_s\": " << alone.comm
         << ",\n  \"t_comp_alone_s\": " << alone.comp << ",\n  \"comet_params\": \"" << layer.comet_params().describe()
         << "\",\n  \"schedules\": {\n";
      for (std::size_t i = 0; i < rows.size(); ++i) {
        auto const &r = rows[i];
        js << "    \"" << name_of(r.schedule) << "\": {\"median_s\": " << r.median << ", \"t_comm_s\": " << alone.comm
           << ", \"t_comp_s\": " << alone.comp << ", \"hidden_fraction\": ";
        if (hidden_defined)
          js << hidden(r.median);
        else
          js << "null";
        js << ", \"max_rel_error\": ";
        if (o.verify)
          js << r.max_rel_error;
        else
          js << "null";
        js << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
      }
      js << "  }\n}\n";
      file.commit();
      std::printf("results written to %s\n", o.json.c_str());
    }
  }
  int failed = 0;
  for (auto const &r : rows)
    if (o.verify && (r.max_rel_error > 1e-5 || r.routing_violations > 0))
      failed = 1;
  if (failed)
    say("verification FAILED: a schedule differs from the reference by more than 1e-5");
  return failed;
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-moe", argc, argv, [](tessel::CommandLine &cl) {
    if (cl.flag({"help", 'h'})) {
      usage();
      return 0;
    }
    if (cl.flag("version")) {
      std::printf("tessel-moe %s\n", tessel::build_summary().c_str());
      return 0;
    }
    return run(parse(cl));
  });
}

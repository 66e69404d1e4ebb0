// tessel-moe: runs an MoE layer stored in an HDF5 file (schema tessel.moe.layer) under its three schedules on
// W = EP x TP ranks, on an emulated link whose bandwidth is calibrated so that communication is a chosen share of
// the sequential layer, and reports per schedule the median layer time, the communication and computation
// alone, the hidden-communication fraction (T_sequential - T) / T_comm and, with --verify, the error against the
// dense single-process reference.
//
//   mpiexec -n 2 tessel-moe layer.h5 --verify --json moe.json
//
// tessel-moe train: trains a small model (embedding -> MoE layer -> linear head) on a teacher's data under each
// schedule and reports the loss curve, which is the same at every rank count and schedule.
#include <tessel/tools/moe/Harness.hpp>
#include <tessel/tools/moe/Train.hpp>

#include <tessel/moe/MoeFile.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Config.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/PacedCommunicator.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace tessel::moe;
using tessel::Communicator;

// How messages name the per-user cache that first-use tuning writes.
constexpr char const *tuning_cache_option = "the tuning cache (TESSEL_CACHE_DIR, XDG_CACHE_HOME or HOME)";

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
  std::string trace;
  double timeout_s = 0.0;
  double tune_budget_s = 3.0;
  bool stats = false;
  bool verbose = false;
};

void usage() {
  std::printf(
      "usage: mpiexec -n W tessel-moe FILE [options]\n"
      "       mpiexec -n W tessel-moe train [options]   (trains a small model: tessel-moe train --help)\n"
      "Runs the MoE layer in FILE (an HDF5 file of schema tessel.moe.layer, see datasets/moe/README.md; written by\n"
      "tessel-moe-gen) on W ranks: each rank takes T / W of the file's T tokens.\n"
      "  --schedule S      all (default), sequential, pipelined or comet (comma-separated list allowed)\n"
      "  --ep E --tp T     expert- and tensor-parallel sizes, E x T = W (default: EP = W, TP = 1)\n"
      "  --iters N         timed runs per schedule, median reported (default 5); --warmup N (default 1)\n"
      "  --chunks C        token chunks of the pipelined schedule (default 4)\n"
      "  --comm-share S    calibrate the emulated link so communication is the share S of the sequential layer,\n"
      "                    in (0, 0.95] (default 0.47, COMET's measurement on 8 x H800)\n"
      "  --bandwidth MB/s  emulate a link of this bandwidth instead of calibrating (one forward's dispatch must\n"
      "                    cross it within the communication timeout)\n"
      "  --latency US      emulated latency per message in microseconds (default 10)\n"
      "  --no-emulation    plain MPI, no link emulation\n"
      "  --verify          compare every schedule with the dense single-process reference (double precision)\n"
      "  --tune            measure comet parameter candidates (--iters runs each) and merge the best into\n"
      "                    --registry FILE\n"
      "  --registry FILE   registry written by --tune (default moe/tuning/host.registry)\n"
      "  --tuning FILE     use this registry's entries (over the built-in one) for the comet parameters\n"
      "  --tune-budget SEC time the first comet forward may spend tuning a shape no registry knows (default 3);\n"
      "                    the result is cached per user and machine (TESSEL_MOE_TUNE=off: no tuning, no cache)\n"
      "  --timeout SEC     communication timeout (default: TESSEL_COMM_TIMEOUT or 120 s)\n"
      "  --json FILE       write the results as JSON (per schedule: the median and every timed run)\n"
      "  --trace PREFIX    write each rank's timeline of the last run of every schedule (tiles, messages landed,\n"
      "                    waits) to PREFIX.rank<r>.json (benchmarks/moe/plot_timeline.py PREFIX draws them)\n"
      "  --stats           print each rank's phase times of the last run of every schedule\n"
      "  --verbose         also print Kokkos' configuration\n"
      "  --version         print the version and exit; --help this text\n"
      "  --debug           add source locations to error messages (or TESSEL_DEBUG=1)\n"
      "Kokkos options (--kokkos-help) are accepted too.\n"
      "exit status: 0 success, 1 runtime error or failed verification, 2 invalid option or argument\n");
}

// --schedule: all (the default) or a list naming each schedule at most once (results are kept per schedule).
std::vector<Schedule> parse_schedules(tessel::CommandLine &cl) {
  auto const names = cl.get_list("schedule", {"all"});
  if (names == std::vector<std::string>{"all"})
    return {Schedule::sequential, Schedule::pipelined, Schedule::comet};
  std::vector<Schedule> schedules;
  for (auto const &item : names) {
    auto const schedule = tessel::CommandLine::parse_value("--schedule", item, parse_schedule);
    TESSEL_REQUIRE_USAGE(std::find(schedules.begin(), schedules.end(), schedule) == schedules.end(),
                         "option --schedule names ", item, " twice");
    schedules.push_back(schedule);
  }
  TESSEL_REQUIRE_USAGE(!schedules.empty(), "option --schedule names no schedule");
  return schedules;
}

Options parse(tessel::CommandLine &cl) {
  Options o;
  o.schedules = parse_schedules(cl);
  o.ep = cl.get_int("ep", o.ep, 0, 1 << 16);
  o.tp = cl.get_int("tp", o.tp, 1, 1 << 16);
  o.iters = cl.get_int("iters", o.iters, 1, 1000000);
  o.warmup = cl.get_int("warmup", o.warmup, 0, 1000000);
  o.chunks = cl.get_int("chunks", o.chunks, 1, 1 << 16);
  o.share = cl.get_double("comm-share", o.share, tessel::Range{0, bench::max_comm_share, true, false});
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
  o.trace = cl.get("trace", o.trace);
  o.verbose = cl.flag("verbose");
  o.stats = cl.flag("stats");
  o.timeout_s = cl.get_double("timeout", o.timeout_s, tessel::Range::closed(0.001, 1e6));
  o.tune_budget_s = cl.get_double("tune-budget", o.tune_budget_s, tessel::Range::closed(0.001, 1e6));
  TESSEL_REQUIRE_USAGE(!cl.has("registry") || o.tune, "--registry is where --tune writes; give --tune too");
  double const timeout = o.timeout_s > 0 ? o.timeout_s : 1e-3 * static_cast<double>(tessel::default_timeout().count());
  TESSEL_REQUIRE_USAGE(!o.emulate || o.latency_us * 1e-6 < timeout, "--latency ", o.latency_us,
                       " us: every message would arrive after the communication timeout of ", timeout,
                       " s (--timeout, TESSEL_COMM_TIMEOUT)");
  auto const files = cl.positionals();
  TESSEL_REQUIRE_USAGE(files.size() <= 1, "more than one input file given ('", files.size() > 1 ? files[0] : "",
                       "' and '", files.size() > 1 ? files[1] : "", "')");
  if (!files.empty())
    o.file = files[0];
  TESSEL_REQUIRE_USAGE(!o.file.empty(), "no input file given (see --help)");
  // --trace T writes T.rankR.json on every rank R; --registry is written (merged) by --tune.
  std::string const trace_file =
      o.trace.empty() ? "" : o.trace + ".rank" + std::to_string(tessel::Communicator::world().rank()) + ".json";
  // The per-user tuning cache is written by first-use tuning too: never over the layer or another output (it may
  // be --tuning, which only reads it).
  tessel::require_distinct_files(
      {{"the layer file", o.file}, {"--tuning", o.tuning}},
      {{"--json", o.json}, {"--trace", trace_file}, {"--registry", o.tune ? o.registry : ""}});
  tessel::require_distinct_files(
      {{"the layer file", o.file}},
      {{"--json", o.json}, {"--trace", trace_file}, {tuning_cache_option, tessel::moe::default_tuning_cache_path()}});
  tessel::require_writable(o.json);
  if (!o.trace.empty())
    tessel::require_writable(o.trace + ".rank0.json");
  if (o.tune)
    tessel::require_writable(o.registry);
  return o;
}

using Say = std::function<void(std::string const &)>;

/// What one rank reads from the file: its tokens and gate inputs, and its shard of the experts.
struct Input {
  std::unique_ptr<MoeFile> file;
  MoeConfig config;
  HostMatrix tokens;
  GateData gate;
  ExpertWeights weights;
};

// Loading may fail on some ranks only (a NaN in one rank's tokens): every rank learns it and stops, instead of the
// others waiting for it in the first collective.
Input load_input(Options const &o, Communicator const &world) {
  int const w = world.size(), me = world.rank();
  Input in;
  std::string load_error;
  tessel::require_same_file(world, "input file", o.file);
  try {
    in.file = std::make_unique<MoeFile>(o.file);
    auto const &info = in.file->info();
    TESSEL_REQUIRE(info.total_tokens % w == 0, o.file, ": ", info.total_tokens, " tokens cannot be split evenly over ",
                   w, " ranks (T % W must be 0)");
    in.config = info.config;
    in.config.tokens = info.total_tokens / w;
    in.config.tp = o.tp;
    in.config.ep = o.ep > 0 ? o.ep : w / std::max(o.tp, 1);
    in.config.validate(w);
    tessel::require_memory(o.file + ": the layer on one rank (" + in.config.describe() + ")",
                           bench::layer_memory_bytes(in.config, o.verify));
    in.tokens = in.file->tokens(static_cast<std::int64_t>(me) * in.config.tokens, in.config.tokens);
    in.gate = in.file->gate(static_cast<std::int64_t>(me) * in.config.tokens, in.config.tokens);
    in.weights = in.file->shard(in.config, me);
  } catch (std::exception const &e) {
    load_error = e.what();
  }
  int const failed_ranks = world.allreduce_value(load_error.empty() ? 0 : 1, tessel::ReduceOp::sum);
  if (!load_error.empty())
    TESSEL_THROW(load_error);
  TESSEL_REQUIRE(failed_ranks == 0, failed_ranks, " other rank(s) could not load their input (see their messages)");
  return in;
}

std::string describe_input(Options const &o, Input const &in, int w) {
  auto const &info = in.file->info();
  std::ostringstream os;
  os << "input " << o.file << ": " << (info.model.empty() ? "model ?" : info.model) << " (N, K scaled 1/" << info.scale
     << "), " << info.total_tokens << " tokens, gate "
     << (info.has_logits ? "logits" : (info.has_bias ? "weight + bias" : "weight"))
     << "\nlayer: " << in.config.describe() << " on " << w << " ranks";
  return os.str();
}

// The layer's communicator: a copy of the world with the --timeout, paced by the emulated link unless
// --no-emulation (the link's bandwidth is set by configure_link).
Communicator make_communicator(Options const &o, Communicator const &world) {
  auto base = world.split(0, world.rank());
  if (o.timeout_s > 0)
    base.set_timeout(tessel::Timeout(static_cast<std::int64_t>(o.timeout_s * 1000)));
  return o.emulate ? tessel::make_paced_communicator(base, tessel::LinkModel{0.0, o.latency_us * 1e-6}) : base;
}

// A fixed --bandwidth must let one forward's dispatch (the rows a rank sends to the other groups, at uniform
// routing) cross the link within the communication timeout: a slower link only ends in a timeout, after it.
void check_bandwidth(Options const &o, MoeLayer const &layer) {
  auto const &c = layer.config();
  double const bytes = static_cast<double>(c.tokens) * c.topk * static_cast<double>(c.hidden) * 4.0 *
                       static_cast<double>(c.ep - 1) / c.ep;
  double const seconds = bytes / (o.bandwidth_mbps * 1e6);
  double const timeout = 1e-3 * static_cast<double>(layer.communicator().timeout().count());
  char text[320];
  std::snprintf(text, sizeof(text),
                "--bandwidth %g MB/s: one forward's dispatch moves about %.3g MB from each rank, %.3g s on this link, "
                "longer than the communication timeout of %g s (--timeout, TESSEL_COMM_TIMEOUT)",
                o.bandwidth_mbps, bytes / 1e6, seconds, timeout);
  TESSEL_REQUIRE_USAGE(seconds <= timeout, text);
}

// A fixed --bandwidth, or the bandwidth that makes communication the --comm-share of the sequential layer.
void configure_link(Options const &o, HostExecSpace const &space, MoeLayer &layer, Input const &in, Say const &say) {
  if (!o.emulate)
    return;
  auto &link = *tessel::paced_backend_of(layer.communicator());
  if (o.bandwidth_mbps > 0) {
    check_bandwidth(o, layer);
    link.set_link(tessel::LinkModel{o.bandwidth_mbps * 1e6, o.latency_us * 1e-6});
    char text[96];
    std::snprintf(text, sizeof(text), "link: %g MB/s, %g us", o.bandwidth_mbps, o.latency_us);
    say(text);
    return;
  }
  say("calibrating the emulated link to a communication share of " + std::to_string(o.share) + " ...");
  auto const cal =
      bench::calibrate_comm_share(space, layer, link, in.tokens, in.gate.input(), o.share, o.latency_us * 1e-6, 3, say);
  std::ostringstream os;
  os << "link: " << cal.link.bandwidth / 1e6 << " MB/s, " << o.latency_us << " us latency";
  say(os.str());
}

// --tune: measures the comet candidates and merges the best into --registry (rank 0 writes it).
void tune(Options const &o, HostExecSpace const &space, MoeLayer &layer, Input const &in, Say const &say) {
  say("tuning the comet parameters ...");
  auto const result = bench::tune_comet(space, layer, in.tokens, in.gate.input(), o.iters, say);
  auto const &info = in.file->info();
  std::ostringstream note;
  note << (info.model.empty() ? o.file : info.model) << " W=" << layer.communicator().size() << ": comet "
       << 1e3 * result.best_seconds << " ms";
  if (layer.communicator().rank() == 0) {
    TuningRegistry reg;
    if (tessel::input_exists(o.registry))
      reg = TuningRegistry::load(o.registry);
    reg.set(TuningKey::of(in.config), result.best, note.str());
    reg.save(o.registry);
  }
  say("tuned: " + result.best.describe() + " -> " + o.registry);
}

// Where the first comet forward took the parameters from, when that was not known at construction.
void say_first_use(Options const &o, MoeLayer const &layer, Say const &say) {
  auto const &t = layer.first_use_tuning();
  if (layer.comet_params_source() != "cache" && !t.ran)
    return;
  std::ostringstream os;
  os << "comet parameters: " << layer.comet_params().describe() << " (" << layer.comet_params_source();
  if (layer.comet_params_source() == "cache") {
    os << " " << t.cache;
  } else {
    std::vector<CometParams> distinct;
    for (auto const &m : t.measured)
      if (std::find(distinct.begin(), distinct.end(), m.first) == distinct.end())
        distinct.push_back(m.first);
    os << ": " << distinct.size() << " candidates, " << t.forwards << " layer executions, tuning time " << t.seconds
       << " s; " << (t.stored ? "cached in " + t.cache : std::string("not cached"));
  }
  say(os.str() + ")");
  if (o.stats)
    for (auto const &[params, seconds] : t.measured)
      say("  first-use candidate " + params.describe() + ": " + std::to_string(1e3 * seconds) + " ms");
}

struct Row {
  Schedule schedule;
  std::vector<double> runs; // every timed run, in order
  double median = 0.0, max_rel_error = -1.0;
  std::int64_t routing_violations = 0;
};

// --stats: every rank's phase times of the last run, printed by rank 0 in rank order.
void print_stats(Communicator const &world, MoeLayer const &layer, Schedule s, Say const &say) {
  auto const &stats = layer.stats();
  char line[512];
  std::snprintf(line, sizeof(line),
                "  [rank %d] %s: total %.2f ms; route %.2f, dispatch %.2f, experts %.2f, combine %.2f, reduce %.2f; "
                "compute busy %.2f, waiting %.2f; comm threads %.2f ms CPU; %lld expert rows",
                world.rank(), name_of(s), 1e3 * stats.total, 1e3 * stats.route, 1e3 * stats.dispatch,
                1e3 * stats.experts, 1e3 * stats.combine, 1e3 * stats.reduce, 1e3 * stats.compute_busy,
                1e3 * stats.compute_wait, 1e3 * stats.comm_cpu, static_cast<long long>(stats.rows));
  std::vector<char> all(sizeof(line) * static_cast<std::size_t>(world.size()));
  world.host_allgather(line, all.data(), sizeof(line));
  for (int r = 0; r < world.size(); ++r)
    say(all.data() + sizeof(line) * static_cast<std::size_t>(r));
}

// --verify: one more forward of \p s against the dense reference (maximum error and routing violations, all ranks).
void verify(Communicator const &world, HostExecSpace const &space, MoeLayer &layer, Input const &in,
            DenseWeights const &dense, HostMatrix out, Row &row) {
  auto const gate = in.gate.input();
  layer.forward(space, in.tokens, gate, out, row.schedule);
  auto const ref = reference_forward(in.config, in.tokens, gate, layer.routing().experts, dense);
  row.max_rel_error = world.allreduce_value(max_relative_error(out, ref.out), tessel::ReduceOp::max);
  row.routing_violations = world.allreduce_value(ref.routing_violations, tessel::ReduceOp::sum);
  if (ref.routing_violations > 0)
    std::fprintf(stderr, "[rank %d] routing check: %s\n", world.rank(), ref.first_violation.c_str());
}

std::vector<Row> time_schedules(Options const &o, Communicator const &world, HostExecSpace const &space,
                                MoeLayer &layer, Input const &in, Say const &say) {
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::app_out"),
                 static_cast<std::size_t>(in.config.tokens), static_cast<std::size_t>(in.config.hidden));
  DenseWeights dense;
  if (o.verify)
    dense = in.file->dense_weights();
  std::vector<Row> rows;
  tessel::Json trace{{"rank", world.rank()}, {"ranks", world.size()}};
  for (auto s : o.schedules) {
    say(std::string("timing ") + name_of(s) + " (" + std::to_string(o.warmup) + " warm-up + " +
        std::to_string(o.iters) + " runs) ...");
    Row row;
    row.schedule = s;
    row.median = bench::time_schedule(space, layer, in.tokens, in.gate.input(), out, s, o.iters, o.warmup, &row.runs);
    if (o.stats)
      print_stats(world, layer, s, say);
    if (!o.trace.empty())
      trace["schedules"][name_of(s)] = {{"forward_total", layer.stats().total},
                                        {"forward", bench::trace_events(layer.stats(), 0.0)}};
    if (o.verify)
      verify(world, space, layer, in, dense, out, row);
    rows.push_back(row);
  }
  if (!o.trace.empty())
    tessel::write_json(o.trace + ".rank" + std::to_string(world.rank()) + ".json", trace);
  return rows;
}

/// The hidden fraction (T_sequential - T) / T_comm of each schedule.
struct Hidden {
  double t_seq = -1.0, t_comm = 0.0;
  // It means something only when communication takes a measurable share of the layer (not on one rank, or without
  // emulation on a fast interconnect).
  bool defined = false;
  Hidden(std::vector<Row> const &rows, double comm) : t_comm(comm) {
    for (auto const &r : rows)
      if (r.schedule == Schedule::sequential)
        t_seq = r.median;
    defined = t_seq > 0 && t_comm > 0.01 * t_seq;
  }
  double operator()(double t) const { return defined ? (t_seq - t) / t_comm : 0.0; }
};

void print_table(Options const &o, std::vector<Row> const &rows, AloneTimes const &alone, Hidden const &hidden) {
  std::printf("\nT_comm alone %.2f ms, T_comp alone %.2f ms (share %.2f)%s\n", 1e3 * alone.comm, 1e3 * alone.comp,
              alone.comm / (alone.comm + alone.comp), o.emulate ? "" : " (no link emulation)");
  std::printf("%-11s %12s %10s %10s %12s %14s\n", "schedule", "median (ms)", "speedup", "hidden", "max rel err",
              "routing check");
  for (auto const &r : rows) {
    std::printf("%-11s %12.2f %9.2fx", name_of(r.schedule), 1e3 * r.median,
                hidden.t_seq > 0 ? hidden.t_seq / r.median : 0.0);
    if (hidden.defined)
      std::printf(" %9.1f%%", 100 * hidden(r.median));
    else
      std::printf(" %10s", "n/a");
    if (o.verify)
      std::printf(" %12.2e %14s\n", r.max_rel_error, r.routing_violations == 0 ? "ok" : "VIOLATED");
    else
      std::printf(" %12s %14s\n", "-", "-");
  }
  if (!hidden.defined)
    std::printf("note: communication alone (%.3f ms) is under 1%% of the sequential layer: there is nothing to "
                "hide, so no hidden fraction is given\n",
                1e3 * alone.comm);
  // No schedule can beat computation alone; when one appears to, the runs were disturbed (other processes on the
  // cores) and the fractions above are not measurements of overlap.
  for (auto const &r : rows)
    if (r.median < alone.comp)
      std::printf("note: %s ran faster than computation alone (%.2f < %.2f ms): the timings were disturbed; rerun "
                  "with more --iters on a quiet machine\n",
                  name_of(r.schedule), 1e3 * r.median, 1e3 * alone.comp);
}

tessel::Json results_json(Options const &o, Input const &in, MoeLayer const &layer, std::vector<Row> const &rows,
                          AloneTimes const &alone, Hidden const &hidden) {
  auto const link = o.emulate ? tessel::paced_backend_of(layer.communicator())->link() : tessel::LinkModel{};
  tessel::Json doc{{"app", "tessel-moe"},
                   {"build", tessel::build_summary()},
                   {"file", o.file},
                   {"model", in.file->info().model},
                   {"config", in.config.describe()},
                   {"ranks", layer.communicator().size()},
                   {"emulation", o.emulate},
                   {"link_bandwidth_Bps", link.bandwidth},
                   {"link_latency_s", o.latency_us * 1e-6},
                   {"t_comm_alone_s", alone.comm},
                   {"t_comp_alone_s", alone.comp},
                   {"comet_params", layer.comet_params().describe()},
                   {"comet_params_source", layer.comet_params_source()},
                   {"first_use_tuning_s",
                    layer.first_use_tuning().ran ? tessel::Json(layer.first_use_tuning().seconds) : tessel::Json()}};
  auto &schedules = doc["schedules"] = tessel::Json::object();
  for (auto const &r : rows)
    schedules[name_of(r.schedule)] = {
        {"median_s", r.median},
        {"runs_s", r.runs},
        {"t_comm_s", alone.comm},
        {"t_comp_s", alone.comp},
        {"hidden_fraction", hidden.defined ? tessel::Json(hidden(r.median)) : tessel::Json()},
        {"max_rel_error", o.verify ? tessel::Json(r.max_rel_error) : tessel::Json()}};
  return doc;
}

int run(Options const &o) {
  auto const world = Communicator::world();
  Say const say = [me = world.rank()](std::string const &line) {
    if (me == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  say("tessel-moe " + tessel::build_summary());
  if (world.rank() == 0 && o.verbose)
    Kokkos::print_configuration(std::cout, false);
  auto in = load_input(o, world);
  say(describe_input(o, in, world.size()));

  TuningRegistry registry = TuningRegistry::builtin();
  if (!o.tuning.empty())
    registry.merge(TuningRegistry::load(o.tuning));
  LayerOptions options;
  options.pipeline_chunks = o.chunks;
  options.registry = &registry;
  options.trace = !o.trace.empty();
  options.tune_on_first_use = true; // the tool tunes and caches on first use (a library user opts in)
  options.tune_budget = o.tune_budget_s;
  MoeLayer layer(in.config, make_communicator(o, world), std::move(in.weights), options);
  say("comet parameters: " + layer.comet_params().describe() + " (" + layer.comet_params_source() + ")");
  HostExecSpace space;
  configure_link(o, space, layer, in, say);
  if (o.tune)
    tune(o, space, layer, in, say);
  // The first comet forward decides the comet parameters (the per-user cache, or tuning on first use): before any
  // timed run, whatever --warmup says.
  if (std::find(o.schedules.begin(), o.schedules.end(), Schedule::comet) != o.schedules.end()) {
    HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::app_decide_out"), in.tokens.extent(0),
                   in.tokens.extent(1));
    layer.forward(space, in.tokens, in.gate.input(), out, Schedule::comet);
  }

  say("measuring communication alone and computation alone (" + std::to_string(o.iters) + " runs) ...");
  auto const alone = layer.measure_alone(space, in.tokens, in.gate.input(), o.iters);
  auto const rows = time_schedules(o, world, space, layer, in, say);
  say_first_use(o, layer, say);
  Hidden const hidden(rows, alone.comm);
  if (world.rank() == 0) {
    print_table(o, rows, alone, hidden);
    if (!o.json.empty()) {
      tessel::write_json(o.json, results_json(o, in, layer, rows, alone, hidden));
      std::printf("results written to %s\n", o.json.c_str());
    }
  }
  bool const failed = o.verify && std::any_of(rows.begin(), rows.end(), [](Row const &r) {
                        return r.max_rel_error > 1e-5 || r.routing_violations > 0;
                      });
  if (failed)
    say("verification FAILED: a schedule differs from the reference by more than 1e-5");
  return failed ? 1 : 0;
}

// --- tessel-moe train ------------------------------------------------------------------------------------------

void train_usage() {
  std::printf(
      "usage: mpiexec -n W tessel-moe train [options]\n"
      "Trains a small model (token embedding -> MoE layer -> linear head) on data from a teacher model of the same\n"
      "form, on W ranks (each takes batch / W tokens of every step), under each schedule in turn; the loss curve\n"
      "is the same at every rank count and schedule.\n"
      "  --schedule S      all (default), sequential, pipelined or comet (comma-separated list allowed)\n"
      "  --ep E --tp T     expert- and tensor-parallel sizes, E x T = W (default: EP = W, TP = 1)\n"
      "  --steps N         optimizer steps (default 50, at least 1)\n"
      "  --batch B         tokens per step over all ranks (default 256; a multiple of W)\n"
      "  --hidden N --ffn K --experts E --topk k   the layer (default 64, 128, 8, 2)\n"
      "  --vocab V         token ids (default 256); --outputs C: the head's outputs (default 16)\n"
      "  --optimizer O     adam (default) or sgd; --lr R (default 1e-2); --momentum M (sgd only, default 0)\n"
      "  --aux-loss A      load-balancing loss coefficient (default 0.01)\n"
      "  --seed S          data and initial weights (default 1)\n"
      "  --json FILE       write the loss curves and step times as JSON\n"
      "  --problem FILE    write the model's data and initial values (HDF5, schema tessel.moe.train_problem: the\n"
      "                    teacher's targets, the student's parameters, every step's token ids) before training, so\n"
      "                    that another framework can train the same model\n"
      "exit status: 0 success (the loss of held-out batches fell by more than its batch-to-batch noise, and all\n"
      "schedules' loss curves agree within 1e-5), 1 otherwise, 2 invalid option\n");
}

struct TrainOptions {
  app::TrainSettings settings;
  std::vector<Schedule> schedules{Schedule::sequential, Schedule::pipelined, Schedule::comet};
  std::string json, problem;
};

TrainOptions parse_train(tessel::CommandLine &cl, Communicator const &world) {
  TrainOptions o;
  auto &s = o.settings;
  o.schedules = parse_schedules(cl);
  s.layer.ep = cl.get_int("ep", 1, 1, 1 << 16);
  s.layer.tp = cl.get_int("tp", 1, 1, 1 << 16);
  if (!cl.has("ep"))
    s.layer.ep = std::max(1, world.size() / s.layer.tp);
  s.steps = cl.get_int("steps", 50, 1, 1000000);
  s.layer.tokens = cl.get_int<std::int64_t>("batch", 256, 1, std::int64_t{1} << 30);
  s.layer.hidden = cl.get_int<std::int64_t>("hidden", 64, 1, 1 << 16);
  s.layer.ffn = cl.get_int<std::int64_t>("ffn", 128, 1, 1 << 20);
  s.layer.experts = cl.get_int("experts", 8, 1, 4096);
  s.layer.topk = cl.get_int("topk", 2, 1, 4096);
  s.vocab = cl.get_int("vocab", 256, 1, 1 << 24);
  s.outputs = cl.get_int("outputs", 16, 1, 1 << 16);
  s.optimizer.kind = cl.get_parsed("optimizer", "adam", parse_optimizer);
  s.optimizer.learning_rate = cl.get_double("lr", 1e-2, tessel::Range::positive(1e6));
  s.optimizer.momentum = cl.get_double("momentum", 0.0, tessel::Range{0, 1, true, false});
  TESSEL_REQUIRE_USAGE(!cl.has("momentum") || s.optimizer.kind == OptimizerOptions::Kind::sgd,
                       "--momentum is SGD's (--optimizer sgd); Adam has none");
  s.aux_loss_coef = cl.get_double("aux-loss", 0.01, tessel::Range::closed(0, 1e6));
  s.seed = cl.get_int<std::uint64_t>("seed", 1, 0, ~std::uint64_t{0} >> 1);
  o.json = cl.get("json", "");
  o.problem = cl.get("problem", "");
  TESSEL_REQUIRE_USAGE(cl.positionals().empty(), "tessel-moe train takes no file (see --help)");
  TESSEL_REQUIRE_USAGE(s.layer.ep * s.layer.tp == world.size(), "--ep x --tp must be the rank count ", world.size(),
                       ", got ", s.layer.ep, " x ", s.layer.tp);
  TESSEL_REQUIRE_USAGE(s.layer.tokens % world.size() == 0, "--batch ", s.layer.tokens,
                       " must be a multiple of the rank count ", world.size());
  tessel::require_distinct_files(
      {},
      {{"--json", o.json}, {"--problem", o.problem}, {tuning_cache_option, tessel::moe::default_tuning_cache_path()}});
  tessel::require_writable(o.json);
  tessel::require_writable(o.problem);
  auto checked = s.layer;
  checked.tokens /= world.size();
  checked.validate(world.size());
  s.optimizer.validate();
  tessel::require_memory("the model (--hidden, --ffn, --experts, --vocab, --outputs, --batch)",
                         app::train_memory_bytes(s, world.size()));
  s.layer_options.tune_on_first_use = true; // the tool tunes and caches on first use (a library user opts in)
  return o;
}

std::string describe_model(TrainOptions const &o, int ranks) {
  auto const &s = o.settings;
  auto checked = s.layer;
  checked.tokens /= ranks;
  return "model: embedding " + std::to_string(s.vocab) + " x " + std::to_string(s.layer.hidden) + " -> MoE (" +
         checked.describe() + ") -> head " + std::to_string(s.layer.hidden) + " x " + std::to_string(s.outputs) + "; " +
         name_of(s.optimizer.kind) + ", " + std::to_string(s.steps) + " steps of " + std::to_string(s.layer.tokens) +
         " tokens on " + std::to_string(ranks) + " ranks";
}

// Trains under one schedule: prints and records its loss curve; false when the held-out loss did not fall by more
// than its noise (app::check_loss).
bool train_schedule(TrainOptions &o, Schedule schedule, Communicator const &comm, Say const &say, tessel::Json &doc,
                    std::vector<std::vector<double>> &curves) {
  o.settings.schedule = schedule;
  auto const r = app::train(HostExecSpace(), comm, o.settings);
  std::vector<double> steps = r.step_seconds;
  std::sort(steps.begin(), steps.end());
  double const median = steps[steps.size() / 2];
  auto const check = app::check_loss(r);
  char line[256];
  std::snprintf(line, sizeof(line), "%-10s loss %.6f -> %.6f; held-out %.6f -> %.6f (noise %.2g); median step %.2f ms",
                name_of(schedule), r.loss.front(), r.loss.back(), check.before, check.after, check.noise, 1e3 * median);
  say(line);
  if (!check.fell && check.after > check.before + check.noise)
    say(std::string("the held-out loss rose under ") + name_of(schedule) + " (a smaller --lr)");
  else if (!check.fell)
    say(std::string("the held-out loss did not fall by more than its noise under ") + name_of(schedule) +
        " (a larger --lr or more --steps)");
  doc["schedules"][name_of(schedule)] = {{"loss", r.loss},
                                         {"step_seconds", r.step_seconds},
                                         {"median_step_s", median},
                                         {"held_out_before", r.held_out_before},
                                         {"held_out_after", r.held_out_after},
                                         {"held_out_noise", check.noise},
                                         {"loss_fell", check.fell}};
  curves.push_back(r.loss);
  return check.fell;
}

int run_train(tessel::CommandLine &cl) {
  auto const world = Communicator::world();
  auto o = parse_train(cl, world);
  auto const &s = o.settings;
  Say const say = [me = world.rank()](std::string const &line) {
    if (me == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  say("tessel-moe train " + tessel::build_summary());
  say(describe_model(o, world.size()));
  auto const comm = world.split(0, world.rank());
  auto checked = s.layer;
  checked.tokens /= world.size();
  tessel::Json doc{{"app", "tessel-moe train"},
                   {"build", tessel::build_summary()},
                   {"ranks", world.size()},
                   {"config", checked.describe()},
                   {"steps", s.steps},
                   {"batch", s.layer.tokens},
                   {"optimizer", name_of(s.optimizer.kind)},
                   {"learning_rate", s.optimizer.learning_rate}};
  if (world.rank() == 0 && !o.problem.empty()) {
    app::write_problem(o.problem, s, app::make_problem(HostExecSpace(), s));
    std::printf("problem written to %s\n", o.problem.c_str());
  }
  std::vector<std::vector<double>> curves;
  bool ok = true;
  for (auto schedule : o.schedules)
    ok = train_schedule(o, schedule, comm, say, doc, curves) && ok;
  double worst = 0.0;
  for (auto const &c : curves)
    for (std::size_t i = 0; i < c.size(); ++i)
      worst = std::max(worst, std::abs(c[i] - curves.front()[i]) / std::max(std::abs(curves.front()[i]), 1e-30));
  char line[160];
  std::snprintf(line, sizeof(line), "largest relative difference between the schedules' loss curves: %.2e", worst);
  say(line);
  if (worst > 1e-5) {
    say("the schedules' loss curves differ by more than 1e-5");
    ok = false;
  }
  doc["max_relative_difference"] = worst;
  if (world.rank() == 0 && !o.json.empty()) {
    tessel::write_json(o.json, doc);
    std::printf("results written to %s\n", o.json.c_str());
  }
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::string(argv[1]) == "train")
    return tessel::run_tool("tessel-moe train", argc - 1, argv + 1, [](tessel::CommandLine &cl) {
      if (cl.flag({"help", 'h'})) {
        train_usage();
        return 0;
      }
      return run_train(cl);
    });
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

// tessel-moe-bench: sequential vs pipelined vs comet MoE layers, side by side in one run, on an emulated link
// calibrated so that communication is the share S of the sequential layer (COMET measured 47% on 8 x H800).
//
//   mpiexec -n 4 tessel-moe-bench --models mixtral,qwen2,phi35 --tokens 1024,4096 --share 0.47 --json moe.json
//   tessel-moe-bench --backend cuda --virtual-ranks 4 ...   (the GPU schedules, see CudaBench.cpp)
//
// For every (model, M): the three models' shapes from COMET's Table 2 with N and K divided by --scale, E and
// topk unchanged, EP = ranks / TP; tokens per rank differ, routing skewed by a Zipf gate bias tuned to
// --imbalance (std of the per-expert token fractions). The link is calibrated per point (T_comm alone =
// S / (1 - S) x T_comp alone). Each schedule is timed --iters times (median; a run lasts until the slowest
// rank returns), rotating the order of the schedules between iterations. hidden = (T_seq - T) / T_comm.
// #wrong counts output elements of pipelined and comet that differ from sequential by more than 1e-5 relative.
#include "CudaBench.hpp"

#include <tessel/tools/moe/Harness.hpp>

#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Synthetic.hpp>

#include <tessel/core/Config.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/PacedCommunicator.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace tessel::moe;
using tessel::Communicator;
using tessel::moe::bench::Calibration;

struct Options : tessel::moe::bench::SweepOptions {
  Options() {
    tokens = {1024, 4096};
    scale = 8.0;
    iters = 5;
    warmup = 2;
  }
  double share = 0.47;
  double latency_us = 10.0;
  bool tune = false;
  std::string registry = "moe/tuning/host.registry";
  std::string trace;  ///< write each rank's timelines of one more run per point to TRACE.<model>.<M>.rank<r>.json
  bool train = false; ///< also time the training step (forward + backward)
};

void usage() {
  std::printf(
      "usage: mpiexec -n W tessel-moe-bench [options]\n"
      "       tessel-moe-bench --backend cuda [--virtual-ranks W ...] (see --backend cuda --help)\n"
      "  --models LIST     models (mixtral, qwen2, phi35; default all three)\n"
      "  --tokens LIST     tokens per rank M (default 1024,4096)\n"
      "  --scale F         divide N and K by F (default 8)\n"
      "  --tp T            tensor-parallel size; EP = W / T (default 1)\n"
      "  --share S         communication share of the sequential layer on the emulated link, in (0, 0.95]\n"
      "                    (default 0.47)\n"
      "  --latency US      link latency per message in microseconds (default 10)\n"
      "  --imbalance STD   routing imbalance (std of per-expert token fractions; default 0.04)\n"
      "  --chunks LIST     chunk counts of the pipelined schedule; each is measured, the fastest reported\n"
      "                    (default 2,4)\n"
      "  --iters N         timed runs per schedule (default 5), --warmup N (default 2)\n"
      "  --json FILE       write the results as JSON\n"
      "  --tune            tune the comet parameters per point (--iters runs per candidate) and merge them into\n"
      "                    --registry FILE\n"
      "  --registry FILE   registry written by --tune (default moe/tuning/host.registry)\n"
      "  --train           also time the training step (forward + backward) of every schedule, with the\n"
      "                    backward's communication and computation alone\n"
      "  --trace PREFIX    write each rank's timelines (tiles, landings, waits) of one more forward (and, with\n"
      "                    --train, backward) per schedule to PREFIX.<model>.<M>.rank<r>.json\n"
      "                    (benchmarks/moe/plot_timeline.py draws them)\n"
      "  --smoke           tiny sizes, one iteration (for CI)\n");
}

Options parse(tessel::CommandLine &cl) {
  Options o;
  o.read(cl, {64, 64, 1, 0}); // --smoke: tiny sizes for CI
  o.share = cl.get_double("share", o.share, tessel::Range{0, bench::max_comm_share, true, false});
  o.latency_us = cl.get_double("latency", o.latency_us, tessel::Range::closed(0, 1e7));
  o.tune = cl.flag("tune");
  TESSEL_REQUIRE_USAGE(!cl.has("registry") || o.tune, "--registry is where --tune writes; give --tune too");
  o.registry = cl.get("registry", o.registry);
  o.trace = cl.get("trace", o.trace);
  o.train = cl.flag("train");
  cl.finish();
  o.require_distinct_points();
  tessel::require_distinct_files({}, {{"--json", o.json}, {"--registry", o.tune ? o.registry : ""}});
  tessel::require_writable(o.json);
  return o;
}

struct Point {
  std::string model;
  MoeConfig config;
  double alpha = 0, imbalance = 0;
  Calibration cal;
  CometParams comet;
  std::string comet_source;
  double t_seq = 0, t_pipe = 0, t_comet = 0;
  int best_chunks = 0;
  std::vector<std::pair<int, double>> t_pipe_by_chunks;
  int attempts = 0;
  double t_comm = 0, t_comp = 0; ///< alone, measured in the timed loop (medians)
  double t_comp_min = 0;         ///< fastest computation-alone run of the loop
  double cpu[3] = {0, 0, 0};     ///< CPU seconds (all threads) per forward, summed over ranks: seq, best pipe, comet
  long wrong = 0;
  double max_diff = 0;
  // --train: medians of the training step (forward + backward) and of its backward part, per schedule (seq,
  // pipelined at best_chunks, comet), and the backward's communication and computation alone.
  double step[3] = {0, 0, 0}, bwd[3] = {0, 0, 0};
  double bwd_comm = 0, bwd_comp = 0;
};

// Elements of \p a that differ from \p b by more than 1e-5 of max |b| (summed over ranks).
long count_wrong(Communicator const &comm, HostMatrix a, HostMatrix b, double &max_rel) {
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(b.data()[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a.data()[i] - b.data()[i])));
  }
  scale = comm.allreduce_value(scale, tessel::ReduceOp::max);
  long wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    wrong += std::abs(a.data()[i] - b.data()[i]) > 1e-5 * scale ? 1 : 0;
  max_rel = std::max(max_rel, comm.allreduce_value(scale > 0 ? diff / scale : diff, tessel::ReduceOp::max));
  return comm.allreduce_value(wrong, tessel::ReduceOp::sum);
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double hidden(Point const &p, double t) { return (p.t_seq - t) / p.t_comm; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

using Say = std::function<void(std::string const &)>;

/// What a point's runs share: the communicator of the layers, its emulated link, and the printer of rank 0.
struct Bench {
  Options const &o;
  Communicator world, paced;
  HostExecSpace space;
  Say say;
};

/// One model's shape (N, K scaled), routing skew and dense weights, shared by its points.
struct Model {
  std::string name;
  MoeConfig base;
  double alpha = 0;
  SyntheticGate gate;
  DenseWeights dense;
  GateInput gate_input() const { return GateInput::from_weight(gate.weight, gate.bias); }
};

Model make_model(Bench const &b, std::string const &name) {
  auto const &o = b.o;
  auto const &model = find_model(name);
  Model m;
  m.name = model.name;
  m.base = scaled_config(model, o.scale, 1);
  m.base.ep = b.world.size() / o.tp;
  m.base.tp = o.tp;
  for (auto tokens : o.tokens) {
    auto config = m.base;
    config.tokens = tokens;
    tessel::require_memory("--models " + name + " --tokens " + std::to_string(tokens) + " (one rank's layer, " +
                               config.describe() + ")",
                           bench::layer_memory_bytes(config, true));
  }
  auto const sample = make_tokens(m.base, 4096, o.seed + 7);
  m.alpha = zipf_alpha_for(m.base, sample, o.seed + 11, o.imbalance);
  m.gate = make_gate(m.base, m.alpha, o.seed + 11);
  m.dense = make_weights(m.base, o.seed + 13);
  return m;
}

/// The three outputs of a point (sequential, pipelined, comet).
struct Outputs {
  HostMatrix seq, pipe, comet;
  Outputs(std::int64_t m, std::int64_t n)
      : seq("Tessel::bench::out_seq", static_cast<std::size_t>(m), static_cast<std::size_t>(n)),
        pipe("Tessel::bench::out_pipe", static_cast<std::size_t>(m), static_cast<std::size_t>(n)),
        comet("Tessel::bench::out_comet", static_cast<std::size_t>(m), static_cast<std::size_t>(n)) {}
  HostMatrix of(Schedule s) const { return s == Schedule::sequential ? seq : s == Schedule::pipelined ? pipe : comet; }
};

/// What one pass of the timed loop measured, per variant: seq, pipelined at each chunk count, comet, communication
/// alone, computation alone.
struct LoopTimes {
  std::vector<std::vector<double>> times;
  std::vector<double> cpu; ///< CPU seconds per forward, summed over ranks
};

// Timed loop: the variants interleaved in an order rotated every iteration, so that load from other processes (the
// machine is shared) hits all of them alike.
LoopTimes run_loop(Bench const &b, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate, Outputs const &out) {
  auto const &o = b.o;
  int const variants = 2 + static_cast<int>(o.chunks.size()) + 2; // seq, pipe..., comet, comm, comp
  LoopTimes loop{std::vector<std::vector<double>>(static_cast<std::size_t>(variants)),
                 std::vector<double>(static_cast<std::size_t>(variants), 0.0)};
  for (int i = 0; i < o.iters; ++i)
    for (int j = 0; j < variants; ++j) {
      int const what = (i + j) % variants;
      auto &slot = loop.times[static_cast<std::size_t>(what)];
      if (what == variants - 2) {
        slot.push_back(layer.measure_alone(b.space, tokens, gate, 1, true, false).comm);
        continue;
      }
      if (what == variants - 1) {
        slot.push_back(layer.measure_alone(b.space, tokens, gate, 1, false, true).comp);
        continue;
      }
      Schedule const s = what == 0              ? Schedule::sequential
                         : what == variants - 3 ? Schedule::comet
                                                : Schedule::pipelined;
      if (s == Schedule::pipelined)
        layer.set_pipeline_chunks(o.chunks[static_cast<std::size_t>(what - 1)]);
      b.paced.barrier();
      double const c0 = cpu_seconds();
      auto const t0 = std::chrono::steady_clock::now();
      layer.forward(b.space, tokens, gate, out.of(s), s);
      double const t = b.world.allreduce_value(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), tessel::ReduceOp::max);
      loop.cpu[static_cast<std::size_t>(what)] +=
          b.world.allreduce_value(cpu_seconds() - c0, tessel::ReduceOp::sum) / o.iters;
      slot.push_back(t);
    }
  return loop;
}

// The loop's medians into \p p (pipelined: the fastest chunk count).
void summarize(Options const &o, LoopTimes const &loop, Point &p) {
  auto const variants = loop.times.size();
  p.t_seq = median(loop.times[0]);
  p.t_pipe_by_chunks.clear();
  p.t_pipe = 1e300;
  for (std::size_t c = 0; c < o.chunks.size(); ++c) {
    double const t = median(loop.times[c + 1]);
    p.t_pipe_by_chunks.emplace_back(o.chunks[c], t);
    if (t < p.t_pipe) {
      p.t_pipe = t;
      p.best_chunks = o.chunks[c];
      p.cpu[1] = loop.cpu[c + 1];
    }
  }
  p.t_comet = median(loop.times[variants - 3]);
  p.t_comm = median(loop.times[variants - 2]);
  p.t_comp = median(loop.times[variants - 1]);
  p.t_comp_min = *std::min_element(loop.times[variants - 1].begin(), loop.times[variants - 1].end());
  p.cpu[0] = loop.cpu[0];
  p.cpu[2] = loop.cpu[variants - 3];
}

// Refits the link from the loop's own medians when the share it measured misses the target by more than 0.05;
// returns whether the loop should run again.
bool refit_link(Bench const &b, Point &p) {
  auto const &o = b.o;
  // The link is judged against the fastest computation-alone run (the least disturbed by other processes); the
  // table reports medians.
  double const share = p.t_comm / (p.t_comm + p.t_comp_min);
  if (std::abs(share - o.share) <= 0.05 || p.attempts == 3 || p.cal.link.bandwidth <= 0.0 || o.train)
    return false; // with --train the link is the training step's (its share is not the forward's)
  // T_comm is affine in 1/bandwidth, with the latency-only intercept found by the calibration.
  double const intercept = std::min(p.cal.t_comm_unlimited, 0.5 * p.t_comm);
  double const target = std::max(o.share / (1.0 - o.share) * p.t_comp_min, 1.5 * intercept);
  double const slope = (p.t_comm - intercept) * p.cal.link.bandwidth;
  auto link = p.cal.link;
  link.bandwidth =
      b.world.allreduce_value(b.world.rank() == 0 ? slope / (target - intercept) : 0.0, tessel::ReduceOp::sum);
  tessel::paced_backend_of(b.paced)->set_link(link);
  p.cal.link = link;
  std::ostringstream os;
  os << "   measured share " << share << " (T_comm " << 1e3 * p.t_comm << " ms, fastest T_comp " << 1e3 * p.t_comp_min
     << " ms): link refitted to " << link.bandwidth / 1e6 << " MB/s, measuring again";
  b.say(os.str());
  return true;
}

constexpr Schedule all_schedules[3] = {Schedule::sequential, Schedule::pipelined, Schedule::comet};

// --train: the training step of each schedule and the backward's communication and computation alone, interleaved
// in a rotated order like run_loop; medians into \p p.
void run_training_loop(Bench const &b, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate,
                       Outputs const &out, HostMatrix d_out, Point &p) {
  auto const &o = b.o;
  layer.set_pipeline_chunks(p.best_chunks);
  MoeGradients grads;
  for (int i = 0; i < o.warmup; ++i)
    for (auto s : all_schedules) {
      layer.forward(b.space, tokens, gate, out.of(s), s);
      layer.backward(b.space, d_out, grads, s);
    }
  std::vector<std::vector<double>> step(3), bwd(3), comm, comp;
  for (int i = 0; i < o.iters; ++i)
    for (int j = 0; j < 4; ++j) {
      int const what = (i + j) % 4;
      if (what == 3) {
        layer.forward(b.space, tokens, gate, out.seq, Schedule::sequential);
        auto const alone = layer.measure_backward_alone(b.space, d_out, 1);
        comm.push_back({alone.comm});
        comp.push_back({alone.comp});
        continue;
      }
      auto const s = all_schedules[what];
      b.paced.barrier();
      auto const t0 = std::chrono::steady_clock::now();
      layer.forward(b.space, tokens, gate, out.of(s), s);
      auto const t1 = std::chrono::steady_clock::now();
      layer.backward(b.space, d_out, grads, s);
      auto const t2 = std::chrono::steady_clock::now();
      step[static_cast<std::size_t>(what)].push_back(
          b.world.allreduce_value(std::chrono::duration<double>(t2 - t0).count(), tessel::ReduceOp::max));
      bwd[static_cast<std::size_t>(what)].push_back(
          b.world.allreduce_value(std::chrono::duration<double>(t2 - t1).count(), tessel::ReduceOp::max));
    }
  for (std::size_t k = 0; k < 3; ++k) {
    p.step[k] = median(step[k]);
    p.bwd[k] = median(bwd[k]);
  }
  std::vector<double> c, d;
  for (auto const &v : comm)
    c.push_back(v[0]);
  for (auto const &v : comp)
    d.push_back(v[0]);
  p.bwd_comm = median(c);
  p.bwd_comp = median(d);
  std::ostringstream os;
  os << "   training step: seq " << 1e3 * p.step[0] << " ms, pipelined " << 1e3 * p.step[1] << " ms, comet "
     << 1e3 * p.step[2] << " ms; comet/seq " << p.step[0] / p.step[2] << "x, comet/pipelined " << p.step[1] / p.step[2]
     << "x; backward T_comm " << 1e3 * p.bwd_comm << " ms, T_comp " << 1e3 * p.bwd_comp << " ms, hidden pipelined "
     << 100 * (p.bwd[0] - p.bwd[1]) / p.bwd_comm << "%, comet " << 100 * (p.bwd[0] - p.bwd[2]) / p.bwd_comm << "%";
  b.say(os.str());
}

// --trace: each rank's timelines of one more forward (and with --train, backward) per schedule, on one time axis
// per schedule (the backward starts where the forward ended).
void write_trace(Bench const &b, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate, Outputs const &out,
                 HostMatrix d_out, std::string const &path) {
  tessel::Json doc{{"rank", b.world.rank()}, {"ranks", b.world.size()}};
  MoeGradients grads;
  for (auto s : all_schedules) {
    b.paced.barrier();
    layer.forward(b.space, tokens, gate, out.of(s), s);
    auto const &fwd = layer.stats();
    auto &entry = doc["schedules"][name_of(s)];
    entry["forward_total"] = fwd.total;
    entry["forward"] = bench::trace_events(fwd, 0.0);
    if (b.o.train) {
      layer.backward(b.space, d_out, grads, s);
      auto const &bw = layer.backward_stats();
      entry["backward_total"] = bw.total;
      entry["backward"] = bench::trace_events(bw, fwd.total);
    }
  }
  tessel::write_json(path, doc);
}

std::string describe(Point const &p) {
  std::ostringstream os;
  os << "   seq " << 1e3 * p.t_seq << " ms, pipelined " << 1e3 * p.t_pipe << " ms, comet " << 1e3 * p.t_comet << " ms ["
     << p.comet.describe() << ", " << p.comet_source << "]; comet/seq " << p.t_seq / p.t_comet
     << "x, CPU s/forward (all ranks) seq " << p.cpu[0] << " pipelined " << p.cpu[1] << " comet " << p.cpu[2]
     << ", comet/pipelined " << p.t_pipe / p.t_comet << "x, hidden pipelined " << 100 * hidden(p, p.t_pipe)
     << "%, comet " << 100 * hidden(p, p.t_comet) << "%";
  return os.str();
}

// One (model, M) point: the layer, its calibrated link (and --tune), the timed loop until its share is on target,
// the outputs compared with sequential.
Point measure_point(Bench const &b, Model const &model, std::int64_t m, TuningRegistry &tuned) {
  auto const &o = b.o;
  int const me = b.world.rank();
  Point p;
  p.model = model.name;
  p.config = model.base;
  p.config.tokens = m;
  p.alpha = model.alpha;
  b.say("## " + model.name + " " + p.config.describe());
  auto const tokens = make_tokens(p.config, m, o.seed + 100 + static_cast<std::uint64_t>(me));
  auto const gate = model.gate_input();
  LayerOptions options;
  options.check_finite = false; // checked once below, not inside the timed runs
  options.pipeline_chunks = o.chunks.front();
  options.trace = !o.trace.empty();
  options.tune_on_first_use = true; // as the tools always did (a library user opts in)
  MoeLayer layer(p.config, b.paced, shard_weights(p.config, me, model.dense), options);
  p.comet = layer.comet_params();
  p.comet_source = layer.comet_params_source();
  Outputs const out(m, model.base.hidden);
  layer.forward(b.space, tokens, gate, out.seq, Schedule::sequential);
  p.imbalance = layer.routing().imbalance_std(b.world);
  // With --train the link is calibrated to the share of the training step (forward and backward).
  HostMatrix d_out = make_tokens(p.config, m, o.seed + 300 + static_cast<std::uint64_t>(me));
  p.cal = bench::calibrate_comm_share(b.space, layer, *tessel::paced_backend_of(b.paced), tokens, gate, o.share,
                                      o.latency_us * 1e-6, 5, b.say, o.train ? d_out : HostMatrix());
  if (o.tune) {
    auto const result = bench::tune_comet(b.space, layer, tokens, gate, o.iters, b.say);
    p.comet = result.best;
    p.comet_source = "tuned";
    std::ostringstream note;
    note << p.model << " W=" << b.world.size() << ": comet " << 1e3 * result.best_seconds << " ms at share " << o.share;
    tuned.set(TuningKey::of(p.config), result.best, note.str());
  }
  // The first comet forward decides the comet parameters (the cache, or tuning on first use): before any timed run,
  // whatever --warmup says.
  layer.forward(b.space, tokens, gate, out.comet, Schedule::comet);
  for (int i = 0; i < o.warmup; ++i) {
    layer.forward(b.space, tokens, gate, out.seq, Schedule::sequential);
    for (int c : o.chunks) {
      layer.set_pipeline_chunks(c);
      layer.forward(b.space, tokens, gate, out.pipe, Schedule::pipelined);
    }
    layer.forward(b.space, tokens, gate, out.comet, Schedule::comet);
  }
  // When the share measured in the loop misses the target, the link is refitted and the loop runs again (at most
  // 3 times).
  for (p.attempts = 1;; ++p.attempts) {
    summarize(o, run_loop(b, layer, tokens, gate, out), p);
    if (!refit_link(b, p))
      break;
  }
  // A shape no registry knows was decided on the first comet forward (the cache, or tuning on first use).
  if (!o.tune) {
    p.comet = layer.comet_params();
    p.comet_source = layer.comet_params_source();
  }
  p.wrong = count_wrong(b.world, out.pipe, out.seq, p.max_diff) + count_wrong(b.world, out.comet, out.seq, p.max_diff);
  b.say(describe(p));
  if (o.train)
    run_training_loop(b, layer, tokens, gate, out, d_out, p);
  if (!o.trace.empty())
    write_trace(b, layer, tokens, gate, out, d_out,
                o.trace + "." + model.name + "." + std::to_string(m) + ".rank" + std::to_string(me) + ".json");
  return p;
}

void print_table(Options const &o, int w, std::vector<Point> const &points) {
  std::printf("\n# MoE layer, %d ranks (EP %d x TP %d), link calibrated to share %.2f; times in ms (median of %d)\n", w,
              w / o.tp, o.tp, o.share, o.iters);
  std::printf("%-13s %6s %5s %6s %3s %4s %6s %9s %9s %6s %9s %9s %2s %9s %8s %8s %9s %9s %7s\n", "model", "M", "N", "K",
              "E", "topk", "imbal", "T_comp", "T_comm", "share", "seq", "pipelined", "C", "comet", "c/seq", "c/pipe",
              "hid_pipe", "hid_comet", "#wrong");
  for (auto const &p : points)
    std::printf("%-13s %6lld %5lld %6lld %3d %4d %6.3f %9.2f %9.2f %6.2f %9.2f %9.2f %2d %9.2f %7.2fx %7.2fx "
                "%8.1f%% %8.1f%% "
                "%7ld\n",
                p.model.c_str(), static_cast<long long>(p.config.tokens), static_cast<long long>(p.config.hidden),
                static_cast<long long>(p.config.ffn), p.config.experts, p.config.topk, p.imbalance, 1e3 * p.t_comp,
                1e3 * p.t_comm, p.t_comm / (p.t_comm + p.t_comp), 1e3 * p.t_seq, 1e3 * p.t_pipe, p.best_chunks,
                1e3 * p.t_comet, p.t_seq / p.t_comet, p.t_pipe / p.t_comet, 100 * hidden(p, p.t_pipe),
                100 * hidden(p, p.t_comet), p.wrong);
}

// No schedule of a step can beat each phase's slower part alone: max(T_comp, T_comm) of the forward plus that of the
// backward (the backward needs the forward's output).
double step_bound(Point const &p) { return std::max(p.t_comp, p.t_comm) + std::max(p.bwd_comp, p.bwd_comm); }

void print_training_table(Options const &o, int w, std::vector<Point> const &points) {
  std::printf("\n# training step (forward + backward), %d ranks (EP %d x TP %d), same link; times in ms (median of "
              "%d); share: communication alone of the step; bound: T_seq / (max(T_comp, T_comm) of the forward + "
              "that of the backward), c/bound: the bound's time / comet's; hidden = (T_seq - T) / T_comm alone, of "
              "the forward, the backward and the step\n",
              w, w / o.tp, o.tp, o.iters);
  std::printf("%-13s %6s %9s %9s %6s %9s %9s %9s %8s %8s %8s %8s %9s %9s %9s %9s %9s\n", "model", "M", "bT_comp",
              "bT_comm", "share", "seq", "pipelined", "comet", "c/seq", "c/pipe", "bound", "c/bound", "fhid_pipe",
              "fhid_com", "bhid_pipe", "bhid_com", "hid_com");
  for (auto const &p : points) {
    double const comm = p.t_comm + p.bwd_comm, share = comm / (comm + p.t_comp + p.bwd_comp);
    std::printf("%-13s %6lld %9.2f %9.2f %6.2f %9.2f %9.2f %9.2f %7.2fx %7.2fx %7.2fx %7.0f%% %8.1f%% %8.1f%% %8.1f%% "
                "%8.1f%% %8.1f%%\n",
                p.model.c_str(), static_cast<long long>(p.config.tokens), 1e3 * p.bwd_comp, 1e3 * p.bwd_comm, share,
                1e3 * p.step[0], 1e3 * p.step[1], 1e3 * p.step[2], p.step[0] / p.step[2], p.step[1] / p.step[2],
                p.step[0] / step_bound(p), 100 * step_bound(p) / p.step[2], 100 * hidden(p, p.t_pipe),
                100 * hidden(p, p.t_comet), 100 * (p.bwd[0] - p.bwd[1]) / p.bwd_comm,
                100 * (p.bwd[0] - p.bwd[2]) / p.bwd_comm, 100 * (p.step[0] - p.step[2]) / comm);
  }
}

tessel::Json point_json(Point const &p) {
  tessel::Json by_chunks = tessel::Json::object();
  for (auto const &[chunks, t] : p.t_pipe_by_chunks)
    by_chunks[std::to_string(chunks)] = t;
  return {{"model", p.model},
          {"M", p.config.tokens},
          {"N", p.config.hidden},
          {"K", p.config.ffn},
          {"E", p.config.experts},
          {"topk", p.config.topk},
          {"imbalance_std", p.imbalance},
          {"zipf_alpha", p.alpha},
          {"bandwidth_Bps", p.cal.link.bandwidth},
          {"t_comp_s", p.t_comp},
          {"t_comm_s", p.t_comm},
          {"t_comp_min_s", p.t_comp_min},
          {"share", p.t_comm / (p.t_comm + p.t_comp)},
          {"sequential_s", p.t_seq},
          {"pipelined_s", p.t_pipe},
          {"pipelined_best_chunks", p.best_chunks},
          {"pipelined_by_chunks_s", by_chunks},
          {"attempts", p.attempts},
          {"comet_s", p.t_comet},
          {"speedup_comet_vs_sequential", p.t_seq / p.t_comet},
          {"speedup_comet_vs_pipelined", p.t_pipe / p.t_comet},
          {"hidden_pipelined", hidden(p, p.t_pipe)},
          {"hidden_comet", hidden(p, p.t_comet)},
          {"comet_params", p.comet.describe()},
          {"comet_params_source", p.comet_source},
          {"cpu_s_per_forward", {{"sequential", p.cpu[0]}, {"pipelined", p.cpu[1]}, {"comet", p.cpu[2]}}},
          {"wrong", p.wrong},
          {"max_rel_diff", p.max_diff},
          {"training_step_s", {{"sequential", p.step[0]}, {"pipelined", p.step[1]}, {"comet", p.step[2]}}},
          {"backward_s", {{"sequential", p.bwd[0]}, {"pipelined", p.bwd[1]}, {"comet", p.bwd[2]}}},
          {"backward_t_comm_s", p.bwd_comm},
          {"training_step_bound_s", step_bound(p)},
          {"backward_t_comp_s", p.bwd_comp}};
}

tessel::Json results_json(Options const &o, int w, std::vector<Point> const &points) {
  tessel::Json doc{{"benchmark", "tessel-moe-bench"},
                   {"build", tessel::build_summary()},
                   {"ranks", w},
                   {"ep", w / o.tp},
                   {"tp", o.tp},
                   {"share", o.share},
                   {"latency_us", o.latency_us},
                   {"scale", o.scale},
                   {"iters", o.iters}};
  auto &list = doc["points"] = tessel::Json::array();
  for (auto const &p : points)
    list.push_back(point_json(p));
  return doc;
}

// --tune: the tuned entries merged into --registry.
void merge_tuned(Options const &o, TuningRegistry const &tuned) {
  TuningRegistry reg;
  if (tessel::input_exists(o.registry))
    reg = TuningRegistry::load(o.registry);
  reg.merge(tuned);
  reg.save(o.registry);
  std::printf("# %zu tuned entries merged into %s\n", tuned.entries().size(), o.registry.c_str());
}

std::string describe_run(Options const &o, int w) {
  std::ostringstream os;
  os << "# ranks " << w << " (EP " << w / o.tp << " x TP " << o.tp << "), scale 1/" << o.scale << ", share " << o.share
     << ", latency " << o.latency_us << " us, imbalance std " << o.imbalance << ", pipelined chunks";
  for (int c : o.chunks)
    os << " " << c;
  os << ", " << o.iters << " timed runs (median)";
  return os.str();
}

int run_host_bench(Options const &o) {
  auto const world = Communicator::world();
  int const w = world.size(), me = world.rank();
  TESSEL_REQUIRE(w % o.tp == 0, "--tp ", o.tp, " does not divide the ", w, " ranks");
  Say const say = [me](std::string const &line) {
    if (me == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  say("# tessel-moe-bench: " + tessel::build_summary());
  say(describe_run(o, w));
  Bench const b{o, world, tessel::make_paced_communicator(world.split(0, me), tessel::LinkModel{0.0, 0.0}),
                HostExecSpace(), say};
  std::vector<Point> points;
  TuningRegistry tuned;
  for (auto const &name : o.models) {
    auto const model = make_model(b, name);
    for (auto m : o.tokens)
      points.push_back(measure_point(b, model, m, tuned));
  }
  if (me == 0) {
    print_table(o, w, points);
    if (o.train)
      print_training_table(o, w, points);
    if (!o.json.empty()) {
      tessel::write_json(o.json, results_json(o, w, points));
      std::printf("# results written to %s\n", o.json.c_str());
    }
    if (o.tune)
      merge_tuned(o, tuned);
  }
  return std::any_of(points.begin(), points.end(), [](Point const &p) { return p.wrong != 0; }) ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-moe-bench", argc, argv, [](tessel::CommandLine &cl) {
    std::string const backend = cl.get("backend", "host");
    TESSEL_REQUIRE_USAGE(backend == "host" || backend == "cuda", "--backend must be host or cuda, got '", backend, "'");
    if (backend == "cuda")
      return tessel::moe::bench::run_cuda_bench(cl);
    if (cl.flag({"help", 'h'})) {
      usage();
      return 0;
    }
    return run_host_bench(parse(cl));
  });
}

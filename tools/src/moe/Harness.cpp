#include <tessel/tools/moe/Harness.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

namespace tessel::moe::bench {

tessel::Json trace_events(ForwardStats const &stats, double offset) {
  auto events = tessel::Json::array();
  auto const add = [&](double begin, double end, std::string const &what) {
    events.push_back({{"begin", offset + begin}, {"end", offset + end}, {"what", what}});
  };
  if (stats.trace.empty() && stats.dispatch + stats.experts + stats.combine > 0) {
    double t = 0;
    for (auto const &[length, what] :
         std::vector<std::pair<double, std::string>>{{stats.route, "route"},
                                                     {stats.dispatch, "dispatch (all-to-all)"},
                                                     {stats.experts, "experts"},
                                                     {stats.combine, "combine (all-to-all)"},
                                                     {stats.reduce, "final sum"}}) {
      add(t, t + length, what);
      t += length;
    }
  }
  for (auto const &e : stats.trace)
    add(e.begin, e.end, e.what);
  return events;
}

namespace {

template <class... Parts> std::string text(Parts const &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// The layer's communication and computation alone; with an output gradient \p d_out, of its training step (forward
// and backward).
template <class ExecSpace>
AloneTimes alone_times(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate,
                       ConstHostMatrix d_out, int repeats, bool comm, bool comp) {
  auto alone = layer.measure_alone(space, tokens, gate, repeats, comm, comp);
  if (d_out.data() == nullptr)
    return alone;
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::calibration_out"), tokens.extent(0),
                 tokens.extent(1));
  layer.forward(space, tokens, gate, out, Schedule::sequential);
  auto const backward = layer.measure_backward_alone(space, d_out, repeats, comm, comp);
  alone.comm += backward.comm;
  alone.comp += backward.comp;
  alone.comm_min += backward.comm_min;
  alone.comp_min += backward.comp_min;
  return alone;
}

// Communication time grows as the bandwidth shrinks, but not affinely in 1/bandwidth (paced transfers overlap the
// fixed per-message costs), so a secant through (0, intercept) can overshoot back and forth. Instead the target is
// bracketed in x = 1/bandwidth and the bracket narrowed by interpolation (regula falsi, every step kept at least 10%
// inside the bracket so that it shrinks).
struct Bracket {
  double target;
  double x_fast = 0.0, t_fast;        // x with t below the target (x = 0: unlimited)
  double x_slow = -1.0, t_slow = 0.0; // x with t above the target (none yet)
  Bracket(double target_time, double intercept) : target(target_time), t_fast(intercept) {}
  // The x to measure after communication took \p t at \p x.
  double next(double x, double t) {
    if (t > target) {
      x_slow = x;
      t_slow = t;
    } else {
      x_fast = x;
      t_fast = t;
    }
    if (x_slow < 0.0)
      return 4.0 * x; // never above the target yet: a 4x slower link
    double const f = std::clamp((target - t_fast) / (t_slow - t_fast), 0.1, 0.9);
    return x_fast + f * (x_slow - x_fast);
  }
};

} // namespace

template <class ExecSpace, class Check>
Calibration calibrate_comm_share(ExecSpace const &space, MoeLayer &layer, PacedBackend &link, ConstHostMatrix tokens,
                                 GateInput const &gate, double share, double latency, int repeats,
                                 std::function<void(std::string const &)> const &progress, ConstHostMatrix d_out) {
  TESSEL_REQUIRE(share > 0.0 && share <= max_comm_share, "calibrate_comm_share: share must be in (0, ", max_comm_share,
                 "], got ", share);
  auto const say = [&](auto const &...parts) {
    if (progress)
      progress(text(parts...));
  };
  Calibration cal;
  // Latency only: the intercept of T_comm(1/B), and computation alone. Computation alone is the fastest repetition,
  // the one least disturbed by other processes on a shared machine (communication on the emulated link is paced by
  // sleeps and barely varies).
  link.set_link(LinkModel{0.0, latency});
  auto const base = alone_times(space, layer, tokens, gate, d_out, repeats, true, true);
  cal.t_comp = base.comp_min;
  cal.t_comm_unlimited = base.comm_min;
  double const target = share / (1.0 - share) * cal.t_comp;
  cal.measurements = 1;
  say("calibration: compute alone ", 1e3 * cal.t_comp, " ms, communication at unlimited bandwidth ",
      1e3 * cal.t_comm_unlimited, " ms, target communication ", 1e3 * target, " ms (share ", share, ")");
  if (cal.t_comm_unlimited >= 0.95 * target) {
    cal.link = LinkModel{0.0, latency};
    cal.t_comm = cal.t_comm_unlimited;
    cal.share = cal.t_comm / (cal.t_comm + cal.t_comp);
    say("calibration: latency alone exceeds the target share; bandwidth left unlimited");
    return cal;
  }
  // Times are the fastest repetition (maximum over ranks, so every rank takes the same decisions): on a loaded
  // machine medians carry other processes' time slices. The closest point measured is kept when no round lands
  // within 5%.
  Bracket bracket(target, cal.t_comm_unlimited);
  double bandwidth = 1e7, best_bandwidth = 0.0, best_t = std::numeric_limits<double>::infinity();
  double slowest = bandwidth; // the slowest link measured
  int const rounds = 10;
  for (int round = 0; round < rounds; ++round) {
    slowest = std::min(slowest, bandwidth);
    link.set_link(LinkModel{bandwidth, latency});
    double const t = alone_times(space, layer, tokens, gate, d_out, repeats, true, false).comm_min;
    ++cal.measurements;
    say("calibration: ", bandwidth / 1e6, " MB/s -> communication ", 1e3 * t, " ms");
    if (std::abs(t - target) < std::abs(best_t - target)) {
      best_bandwidth = bandwidth;
      best_t = t;
    }
    if (std::abs(t - target) <= 0.05 * target)
      break;
    double const next_x = bracket.next(1.0 / bandwidth, t);
    // All ranks must set the same link: agree on rank 0's value.
    bandwidth =
        layer.communicator().allreduce_value(layer.communicator().rank() == 0 ? 1.0 / next_x : 0.0, ReduceOp::sum);
  }
  TESSEL_REQUIRE(std::abs(best_t - target) <= 0.05 * target || bracket.x_slow >= 0.0,
                 "calibrate_comm_share: communication time (", 1e3 * best_t, " ms) does not reach the target ",
                 1e3 * target, " ms even at ", slowest / 1e6, " MB/s after ", rounds, " measurements (",
                 1e3 * cal.t_comm_unlimited,
                 " ms unlimited): the machine is too noisy to calibrate the link (run the calibration on a less "
                 "loaded machine)");
  cal.link = LinkModel{best_bandwidth, latency};
  link.set_link(cal.link);
  cal.t_comm = best_t;
  cal.share = best_t / (best_t + cal.t_comp);
  return cal;
}

double layer_memory_bytes(MoeConfig const &config, bool dense) {
  auto const d = [](auto v) { return static_cast<double>(v); };
  double const n = d(config.hidden), k = d(config.ffn), m = d(config.tokens), topk = d(config.topk);
  double const k0 = (config.gated ? 2.0 : 1.0) * k, experts = d(config.experts);
  double const shard = experts / d(config.ep) * n * (k0 + k) / d(config.tp) * 4.0;
  // Tokens and output; rows sent, received and their outputs (topk per token); hidden rows; combine both ways.
  double const rows = m * n * 4.0 * (2.0 + 3.0 * topk + 2.0) + m * topk * k0 / d(config.tp) * 4.0;
  return shard + rows + (dense ? experts * n * (k0 + k) * 4.0 : 0.0);
}

template <class ExecSpace, class Check>
double time_schedule(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate,
                     HostMatrix out, Schedule schedule, int iters, int warmup, std::vector<double> *runs) {
  TESSEL_REQUIRE(iters >= 1 && warmup >= 0, "time_schedule: need iters >= 1 and warmup >= 0");
  auto const &comm = layer.communicator();
  for (int i = 0; i < warmup; ++i)
    layer.forward(space, tokens, gate, out, schedule);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    comm.barrier();
    auto const t0 = std::chrono::steady_clock::now();
    layer.forward(space, tokens, gate, out, schedule);
    double const mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    times.push_back(comm.allreduce_value(mine, ReduceOp::max));
  }
  if (runs != nullptr)
    *runs = times;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <class ExecSpace, class Check>
CometSearchResult tune_comet(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate,
                             int rounds, std::function<void(std::string const &)> const &progress) {
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::tune_out"), tokens.extent(0),
                 tokens.extent(1));
  CometSearchOptions options;
  options.rounds = rounds;
  options.start = layer.comet_params();
  options.progress = progress;
  auto const result =
      search_comet(layer.communicator(), layer.config(), "host", options, [&](CometParams const &params) {
        layer.set_comet_params(params);
        layer.forward(space, tokens, gate, out, Schedule::comet);
      });
  layer.set_comet_params(result.best);
  return result;
}

#define TESSEL_MOE_INSTANTIATE_CALIBRATION(SPACE)                                                                      \
  template Calibration calibrate_comm_share(SPACE const &, MoeLayer &, PacedBackend &, ConstHostMatrix,                \
                                            GateInput const &, double, double, int,                                    \
                                            std::function<void(std::string const &)> const &, ConstHostMatrix);        \
  template double time_schedule(SPACE const &, MoeLayer &, ConstHostMatrix, GateInput const &, HostMatrix, Schedule,   \
                                int, int, std::vector<double> *);                                                      \
  template CometSearchResult tune_comet(SPACE const &, MoeLayer &, ConstHostMatrix, GateInput const &, int,            \
                                        std::function<void(std::string const &)> const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_CALIBRATION)

} // namespace tessel::moe::bench

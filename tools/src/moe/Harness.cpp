#include <tessel/tools/moe/Harness.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

namespace tessel::moe::bench {

tessel::Json trace_events(ForwardStats const &st, double offset) {
  auto events = tessel::Json::array();
  auto const add = [&](double begin, double end, std::string const &what) {
    events.push_back({{"begin", offset + begin}, {"end", offset + end}, {"what", what}});
  };
  if (st.trace.empty() && st.dispatch + st.experts + st.combine > 0) {
    double t = 0;
    for (auto const &[length, what] :
         std::vector<std::pair<double, std::string>>{{st.route, "route"},
                                                     {st.dispatch, "dispatch (all-to-all)"},
                                                     {st.experts, "experts"},
                                                     {st.combine, "combine (all-to-all)"},
                                                     {st.reduce, "final sum"}}) {
      add(t, t + length, what);
      t += length;
    }
  }
  for (auto const &e : st.trace)
    add(e.begin, e.end, e.what);
  return events;
}

template <class ExecSpace, class Check>
Calibration calibrate_comm_share(ExecSpace const &space, MoeLayer &layer, PacedBackend &link, ConstHostMatrix tokens,
                                 GateInput const &gate, double share, double latency, int repeats,
                                 std::function<void(std::string const &)> const &progress, ConstHostMatrix d_out) {
  TESSEL_REQUIRE(share > 0.0 && share < 1.0, "calibrate_comm_share: share must be in (0, 1), got ", share);
  // The layer's communication and computation alone; with an output gradient, of its training step (forward and
  // backward).
  auto const measure_alone = [&](int reps, bool comm, bool comp) {
    auto alone = layer.measure_alone(space, tokens, gate, reps, comm, comp);
    if (d_out.data() != nullptr) {
      HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::calibration_out"), tokens.extent(0),
                     tokens.extent(1));
      layer.forward(space, tokens, gate, out, Schedule::sequential);
      auto const backward = layer.measure_backward_alone(space, d_out, reps, comm, comp);
      alone.comm += backward.comm;
      alone.comp += backward.comp;
      alone.comm_min += backward.comm_min;
      alone.comp_min += backward.comp_min;
    }
    return alone;
  };
  auto const say = [&](std::string const &what) {
    if (progress)
      progress(what);
  };
  Calibration cal;
  // Latency only: the intercept of T_comm(1/B), and computation alone.
  link.set_link(LinkModel{0.0, latency});
  // Computation alone: the fastest repetition, the one least disturbed by other processes on a shared machine
  // (communication on the emulated link is paced by sleeps and barely varies).
  auto const base = measure_alone(repeats, true, true);
  cal.t_comp = base.comp_min;
  double const intercept = base.comm_min;
  cal.t_comm_unlimited = intercept;
  double const target = share / (1.0 - share) * cal.t_comp;
  cal.measurements = 1;
  {
    std::ostringstream os;
    os << "calibration: compute alone " << 1e3 * cal.t_comp << " ms, communication at unlimited bandwidth "
       << 1e3 * intercept << " ms, target communication " << 1e3 * target << " ms (share " << share << ")";
    say(os.str());
  }
  if (intercept >= 0.95 * target) {
    cal.link = LinkModel{0.0, latency};
    cal.t_comm = intercept;
    cal.share = intercept / (intercept + cal.t_comp);
    say("calibration: latency alone exceeds the target share; bandwidth left unlimited");
    return cal;
  }
  // Communication time grows as the bandwidth shrinks, but not affinely in 1/bandwidth (paced transfers overlap the
  // fixed per-message costs), so a secant through (0, intercept) can overshoot back and forth. Instead the target
  // is bracketed in x = 1/bandwidth and the bracket narrowed by interpolation (regula falsi, every step kept at
  // least 10% inside the bracket so it shrinks). Times are the fastest repetition (maximum over ranks, so every
  // rank takes the same decisions): on a loaded machine medians carry other processes' time slices. The closest
  // point measured is kept when no round lands within 5%.
  double bandwidth = 1e7;
  double x_fast = 0.0, t_fast = intercept; // x with t below the target (x = 0: unlimited)
  double x_slow = -1.0, t_slow = 0.0;      // x with t above the target (none yet)
  double best_bandwidth = 0.0, best_t = std::numeric_limits<double>::infinity();
  double slowest = bandwidth; // the slowest link measured
  int const rounds = 10;
  for (int round = 0; round < rounds; ++round) {
    slowest = std::min(slowest, bandwidth);
    link.set_link(LinkModel{bandwidth, latency});
    double const t = measure_alone(repeats, true, false).comm_min;
    ++cal.measurements;
    {
      std::ostringstream os;
      os << "calibration: " << bandwidth / 1e6 << " MB/s -> communication " << 1e3 * t << " ms";
      say(os.str());
    }
    if (std::abs(t - target) < std::abs(best_t - target)) {
      best_bandwidth = bandwidth;
      best_t = t;
    }
    if (std::abs(t - target) <= 0.05 * target)
      break;
    double const x = 1.0 / bandwidth;
    if (t > target) {
      x_slow = x;
      t_slow = t;
    } else {
      x_fast = x;
      t_fast = t;
    }
    double next_x;
    if (x_slow < 0.0) {
      next_x = 4.0 * x; // never above the target yet: a 4x slower link
    } else {
      double const f = std::clamp((target - t_fast) / (t_slow - t_fast), 0.1, 0.9);
      next_x = x_fast + f * (x_slow - x_fast);
    }
    // All ranks must set the same link: agree on rank 0's value.
    bandwidth =
        layer.communicator().allreduce_value(layer.communicator().rank() == 0 ? 1.0 / next_x : 0.0, ReduceOp::sum);
  }
  bool const converged = std::abs(best_t - target) <= 0.05 * target;
  TESSEL_REQUIRE(converged || x_slow >= 0.0, "calibrate_comm_share: communication time (", 1e3 * best_t,
                 " ms) does not reach the target ", 1e3 * target, " ms even at ", slowest / 1e6, " MB/s after ", rounds,
                 " measurements (", 1e3 * intercept,
                 " ms unlimited): the machine is too noisy to calibrate the link (run the calibration on a less "
                 "loaded machine)");
  bandwidth = best_bandwidth;
  double const t_comm = best_t;
  cal.link = LinkModel{bandwidth, latency};
  link.set_link(cal.link);
  cal.t_comm = t_comm;
  cal.share = t_comm / (t_comm + cal.t_comp);
  return cal;
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
TuneResult tune_comet(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate, int iters,
                      std::function<void(std::string const &)> const &progress) {
  auto const &config = layer.config();
  HostMatrix out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::tune_out"), tokens.extent(0),
                 tokens.extent(1));
  TuneResult result;
  auto const measure = [&](CometParams const &p) {
    layer.set_comet_params(p);
    double const t = time_schedule(space, layer, tokens, gate, out, Schedule::comet, iters, 1);
    result.measured.emplace_back(p, t);
    if (progress) {
      std::ostringstream os;
      os << "tune: " << p.describe() << " -> " << 1e3 * t << " ms";
      progress(os.str());
    }
    return t;
  };
  result.best = layer.comet_params();
  result.best_seconds = measure(result.best);
  // Start from the better of the current parameters and the fallback rule: the current ones may have been tuned
  // under another transport or machine, and one knob at a time cannot always walk back from them.
  auto const fallback = fallback_params(config);
  if (!(fallback == result.best)) {
    double const t = measure(fallback);
    if (t < result.best_seconds) {
      result.best = fallback;
      result.best_seconds = t;
    }
  }
  auto const try_values = [&](auto set, auto const &values) {
    for (auto v : values) {
      auto p = result.best;
      set(p, v);
      if (p == result.best)
        continue;
      try {
        p.validate(config);
      } catch (Exception const &) {
        continue;
      }
      double const t = measure(p);
      if (t < result.best_seconds) {
        result.best = p;
        result.best_seconds = t;
      }
    }
  };
  std::vector<int> splits;
  for (int s : {1, 2, 4, 8})
    if (config.hidden / s >= 32)
      splits.push_back(s);
  std::vector<std::int64_t> tiles{128, 256, 512, 1024};
  // Workers first: whether a communication thread competes with computation changes every other timing.
  try_values([](CometParams &p, int v) { p.comm_workers = v; }, std::vector<int>{0, 1, 2});
  try_values([](CometParams &p, int v) { p.n_splits = v; }, splits);
  try_values([](CometParams &p, int v) { p.m_splits = v; }, std::vector<int>{1, 2, 4});
  try_values([](CometParams &p, std::int64_t v) { p.tile_m = v; }, tiles);
  try_values([](CometParams &p, PlanPolicy v) { p.policy = v; },
             std::vector<PlanPolicy>{PlanPolicy::critical_path, PlanPolicy::local_first});
  try_values([](CometParams &p, int v) { p.in_flight = v; }, std::vector<int>{0, 4});
  // A second look at the split count, which interacts with the tile size.
  try_values([](CometParams &p, int v) { p.n_splits = v; }, splits);
  layer.set_comet_params(result.best);
  return result;
}

#define TESSEL_MOE_INSTANTIATE_CALIBRATION(SPACE)                                                                      \
  template Calibration calibrate_comm_share(SPACE const &, MoeLayer &, PacedBackend &, ConstHostMatrix,                \
                                            GateInput const &, double, double, int,                                    \
                                            std::function<void(std::string const &)> const &, ConstHostMatrix);        \
  template double time_schedule(SPACE const &, MoeLayer &, ConstHostMatrix, GateInput const &, HostMatrix, Schedule,   \
                                int, int, std::vector<double> *);                                                      \
  template TuneResult tune_comet(SPACE const &, MoeLayer &, ConstHostMatrix, GateInput const &, int,                   \
                                 std::function<void(std::string const &)> const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_CALIBRATION)

} // namespace tessel::moe::bench

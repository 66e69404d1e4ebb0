#ifndef TESSEL_TOOLS_MOE_HARNESS_HPP
#define TESSEL_TOOLS_MOE_HARNESS_HPP

// The measurement harness of the MoE tools (tessel-moe, tessel-moe-bench), which own the emulated link: calibrating
// the link so that communication is a chosen share of a layer's sequential time, timing a schedule, and tuning the
// comet parameters by measurement. The library only runs layers; the link is passed in by its owner.

#include <tessel/moe/CometSearch.hpp>
#include <tessel/moe/MoeLayer.hpp>

#include <tessel/core/Json.hpp>
#include <tessel/core/PacedCommunicator.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tessel::moe::bench {

/// \brief Result of a calibration (times in seconds, maximum over ranks).
struct Calibration {
  LinkModel link;                ///< the link set on the emulated link
  double t_comp = 0.0;           ///< computation alone
  double t_comm = 0.0;           ///< communication alone at \p link
  double t_comm_unlimited = 0.0; ///< communication alone at unlimited bandwidth (latency and software only)
  double share = 0.0;            ///< t_comm / (t_comp + t_comm) achieved
  int measurements = 0;
};

/// \brief The largest communication share calibrate_comm_share() takes: every measurement of communication alone at
/// a share s takes s / (1 - s) times the computation (19x at 0.95; a million times at 0.999999, which calibrated for
/// hours), and the calibration takes up to 10 rounds of them.
constexpr double max_comm_share = 0.95;

/// \brief Measures \p layer's computation alone (the fastest of \p repeats runs: on a shared machine, the one
/// least disturbed by other processes) and its communication alone, then sets the bandwidth of \p link, the
/// emulated link under the layer's communicator, so that communication is the fraction \p share of the sequential layer
/// (T_comm = share / (1 - share) x T_comp), with \p latency seconds per message. The communication time is
/// bracketed in 1/bandwidth and narrowed until within 5% (at most 10 rounds; otherwise the closest point measured).
/// Times are the fastest repetitions, so a loaded machine still calibrates. When latency alone already
/// exceeds the target, the bandwidth is left unlimited and the achieved share is reported. Collective.
/// With an output gradient \p d_out, the share is that of the training step: communication and computation alone
/// are the forward's plus the backward's (MoeLayer::measure_backward_alone). \p share must be in (0, max_comm_share].
/// \pre \p link paces layer.communicator() (make_paced_communicator, paced_backend_of)
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
Calibration calibrate_comm_share(ExecSpace const &space, MoeLayer &layer, PacedBackend &link, ConstHostMatrix tokens,
                                 GateInput const &gate, double share, double latency, int repeats = 3,
                                 std::function<void(std::string const &)> const &progress = {},
                                 ConstHostMatrix d_out = {});

/// \brief Median over \p iters runs of the layer time of \p schedule: each run starts after a barrier and lasts
/// until the slowest rank returns (maximum over ranks). \p warmup runs are not timed. \p runs (when given) receives
/// every run's time in order, so that a schedule whose time moves between levels shows it. Collective.
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
double time_schedule(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate,
                     HostMatrix out, Schedule schedule, int iters, int warmup = 1, std::vector<double> *runs = nullptr);

/// \brief The tools' --tune: search_comet() (CometSearch.hpp, the search first-use tuning runs within its budget)
/// with no time limit and \p rounds runs per candidate, on \p layer (its current communicator and link), starting
/// from the layer's current parameters. Leaves the best parameters set on the layer. Collective.
template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
CometSearchResult tune_comet(ExecSpace const &space, MoeLayer &layer, ConstHostMatrix tokens, GateInput const &gate,
                             int rounds = 3, std::function<void(std::string const &)> const &progress = {});

/// \brief About the bytes one rank allocates to run \p config's layer (its tokens and output, the rows it sends and
/// receives, the hidden rows and the combine, its expert shard; with \p dense also every expert at full size, as
/// the reference check needs), to refuse a layer this machine cannot hold before allocating it.
double layer_memory_bytes(MoeConfig const &config, bool dense);

/// \brief The timeline of one forward or backward as JSON events {begin, end, what} (seconds, plus \p offset): the
/// overlapped schedules' own timelines (LayerOptions::trace), the sequential forward's phases. The tools' --trace
/// files hold them; benchmarks/moe/plot_timeline.py draws them.
tessel::Json trace_events(ForwardStats const &stats, double offset);

} // namespace tessel::moe::bench

#endif

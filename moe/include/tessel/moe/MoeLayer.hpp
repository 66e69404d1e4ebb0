#ifndef TESSEL_MOE_MOELAYER_HPP
#define TESSEL_MOE_MOELAYER_HPP

/// \file MoeLayer.hpp
/// \brief A distributed MoE layer (routing, dispatch, expert FFN, combine) with three schedules that compute
/// the same function: sequential (Megatron), pipelined (Tutel / FasterMoE) and comet (COMET).

#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/LayerControls.hpp>
#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Communicator.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessel::moe {

/// \brief Options of a layer.
struct LayerOptions {
  /// Parameters of the comet schedule; unset: looked up in \p registry (see Tuning.hpp).
  std::optional<CometParams> comet;
  /// Registry for the lookup; nullptr: TuningRegistry::builtin().
  TuningRegistry const *registry = nullptr;
  /// Backend name of the registry key.
  std::string backend = "host";
  /// Token chunks of the pipelined schedule (Tutel's a2a_ffn_overlap_degree).
  int pipeline_chunks = 4;
  /// Communication threads of the pipelined schedule (0: the compute thread progresses the messages between
  /// experts, which wins when every core already runs a rank; see CometParams::comm_workers).
  int pipeline_comm_workers = 0;
  /// Check the tokens for NaN and infinity before each forward (collective: every rank reports the first bad
  /// value of any rank).
  bool check_finite = true;
  /// Record a timeline of the overlapped schedules' tiles and messages in ForwardStats::trace (for analysis).
  bool trace = false;
  /// \brief Opt-in (off by default: a library does nothing behind its user's back). Where neither \p comet nor the
  /// registry gives the comet parameters (the fallback rule would), look them up in the per-user cache, else tune
  /// them on the first comet forward (up to \p tune_budget seconds of extra forwards) and write the result to the
  /// cache file (\p tuning_cache, by default under the home directory): the rule is a guess, and on some machines
  /// and links it runs comet behind the pipelined schedule. The tools turn it on; the environment variable
  /// TESSEL_MOE_TUNE=off turns it off for a whole job.
  bool tune_on_first_use = false;
  /// Seconds the first-use search may take (no candidate is started that would end past it).
  double tune_budget = 3.0;
  /// The cache file; empty: default_tuning_cache_path().
  std::string tuning_cache;
};

/// \brief What the first comet forward's tuning did (MoeLayer::first_use_tuning()).
struct FirstUseTuning {
  bool ran = false;     ///< a search ran (not found in the cache)
  double seconds = 0.0; ///< wall time of the tuning forward, search and final run (maximum over ranks)
  int forwards = 0;     ///< layer executions it took
  std::string cache;    ///< the cache file read (and written when \p stored)
  bool stored = false;  ///< rank 0 wrote the result to \p cache
  /// Each candidate measured and its score (seconds per forward, maximum over ranks), in the order tried.
  std::vector<std::pair<CometParams, double>> measured;
};

/// \brief One interval of a forward's timeline (seconds since the forward started, this rank).
struct TraceEvent {
  double begin = 0.0; ///< start (s)
  double end = 0.0;   ///< end (s)
  std::string what;   ///< "layer0 s=1 e=3 rows 0-255", "layer1 s=1 block 2", "landed s=1 m=4", "wait"
};

/// \brief Where the last forward spent its time on this rank (seconds).
struct ForwardStats {
  Schedule schedule = Schedule::sequential; ///< the schedule that ran
  double total = 0.0;                       ///< the whole forward
  // Sequential: the phases in order. Overlapped schedules: route covers routing and packing; the others stay 0.
  double route = 0.0;        ///< routing (and, overlapped, packing)
  double dispatch = 0.0;     ///< sequential: the dispatch all-to-all
  double experts = 0.0;      ///< sequential: the expert GEMMs
  double combine = 0.0;      ///< sequential: the combine all-to-all
  double reduce = 0.0;       ///< sequential: the final top-k sum
  double compute_busy = 0.0; ///< overlapped schedules: time the compute thread computed
  double compute_wait = 0.0; ///< overlapped schedules: time the compute thread waited for data
  /// Overlapped schedules: CPU seconds the communication threads used (they should mostly sleep).
  double comm_cpu = 0.0;
  /// Expert rows this rank computed (sum over sources and local experts).
  std::int64_t rows = 0;
  /// Timeline, when LayerOptions::trace is set.
  std::vector<TraceEvent> trace;
};

/// \brief Communication alone and computation alone of one layer (seconds, maximum over ranks, median over
/// repetitions): the denominators of the hidden-communication fraction (T_sequential - T) / T_comm.
struct AloneTimes {
  double comm = 0.0; ///< communication alone
  double comp = 0.0; ///< computation alone
  // Minimum over the repetitions (of the maximum over ranks): the time least disturbed by other processes.
  double comm_min = 0.0; ///< communication alone, minimum over the repetitions
  double comp_min = 0.0; ///< computation alone, minimum over the repetitions
};

/// \brief Gradients of one backward on this rank (allocated by MoeLayer::backward on first use).
struct MoeGradients {
  /// [M, N] dL/d tokens of this rank: through the experts and, when the gate is a weight, through the gate.
  HostMatrix tokens;
  /// dL/d this rank's expert shards (the shapes of ExpertWeights: W0's gated half and up half, W1).
  ExpertWeights experts;
  /// [M, E] dL/d logits of this rank (the combine weights' and the load-balancing loss's share).
  HostMatrix logits;
  /// [N, E] dL/d gate weight, summed over all ranks (the gate is replicated); set when the forward was given a gate
  /// weight.
  HostMatrix gate_weight;
  /// [E] dL/d gate bias, summed over all ranks; set when the forward was given a gate with a bias.
  HostVector gate_bias;
};

/// \brief One MoE layer on a communicator of EP x TP ranks.
///
/// Construction is collective: it validates the configuration and checks that it is the same on every rank.
/// forward() is collective too. Every rank brings M tokens and receives their outputs; the schedules differ
/// only in how they overlap communication with computation, and exchange the same messages (the expert side
/// top-k-reduces its outputs per token before the combine in all three).
class MoeLayer : public LayerControls {
public:
  /// The layer of \p config on \p comm (EP x TP ranks) with this rank's expert shards \p weights (the layer keeps
  /// the Views; an optimizer updates them in place). Collective.
  MoeLayer(MoeConfig const &config, Communicator const &comm, ExpertWeights weights, LayerOptions options = {});
  ~MoeLayer();
  /// \name Move-only
  //@{
  /// Move-only.
  MoeLayer(MoeLayer &&) noexcept;
  MoeLayer &operator=(MoeLayer &&) noexcept;
  //@}

  /// \brief out = sum over each token's top-k experts of weight x FFN_e(token), for this rank's \p tokens
  /// [M, N]; \p out is [M, N]. Runs on \p space (and, for the overlapped schedules, on communication threads
  /// that only move bytes); any enabled host execution space. Throws TimeoutError naming the silent peers when a peer
  /// never answers.
  template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
  void forward(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out,
               Schedule schedule = Schedule::comet);

  /// \brief Gradients of the last forward's loss L = sum over ranks of <d_out, out> + aux_loss_coef x aux_loss:
  /// \p d_out [M, N] is dL/d out of this rank's tokens. Collective; runs on \p space like forward, under \p schedule
  /// (any: it need not be the forward's). The forward keeps what the backward needs (each expert's input rows, the
  /// routing, the tokens and gate it was given, which must not change in between); the backward recomputes GEMM0
  /// rather than keeping the hidden rows. \p aux_loss_coef adds Routing::aux_loss's gradient (through the softmax;
  /// its expert fractions are counts and carry none).
  template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
  void backward(ExecSpace const &space, ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule = Schedule::comet,
                double aux_loss_coef = 0.0);

  /// This rank's expert shards (views: an optimizer updates them in place).
  ExpertWeights const &weights() const;

  /// The communicator the layer was built on.
  Communicator const &communicator() const;
  /// Routing of the last forward.
  Routing const &routing() const;
  /// Where the last forward spent its time.
  ForwardStats const &stats() const;
  /// Where the last backward spent its time (the fields of ForwardStats: route is the gate's backward).
  ForwardStats const &backward_stats() const;
  /// Communication threads of the pipelined schedule (LayerOptions::pipeline_comm_workers).
  void set_pipeline_comm_workers(int workers);
  /// What first-use tuning did (see LayerOptions::tune_on_first_use); comet_params_source() says "cache" when the
  /// parameters came from the per-user cache.
  FirstUseTuning const &first_use_tuning() const;

  /// \brief Measures the layer's communication alone (route exchange, dispatch and combine all-to-alls with no
  /// computation between them) and computation alone (routing, packing, expert GEMMs, top-k reduction and
  /// final sum with no communication), \p repeats times each; either may be skipped (left 0). Collective.
  template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
  AloneTimes measure_alone(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int repeats = 3,
                           bool comm = true, bool comp = true);

  /// \brief measure_alone() for the backward of the last forward: its messages with no computation, and its
  /// computation (token and weight gradients, gate) with no messages. Collective; the last forward stays
  /// differentiable.
  template <class ExecSpace, class = host_execution_space_t<ExecSpace>>
  AloneTimes measure_backward_alone(ExecSpace const &space, ConstHostMatrix d_out, int repeats = 3, bool comm = true,
                                    bool comp = true);

  struct State;

private:
  std::unique_ptr<State> _state;
};

} // namespace tessel::moe

#endif

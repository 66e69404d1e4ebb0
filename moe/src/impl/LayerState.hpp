#ifndef TESSEL_MOE_SRC_IMPL_LAYERSTATE_HPP
#define TESSEL_MOE_SRC_IMPL_LAYERSTATE_HPP

// The host layer's state and the steps its schedules share (LayerState.cpp): routing and packing, the route
// messages, the baselines' expert computation, the combine layout and the final sum. Each schedule is one file:
// SequentialSchedule.cpp, PipelinedSchedule.cpp, CometSchedule.cpp. Template members are instantiated for every
// enabled host execution space in the file that defines them.

#include <tessel/moe/CometSearch.hpp>
#include <tessel/moe/MoeLayer.hpp>

#include "CommEngine.hpp"
#include "Kernels.hpp"
#include "LayerCore.hpp"

#include <tessel/core/Error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::moe::Impl {

using Clock = std::chrono::steady_clock;

// Tags of one forward (the messages of a forward all complete before it returns, so forwards never mix).
constexpr int tag_route = 1;       // + chunk
constexpr int tag_data = 1024;     // + message (comet) or chunk (pipelined)
constexpr int tag_combine = 16384; // + column block (comet) or chunk (pipelined)
constexpr int max_chunks = 1000;
constexpr std::int64_t max_messages = 15000;

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline std::size_t sz(std::int64_t i) { return static_cast<std::size_t>(i); }

// What a source sends along with its rows for one chunk: rows per local expert, its slot range, and per row
// the slot (distinct token) and combine weight.
struct SourceMeta {
  std::vector<std::int64_t> expert_rows;
  std::int64_t slot_begin = 0, slot_count = 0;
  std::vector<std::int32_t> slot;
  std::vector<float> weight;
  std::int64_t rows() const { return static_cast<std::int64_t>(slot.size()); }
  std::int64_t expert_offset(int e) const {
    return std::accumulate(expert_rows.begin(), expert_rows.begin() + e, std::int64_t{0});
  }
};

// Route message layout (int32 words): [E/EP row counts][slot_begin][slot_count][slot per row][weight bits per row]
std::vector<std::int32_t> encode_route(DispatchPlan const &plan, int chunk, int group);
std::size_t route_capacity(MoeConfig const &config, std::int64_t chunk_tokens);
SourceMeta decode_route(std::vector<std::int32_t> const &words, int local_experts, int source,
                        std::string const &context);

// The route messages of the overlapped schedules, received into in[c * W + s] and sent from out[c * W + d]; done
// counts the ones received. Declared before the engine that moves them, so that they outlive it.
struct RouteMessages {
  std::vector<std::vector<std::int32_t>> in, out;
  std::atomic<int> done{0};
};

// Grow-only flat workspace: forwards of the same shape reuse their memory.
float *ensure(Kokkos::View<float *, Kokkos::HostSpace> &view, char const *label, std::size_t size);

template <class T> std::vector<std::int64_t> exclusive_offsets(std::vector<T> const &sizes) {
  std::vector<std::int64_t> offsets(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    offsets[i + 1] = offsets[i] + static_cast<std::int64_t>(sizes[i]);
  return offsets;
}

// Runs \p f, prefixing the message of a tessel error with \p context (a TimeoutError keeps its type and peer).
template <class F> void with_context(std::string const &context, F &&f) {
  try {
    f();
  } catch (TimeoutError const &e) {
    throw TimeoutError(context + ": " + e.what(), e.peer());
  }
}

} // namespace tessel::moe::Impl

namespace tessel::moe {

// The shared settings (config, comet, pipeline_chunks) are the core's; options keeps the rest as given.
struct MoeLayer::State : Impl::LayerCore {
  using Clock = Impl::Clock;

  Communicator comm;
  ExpertWeights weights;
  LayerOptions options;
  Routing routing;
  DispatchPlan plan;
  ForwardStats stats;
  std::vector<std::vector<Impl::SourceMeta>> metas; // [chunk][source]
  Kokkos::View<float *, Kokkos::HostSpace> send_rows, x, xp, h, y, combine_send, combine_recv;
  Impl::Layer0Scratch scratch;
  std::vector<std::int64_t> x_off, send_off, recv_off; // per source / rank, in floats

  // What the last forward keeps for the backward: its tokens and gate, and where each (chunk, source, local expert)'s
  // input rows are (in x, or this rank's own rows in send_rows), at [(chunk * W + source) * E/EP + expert].
  struct Saved {
    bool valid = false;
    ConstHostMatrix tokens;
    GateInput gate;
    std::vector<float const *> rows;
  } saved;
  ForwardStats backward_stats;
  FirstUseTuning first_use;
  // The backward's buffers (BackwardRun.cpp): this rank's output gradient per group's slots, the received ones,
  // the rows' gradients kept for the weight-gradient GEMMs, and the combine-weight gradients.
  Kokkos::View<float *, Kokkos::HostSpace> grad_out, grad_in, grad_g, grad_aw, grad_dh, grad_pre, grad_q, grad_dx,
      grad_w_send, grad_w_recv;

  State(MoeConfig const &c, Communicator const &world)
      : LayerCore(c, "tessel::moe::MoeLayer", "host", Impl::max_chunks), comm(world) {}

  int rank() const { return comm.rank(); }
  int world() const { return comm.size(); }
  int group_of(int r) const { return config.group_of_rank(r); }
  static void check_pipeline_comm_workers(int workers) {
    TESSEL_REQUIRE(workers >= 0 && workers <= 8, "MoeLayer: pipeline_comm_workers must be in [0, 8], got ", workers);
  }
  std::string context(Schedule s) const {
    return tessel::Impl::concat("MoE layer forward (", name_of(s), " schedule) on rank ", rank(), " of ", world());
  }

  // Shared steps (LayerState.cpp).

  void check_inputs(ConstHostMatrix tokens, GateInput const &gate, HostMatrix out) const;
  // Collective: every rank learns the first non-finite token (and logit) of every rank.
  void check_finite(ConstHostMatrix tokens, GateInput const &gate) const;
  // Collective: every rank learns the first non-finite value of every rank's output gradient.
  void check_finite_gradient(ConstHostMatrix d_out) const;
  // Routing, dispatch plan and packing of the rows to send: everything before the first message.
  template <class ExecSpace>
  void prelude(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int chunks, bool finite,
               std::string const &context_text = {});

  // The start of an overlapped schedule: prelude() into \p chunks chunks, the stats reset (route: the time so far).
  // Returns when the forward started.
  template <class ExecSpace>
  Clock::time_point begin_overlapped(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, int chunks,
                                     Schedule schedule);

  std::vector<std::int32_t> own_route(int chunk) const { return Impl::encode_route(plan, chunk, group_of(rank())); }
  Impl::SourceMeta own_meta(int chunk) const {
    return Impl::decode_route(own_route(chunk), config.experts_per_group(), rank(), "own routing");
  }
  // Row pointer of chunk c's rows from this rank for its own group (local rows need no message).
  float const *local_rows(int chunk) const {
    return send_rows.data() + plan.block_begin(chunk, group_of(rank())) * config.hidden;
  }
  // Per source: combine send regions (slot-indexed rows of all chunks, block-major by column split).
  void layout_combine(std::vector<std::int64_t> const &source_slots);

  // The tail of the overlapped schedules: wait until every combine message has landed, stop the engine, then add
  // up the contributions (waiting and summing counted apart in the stats). Returns when each began.
  template <class ExecSpace>
  std::pair<Clock::time_point, Clock::time_point> finish_combines(ExecSpace const &space, Impl::CommEngine &engine,
                                                                  std::atomic<int> const &combines_left, HostMatrix out,
                                                                  std::vector<std::int64_t> const &split_cols);
  // out[t] = sum over ranks r (in rank order, so every schedule adds in the same order) of r's rows for t.
  template <class ExecSpace>
  void final_sum(ExecSpace const &space, HostMatrix out, std::vector<std::int64_t> const &split_cols,
                 bool self_in_send);
  // GroupGEMM0 -> activation -> GroupGEMM1 on rows [rows, N] of local expert e, in panels (baselines).
  template <class ExecSpace>
  void ffn_rows(ExecSpace const &space, int e, MatrixRef<float const> xin, MatrixRef<float> yout);
  // The baselines' expert computation of one chunk: rows of all sources permuted expert-major (Megatron's
  // permutation), one GEMM pair per expert, then the top-k reduction per source into the combine rows.
  template <class ExecSpace>
  void baseline_compute(ExecSpace const &space, int chunk, std::vector<float const *> const &source_rows,
                        std::function<void()> const &between_experts = {});

  // Blocking route exchange of one chunk (sequential schedule and measurements).
  void exchange_routes(int chunk);
  void dispatch_alltoallv();
  void combine_alltoallv();
  std::vector<float const *> sequential_sources() const;
  std::vector<std::int64_t> source_slots() const;
  // Decodes the route messages of every chunk (\p route_in[c * W + s]; this rank's own from the plan).
  void decode_metas(int chunks, std::vector<std::vector<std::int32_t>> const &route_in, std::string const &context);
  std::int64_t total_rows() const;
  // Posts the route messages of \p chunks chunks on \p engine: every receive, then the sends (control messages,
  // never queued), chunk-major or, with \p destination_major, destination-major.
  void post_routes(Impl::CommEngine &engine, int chunks, Impl::RouteMessages &routes, bool destination_major);

  // Records where the forward left each (chunk, source, expert)'s input rows (\p at(c, s, e)) for the backward.
  template <class At> void save_for_backward(ConstHostMatrix tokens, GateInput const &gate, At &&at) {
    int const chunks = static_cast<int>(metas.size()), w = world(), local_experts = config.experts_per_group();
    saved.tokens = tokens;
    saved.gate = gate;
    saved.rows.assign(Impl::sz(chunks * w * local_experts), nullptr);
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        for (int e = 0; e < local_experts; ++e)
          saved.rows[Impl::sz((c * w + s) * local_experts + e)] = at(c, s, e);
    saved.valid = true;
  }
  std::string backward_context(Schedule s) const {
    return tessel::Impl::concat("MoE layer backward (", name_of(s), " schedule) on rank ", rank(), " of ", world());
  }
  template <class ExecSpace>
  void backward(ExecSpace const &space, ConstHostMatrix d_out, MoeGradients &grads, Schedule schedule,
                double aux_loss_coef);
  template <class ExecSpace>
  AloneTimes measure_backward_alone(ExecSpace const &space, ConstHostMatrix d_out, int repeats, bool comm_part,
                                    bool comp_part);

  // LayerOptions::tune_on_first_use, unless TESSEL_MOE_TUNE=off (FirstUseTuning.cpp).
  static bool first_use_enabled(LayerOptions const &options);
  // The first comet forward while tune_pending: the cached parameters (returns false: the caller runs the forward),
  // or a search whose last run, with the winner, is the forward (returns true). Collective.
  template <class ExecSpace>
  bool comet_first_use(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out);
  // The per-user cache's parameters for \p key on \p machine (rank 0 reads, all ranks learn); collective.
  std::optional<CometParams> cached_comet(TuningKey const &key, MachineKey const &machine);
  // Rank 0 adds the search's winner (the parameters now set) to the cache.
  void store_comet(TuningKey const &key, CometSearchResult const &search);
  // The schedules, one file each.

  template <class ExecSpace>
  void forward_sequential(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out);
  template <class ExecSpace>
  void forward_pipelined(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out);
  template <class ExecSpace>
  void forward_comet(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate, HostMatrix out);
};

} // namespace tessel::moe

#endif

#ifndef TESSEL_MOE_SRC_IMPL_BACKWARDRUN_HPP
#define TESSEL_MOE_SRC_IMPL_BACKWARDRUN_HPP

// One backward of the host layer: the forward's messages reversed. Each token owner sends every EP group its output
// gradient per slot (one row per distinct token, as the forward's combine), cut into slot tiles; the expert side
// computes, per tile and local expert, GEMM0 again (x W0: recomputed, not kept), q = g W1^T, the activation's
// backward and dx = dpre W0^T, sums dx per slot and sends it back with the combine weights' gradients; the owner adds
// the ranks' token gradients in rank order (as the forward's final sum) and differentiates the gate. The weight
// gradients dW1 += (w act)^T g and dW0 += x^T dpre need nothing from another rank. What the schedules change is only
// the order of the tiles (compute_sequential, compute_pipelined, compute_comet, one file each):
//   sequential: every tile has landed before the first is computed, and the replies leave after the last;
//   pipelined:  chunk by chunk (the forward's chunks): a chunk is computed once its tiles landed and sent at once;
//   comet:      tile by tile as they land (local ones first, or, with the critical_path policy, landed remote ones
//               first; landed tiles that follow one are computed with it), each tile's token gradients sent the
//               moment they are done, and the weight-gradient GEMMs kept back to fill the time the compute thread
//               would otherwise wait.
#include "LayerState.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tessel::moe::Impl {

// Tags of one backward (its messages all complete before it returns).
constexpr int tag_grad_out = 1;   // + tile of the pair
constexpr int tag_grad_x = 10001; // + tile of the pair
constexpr int tag_grad_w = 20001; // + chunk
constexpr std::int64_t max_tiles = 9999;

struct Tile {
  int chunk = 0;
  std::int64_t slot_begin = 0, slot_end = 0; // slots of the source's numbering in its group
};

// The slot tiles of a source's chunks (the same list on both sides: from the plan at the owner, from the route
// messages at the expert side).
std::vector<Tile> slot_tiles(std::vector<std::pair<std::int64_t, std::int64_t>> const &chunk_slots, std::int64_t tile);

// What a backward runs: everything, or (for AloneTimes) its messages without the computation, or its computation
// without messages (every tile taken as landed, on whatever the receive buffers hold).
enum class Mode { full, comm_only, compute_only };

// Slots per tile of the comet backward (see BackwardRun.cpp).
std::int64_t comet_tile_slots(MoeConfig const &config, CometParams const &comet);

template <class ExecSpace> class BackwardRun {
public:
  BackwardRun(MoeLayer::State &layer, ExecSpace const &space, Schedule schedule, MoeGradients &grads, double aux,
              Mode mode = Mode::full)
      : layer(layer), space(space), schedule(schedule), grads(grads), aux(aux), mode(mode),
        context_text(layer.backward_context(schedule)), world(layer.world()), me(layer.rank()),
        local_experts(layer.config.experts_per_group()), chunks(static_cast<int>(layer.metas.size())),
        n(layer.config.hidden), ffn_per_rank(layer.config.ffn_per_rank()), c0(layer.config.gemm0_cols()),
        tile_slots(schedule == Schedule::comet ? comet_tile_slots(layer.config, layer.comet)
                                               : std::numeric_limits<std::int64_t>::max() / 2),
        engine(layer.comm,
               schedule == Schedule::comet       ? layer.comet.comm_workers
               : schedule == Schedule::pipelined ? layer.options.pipeline_comm_workers
                                                 : 0,
               schedule == Schedule::comet ? layer.comet.in_flight : 0, context_text) {}

  void run(ConstHostMatrix d_out) {
    t0 = Clock::now();
    layer.backward_stats = ForwardStats{};
    layer.backward_stats.schedule = schedule;
    allocate_gradients();
    layout();
    pack_output_gradient(d_out);
    post_receives();
    post_sends();
    compute();
    finish();
  }

private:
  using Meta = SourceMeta;
  Meta const &meta(int c, int s) const { return layer.metas[sz(c)][sz(s)]; }
  std::size_t block(int c, int s, int e) const { return sz((c * world + s) * local_experts + e); }

  void allocate_gradients();

  void layout();

  // The output gradient of this rank's tokens in each group's slot order (what the forward's combine returned).
  void pack_output_gradient(ConstHostMatrix d_out);

  float const *grad_rows_of(int s) const {
    return s == me ? god + out_off[sz(layer.group_of(me))] * n : gid + in_off[sz(s)] * n;
  }

  void post_receives();

  // Tile-major over the destinations, so that every rank can start on its first tile early.
  void post_sends();

  // The order of the tiles, the schedule's own part: compute() runs the one of `schedule`.
  void compute();
  void compute_sequential(); // SequentialBackward.cpp
  void compute_pipelined();  // PipelinedBackward.cpp
  void compute_comet();      // CometBackward.cpp

  // The end of a run of landed tiles of source s from tile t: the following tiles of the same chunk that \p take
  // accepts, up to four tiles' worth of slots.
  template <class Take> int merge_end(int s, int t, Take &&take) {
    auto const &list = source_tiles[sz(s)];
    std::int64_t slots = list[sz(t)].slot_end - list[sz(t)].slot_begin;
    int end = t + 1;
    while (end < static_cast<int>(list.size()) && list[sz(end)].chunk == list[sz(t)].chunk &&
           slots + (list[sz(end)].slot_end - list[sz(end)].slot_begin) <= 4 * tile_slots && take(end)) {
      slots += list[sz(end)].slot_end - list[sz(end)].slot_begin;
      ++end;
    }
    return end;
  }

  template <class Ready> void wait_until(Ready &&is_ready) {
    auto const wait0 = Clock::now();
    engine.wait(is_ready);
    layer.backward_stats.compute_wait += since(wait0);
    if (layer.options.trace)
      layer.backward_stats.trace.push_back({seconds_between(t0, wait0), since(t0), "wait"});
  }

  // Tile t of source s: for each local expert, its rows whose slots lie in the tile (contiguous: an expert's rows
  // are in token order, and so are the slots), through the FFN's backward; their token gradients summed per slot.
  void tile(int s, int t, bool send_now) { tiles(s, t, t + 1, send_now); }

  // Tiles [t_begin, t_end) of source s, consecutive in one chunk (so their slots are one range): computed as one, each
  // sent as its own message.
  void tiles(int s, int t_begin, int t_end, bool send_now);

  // All tiles of (chunk c, source s) are done: its combine-weight gradients go back.
  void chunk_done(int c, int s, bool send_now = true);

  // c = op(a) op(b) + beta c. Without a communication thread, a transport that moves a large message only while
  // both sides call MPI would stall during a long GEMM: while bytes are moving, the GEMM runs in column panels of
  // about 2^28 multiply-adds (each packs only its part of b) with progress in between, as the forward's layer0.
  void gemm_panels(Op op_a, MatrixRef<float const> a, Op op_b, MatrixRef<float const> b, float beta,
                   MatrixRef<float> c);

  struct Piece {
    int c, s, e;
    std::int64_t begin, end; // rows of the (chunk, source, expert)
  };

  // dW1_e += (w act)^T g and dW0_e += x^T dpre over one finished piece of rows.
  void weight_gradient_piece();

  void weight_gradients_all();

  void finish();

  // dL/d combine weight per (token, k), summed over the group's ranks in rank order; then the top-k softmax's
  // backward (with its renormalization), the load-balancing loss's, and the gate's.
  void gate_backward();
  // dL/d combine weight per (token, k) [M, topk], summed over the group's ranks in rank order.
  std::vector<float> combine_weight_gradients() const;
  // The load-balancing loss's dL/dp_e per token (summed over all ranks' tokens; zero without it).
  std::vector<double> aux_gradient() const;
  // grads.logits from the combine weights' gradients \p dw and the load-balancing loss's \p aux_grad.
  void logit_gradients(std::vector<float> const &dw, std::vector<double> const &aux_grad);
  // Through a gate given as a weight: the tokens' share, the weight's and the bias's gradients (summed over ranks).
  void gate_weight_gradients();

  MoeLayer::State &layer;
  ExecSpace const &space;
  Schedule const schedule;
  MoeGradients &grads;
  double const aux;
  Mode const mode;
  std::string const context_text;
  int const world, me, local_experts, chunks;
  std::int64_t const n, ffn_per_rank, c0, tile_slots;
  Clock::time_point t0;
  std::vector<std::int64_t> out_off, in_off, slots_of, rows_at, w_send_off, w_recv_off, group_rows;
  std::vector<std::vector<Tile>> owner_tiles, source_tiles;
  float *gd = nullptr, *awd = nullptr, *dhd = nullptr, *pred = nullptr, *qd = nullptr, *dxd = nullptr, *wsd = nullptr,
        *wrd = nullptr, *god = nullptr, *gid = nullptr;
  std::vector<int> tiles_left_of;
  std::deque<Piece> pieces;
  std::vector<std::function<void()>> deferred_sends;
  // What the communication threads use is declared before the engine, so it outlives it.
  std::vector<std::vector<char>> landed;
  std::vector<std::pair<int, int>> ready;
  int tiles_expected = 0, tiles_landed = 0;
  std::atomic<int> replies_left{0};
  std::vector<TraceEvent> landed_at;
  CommEngine engine;
};

} // namespace tessel::moe::Impl

#endif

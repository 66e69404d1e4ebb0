#ifndef TESSEL_MOE_CUDA_RANKDRIVER_HPP
#define TESSEL_MOE_CUDA_RANKDRIVER_HPP

// One rank's device MoE layer, forward and backward: the steps both device layers run (validate, route, plan,
// upload, poison, pack and signal, the schedule, the final sum, the copy out; the backward's lists, packing, tiles,
// weight gradients, replies and the owner's end) over a Transport, the one part in which they differ:
// VirtualRanksLayer drives W of these in one process over a table of in-process peers, NcclMoeLayer one per process
// over an NCCL symmetric window and NCCL's all-to-alls. Each step only enqueues work on the rank's streams, so a
// layer driving several ranks runs a step on every rank before the next (events recorded before they are waited
// for). Host code.
#include "Backward.hpp"
#include "DeviceLayerCore.hpp"
#include "Rank.hpp"
#include "WorkPlan.hpp"

#include <tessel/moe/Router.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessel::moe::cuda::Impl {

/// How one rank's device work reaches the other ranks. Every step enqueues work on the stream it is given.
class Transport {
public:
  virtual ~Transport() = default;

  /// This rank's symmetric allocation (SymmetricLayout) and the device table of every rank's (the fused kernels').
  virtual char *local() const = 0;
  virtual char *const *peer_table() const = 0;
  /// How many ranks share this rank's GPU (the fused kernels' grid and the final sum's block budget).
  virtual int sharing() const = 0;

  /// Orders \p stream after the packed rows (RankState::packed) of every rank whose rows this rank reads.
  virtual void wait_packed(cudaStream_t stream) = 0;
  /// Token chunk \p ch's dispatch rows of every source for this rank's group into its x_recv (\p work: its lists).
  virtual void dispatch(RankWork const &work, int ch, cudaStream_t stream) = 0;
  /// Token chunk \p ch's reduced rows (combine_send) into the owners' combine regions.
  virtual void combine(RankWork const &work, int ch, cudaStream_t stream) = 0;
  /// Orders \p stream after every rank's combine into this rank (RankState::combined).
  virtual void wait_combined(cudaStream_t stream) = 0;

  /// The unit of the backward's messages: true, one (source, chunk) tile; false, one token chunk of every source,
  /// which gradients_in moves at the chunk's first tile and replies_out at its last.
  virtual bool tile_messages() const = 0;
  /// Orders \p stream after the packed output gradients (RankBackward::packed) of every rank this one reads.
  virtual void wait_gradients_packed(cudaStream_t stream) = 0;
  /// Source \p source's output gradients of chunk \p ch for this rank's group into its g_in (the rows' slots and
  /// combine weights too, where the peers' plans hold no rows).
  virtual void gradients_in(int ch, int source, cudaStream_t stream) = 0;
  /// This rank's replies of (\p source, \p ch): token gradients per slot into the owner's combine region, the rows'
  /// combine-weight gradients into its dw_recv.
  virtual void replies_out(int ch, int source, cudaStream_t stream) = 0;
  /// Orders \p stream after every rank's replies to this one (RankBackward::replied).
  virtual void wait_replied(cudaStream_t stream) = 0;
  /// Before the backward's uploads: what the transport itself sends (NCCL: the plan rows' slots and weights).
  virtual void prepare_backward(BackwardWork const &lists) = 0;

  /// Waits for \p stream's work, which may wait on the peers' (NCCL: ends the communicator on every rank when it
  /// cannot finish).
  virtual void synchronize(Stream const &stream) = 0;
};

/// One rank of a device layer.
class RankDriver {
public:
  RankDriver(DeviceLayerCore &core, int rank);
  /// The transport must outlive the driver's use (set once the layer's ranks exist).
  void set_transport(Transport &transport) { _transport = &transport; }

  int rank() const { return _rank; }
  RankState &state() { return _state; }
  RankBackward &backward_state();
  Routing const &routing() const { return _routing; }
  RankWork const &work() const { return _work; }
  bool has_forward() const { return _has_forward; }
  GateInput const &forward_gate() const { return _gate; }
  int forward_chunks() const { return _chunks; }
  /// What the kernels of this rank see.
  RankView view() const;

  // ---- forward, in this order on every rank ----
  /// Checks the shapes of \p tokens and \p out ([M, N]) and \p chunks; returns the flat index of the first
  /// non-finite token (M N when none), which the layer checks over all ranks.
  std::int64_t check_forward(ConstHostMatrix tokens, HostMatrix out, int chunks) const;
  /// Routes \p tokens through \p gate; returns this rank's dispatch plan of \p chunks token chunks.
  DispatchPlan route(ConstHostMatrix tokens, GateInput const &gate, int chunks);
  /// From every rank's plan: the slot table into the symmetric allocation, the plan, tokens and work lists to the
  /// device, poisoned buffers; synchronizes the stream. Returns the rows this rank computes.
  std::int64_t prepare_forward(std::vector<DispatchPlan> const &plans, ConstHostMatrix tokens, Schedule schedule,
                               int chunks);
  /// Packs the dispatch rows into the symmetric send rows, signals them, records RankState::packed.
  void pack();
  /// The schedule's communication and expert FFN; records RankState::combined. comet: enqueues the fused kernels
  /// with \p grid and returns their grids {layer0, layer1}.
  std::pair<int, int> run_forward(Schedule schedule, CometGrid const &grid);
  /// The final sum over the ranks' combines (\p expected: the combine-flag count to wait for on the device; 0: the
  /// transport's ordering alone).
  void final_sum(std::uint64_t expected);
  /// Copies the output to \p out on the stream.
  void copy_out(HostMatrix out);
  /// Waits for the forward's work; comet: reads the kernels' control word. \p context names the forward in errors.
  void finish_forward(Schedule schedule, std::string const &context);
  /// Keeps what the backward needs (the forward completed).
  void keep_forward(GateInput const &gate);
  /// Marks the last forward unusable for a backward (a new forward starts).
  void drop_forward() { _has_forward = false; }

  // ---- backward, in this order on every rank ----
  /// Checks \p d_out's shape ([M, N]).
  void check_backward(ConstHostMatrix d_out) const;
  /// The backward's lists from every rank's plan, the uploads (synchronizes the stream).
  void prepare_backward(WorkPlanner const &planner, ConstHostMatrix d_out, std::vector<double> const &aux_grad,
                        bool row_lists);
  BackwardWork const &backward_lists() const { return _lists; }
  /// Packs the output gradient per slot, copies the own rows into x_recv, records RankBackward::packed.
  void pack_backward();
  /// The schedule's tiles, weight gradients and replies; records RankBackward::replied and wgrad_done.
  void run_backward(Schedule schedule);
  /// The owner's end once every rank's replies are in: the token gradients' sum, the gate's backward.
  void owner_backward(bool gate_weight);
  /// Copies the gradients into \p grads (the gate weight's partial gradient into \p gate_partial) and waits for
  /// the backward's work.
  void finish_backward(MoeGradients &grads, bool gate_bias, std::vector<float> &gate_partial,
                       std::string const &context);

private:
  /// Runs \p wait; a TimeoutError is rethrown naming \p context and this rank, and stops the layer.
  template <class F> void wait_named(std::string const &context, F &&wait);
  /// The backward's tiles in order: per chunk, the own source first, then rank - 1, rank - 2, ...
  std::vector<std::pair<int, int>> tile_order() const;
  void backward_sequential(std::vector<std::pair<int, int>> const &tiles);
  void backward_overlapped(std::vector<std::pair<int, int>> const &tiles, bool comet);

  DeviceLayerCore &_core;
  int _rank = 0;
  Transport *_transport = nullptr;
  RankState _state;
  std::unique_ptr<RankBackward> _backward;
  Routing _routing;
  DispatchPlan const *_plan = nullptr; // this rank's, in the layer's plan table
  RankWork _work;
  BackwardWork _lists;
  GateInput _gate;
  Schedule _schedule = Schedule::comet;
  int _chunks = 1;
  bool _has_forward = false;
};

} // namespace tessel::moe::cuda::Impl

#endif

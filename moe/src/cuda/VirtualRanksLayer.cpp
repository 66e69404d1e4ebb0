// The moe device layer's host driver: routing and plans on the host, one stream and one symmetric allocation per
// virtual rank, the three schedules as stream-ordered work with cross-rank events, cuBLAS for the baselines' GEMMs
// and the fused COMET kernels (Comet.cu) for comet.
#include <tessel/moe/cuda/VirtualRanksLayer.hpp>

#include "Device.hpp"
#include "DeviceLayerCore.hpp"
#include "Rank.hpp"
#include "WorkPlan.hpp"

#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/cuda/Cuda.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>

namespace tessel::moe::cuda {

using namespace Impl;

bool device_available() { return tessel::cuda::device_count() > 0; }

namespace {

// The device must be visible before the core creates its events.
MoeConfig const &on_visible_device(MoeConfig const &config) {
  TESSEL_REQUIRE(device_available(), "tessel::moe::cuda::VirtualRanksLayer: no CUDA device is visible");
  return config;
}

} // namespace

struct VirtualRanksLayer::State : DeviceLayerCore {
  std::vector<RankState> ranks;
  DeviceBuffer<char *> peer_base;
  std::vector<Routing> routings;
  std::vector<DispatchPlan> plans;

  State(MoeConfig const &c, std::vector<ExpertWeights> const &weights, DeviceOptions o)
      : DeviceLayerCore(on_visible_device(c), c.world(), std::move(o), "tessel::moe::cuda::VirtualRanksLayer") {
    TESSEL_REQUIRE(static_cast<int>(weights.size()) == world, "tessel::moe::cuda::VirtualRanksLayer: ", weights.size(),
                   " weight shards for ", world, " ranks (EP x TP)");
    ranks.resize(static_cast<std::size_t>(world));
    std::vector<char *> bases(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.sym = DeviceBuffer<char>(layout.bytes, "Tessel::moe::cuda::symmetric");
      // Flags start at 0 (epochs and counts only grow); the rest is written before it is read.
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rs.sym.data(), 0, layout.bytes, rs.stream.get()));
      bases[static_cast<std::size_t>(r)] = rs.sym.data();
      load_weights(rs, c, r, weights[static_cast<std::size_t>(r)], timeout());
    }
    peer_base = DeviceBuffer<char *>(static_cast<std::size_t>(world), "Tessel::moe::cuda::peer_base");
    peer_base.copy_from_host(bases.data(), bases.size(), ranks[0].stream.get());
    upload_rank_group(ranks[0].stream.get());
    ranks[0].stream.synchronize(timeout());
    routings.resize(static_cast<std::size_t>(world));
  }

  RankView view(int r) const {
    return DeviceLayerCore::view(r, peer_base.data(), ranks[static_cast<std::size_t>(r)].control.data());
  }

  // ------------------------------------------------------------------------------------------------------------
  // Device steps
  // ------------------------------------------------------------------------------------------------------------

  /// Copies the rows of (source, chunk) from the source's send rows (a peer pointer) into x_recv on \p stream.
  void dispatch_copy(RankState &rs, RankWork const &w, int s, int ch, cudaStream_t stream) {
    auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    if (b.rows == 0)
      return;
    std::size_t const row_bytes = static_cast<std::size_t>(config.hidden) * es;
    char const *src = ranks[static_cast<std::size_t>(s)].sym.data() + layout.send_rows +
                      static_cast<std::size_t>(b.send_row) * row_bytes;
    char *dst = rs.x_recv.data() +
                static_cast<std::size_t>(w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)]) * row_bytes;
    TESSEL_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<std::size_t>(b.rows) * row_bytes, cudaMemcpyDeviceToDevice, stream));
  }

  /// Copies rank \p d's reduced rows of (source, chunk) into the source's combine buffer (region d).
  void combine_copy(int d, RankWork const &w, int s, int ch, cudaStream_t stream) {
    auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
    if (b.slots == 0)
      return;
    std::int64_t const m = config.tokens, n = config.hidden;
    float const *src = ranks[static_cast<std::size_t>(d)].combine_send.data() + (s * m + b.slot_begin) * n;
    char *dst = ranks[static_cast<std::size_t>(s)].sym.data() + layout.combine +
                static_cast<std::size_t>((d * m + b.slot_begin) * n) * sizeof(float);
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(b.slots * n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
  }

  void wait_all(cudaStream_t stream, Event RankState::*event) {
    for (auto &rs : ranks)
      (rs.*event).wait_on(stream);
  }

  // ------------------------------------------------------------------------------------------------------------
  // forward
  // ------------------------------------------------------------------------------------------------------------

  void forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
               std::vector<HostMatrix> const &out, Schedule schedule) {
    auto const t0 = std::chrono::steady_clock::now();
    require_usable();
    std::int64_t const m = config.tokens, n = config.hidden;
    TESSEL_REQUIRE(static_cast<int>(tokens.size()) == world && static_cast<int>(gates.size()) == world &&
                       static_cast<int>(out.size()) == world,
                   "VirtualRanksLayer::forward: give tokens, gates and outputs of all ", world, " ranks (got ",
                   tokens.size(), ", ", gates.size(), ", ", out.size(), ")");
    for (int r = 0; r < world; ++r) {
      auto const &x = tokens[static_cast<std::size_t>(r)];
      auto const &o = out[static_cast<std::size_t>(r)];
      TESSEL_REQUIRE(x.extent(0) == static_cast<std::size_t>(m) && x.extent(1) == static_cast<std::size_t>(n),
                     "VirtualRanksLayer::forward: rank ", r, "'s tokens are ", x.extent(0), " x ", x.extent(1),
                     ", expected M x N = ", m, " x ", n);
      TESSEL_REQUIRE(o.extent(0) == static_cast<std::size_t>(m) && o.extent(1) == static_cast<std::size_t>(n),
                     "VirtualRanksLayer::forward: rank ", r, "'s output is ", o.extent(0), " x ", o.extent(1),
                     ", expected M x N = ", m, " x ", n);
      auto const bad = first_non_finite(x.data(), static_cast<std::size_t>(m * n));
      TESSEL_REQUIRE(bad >= static_cast<std::size_t>(m * n), "VirtualRanksLayer::forward: the tokens of rank ", r,
                     " contain NaN or infinity at row ", bad / static_cast<std::size_t>(n), ", column ",
                     bad % static_cast<std::size_t>(n));
    }
    int const chunks = schedule == Schedule::pipelined ? pipeline_chunks : 1;
    TESSEL_REQUIRE(chunks <= std::max<std::int64_t>(m, 1), "VirtualRanksLayer: ", chunks,
                   " pipeline chunks for M = ", m, " tokens");
    HostExecSpace space;
    plans.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      route(space, host_config, tokens[static_cast<std::size_t>(r)], gates[static_cast<std::size_t>(r)],
            routings[static_cast<std::size_t>(r)]);
      plans[static_cast<std::size_t>(r)] =
          make_dispatch_plan(host_config, routings[static_cast<std::size_t>(r)], chunks);
    }
    ++epoch;

    // Every source publishes its slot table in its symmetric allocation; every destination gets its work lists.
    WorkPlanner const planner(config, plans, comet);
    std::vector<std::vector<std::int64_t>> table_bases(static_cast<std::size_t>(world));
    std::vector<RankWork> work;
    for (int s = 0; s < world; ++s) {
      auto &rs = ranks[static_cast<std::size_t>(s)];
      std::vector<std::int32_t> rows;
      std::vector<float> weights;
      planner.slot_table(s, rows, weights, table_bases[static_cast<std::size_t>(s)]);
      if (!rows.empty()) {
        TESSEL_CUDA_CHECK(cudaMemcpyAsync(rs.sym.data() + layout.slot_rows, rows.data(),
                                          rows.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, rs.stream.get()));
        TESSEL_CUDA_CHECK(cudaMemcpyAsync(rs.sym.data() + layout.slot_weight, weights.data(),
                                          weights.size() * sizeof(float), cudaMemcpyHostToDevice, rs.stream.get()));
      }
      auto const &plan = plans[static_cast<std::size_t>(s)];
      upload(rs.row_token, plan.row_token, "Tessel::moe::cuda::row_token", rs.stream.get());
      upload(rs.token_slot, plan.token_slot, "Tessel::moe::cuda::token_slot", rs.stream.get());
      ensure(rs.tokens, static_cast<std::size_t>(m * n), "Tessel::moe::cuda::tokens");
      rs.tokens.copy_from_host(tokens[static_cast<std::size_t>(s)].data(), static_cast<std::size_t>(m * n),
                               rs.stream.get());
      ensure(rs.out, static_cast<std::size_t>(m * n), "Tessel::moe::cuda::out");
      // Host vectors die at the end of this iteration: the copies must be done by then.
      rs.stream.synchronize(timeout());
    }
    stats = DeviceStats{};
    stats.schedule = schedule;
    for (int d = 0; d < world; ++d) {
      work.push_back(planner.work_of(d, chunks, table_bases));
      auto &w = work.back();
      auto &rs = ranks[static_cast<std::size_t>(d)];
      stats.rows += w.rows;
      ensure_compute(rs, config, w.rows, schedule != Schedule::comet);
      if (schedule == Schedule::comet)
        planner.comet_work(d, w);
      else
        ensure(rs.combine_send, static_cast<std::size_t>(world) * static_cast<std::size_t>(m * n),
               "Tessel::moe::cuda::combine_send");
      upload_work(rs, config, w, schedule == Schedule::comet);
      poison(rs, rs.sym.data());
      rs.stream.synchronize(timeout());
    }
    stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Timed region: every rank's stream starts after `start` on rank 0's stream.
    start.record(ranks[0].stream.get());
    for (int r = 1; r < world; ++r)
      start.wait_on(ranks[static_cast<std::size_t>(r)].stream.get());
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      auto const v = view(r);
      TESSEL_CUDA_CHECK(pack_rows(rs.stream.get(), config.dtype, rs.tokens.data(), rs.row_token.data(),
                                  plans[static_cast<std::size_t>(r)].rows(), n, rs.sym.data() + layout.send_rows));
      TESSEL_CUDA_CHECK(signal_packed(rs.stream.get(), v, epoch));
      rs.packed.record(rs.stream.get());
    }
    switch (schedule) {
    case Schedule::sequential:
      run_sequential(work);
      break;
    case Schedule::pipelined:
      run_pipelined(work, chunks);
      break;
    case Schedule::comet:
      run_comet(work);
      break;
    }
    for (int r = 1; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.computed.record(rs.stream.get());
      rs.computed.wait_on(ranks[0].stream.get());
    }
    stop.record(ranks[0].stream.get());
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.out.copy_to_host(out[static_cast<std::size_t>(r)].data(), static_cast<std::size_t>(m * n), rs.stream.get());
    }
    for (int r = 0; r < world; ++r)
      synchronize_rank(r, schedule);
    stats.device_ms = Event::elapsed_ms(start, stop);
  }

  void synchronize_rank(int r, Schedule schedule) {
    auto &rs = ranks[static_cast<std::size_t>(r)];
    auto const context =
        tessel::Impl::concat("VirtualRanksLayer::forward (", name_of(schedule), ") on virtual rank ", r);
    host_wait([&] {
      try {
        rs.stream.synchronize(timeout());
        rs.comm.synchronize(timeout());
      } catch (TimeoutError const &e) {
        throw TimeoutError(tessel::Impl::concat(context, ": ", e.what()), r);
      }
    });
    if (schedule == Schedule::comet)
      check_device(rs, rs.sym.data(), context);
  }

  // sequential: dispatch copies of every source -> GEMM0 -> activation -> GEMM1 -> top-k reduce -> combine copies
  // -> (all ranks' combines) -> final sum.
  void run_sequential(std::vector<RankWork> const &work) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto const &w = work[static_cast<std::size_t>(d)];
      cudaStream_t const s = rs.stream.get();
      wait_all(s, &RankState::packed);
      for (int src = 0; src < world; ++src)
        dispatch_copy(rs, w, src, 0, s);
      chunk_ffn(rs, config, w, 0);
      TESSEL_CUDA_CHECK(topk_reduce(s, view(d), rs.y.data(), static_cast<int>(w.chunk_reduces[0].size()),
                                    rs.chunk_reduces.data(), rs.combine_send.data()));
      for (int src = 0; src < world; ++src)
        combine_copy(d, w, src, 0, s);
      rs.combined.record(s);
    }
    finish(0);
  }

  // pipelined: a copy stream moves chunk c + 1's rows while the compute stream runs chunk c; each chunk's combine
  // leaves as soon as it is reduced (Tutel's order: all dispatches first, then the combines).
  void run_pipelined(std::vector<RankWork> const &work, int chunks) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto const &w = work[static_cast<std::size_t>(d)];
      if (static_cast<int>(rs.chunk_in.size()) < chunks) {
        rs.chunk_in.resize(static_cast<std::size_t>(chunks));
        rs.chunk_out.resize(static_cast<std::size_t>(chunks));
      }
      cudaStream_t const q = rs.comm.get();
      wait_all(q, &RankState::packed);
      for (int ch = 0; ch < chunks; ++ch) {
        for (int src = 0; src < world; ++src)
          dispatch_copy(rs, w, src, ch, q);
        rs.chunk_in[static_cast<std::size_t>(ch)].record(q);
      }
      pipelined_compute(rs, config, w, view(d), chunks);
      for (int ch = 0; ch < chunks; ++ch) {
        rs.chunk_out[static_cast<std::size_t>(ch)].wait_on(q);
        for (int src = 0; src < world; ++src)
          combine_copy(d, w, src, ch, q);
      }
      rs.combined.record(q);
    }
    finish(0);
  }

  // Every rank's final sum after every rank's combine stores (\p expected: the combine-flag count to wait for on
  // the device as well; 0: the events alone order it).
  void finish(std::uint64_t expected) {
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      wait_all(rs.stream.get(), &RankState::combined);
      TESSEL_CUDA_CHECK(final_sum(rs.stream.get(), view(d), rs.token_slot.data(), rank_group_device.data(), expected,
                                  waiting_blocks(world), rs.out.data()));
    }
  }

  // comet: fused layer0 (pull + grouped GEMM + activation) and fused layer1 (N-split GEMM + top-k reduce + stores
  // to the owners) per rank, then the final sum once every rank's communication blocks have signalled.
  void run_comet(std::vector<RankWork> const &work) {
    auto const grid = comet_grid(config, comet, world);
    stats.comm_blocks = grid.comm_blocks;
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      // In one process, layer0's pulls start after every source has packed (stream order), so no block ever spins
      // on a kernel that may not be resident; across GPUs the packed flags alone order them.
      wait_all(rs.stream.get(), &RankState::packed);
      auto const grids =
          launch_comet(rs, config, work[static_cast<std::size_t>(d)], view(d), grid, comet.n_splits, epoch);
      rs.combined.record(rs.stream.get());
      stats.grid0 = std::max(stats.grid0, grids.first);
      stats.grid1 = std::max(stats.grid1, grids.second);
    }
    combine_expected += static_cast<std::uint64_t>(grid.comm_blocks);
    finish(combine_expected);
  }
};

VirtualRanksLayer::VirtualRanksLayer(MoeConfig const &config, std::vector<ExpertWeights> const &weights,
                                     DeviceOptions options)
    : _state(std::make_unique<State>(config, weights, std::move(options))) {
  attach(*_state);
}
VirtualRanksLayer::~VirtualRanksLayer() = default;
VirtualRanksLayer::VirtualRanksLayer(VirtualRanksLayer &&) noexcept = default;
VirtualRanksLayer &VirtualRanksLayer::operator=(VirtualRanksLayer &&) noexcept = default;

void VirtualRanksLayer::forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
                                std::vector<HostMatrix> const &out, Schedule schedule) {
  _state->forward(tokens, gates, out, schedule);
}

int VirtualRanksLayer::world() const { return _state->world; }
Routing const &VirtualRanksLayer::routing(int rank) const {
  TESSEL_REQUIRE(rank >= 0 && rank < _state->world, "VirtualRanksLayer::routing: rank ", rank, " out of [0, ",
                 _state->world, ")");
  return _state->routings[static_cast<std::size_t>(rank)];
}
DeviceStats const &VirtualRanksLayer::stats() const { return _state->stats; }

} // namespace tessel::moe::cuda

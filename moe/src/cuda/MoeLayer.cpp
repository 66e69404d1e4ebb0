// The moe device layer's host driver: routing and plans on the host, one stream and one symmetric allocation per
// virtual rank, the three schedules as stream-ordered work with cross-rank events, cuBLAS for the baselines' GEMMs
// and the fused COMET kernels (Comet.cu) for comet.
#include <tessel/moe/cuda/MoeLayer.hpp>

#include "Device.hpp"
#include "WorkPlan.hpp"

#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/cuda/Cuda.hpp>

#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>

namespace tessel::moe::cuda {

namespace {

using tessel::cuda::DeviceBuffer;
using tessel::cuda::Event;
using tessel::cuda::Stream;
using namespace Impl;

void check_cublas(cublasStatus_t status, char const *call) {
  TESSEL_REQUIRE(status == CUBLAS_STATUS_SUCCESS, "cuBLAS call ", call, " failed: ", cublasGetStatusString(status),
                 " (", static_cast<int>(status), ")");
}
#define TESSEL_MOE_CUBLAS(call) check_cublas((call), #call)

constexpr std::size_t align_up(std::size_t v, std::size_t a = 256) { return (v + a - 1) / a * a; }

/// Grow-only device buffer: forwards of the same shape reuse their memory.
template <class T> T *ensure(DeviceBuffer<T> &buffer, std::size_t count, char const *label) {
  if (buffer.size() < std::max<std::size_t>(count, 1))
    buffer = DeviceBuffer<T>(std::max<std::size_t>(count, 1), label);
  return buffer.data();
}

template <class T> void upload(DeviceBuffer<T> &buffer, std::vector<T> const &host, char const *label, cudaStream_t s) {
  ensure(buffer, host.size(), label);
  if (!host.empty())
    buffer.copy_from_host(host.data(), host.size(), s);
}

cudaDataType_t cuda_type(DataType dtype) {
  switch (dtype) {
  case DataType::float16:
    return CUDA_R_16F;
  case DataType::bfloat16:
    return CUDA_R_16BF;
  default:
    return CUDA_R_32F;
  }
}

/// An owned cuBLAS handle bound to a stream.
class Cublas {
public:
  explicit Cublas(cudaStream_t stream) {
    TESSEL_MOE_CUBLAS(cublasCreate(&_handle));
    TESSEL_MOE_CUBLAS(cublasSetStream(_handle, stream));
  }
  ~Cublas() {
    if (_handle != nullptr)
      cublasDestroy(_handle);
  }
  Cublas(Cublas &&other) noexcept : _handle(std::exchange(other._handle, nullptr)) {}
  Cublas &operator=(Cublas &&) = delete;
  Cublas(Cublas const &) = delete;
  Cublas &operator=(Cublas const &) = delete;
  cublasHandle_t get() const noexcept { return _handle; }

private:
  cublasHandle_t _handle = nullptr;
};

struct RankState {
  Stream stream, comm;
  Cublas cublas{stream.get()};
  DeviceBuffer<char> sym; // the symmetric allocation
  DeviceBuffer<char> w0, w1;
  DeviceBuffer<float> tokens, c0, y, combine_send, out;
  DeviceBuffer<char> x_recv, h;
  DeviceBuffer<std::int32_t> row_token, token_slot;
  DeviceBuffer<int> ready;       // comet: [messages] message_ready, then [splits] split_done (zeroed per forward)
  DeviceBuffer<int> split_tiles; // comet: [splits]
  DeviceBuffer<Control> control;
  DeviceBuffer<Message> messages;
  DeviceBuffer<Layer0Item> items0;
  DeviceBuffer<Layer1Item> items1;
  DeviceBuffer<ReduceItem> reduces, chunk_reduces;
  Event packed, computed, combined;
  std::vector<Event> chunk_in, chunk_out;
};

} // namespace

bool device_available() { return tessel::cuda::device_count() > 0; }

struct VirtualRanksLayer::State {
  MoeConfig config;      // as given (dtype: the device precision)
  MoeConfig host_config; // float32 (the host router's view)
  DeviceOptions options;
  CometParams comet;
  std::string comet_source;
  int world = 1, groups = 1, eg = 1;
  std::size_t es = 4; // bytes per element of the device precision
  SymmetricLayout layout;
  std::vector<RankState> ranks;
  DeviceBuffer<char *> peer_base;
  std::vector<Routing> routings;
  std::vector<DispatchPlan> plans;
  std::vector<std::int32_t> rank_group;
  DeviceBuffer<std::int32_t> rank_group_device;
  DeviceStats stats;
  std::uint64_t epoch = 0, combine_expected = 0;
  int sm_count = 1;
  Event start{true}, stop{true};

  State(MoeConfig const &c, std::vector<ExpertWeights> const &weights, DeviceOptions o)
      : config(c), host_config(c), options(std::move(o)) {
    TESSEL_REQUIRE(device_available(), "tessel::moe::cuda::VirtualRanksLayer: no CUDA device is visible");
    TESSEL_REQUIRE(c.dtype == DataType::float32 || c.dtype == DataType::float16 || c.dtype == DataType::bfloat16,
                   "tessel::moe::cuda::VirtualRanksLayer: MoeConfig.dtype must be float32, float16 or bfloat16, got ",
                   name_of(c.dtype));
    host_config.dtype = DataType::float32;
    host_config.validate();
    TESSEL_REQUIRE(c.topk <= 32,
                   "tessel::moe::cuda::VirtualRanksLayer: topk must be <= 32 (a warp reduces a slot), got ", c.topk);
    TESSEL_REQUIRE(options.pipeline_chunks >= 1, "DeviceOptions.pipeline_chunks must be >= 1, got ",
                   options.pipeline_chunks);
    TESSEL_REQUIRE(options.timeout_seconds > 0, "DeviceOptions.timeout_seconds must be positive");
    world = c.world();
    groups = c.ep;
    eg = c.experts_per_group();
    es = size_of(c.dtype);
    TESSEL_REQUIRE(static_cast<int>(weights.size()) == world, "tessel::moe::cuda::VirtualRanksLayer: ", weights.size(),
                   " weight shards for ", world, " ranks (EP x TP)");
    if (options.comet) {
      comet = *options.comet;
      comet_source = "given";
    } else {
      auto const &registry = options.registry ? *options.registry : TuningRegistry::builtin();
      comet = registry.lookup(host_config, "cuda", &comet_source);
    }
    comet.validate(host_config, "cuda");

    int device = 0;
    TESSEL_CUDA_CHECK(cudaGetDevice(&device));
    TESSEL_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));

    std::int64_t const m = c.tokens, n = c.hidden, topk = c.topk;
    std::size_t off = 0;
    auto take = [&](std::size_t bytes) {
      std::size_t const at = off;
      off = align_up(off + std::max<std::size_t>(bytes, 1));
      return at;
    };
    layout.send_rows = take(static_cast<std::size_t>(m * topk * n) * es);
    layout.slot_rows = take(static_cast<std::size_t>(m * topk * topk) * sizeof(std::int32_t));
    layout.slot_weight = take(static_cast<std::size_t>(m * topk * topk) * sizeof(float));
    layout.combine = take(static_cast<std::size_t>(world) * static_cast<std::size_t>(m * n) * sizeof(float));
    layout.packed_flag = take(static_cast<std::size_t>(world) * sizeof(std::uint64_t));
    layout.combine_flag = take(static_cast<std::size_t>(world) * sizeof(std::uint64_t));
    layout.bytes = off;

    ranks.resize(static_cast<std::size_t>(world));
    std::vector<char *> bases(static_cast<std::size_t>(world));
    std::int64_t const cols0 = c.gemm0_cols(), kp = c.ffn_per_rank();
    for (int r = 0; r < world; ++r) {
      auto &rs = ranks[static_cast<std::size_t>(r)];
      rs.sym = DeviceBuffer<char>(layout.bytes, "Tessel::moe::cuda::symmetric");
      // Flags start at 0 (epochs and counts only grow); the rest is written before it is read.
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rs.sym.data(), 0, layout.bytes, rs.stream.get()));
      bases[static_cast<std::size_t>(r)] = rs.sym.data();
      // Weights: float on the host, the device precision on the device.
      auto const &w = weights[static_cast<std::size_t>(r)];
      std::size_t const n0 = static_cast<std::size_t>(eg) * static_cast<std::size_t>(n * cols0);
      std::size_t const n1 = static_cast<std::size_t>(eg) * static_cast<std::size_t>(kp * n);
      TESSEL_REQUIRE(w.w0.extent(0) == static_cast<std::size_t>(eg) && w.w0.extent(1) == static_cast<std::size_t>(n) &&
                         w.w0.extent(2) == static_cast<std::size_t>(cols0),
                     "VirtualRanksLayer: rank ", r, "'s w0 is ", w.w0.extent(0), " x ", w.w0.extent(1), " x ",
                     w.w0.extent(2), ", expected E/EP x N x gemm0_cols = ", eg, " x ", n, " x ", cols0);
      TESSEL_REQUIRE(w.w1.extent(0) == static_cast<std::size_t>(eg) && w.w1.extent(1) == static_cast<std::size_t>(kp) &&
                         w.w1.extent(2) == static_cast<std::size_t>(n),
                     "VirtualRanksLayer: rank ", r, "'s w1 is ", w.w1.extent(0), " x ", w.w1.extent(1), " x ",
                     w.w1.extent(2), ", expected E/EP x K/TP x N = ", eg, " x ", kp, " x ", n);
      rs.w0 = DeviceBuffer<char>(n0 * es, "Tessel::moe::cuda::w0");
      rs.w1 = DeviceBuffer<char>(n1 * es, "Tessel::moe::cuda::w1");
      DeviceBuffer<float> stage(std::max(n0, n1), "Tessel::moe::cuda::weight_stage");
      stage.copy_from_host(w.w0.data(), n0, rs.stream.get());
      TESSEL_CUDA_CHECK(convert(rs.stream.get(), c.dtype, stage.data(), n0, rs.w0.data()));
      rs.stream.synchronize(timeout());
      stage.copy_from_host(w.w1.data(), n1, rs.stream.get());
      TESSEL_CUDA_CHECK(convert(rs.stream.get(), c.dtype, stage.data(), n1, rs.w1.data()));
      rs.stream.synchronize(timeout());
      rs.control = DeviceBuffer<Control>(1, "Tessel::moe::cuda::control");
    }
    peer_base = DeviceBuffer<char *>(static_cast<std::size_t>(world), "Tessel::moe::cuda::peer_base");
    peer_base.copy_from_host(bases.data(), bases.size(), ranks[0].stream.get());
    for (int r = 0; r < world; ++r)
      rank_group.push_back(c.group_of_rank(r));
    rank_group_device = DeviceBuffer<std::int32_t>(rank_group.size(), "Tessel::moe::cuda::rank_group");
    rank_group_device.copy_from_host(rank_group.data(), rank_group.size(), ranks[0].stream.get());
    ranks[0].stream.synchronize(timeout());
    routings.resize(static_cast<std::size_t>(world));
  }

  Timeout timeout() const { return Timeout(static_cast<std::int64_t>(options.timeout_seconds * 1000.0)); }

  RankView view(int r) const {
    RankView v;
    v.rank = r;
    v.world = world;
    v.peer_base = peer_base.data();
    v.layout = layout;
    v.m = config.tokens;
    v.n = config.hidden;
    v.kp = config.ffn_per_rank();
    v.topk = config.topk;
    v.timeout_ns = static_cast<long long>(options.timeout_seconds * 1e9);
    v.control = ranks[static_cast<std::size_t>(r)].control.data();
    return v;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Host side: routing, the slot tables each source publishes, and each destination's work lists
  // ------------------------------------------------------------------------------------------------------------

  // ------------------------------------------------------------------------------------------------------------
  // Device steps
  // ------------------------------------------------------------------------------------------------------------

  void ensure_compute(RankState &rs, std::int64_t rows, bool c0) {
    std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), cols0 = config.gemm0_cols();
    ensure(rs.x_recv, static_cast<std::size_t>(rows * n) * es, "Tessel::moe::cuda::x_recv");
    ensure(rs.h, static_cast<std::size_t>(rows * kp) * es, "Tessel::moe::cuda::h");
    ensure(rs.y, static_cast<std::size_t>(rows * n), "Tessel::moe::cuda::y");
    if (c0)
      ensure(rs.c0, static_cast<std::size_t>(rows * cols0), "Tessel::moe::cuda::c0");
  }

  /// The baselines' expert FFN of one (source, chunk) block of rank \p d: cuBLAS GEMM0 per expert, activation,
  /// cuBLAS GEMM1 per expert (fp32 output, fp32 accumulation).
  void block_ffn(RankState &rs, Block const &b, std::int64_t row) {
    if (b.rows == 0)
      return;
    std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), cols0 = config.gemm0_cols();
    cudaDataType_t const t = cuda_type(config.dtype);
    float const one = 1.0f, zero = 0.0f;
    for (int e = 0; e < eg; ++e) {
      std::int64_t const r0 = row + b.expert_offset[static_cast<std::size_t>(e)];
      auto const rows = static_cast<int>(b.expert_offset[static_cast<std::size_t>(e) + 1] -
                                         b.expert_offset[static_cast<std::size_t>(e)]);
      if (rows == 0)
        continue;
      // Row-major C = A B is column-major C^T = B^T A^T.
      TESSEL_MOE_CUBLAS(cublasGemmEx(
          rs.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(cols0), rows, static_cast<int>(n), &one,
          rs.w0.data() + static_cast<std::size_t>(e * n * cols0) * es, t, static_cast<int>(cols0),
          rs.x_recv.data() + static_cast<std::size_t>(r0 * n) * es, t, static_cast<int>(n), &zero,
          rs.c0.data() + r0 * cols0, CUDA_R_32F, static_cast<int>(cols0), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    TESSEL_CUDA_CHECK(activate(rs.stream.get(), config.dtype, static_cast<int>(config.activation), config.gated,
                               rs.c0.data() + row * cols0, b.rows, kp,
                               rs.h.data() + static_cast<std::size_t>(row * kp) * es));
    for (int e = 0; e < eg; ++e) {
      std::int64_t const r0 = row + b.expert_offset[static_cast<std::size_t>(e)];
      auto const rows = static_cast<int>(b.expert_offset[static_cast<std::size_t>(e) + 1] -
                                         b.expert_offset[static_cast<std::size_t>(e)]);
      if (rows == 0)
        continue;
      TESSEL_MOE_CUBLAS(
          cublasGemmEx(rs.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), rows, static_cast<int>(kp), &one,
                       rs.w1.data() + static_cast<std::size_t>(e * kp * n) * es, t, static_cast<int>(n),
                       rs.h.data() + static_cast<std::size_t>(r0 * kp) * es, t, static_cast<int>(kp), &zero,
                       rs.y.data() + r0 * n, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }

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
    int const chunks = schedule == Schedule::pipelined ? options.pipeline_chunks : 1;
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
      ensure_compute(rs, w.rows, schedule != Schedule::comet);
      if (schedule == Schedule::comet) {
        planner.comet_work(d, w);
        upload(rs.messages, w.messages, "Tessel::moe::cuda::messages", rs.stream.get());
        upload(rs.items0, w.items0, "Tessel::moe::cuda::items0", rs.stream.get());
        upload(rs.items1, w.items1, "Tessel::moe::cuda::items1", rs.stream.get());
        upload(rs.reduces, w.reduces, "Tessel::moe::cuda::reduces", rs.stream.get());
        upload(rs.split_tiles, w.split_tiles, "Tessel::moe::cuda::split_tiles", rs.stream.get());
      } else {
        ensure(rs.combine_send, static_cast<std::size_t>(world) * static_cast<std::size_t>(m * n),
               "Tessel::moe::cuda::combine_send");
        std::vector<ReduceItem> all;
        for (auto const &c : w.chunk_reduces)
          all.insert(all.end(), c.begin(), c.end());
        upload(rs.chunk_reduces, all, "Tessel::moe::cuda::reduces", rs.stream.get());
      }
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
    try {
      rs.stream.synchronize(timeout());
      rs.comm.synchronize(timeout());
    } catch (TimeoutError const &e) {
      throw TimeoutError(tessel::Impl::concat("VirtualRanksLayer::forward (", name_of(schedule), ") on virtual rank ",
                                              r, ": ", e.what()),
                         r);
    }
    if (schedule != Schedule::comet)
      return;
    Control control;
    rs.control.copy_to_host(&control, 1, rs.stream.get());
    rs.stream.synchronize(timeout());
    if (control.error == no_error)
      return;
    char const *what = control.error == timeout_packed    ? "the packed flag of source rank "
                       : control.error == timeout_message ? "message "
                       : control.error == timeout_split   ? "the GEMM tiles of column block "
                                                          : "the combine stores of rank ";
    throw TimeoutError(tessel::Impl::concat("VirtualRanksLayer::forward (comet) on virtual rank ", r,
                                            ": a device wait for ", what, control.error_arg, " gave up after ",
                                            options.timeout_seconds, " s"),
                       control.error == timeout_packed || control.error == timeout_combine ? control.error_arg : -1);
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
      for (int src = 0; src < world; ++src)
        block_ffn(rs, w.blocks[static_cast<std::size_t>(src)][0], w.row[static_cast<std::size_t>(src)][0]);
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
      cudaStream_t const s = rs.stream.get(), q = rs.comm.get();
      wait_all(q, &RankState::packed);
      for (int ch = 0; ch < chunks; ++ch) {
        for (int src = 0; src < world; ++src)
          dispatch_copy(rs, w, src, ch, q);
        rs.chunk_in[static_cast<std::size_t>(ch)].record(q);
      }
      std::size_t reduce_offset = 0;
      for (int ch = 0; ch < chunks; ++ch) {
        rs.chunk_in[static_cast<std::size_t>(ch)].wait_on(s);
        for (int src = 0; src < world; ++src)
          block_ffn(rs, w.blocks[static_cast<std::size_t>(src)][static_cast<std::size_t>(ch)],
                    w.row[static_cast<std::size_t>(src)][static_cast<std::size_t>(ch)]);
        auto const count = w.chunk_reduces[static_cast<std::size_t>(ch)].size();
        TESSEL_CUDA_CHECK(topk_reduce(s, view(d), rs.y.data(), static_cast<int>(count),
                                      rs.chunk_reduces.data() + reduce_offset, rs.combine_send.data()));
        reduce_offset += count;
        rs.chunk_out[static_cast<std::size_t>(ch)].record(s);
      }
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
      TESSEL_CUDA_CHECK(
          final_sum(rs.stream.get(), view(d), rs.token_slot.data(), rank_group_device.data(), expected, rs.out.data()));
    }
  }

  // comet: fused layer0 (pull + grouped GEMM + activation) and fused layer1 (N-split GEMM + top-k reduce + stores
  // to the owners) per rank, then the final sum once every rank's communication blocks have signalled.
  void run_comet(std::vector<RankWork> const &work) {
    int per_sm0 = 0, per_sm1 = 0;
    TESSEL_CUDA_CHECK(layer0_occupancy(config.dtype, config.gated, static_cast<int>(config.activation), &per_sm0));
    TESSEL_CUDA_CHECK(layer1_occupancy(config.dtype, &per_sm1));
    TESSEL_REQUIRE(per_sm0 > 0 && per_sm1 > 0, "VirtualRanksLayer: the fused kernels do not fit on this device");
    // The virtual ranks share the device: each gets an equal share of the co-resident blocks. (Correctness does
    // not depend on it: roles come from tickets; the share only keeps the ranks from serializing.)
    int const cap0 = std::max(2, per_sm0 * sm_count / world), cap1 = std::max(2, per_sm1 * sm_count / world);
    int const n_c = std::clamp(comet.comm_workers, 1, cap1 / 2);
    stats.comm_blocks = n_c;
    for (int d = 0; d < world; ++d) {
      auto &rs = ranks[static_cast<std::size_t>(d)];
      auto const &w = work[static_cast<std::size_t>(d)];
      cudaStream_t const s = rs.stream.get();
      auto const v = view(d);
      // In one process, layer0's pulls start after every source has packed (stream order), so no block ever spins
      // on a kernel that may not be resident; across GPUs the packed flags alone order them.
      wait_all(s, &RankState::packed);
      int const messages = static_cast<int>(w.messages.size());
      int const splits = comet.n_splits;
      ensure(rs.ready, static_cast<std::size_t>(messages + splits), "Tessel::moe::cuda::ready");
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rs.control.data(), 0, sizeof(Control), s));
      TESSEL_CUDA_CHECK(
          cudaMemsetAsync(rs.ready.data(), 0, static_cast<std::size_t>(messages + splits) * sizeof(int), s));

      Layer0Args a0;
      a0.view = v;
      a0.dtype = config.dtype;
      a0.activation = static_cast<int>(config.activation);
      a0.gated = config.gated;
      a0.epoch = epoch;
      a0.messages = messages;
      a0.message = rs.messages.data();
      a0.message_ready = rs.ready.data();
      a0.items = static_cast<int>(w.items0.size());
      a0.item = rs.items0.data();
      a0.x_recv = rs.x_recv.data();
      a0.w0 = rs.w0.data();
      a0.cols0 = config.gemm0_cols();
      a0.h = rs.h.data();
      a0.comm_blocks = std::clamp(std::min(n_c, messages), 1, cap0 - 1);
      int const grid0 = a0.comm_blocks + std::clamp(a0.items, 1, cap0 - a0.comm_blocks);
      TESSEL_CUDA_CHECK(comet_layer0(s, a0, grid0));

      Layer1Args a1;
      a1.view = v;
      a1.dtype = config.dtype;
      a1.items = static_cast<int>(w.items1.size());
      a1.item = rs.items1.data();
      a1.h = rs.h.data();
      a1.w1 = rs.w1.data();
      a1.y = rs.y.data();
      a1.splits = splits;
      a1.split_tiles = rs.split_tiles.data();
      a1.split_done = rs.ready.data() + messages;
      a1.reduces = static_cast<int>(w.reduces.size());
      a1.reduce = rs.reduces.data();
      a1.comm_blocks = n_c;
      int const grid1 = n_c + std::clamp(a1.items, 1, cap1 - n_c);
      TESSEL_CUDA_CHECK(comet_layer1(s, a1, grid1));
      rs.combined.record(s);
      stats.grid0 = std::max(stats.grid0, grid0);
      stats.grid1 = std::max(stats.grid1, grid1);
    }
    combine_expected += static_cast<std::uint64_t>(n_c);
    finish(combine_expected);
  }
};

VirtualRanksLayer::VirtualRanksLayer(MoeConfig const &config, std::vector<ExpertWeights> const &weights,
                                     DeviceOptions options)
    : _state(std::make_unique<State>(config, weights, std::move(options))) {}
VirtualRanksLayer::~VirtualRanksLayer() = default;
VirtualRanksLayer::VirtualRanksLayer(VirtualRanksLayer &&) noexcept = default;
VirtualRanksLayer &VirtualRanksLayer::operator=(VirtualRanksLayer &&) noexcept = default;

void VirtualRanksLayer::forward(std::vector<ConstHostMatrix> const &tokens, std::vector<GateInput> const &gates,
                                std::vector<HostMatrix> const &out, Schedule schedule) {
  _state->forward(tokens, gates, out, schedule);
}

MoeConfig const &VirtualRanksLayer::config() const { return _state->config; }
int VirtualRanksLayer::world() const { return _state->world; }
Routing const &VirtualRanksLayer::routing(int rank) const {
  TESSEL_REQUIRE(rank >= 0 && rank < _state->world, "VirtualRanksLayer::routing: rank ", rank, " out of [0, ",
                 _state->world, ")");
  return _state->routings[static_cast<std::size_t>(rank)];
}
DeviceStats const &VirtualRanksLayer::stats() const { return _state->stats; }
CometParams const &VirtualRanksLayer::comet_params() const { return _state->comet; }
std::string const &VirtualRanksLayer::comet_params_source() const { return _state->comet_source; }
void VirtualRanksLayer::set_comet_params(CometParams const &params) {
  params.validate(_state->host_config, "cuda");
  _state->comet = params;
  _state->comet_source = "given";
}
int VirtualRanksLayer::pipeline_chunks() const { return _state->options.pipeline_chunks; }
void VirtualRanksLayer::set_pipeline_chunks(int chunks) {
  TESSEL_REQUIRE(chunks >= 1, "VirtualRanksLayer::set_pipeline_chunks: chunks must be >= 1, got ", chunks);
  _state->options.pipeline_chunks = chunks;
}

} // namespace tessel::moe::cuda

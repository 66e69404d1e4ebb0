#include "Rank.hpp"

namespace tessel::moe::cuda::Impl {

namespace {

constexpr std::size_t align_up(std::size_t v, std::size_t a = 256) { return (v + a - 1) / a * a; }

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

// One GEMM layer of the baselines' expert FFN: out = in W_e per problem, fp32 out. GEMM0: x_recv (N columns, device
// precision) -> c0 (gemm0_cols); GEMM1: h (K/TP, device precision) -> y (N).
struct GemmLayer {
  char *weights = nullptr, *in = nullptr;
  float *out = nullptr;
  std::int64_t in_cols = 0, out_cols = 0;
  std::size_t es = 0;
  void *weight(int e) const { return weights + static_cast<std::size_t>(e * in_cols * out_cols) * es; }
  void *input(std::int64_t row) const { return in + static_cast<std::size_t>(row * in_cols) * es; }
  void *output(std::int64_t row) const { return out + row * out_cols; }
};

GemmLayer gemm_layer(RankState const &rs, MoeConfig const &config, int layer) {
  GemmLayer g;
  g.es = size_of(config.dtype);
  if (layer == 0) {
    g.weights = rs.w0.data();
    g.in = rs.x_recv.data();
    g.out = rs.c0.data();
    g.in_cols = config.hidden;
    g.out_cols = config.gemm0_cols();
  } else {
    g.weights = rs.w1.data();
    g.in = rs.h.data();
    g.out = rs.y.data();
    g.in_cols = config.ffn_per_rank();
    g.out_cols = config.hidden;
  }
  return g;
}

} // namespace

SymmetricLayout symmetric_layout(MoeConfig const &config) {
  std::int64_t const m = config.tokens, n = config.hidden, topk = config.topk;
  std::size_t const es = size_of(config.dtype), world = static_cast<std::size_t>(config.world());
  SymmetricLayout layout;
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t const at = off;
    off = align_up(off + std::max<std::size_t>(bytes, 1));
    return at;
  };
  layout.send_rows = take(static_cast<std::size_t>(m * topk * n) * es);
  layout.slot_rows = take(static_cast<std::size_t>(m * topk * topk) * sizeof(std::int32_t));
  layout.slot_weight = take(static_cast<std::size_t>(m * topk * topk) * sizeof(float));
  layout.combine = take(world * static_cast<std::size_t>(m * n) * sizeof(float));
  layout.packed_flag = take(world * sizeof(std::uint64_t));
  layout.combine_flag = take(world * sizeof(std::uint64_t));
  layout.abort = take(sizeof(std::uint64_t));
  layout.bytes = off;
  return layout;
}

void load_weights(RankState &rs, MoeConfig const &config, int rank, ExpertWeights const &w, Timeout timeout) {
  std::int64_t const n = config.hidden, cols0 = config.gemm0_cols(), kp = config.ffn_per_rank();
  auto const eg = static_cast<std::size_t>(config.experts_per_group());
  std::size_t const es = size_of(config.dtype);
  TESSEL_REQUIRE(w.w0.extent(0) == eg && w.w0.extent(1) == static_cast<std::size_t>(n) &&
                     w.w0.extent(2) == static_cast<std::size_t>(cols0),
                 "tessel::moe::cuda: rank ", rank, "'s w0 is ", w.w0.extent(0), " x ", w.w0.extent(1), " x ",
                 w.w0.extent(2), ", expected E/EP x N x gemm0_cols = ", eg, " x ", n, " x ", cols0);
  TESSEL_REQUIRE(w.w1.extent(0) == eg && w.w1.extent(1) == static_cast<std::size_t>(kp) &&
                     w.w1.extent(2) == static_cast<std::size_t>(n),
                 "tessel::moe::cuda: rank ", rank, "'s w1 is ", w.w1.extent(0), " x ", w.w1.extent(1), " x ",
                 w.w1.extent(2), ", expected E/EP x K/TP x N = ", eg, " x ", kp, " x ", n);
  std::size_t const n0 = eg * static_cast<std::size_t>(n * cols0), n1 = eg * static_cast<std::size_t>(kp * n);
  rs.w0 = DeviceBuffer<char>(n0 * es, "Tessel::moe::cuda::w0");
  rs.w1 = DeviceBuffer<char>(n1 * es, "Tessel::moe::cuda::w1");
  DeviceBuffer<float> stage(std::max(n0, n1), "Tessel::moe::cuda::weight_stage");
  stage.copy_from_host(w.w0.data(), n0, rs.stream.get());
  TESSEL_CUDA_CHECK(convert(rs.stream.get(), config.dtype, stage.data(), n0, rs.w0.data()));
  rs.stream.synchronize(timeout);
  stage.copy_from_host(w.w1.data(), n1, rs.stream.get());
  TESSEL_CUDA_CHECK(convert(rs.stream.get(), config.dtype, stage.data(), n1, rs.w1.data()));
  rs.stream.synchronize(timeout);
}

void ensure_compute(RankState &rs, MoeConfig const &config, std::int64_t rows, bool c0) {
  std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), cols0 = config.gemm0_cols();
  std::size_t const es = size_of(config.dtype);
  ensure(rs.x_recv, static_cast<std::size_t>(rows * n) * es, "Tessel::moe::cuda::x_recv");
  ensure(rs.h, static_cast<std::size_t>(rows * kp) * es, "Tessel::moe::cuda::h");
  ensure(rs.y, static_cast<std::size_t>(rows * n), "Tessel::moe::cuda::y");
  if (c0)
    ensure(rs.c0, static_cast<std::size_t>(rows * cols0), "Tessel::moe::cuda::c0");
}

void upload_work(RankState &rs, MoeConfig const &config, RankWork const &w, bool comet) {
  cudaStream_t const s = rs.stream.get();
  if (comet) {
    upload(rs.messages, w.messages, "Tessel::moe::cuda::messages", s);
    upload(rs.items0, w.items0, "Tessel::moe::cuda::items0", s);
    upload(rs.items1, w.items1, "Tessel::moe::cuda::items1", s);
    upload(rs.reduces, w.reduces, "Tessel::moe::cuda::reduces", s);
    upload(rs.split_tiles, w.split_tiles, "Tessel::moe::cuda::split_tiles", s);
  } else {
    std::vector<ReduceItem> all;
    for (auto const &c : w.chunk_reduces)
      all.insert(all.end(), c.begin(), c.end());
    upload(rs.chunk_reduces, all, "Tessel::moe::cuda::reduces", s);
    // cublasGemmGroupedBatchedEx reads the matrix pointers from device memory (the shapes and scalars from host
    // arrays): all of one forward's are uploaded here, ahead of the timed region, in the order chunk_ffn passes
    // them (per chunk: GEMM0's weights, inputs, outputs, then GEMM1's).
    std::vector<void *> ptrs;
    rs.gemm_ptr_base.clear();
    if (grouped_gemms(config.dtype))
      for (auto const &g : w.gemms) {
        rs.gemm_ptr_base.push_back(ptrs.size());
        for (auto const &layer : {gemm_layer(rs, config, 0), gemm_layer(rs, config, 1)}) {
          for (auto const &p : g.problems)
            ptrs.push_back(layer.weight(p.expert));
          for (auto const &p : g.problems)
            ptrs.push_back(layer.input(p.row));
          for (auto const &p : g.problems)
            ptrs.push_back(layer.output(p.row));
        }
      }
    upload(rs.gemm_ptrs, ptrs, "Tessel::moe::cuda::gemm_pointers", s);
    // `all` and `ptrs` die here: the copies must have left them.
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

bool grouped_gemms(DataType dtype) {
#ifdef TESSEL_CUBLAS_HAS_GROUPED_GEMM
  // cublasGemmGroupedBatchedEx takes one type for A, B and C (fp32, fp16 or bf16 with CUBLAS_COMPUTE_32F): 16-bit
  // inputs with the fp32 output the top-k reduction reads are not among its combinations, so float16 and bfloat16
  // keep one cublasGemmEx per problem rather than round y to 16 bits.
  return dtype == DataType::float32;
#else
  (void)dtype;
  return false;
#endif
}

namespace {

// One GEMM problem batch of a chunk, through cuBLAS: grouped (device pointer arrays at \p ptrs: weights, inputs,
// outputs of the chunk's problems) or one cublasGemmEx per problem (\p ptrs null).
void run_gemms(RankState &rs, MoeConfig const &config, ChunkGemms const &g, GemmLayer const &layer, void *const *ptrs) {
  cudaDataType_t const t = cuda_type(config.dtype);
  // Row-major C = A W is column-major C^T = W^T A^T: m = output columns, n = rows, k = input columns.
  int const m = static_cast<int>(layer.out_cols), k = static_cast<int>(layer.in_cols);
  if (ptrs != nullptr) {
#ifdef TESSEL_CUBLAS_HAS_GROUPED_GEMM
    std::size_t const groups = g.group_rows.size(), problems = g.problems.size();
    std::vector<cublasOperation_t> const op(groups, CUBLAS_OP_N);
    std::vector<int> const ms(groups, m), ks(groups, k);
    std::vector<int> ns(groups);
    for (std::size_t i = 0; i < groups; ++i)
      ns[i] = static_cast<int>(g.group_rows[i]);
    std::vector<float> const alpha(groups, 1.0f), beta(groups, 0.0f);
    TESSEL_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(rs.cublas.get(), op.data(), op.data(), ms.data(), ns.data(),
                                                   ks.data(), alpha.data(), ptrs, t, ms.data(), ptrs + problems, t,
                                                   ks.data(), beta.data(), ptrs + 2 * problems, CUDA_R_32F, ms.data(),
                                                   static_cast<int>(groups), g.group_size.data(), CUBLAS_COMPUTE_32F));
    return;
#endif
  }
  float const one = 1.0f, zero = 0.0f;
  for (auto const &p : g.problems)
    TESSEL_CUBLAS_CHECK(cublasGemmEx(rs.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, m, static_cast<int>(p.rows), k, &one,
                                     layer.weight(p.expert), t, m, layer.input(p.row), t, k, &zero, layer.output(p.row),
                                     CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

} // namespace

void chunk_ffn(RankState &rs, MoeConfig const &config, RankWork const &w, int ch) {
  auto const &g = w.gemms[static_cast<std::size_t>(ch)];
  if (g.problems.empty())
    return;
  void *const *ptrs = nullptr;
  if (grouped_gemms(config.dtype)) {
    TESSEL_REQUIRE(static_cast<std::size_t>(ch) < rs.gemm_ptr_base.size(),
                   "internal: tessel::moe::cuda: the GEMM pointers of chunk ", ch, " were not uploaded");
    ptrs = rs.gemm_ptrs.data() + rs.gemm_ptr_base[static_cast<std::size_t>(ch)];
  }
  run_gemms(rs, config, g, gemm_layer(rs, config, 0), ptrs);
  std::int64_t const kp = config.ffn_per_rank(), cols0 = config.gemm0_cols();
  std::size_t const es = size_of(config.dtype);
  for (std::size_t src = 0; src < w.blocks.size(); ++src) {
    auto const &b = w.blocks[src][static_cast<std::size_t>(ch)];
    std::int64_t const row = w.row[src][static_cast<std::size_t>(ch)];
    if (b.rows > 0)
      TESSEL_CUDA_CHECK(activate(rs.stream.get(), config.dtype, static_cast<int>(config.activation), config.gated,
                                 rs.c0.data() + row * cols0, b.rows, kp,
                                 rs.h.data() + static_cast<std::size_t>(row * kp) * es));
  }
  run_gemms(rs, config, g, gemm_layer(rs, config, 1), ptrs == nullptr ? nullptr : ptrs + 3 * g.problems.size());
}

void pipelined_compute(RankState &rs, MoeConfig const &config, RankWork const &w, RankView const &view, int chunks) {
  cudaStream_t const s = rs.stream.get();
  std::size_t offset = 0;
  for (int ch = 0; ch < chunks; ++ch) {
    rs.chunk_in[static_cast<std::size_t>(ch)].wait_on(s);
    chunk_ffn(rs, config, w, ch);
    auto const count = w.chunk_reduces[static_cast<std::size_t>(ch)].size();
    TESSEL_CUDA_CHECK(topk_reduce(s, view, rs.y.data(), static_cast<int>(count), rs.chunk_reduces.data() + offset,
                                  rs.combine_send.data()));
    offset += count;
    rs.chunk_out[static_cast<std::size_t>(ch)].record(s);
  }
}

namespace {

int multiprocessors() {
  int device = 0, sms = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  TESSEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

} // namespace

int waiting_blocks(int sharing) { return std::max(1, waiting_blocks_per_sm * multiprocessors() / sharing); }

CometGrid comet_grid(MoeConfig const &config, CometParams const &comet, int sharing) {
  int const sms = multiprocessors();
  int per_sm0 = 0, per_sm1 = 0;
  TESSEL_CUDA_CHECK(layer0_occupancy(config.dtype, config.gated, static_cast<int>(config.activation), &per_sm0));
  TESSEL_CUDA_CHECK(layer1_occupancy(config.dtype, &per_sm1));
  TESSEL_REQUIRE(per_sm0 > 0 && per_sm1 > 0, "tessel::moe::cuda: the fused kernels do not fit on this device");
  // Ranks sharing the device get an equal share of the co-resident blocks, and of the communication blocks, which
  // are tuned for a whole device (COMET's n_c). Correctness does not depend on it: roles come from tickets; the
  // share only keeps the ranks from serializing.
  CometGrid g;
  g.cap0 = std::max(2, per_sm0 * sms / sharing);
  g.cap1 = std::max(2, per_sm1 * sms / sharing);
  g.comm_blocks = std::clamp((comet.comm_workers + sharing - 1) / sharing, 1, g.cap1 / 2);
  return g;
}

std::pair<int, int> launch_comet(RankState &rs, MoeConfig const &config, RankWork const &w, RankView const &view,
                                 CometGrid const &grid, int n_splits, std::uint64_t epoch) {
  cudaStream_t const s = rs.stream.get();
  int const messages = static_cast<int>(w.messages.size());
  ensure(rs.ready, static_cast<std::size_t>(messages + n_splits), "Tessel::moe::cuda::ready");
  TESSEL_CUDA_CHECK(cudaMemsetAsync(rs.control.data(), 0, sizeof(Control), s));
  TESSEL_CUDA_CHECK(
      cudaMemsetAsync(rs.ready.data(), 0, static_cast<std::size_t>(messages + n_splits) * sizeof(int), s));

  Layer0Args a0;
  a0.view = view;
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
  a0.comm_blocks = std::clamp(std::min(grid.comm_blocks, messages), 1, grid.cap0 - 1);
  int const grid0 = a0.comm_blocks + std::clamp(a0.items, 1, grid.cap0 - a0.comm_blocks);
  TESSEL_CUDA_CHECK(comet_layer0(s, a0, grid0));

  Layer1Args a1;
  a1.view = view;
  a1.dtype = config.dtype;
  a1.items = static_cast<int>(w.items1.size());
  a1.item = rs.items1.data();
  a1.h = rs.h.data();
  a1.w1 = rs.w1.data();
  a1.y = rs.y.data();
  a1.splits = n_splits;
  a1.split_tiles = rs.split_tiles.data();
  a1.split_done = rs.ready.data() + messages;
  a1.reduces = static_cast<int>(w.reduces.size());
  a1.reduce = rs.reduces.data();
  a1.comm_blocks = grid.comm_blocks;
  int const grid1 = grid.comm_blocks + std::clamp(a1.items, 1, grid.cap1 - grid.comm_blocks);
  TESSEL_CUDA_CHECK(comet_layer1(s, a1, grid1));
  return {grid0, grid1};
}

namespace {

std::string describe_wait(int code, std::int64_t arg) {
  switch (code) {
  case timeout_packed:
    return tessel::Impl::concat("the packed flag of source rank ", arg);
  case timeout_message:
    return tessel::Impl::concat("message ", arg);
  case timeout_split:
    return tessel::Impl::concat("the GEMM tiles of column block ", arg);
  default:
    return tessel::Impl::concat("the combine stores of rank ", arg);
  }
}

} // namespace

std::string device_failure(std::uint64_t word, int error, int error_arg, double timeout_seconds, int *peer) {
  // The abort word names the first failure to reach this rank, which is the one every rank reports; a local error
  // without it cannot happen (the failing thread raises its own word too), but is reported as it is.
  int code = error, origin = -1;
  std::int64_t arg = error_arg;
  if (word != 0) {
    code = static_cast<int>(word >> abort_code_shift);
    origin = static_cast<int>((word >> abort_rank_shift) & ((1ull << (abort_code_shift - abort_rank_shift)) - 1));
    arg = static_cast<std::int32_t>(word & 0xffffffffull);
  }
  if (peer != nullptr)
    *peer = code == timeout_packed || code == timeout_combine ? static_cast<int>(arg) : origin;
  return tessel::Impl::concat(origin >= 0 ? tessel::Impl::concat("rank ", origin, "'s") : std::string("a"),
                              " device wait for ", describe_wait(code, arg), " gave up after ", timeout_seconds,
                              " s; every rank's kernels stopped");
}

void check_control(RankState &rs, char const *sym_base, SymmetricLayout const &layout, Timeout timeout,
                   std::string const &context, double timeout_seconds) {
  Control control;
  std::uint64_t word = 0;
  rs.control.copy_to_host(&control, 1, rs.stream.get());
  tessel::cuda::Impl::copy(&word, sym_base + layout.abort, sizeof(word), rs.stream.get());
  rs.stream.synchronize(timeout);
  if (word == 0 && control.error == no_error)
    return;
  int peer = -1;
  auto const failure = device_failure(word, control.error, control.error_arg, timeout_seconds, &peer);
  throw TimeoutError(tessel::Impl::concat(context, ": ", failure), peer);
}

} // namespace tessel::moe::cuda::Impl

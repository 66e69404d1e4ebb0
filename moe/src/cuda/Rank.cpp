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
  std::size_t element_size = 0;
  void *weight(int e) const { return weights + static_cast<std::size_t>(e * in_cols * out_cols) * element_size; }
  void *input(std::int64_t row) const { return in + static_cast<std::size_t>(row * in_cols) * element_size; }
  void *output(std::int64_t row) const { return out + row * out_cols; }
};

GemmLayer gemm_layer(RankState const &rank_state, MoeConfig const &config, int layer) {
  GemmLayer g;
  g.element_size = size_of(config.dtype);
  if (layer == 0) {
    g.weights = rank_state.w0.data();
    g.in = rank_state.x_recv.data();
    g.out = rank_state.c0.data();
    g.in_cols = config.hidden;
    g.out_cols = config.gemm0_cols();
  } else {
    g.weights = rank_state.w1.data();
    g.in = rank_state.h.data();
    g.out = rank_state.y.data();
    g.in_cols = config.ffn_per_rank();
    g.out_cols = config.hidden;
  }
  return g;
}

} // namespace

SymmetricLayout symmetric_layout(MoeConfig const &config) {
  std::int64_t const m = config.tokens, n = config.hidden, topk = config.topk;
  std::size_t const element_size = size_of(config.dtype), world = static_cast<std::size_t>(config.world());
  SymmetricLayout layout;
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t const at = off;
    off = align_up(off + std::max<std::size_t>(bytes, 1));
    return at;
  };
  layout.send_rows = take(static_cast<std::size_t>(m * topk * n) * element_size);
  layout.slot_rows = take(static_cast<std::size_t>(m * topk * topk) * sizeof(std::int32_t));
  layout.slot_weight = take(static_cast<std::size_t>(m * topk * topk) * sizeof(float));
  layout.combine = take(world * static_cast<std::size_t>(m * n) * sizeof(float));
  layout.packed_flag = take(world * sizeof(std::uint64_t));
  layout.combine_flag = take(world * sizeof(std::uint64_t));
  layout.abort = take(sizeof(std::uint64_t));
  layout.bytes = off;
  return layout;
}

void load_weights(RankState &rank_state, MoeConfig const &config, int rank, ExpertWeights const &w, Timeout timeout) {
  std::int64_t const n = config.hidden, cols0 = config.gemm0_cols(), ffn_per_rank = config.ffn_per_rank();
  auto const local_experts = static_cast<std::size_t>(config.experts_per_group());
  std::size_t const element_size = size_of(config.dtype);
  TESSEL_REQUIRE(w.w0.extent(0) == local_experts && w.w0.extent(1) == static_cast<std::size_t>(n) &&
                     w.w0.extent(2) == static_cast<std::size_t>(cols0),
                 "tessel::moe::cuda: rank ", rank, "'s w0 is ", w.w0.extent(0), " x ", w.w0.extent(1), " x ",
                 w.w0.extent(2), ", expected E/EP x N x gemm0_cols = ", local_experts, " x ", n, " x ", cols0);
  TESSEL_REQUIRE(w.w1.extent(0) == local_experts && w.w1.extent(1) == static_cast<std::size_t>(ffn_per_rank) &&
                     w.w1.extent(2) == static_cast<std::size_t>(n),
                 "tessel::moe::cuda: rank ", rank, "'s w1 is ", w.w1.extent(0), " x ", w.w1.extent(1), " x ",
                 w.w1.extent(2), ", expected E/EP x K/TP x N = ", local_experts, " x ", ffn_per_rank, " x ", n);
  std::size_t const n0 = local_experts * static_cast<std::size_t>(n * cols0),
                    n1 = local_experts * static_cast<std::size_t>(ffn_per_rank * n);
  rank_state.w0 = DeviceBuffer<char>(n0 * element_size, "Tessel::moe::cuda::w0");
  rank_state.w1 = DeviceBuffer<char>(n1 * element_size, "Tessel::moe::cuda::w1");
  DeviceBuffer<float> stage(std::max(n0, n1), "Tessel::moe::cuda::weight_stage");
  stage.copy_from_host(w.w0.data(), n0, rank_state.stream.get());
  TESSEL_CUDA_CHECK(convert(rank_state.stream.get(), config.dtype, stage.data(), n0, rank_state.w0.data()));
  rank_state.stream.synchronize(timeout);
  stage.copy_from_host(w.w1.data(), n1, rank_state.stream.get());
  TESSEL_CUDA_CHECK(convert(rank_state.stream.get(), config.dtype, stage.data(), n1, rank_state.w1.data()));
  rank_state.stream.synchronize(timeout);
}

void ensure_compute(RankState &rank_state, MoeConfig const &config, std::int64_t rows, bool c0) {
  std::int64_t const n = config.hidden, ffn_per_rank = config.ffn_per_rank(), cols0 = config.gemm0_cols();
  std::size_t const element_size = size_of(config.dtype);
  ensure(rank_state.x_recv, static_cast<std::size_t>(rows * n) * element_size, "Tessel::moe::cuda::x_recv");
  ensure(rank_state.h, static_cast<std::size_t>(rows * ffn_per_rank) * element_size, "Tessel::moe::cuda::h");
  ensure(rank_state.y, static_cast<std::size_t>(rows * n), "Tessel::moe::cuda::y");
  if (c0)
    ensure(rank_state.c0, static_cast<std::size_t>(rows * cols0), "Tessel::moe::cuda::c0");
}

void upload_work(RankState &rank_state, MoeConfig const &config, RankWork const &w, bool comet) {
  cudaStream_t const s = rank_state.stream.get();
  if (comet) {
    upload(rank_state.messages, w.messages, "Tessel::moe::cuda::messages", s);
    upload(rank_state.items0, w.items0, "Tessel::moe::cuda::items0", s);
    upload(rank_state.items1, w.items1, "Tessel::moe::cuda::items1", s);
    upload(rank_state.reduces, w.reduces, "Tessel::moe::cuda::reduces", s);
    upload(rank_state.split_tiles, w.split_tiles, "Tessel::moe::cuda::split_tiles", s);
  } else {
    std::vector<ReduceItem> all;
    for (auto const &c : w.chunk_reduces)
      all.insert(all.end(), c.begin(), c.end());
    upload(rank_state.chunk_reduces, all, "Tessel::moe::cuda::reduces", s);
    // cublasGemmGroupedBatchedEx reads the matrix pointers from device memory (the shapes and scalars from host
    // arrays): all of one forward's are uploaded here, ahead of the timed region, in the order chunk_ffn passes
    // them (per chunk: GEMM0's weights, inputs, outputs, then GEMM1's).
    std::vector<void *> ptrs;
    rank_state.gemm_ptr_base.clear();
    if (grouped_gemms(config.dtype))
      for (auto const &g : w.gemms) {
        rank_state.gemm_ptr_base.push_back(ptrs.size());
        for (auto const &layer : {gemm_layer(rank_state, config, 0), gemm_layer(rank_state, config, 1)}) {
          for (auto const &p : g.problems)
            ptrs.push_back(layer.weight(p.expert));
          for (auto const &p : g.problems)
            ptrs.push_back(layer.input(p.row));
          for (auto const &p : g.problems)
            ptrs.push_back(layer.output(p.row));
        }
      }
    upload(rank_state.gemm_ptrs, ptrs, "Tessel::moe::cuda::gemm_pointers", s);
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
void run_gemms(RankState &rank_state, MoeConfig const &config, ChunkGemms const &g, GemmLayer const &layer,
               void *const *ptrs) {
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
    TESSEL_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(rank_state.cublas.get(), op.data(), op.data(), ms.data(), ns.data(),
                                                   ks.data(), alpha.data(), ptrs, t, ms.data(), ptrs + problems, t,
                                                   ks.data(), beta.data(), ptrs + 2 * problems, CUDA_R_32F, ms.data(),
                                                   static_cast<int>(groups), g.group_size.data(), CUBLAS_COMPUTE_32F));
    return;
#endif
  }
  float const one = 1.0f, zero = 0.0f;
  for (auto const &p : g.problems)
    TESSEL_CUBLAS_CHECK(cublasGemmEx(rank_state.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, m, static_cast<int>(p.rows), k,
                                     &one, layer.weight(p.expert), t, m, layer.input(p.row), t, k, &zero,
                                     layer.output(p.row), CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

} // namespace

void chunk_ffn(RankState &rank_state, MoeConfig const &config, RankWork const &w, int ch) {
  auto const &g = w.gemms[static_cast<std::size_t>(ch)];
  if (g.problems.empty())
    return;
  void *const *ptrs = nullptr;
  if (grouped_gemms(config.dtype)) {
    TESSEL_REQUIRE(static_cast<std::size_t>(ch) < rank_state.gemm_ptr_base.size(),
                   "internal: tessel::moe::cuda: the GEMM pointers of chunk ", ch, " were not uploaded");
    ptrs = rank_state.gemm_ptrs.data() + rank_state.gemm_ptr_base[static_cast<std::size_t>(ch)];
  }
  run_gemms(rank_state, config, g, gemm_layer(rank_state, config, 0), ptrs);
  std::int64_t const ffn_per_rank = config.ffn_per_rank(), cols0 = config.gemm0_cols();
  std::size_t const element_size = size_of(config.dtype);
  for (std::size_t src = 0; src < w.blocks.size(); ++src) {
    auto const &b = w.blocks[src][static_cast<std::size_t>(ch)];
    std::int64_t const row = w.row[src][static_cast<std::size_t>(ch)];
    if (b.rows > 0)
      TESSEL_CUDA_CHECK(activate(rank_state.stream.get(), config.dtype, static_cast<int>(config.activation),
                                 config.gated, rank_state.c0.data() + row * cols0, b.rows, ffn_per_rank,
                                 rank_state.h.data() + static_cast<std::size_t>(row * ffn_per_rank) * element_size));
  }
  run_gemms(rank_state, config, g, gemm_layer(rank_state, config, 1),
            ptrs == nullptr ? nullptr : ptrs + 3 * g.problems.size());
}

void pipelined_compute(RankState &rank_state, MoeConfig const &config, RankWork const &w, RankView const &view,
                       int chunks) {
  cudaStream_t const s = rank_state.stream.get();
  std::size_t offset = 0;
  for (int ch = 0; ch < chunks; ++ch) {
    rank_state.chunk_in[static_cast<std::size_t>(ch)].wait_on(s);
    chunk_ffn(rank_state, config, w, ch);
    auto const count = w.chunk_reduces[static_cast<std::size_t>(ch)].size();
    TESSEL_CUDA_CHECK(topk_reduce(s, view, rank_state.y.data(), static_cast<int>(count),
                                  rank_state.chunk_reduces.data() + offset, rank_state.combine_send.data()));
    offset += count;
    rank_state.chunk_out[static_cast<std::size_t>(ch)].record(s);
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

std::pair<int, int> launch_comet(RankState &rank_state, MoeConfig const &config, RankWork const &w,
                                 RankView const &view, CometGrid const &grid, int n_splits, std::uint64_t epoch) {
  cudaStream_t const s = rank_state.stream.get();
  int const messages = static_cast<int>(w.messages.size());
  ensure(rank_state.ready, static_cast<std::size_t>(messages + n_splits), "Tessel::moe::cuda::ready");
  TESSEL_CUDA_CHECK(cudaMemsetAsync(rank_state.control.data(), 0, sizeof(Control), s));
  TESSEL_CUDA_CHECK(
      cudaMemsetAsync(rank_state.ready.data(), 0, static_cast<std::size_t>(messages + n_splits) * sizeof(int), s));

  Layer0Args a0;
  a0.view = view;
  a0.dtype = config.dtype;
  a0.activation = static_cast<int>(config.activation);
  a0.gated = config.gated;
  a0.epoch = epoch;
  a0.messages = messages;
  a0.message = rank_state.messages.data();
  a0.message_ready = rank_state.ready.data();
  a0.items = static_cast<int>(w.items0.size());
  a0.item = rank_state.items0.data();
  a0.x_recv = rank_state.x_recv.data();
  a0.w0 = rank_state.w0.data();
  a0.cols0 = config.gemm0_cols();
  a0.h = rank_state.h.data();
  a0.comm_blocks = std::clamp(std::min(grid.comm_blocks, messages), 1, grid.cap0 - 1);
  int const grid0 = a0.comm_blocks + std::clamp(a0.items, 1, grid.cap0 - a0.comm_blocks);
  TESSEL_CUDA_CHECK(comet_layer0(s, a0, grid0));

  Layer1Args a1;
  a1.view = view;
  a1.dtype = config.dtype;
  a1.items = static_cast<int>(w.items1.size());
  a1.item = rank_state.items1.data();
  a1.h = rank_state.h.data();
  a1.w1 = rank_state.w1.data();
  a1.y = rank_state.y.data();
  a1.splits = n_splits;
  a1.split_tiles = rank_state.split_tiles.data();
  a1.split_done = rank_state.ready.data() + messages;
  a1.reduces = static_cast<int>(w.reduces.size());
  a1.reduce = rank_state.reduces.data();
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

void check_control(RankState &rank_state, char const *sym_base, SymmetricLayout const &layout, Timeout timeout,
                   std::string const &context, double timeout_seconds) {
  Control control;
  std::uint64_t word = 0;
  rank_state.control.copy_to_host(&control, 1, rank_state.stream.get());
  tessel::cuda::Impl::copy(&word, sym_base + layout.abort, sizeof(word), rank_state.stream.get());
  rank_state.stream.synchronize(timeout);
  if (word == 0 && control.error == no_error)
    return;
  int peer = -1;
  auto const failure = device_failure(word, control.error, control.error_arg, timeout_seconds, &peer);
  throw TimeoutError(tessel::Impl::concat(context, ": ", failure), peer);
}

} // namespace tessel::moe::cuda::Impl

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

void upload_work(RankState &rs, RankWork const &w, bool comet) {
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
    // `all` dies here: the copy must have left it.
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

void block_ffn(RankState &rs, MoeConfig const &config, Block const &b, std::int64_t row) {
  if (b.rows == 0)
    return;
  std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), cols0 = config.gemm0_cols();
  std::size_t const es = size_of(config.dtype);
  cudaDataType_t const t = cuda_type(config.dtype);
  float const one = 1.0f, zero = 0.0f;
  int const eg = config.experts_per_group();
  for (int e = 0; e < eg; ++e) {
    std::int64_t const r0 = row + b.expert_offset[static_cast<std::size_t>(e)];
    auto const rows = static_cast<int>(b.expert_offset[static_cast<std::size_t>(e) + 1] -
                                       b.expert_offset[static_cast<std::size_t>(e)]);
    if (rows == 0)
      continue;
    // Row-major C = A B is column-major C^T = B^T A^T.
    TESSEL_CUBLAS_CHECK(cublasGemmEx(
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
    TESSEL_CUBLAS_CHECK(
        cublasGemmEx(rs.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), rows, static_cast<int>(kp), &one,
                     rs.w1.data() + static_cast<std::size_t>(e * kp * n) * es, t, static_cast<int>(n),
                     rs.h.data() + static_cast<std::size_t>(r0 * kp) * es, t, static_cast<int>(kp), &zero,
                     rs.y.data() + r0 * n, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

CometGrid comet_grid(MoeConfig const &config, CometParams const &comet, int sharing) {
  int device = 0, sms = 0, per_sm0 = 0, per_sm1 = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  TESSEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TESSEL_CUDA_CHECK(layer0_occupancy(config.dtype, config.gated, static_cast<int>(config.activation), &per_sm0));
  TESSEL_CUDA_CHECK(layer1_occupancy(config.dtype, &per_sm1));
  TESSEL_REQUIRE(per_sm0 > 0 && per_sm1 > 0, "tessel::moe::cuda: the fused kernels do not fit on this device");
  // Ranks sharing the device get an equal share of the co-resident blocks. (Correctness does not depend on it:
  // roles come from tickets; the share only keeps the ranks from serializing.)
  CometGrid g;
  g.cap0 = std::max(2, per_sm0 * sms / sharing);
  g.cap1 = std::max(2, per_sm1 * sms / sharing);
  g.comm_blocks = std::clamp(comet.comm_workers, 1, g.cap1 / 2);
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

void check_control(RankState &rs, Timeout timeout, std::string const &context, double timeout_seconds) {
  Control control;
  rs.control.copy_to_host(&control, 1, rs.stream.get());
  rs.stream.synchronize(timeout);
  if (control.error == no_error)
    return;
  char const *what = control.error == timeout_packed    ? "the packed flag of source rank "
                     : control.error == timeout_message ? "message "
                     : control.error == timeout_split   ? "the GEMM tiles of column block "
                                                        : "the combine stores of rank ";
  throw TimeoutError(tessel::Impl::concat(context, ": a device wait for ", what, control.error_arg, " gave up after ",
                                          timeout_seconds, " s"),
                     control.error == timeout_packed || control.error == timeout_combine ? control.error_arg : -1);
}

} // namespace tessel::moe::cuda::Impl

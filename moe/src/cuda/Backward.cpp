#include "Backward.hpp"

#include <algorithm>

namespace tessel::moe::cuda::Impl {

namespace {

// Row-major C [rows x cols] = op(A) op(B) is column-major C^T: the callers pass the column-major view. fp32 in and
// out, CUBLAS_COMPUTE_32F (no TF32).
void sgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n,
           std::int64_t k, float const *a, std::int64_t lda, float const *b, std::int64_t ldb, float beta, float *c,
           std::int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  float const one = 1.0f;
  TESSEL_CUBLAS_CHECK(cublasGemmEx(handle, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one,
                                   a, CUDA_R_32F, static_cast<int>(lda), b, CUDA_R_32F, static_cast<int>(ldb), &beta, c,
                                   CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

float const *w0_of(RankState const &rank_state, MoeConfig const &config, int e) {
  return reinterpret_cast<float const *>(rank_state.w0.data()) + e * config.hidden * config.gemm0_cols();
}
float const *w1_of(RankState const &rank_state, MoeConfig const &config, int e) {
  return reinterpret_cast<float const *>(rank_state.w1.data()) + e * config.ffn_per_rank() * config.hidden;
}

// The expert side's backward of problem \p p on rank_state's stream (its cuBLAS handle): pre = x W0_e, q = g W1_e^T,
// the activation's backward (aw, dpre, dw), dx = dpre W0_e^T. x: the forward's x_recv (float32).
void expert_backward(RankState &rank_state, RankBackward &rb, MoeConfig const &config, ExpertGemm const &p) {
  if (p.rows == 0)
    return;
  std::int64_t const n = config.hidden, ffn_per_rank = config.ffn_per_rank(), c0 = config.gemm0_cols(), r = p.rows;
  cublasHandle_t const h = rank_state.cublas.get();
  float const *x = reinterpret_cast<float const *>(rank_state.x_recv.data()) + p.row * n;
  float const *w0 = w0_of(rank_state, config, p.expert), *w1 = w1_of(rank_state, config, p.expert);
  float *pre = rb.pre.data() + p.row * c0, *dpre = rb.dpre.data() + p.row * c0;
  float *q = rb.q.data() + p.row * ffn_per_rank, *aw = rb.aw.data() + p.row * ffn_per_rank;
  float const *g = rb.g.data() + p.row * n;
  // pre = x W0_e (GEMM0 again: the forward keeps x, not the hidden rows).
  sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, c0, r, n, w0, c0, x, n, 0.0f, pre, c0);
  // q = g W1_e^T.
  sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, ffn_per_rank, r, n, w1, n, g, n, 0.0f, q, ffn_per_rank);
  TESSEL_CUDA_CHECK(activation_backward(rank_state.stream.get(), static_cast<int>(config.activation), config.gated, pre,
                                        q, rb.row_weight.data() + p.row, r, ffn_per_rank, aw, dpre,
                                        rb.dw.data() + p.row));
  // dx = dpre W0_e^T.
  sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, r, c0, w0, c0, dpre, c0, 0.0f, rb.dx.data() + p.row * n, n);
}

// dW1_e += aw^T g and dW0_e += x^T dpre over the rows of \p p, on \p handle's stream.
void weight_gradients(RankState const &rank_state, RankBackward &rb, MoeConfig const &config, ExpertGemm const &p,
                      cublasHandle_t handle) {
  if (p.rows == 0)
    return;
  std::int64_t const n = config.hidden, ffn_per_rank = config.ffn_per_rank(), c0 = config.gemm0_cols(), r = p.rows;
  float const *x = reinterpret_cast<float const *>(rank_state.x_recv.data()) + p.row * n;
  // dW1_e [ffn_per_rank, N] += aw^T g.
  sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, n, ffn_per_rank, r, rb.g.data() + p.row * n, n,
        rb.aw.data() + p.row * ffn_per_rank, ffn_per_rank, 1.0f, rb.grad_w1.data() + p.expert * ffn_per_rank * n, n);
  // dW0_e [N, cols0] += x^T dpre.
  sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, c0, n, r, rb.dpre.data() + p.row * c0, c0, x, n, 1.0f,
        rb.grad_w0.data() + p.expert * n * c0, c0);
}

// The gate's GEMMs: grad_x += dlogits Wg^T and grad_gate_w = tokens^T dlogits.
void gate_gemms(RankState &rank_state, RankBackward &rb, MoeConfig const &config) {
  std::int64_t const m = config.tokens, n = config.hidden, e = config.experts;
  cublasHandle_t const h = rank_state.cublas.get();
  // grad_x [M, N] += dlogits Wg^T.
  sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, e, rb.gate_w.data(), e, rb.dlogits.data(), e, 1.0f, rb.grad_x.data(), n);
  // grad_gate_w [N, E] = tokens^T dlogits.
  if (m == 0)
    TESSEL_CUDA_CHECK(cudaMemsetAsync(rb.grad_gate_w.data(), 0, static_cast<std::size_t>(n * e) * sizeof(float),
                                      rank_state.stream.get()));
  else
    sgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, e, n, m, rb.dlogits.data(), e, rank_state.tokens.data(), n, 0.0f,
          rb.grad_gate_w.data(), e);
}

} // namespace

void ensure_backward(RankBackward &rb, MoeConfig const &config, std::int64_t rows, std::int64_t slots_in,
                     std::int64_t slots_out) {
  auto const z = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  std::int64_t const m = config.tokens, n = config.hidden, ffn_per_rank = config.ffn_per_rank(),
                     c0 = config.gemm0_cols(), e = config.experts, local_experts = config.experts_per_group(),
                     topk = config.topk;
  ensure(rb.d_out, z(m * n), "Tessel::moe::cuda::grad_out");
  ensure(rb.g_out, z(slots_out * n), "Tessel::moe::cuda::grad_out_slots");
  ensure(rb.slot_token, z(slots_out), "Tessel::moe::cuda::grad_slot_token");
  ensure(rb.dw_recv, z(config.world() * m * topk), "Tessel::moe::cuda::grad_weight_recv");
  ensure(rb.choice_row, z(m * topk), "Tessel::moe::cuda::grad_choice_row");
  ensure(rb.chosen, z(m * topk), "Tessel::moe::cuda::grad_chosen");
  ensure(rb.probs, z(m * e), "Tessel::moe::cuda::grad_probs");
  ensure(rb.weights, z(m * topk), "Tessel::moe::cuda::grad_combine_weights");
  ensure(rb.dlogits, z(m * e), "Tessel::moe::cuda::grad_logits");
  ensure(rb.aux, z(e), "Tessel::moe::cuda::grad_aux");
  ensure(rb.gate_w, z(n * e), "Tessel::moe::cuda::gate_weight");
  ensure(rb.grad_gate_w, z(n * e), "Tessel::moe::cuda::grad_gate_weight");
  ensure(rb.grad_x, z(m * n), "Tessel::moe::cuda::grad_tokens");
  ensure(rb.g_in, z(slots_in * n), "Tessel::moe::cuda::grad_in_slots");
  ensure(rb.row_slot, z(rows), "Tessel::moe::cuda::grad_row_slot");
  ensure(rb.row_weight, z(rows), "Tessel::moe::cuda::grad_row_weight");
  ensure(rb.dw, z(rows), "Tessel::moe::cuda::grad_row_dw");
  ensure(rb.g, z(rows * n), "Tessel::moe::cuda::grad_rows");
  ensure(rb.dx, z(rows * n), "Tessel::moe::cuda::grad_x_rows");
  ensure(rb.pre, z(rows * c0), "Tessel::moe::cuda::grad_recomputed_pre");
  ensure(rb.dpre, z(rows * c0), "Tessel::moe::cuda::grad_pre");
  ensure(rb.q, z(rows * ffn_per_rank), "Tessel::moe::cuda::grad_q");
  ensure(rb.aw, z(rows * ffn_per_rank), "Tessel::moe::cuda::grad_weighted_hidden");
  ensure(rb.grad_w0, z(local_experts * n * c0), "Tessel::moe::cuda::grad_w0");
  ensure(rb.grad_w1, z(local_experts * ffn_per_rank * n), "Tessel::moe::cuda::grad_w1");
}

void poison_backward(RankBackward &rb, cudaStream_t stream) {
  auto fill = [stream](auto const &buffer) {
    if (buffer.data() != nullptr && buffer.bytes() > 0)
      TESSEL_CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0xff, buffer.bytes(), stream));
  };
  fill(rb.g_out);
  fill(rb.dw_recv);
  fill(rb.dlogits);
  fill(rb.grad_gate_w);
  fill(rb.grad_x);
  fill(rb.g_in);
  fill(rb.dw);
  fill(rb.g);
  fill(rb.dx);
  fill(rb.pre);
  fill(rb.dpre);
  fill(rb.q);
  fill(rb.aw);
}

void prepare_backward(RankState &rank_state, RankBackward &rb, MoeConfig const &config, BackwardInputs const &in,
                      Timeout timeout) {
  auto const &lists = *in.lists;
  auto const &w = *in.work;
  auto const &routing = *in.routing;
  std::int64_t const m = config.tokens, n = config.hidden, e_all = config.experts, topk = config.topk;
  cudaStream_t const stream = rank_state.stream.get();
  ensure_backward(rb, config, w.rows, lists.in_off.back(), lists.out_off.back());
  ensure(rank_state.combine_send, static_cast<std::size_t>(config.world()) * static_cast<std::size_t>(m * n),
         "Tessel::moe::cuda::combine_send");
  auto const mk = static_cast<std::size_t>(m * topk), me = static_cast<std::size_t>(m * e_all);
  if (m * n > 0)
    rb.d_out.copy_from_host(in.d_out.data(), static_cast<std::size_t>(m * n), stream);
  upload(rb.slot_token, lists.slot_token, "Tessel::moe::cuda::grad_slot_token", stream);
  if (!lists.row_slot.empty()) {
    upload(rb.row_slot, lists.row_slot, "Tessel::moe::cuda::grad_row_slot", stream);
    upload(rb.row_weight, lists.row_weight, "Tessel::moe::cuda::grad_row_weight", stream);
  }
  upload(rb.choice_row, lists.choice_row, "Tessel::moe::cuda::grad_choice_row", stream);
  upload(rb.aux, *in.aux, "Tessel::moe::cuda::grad_aux", stream);
  std::vector<ReduceItem> items;
  for (auto const &c : w.chunk_reduces)
    items.insert(items.end(), c.begin(), c.end());
  upload(rb.reduces, items, "Tessel::moe::cuda::grad_reduces", stream);
  if (mk > 0) {
    rb.chosen.copy_from_host(routing.experts.data(), mk, stream);
    rb.weights.copy_from_host(routing.weights.data(), mk, stream);
  }
  if (me > 0)
    rb.probs.copy_from_host(routing.probabilities.data(), me, stream);
  if (in.gate_weight.data() != nullptr)
    rb.gate_w.copy_from_host(in.gate_weight.data(), static_cast<std::size_t>(n * e_all), stream);
  TESSEL_CUDA_CHECK(cudaMemsetAsync(rb.grad_w0.data(), 0, rb.grad_w0.bytes(), stream));
  TESSEL_CUDA_CHECK(cudaMemsetAsync(rb.grad_w1.data(), 0, rb.grad_w1.bytes(), stream));
  if (in.poison) {
    poison_backward(rb, stream);
    if (lists.row_slot.empty()) { // the sources send them (NcclMoeLayer)
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rb.row_slot.data(), 0xff, rb.row_slot.bytes(), stream));
      TESSEL_CUDA_CHECK(cudaMemsetAsync(rb.row_weight.data(), 0xff, rb.row_weight.bytes(), stream));
    }
    TESSEL_CUDA_CHECK(
        cudaMemsetAsync(in.sym_base + in.layout->combine, 0xff, in.layout->packed_flag - in.layout->combine, stream));
    TESSEL_CUDA_CHECK(cudaMemsetAsync(rank_state.combine_send.data(), 0xff, rank_state.combine_send.bytes(), stream));
  }
  // `items` dies here: the copies must be done by then.
  rank_state.stream.synchronize(timeout);
}

void pack_output_gradient(RankState &rank_state, RankBackward &rb, MoeConfig const &config, BackwardWork const &lists) {
  auto const slots = lists.out_off.back();
  if (slots > 0)
    TESSEL_CUDA_CHECK(pack_rows(rank_state.stream.get(), DataType::float32, rb.d_out.data(), rb.slot_token.data(),
                                slots, config.hidden, rb.g_out.data()));
}

void backward_tile(RankState &rank_state, RankBackward &rb, MoeConfig const &config, RankView const &view,
                   RankWork const &w, BackwardWork const &lists, int s, int ch) {
  auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
  std::int64_t const row0 = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)], n = config.hidden;
  cudaStream_t const stream = rank_state.stream.get();
  if (b.rows > 0)
    TESSEL_CUDA_CHECK(pack_rows(stream, DataType::float32,
                                rb.g_in.data() + lists.in_off[static_cast<std::size_t>(s)] * n,
                                rb.row_slot.data() + row0, b.rows, n, rb.g.data() + row0 * n));
  for (int e = 0; e < config.experts_per_group(); ++e) {
    auto const begin = b.expert_offset[static_cast<std::size_t>(e)],
               end = b.expert_offset[static_cast<std::size_t>(e) + 1];
    expert_backward(rank_state, rb, config, ExpertGemm{e, row0 + begin, end - begin});
  }
  auto const &at = lists.reduce_at[static_cast<std::size_t>(ch)];
  auto const first = at[static_cast<std::size_t>(s)], last = at[static_cast<std::size_t>(s) + 1];
  TESSEL_CUDA_CHECK(slot_sum(stream, view, rb.dx.data(), static_cast<int>(last - first), rb.reduces.data() + first,
                             rank_state.combine_send.data()));
}

void backward_weights(RankState const &rank_state, RankBackward &rb, MoeConfig const &config, RankWork const &w, int s,
                      int ch, cublasHandle_t handle) {
  auto const &b = w.blocks[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
  std::int64_t const row0 = w.row[static_cast<std::size_t>(s)][static_cast<std::size_t>(ch)];
  for (int e = 0; e < config.experts_per_group(); ++e) {
    auto const begin = b.expert_offset[static_cast<std::size_t>(e)],
               end = b.expert_offset[static_cast<std::size_t>(e) + 1];
    weight_gradients(rank_state, rb, config, ExpertGemm{e, row0 + begin, end - begin}, handle);
  }
}

void owner_backward(RankState &rank_state, RankBackward &rb, MoeConfig const &config, RankView const &view,
                    std::int32_t const *rank_group, bool gate_weight, int final_sum_blocks) {
  cudaStream_t const stream = rank_state.stream.get();
  TESSEL_CUDA_CHECK(
      final_sum(stream, view, rank_state.token_slot.data(), rank_group, 0, final_sum_blocks, rb.grad_x.data()));
  GateBackwardArgs a;
  a.m = config.tokens;
  a.experts = config.experts;
  a.topk = config.topk;
  a.world = config.world();
  a.experts_per_group = config.experts_per_group();
  a.normalize = config.normalize_topk;
  a.probs = rb.probs.data();
  a.weights = rb.weights.data();
  a.chosen = rb.chosen.data();
  a.choice_row = rb.choice_row.data();
  a.dw_recv = rb.dw_recv.data();
  a.stride = config.tokens * config.topk;
  a.rank_group = rank_group;
  a.aux = rb.aux.data();
  a.dlogits = rb.dlogits.data();
  TESSEL_CUDA_CHECK(gate_backward(stream, a));
  if (gate_weight)
    gate_gemms(rank_state, rb, config);
}

void copy_gradients(RankState &rank_state, RankBackward &rb, MoeConfig const &config, MoeGradients &gr,
                    bool gate_weight, bool gate_bias, std::vector<float> &gate_partial) {
  auto const m = static_cast<std::size_t>(config.tokens), n = static_cast<std::size_t>(config.hidden),
             e_all = static_cast<std::size_t>(config.experts),
             local_experts = static_cast<std::size_t>(config.experts_per_group()),
             ffn_per_rank = static_cast<std::size_t>(config.ffn_per_rank()),
             c0 = static_cast<std::size_t>(config.gemm0_cols());
  auto const shape_is = [](auto const &v, std::size_t a, std::size_t b, std::size_t c = 0) {
    return v.extent(0) == a && v.extent(1) == b && (c == 0 || v.extent(2) == c);
  };
  if (!shape_is(gr.tokens, m, n))
    gr.tokens = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::cuda::grad_tokens"), m, n);
  if (!shape_is(gr.logits, m, e_all))
    gr.logits = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::cuda::grad_logits"), m, e_all);
  if (!shape_is(gr.experts.w0, local_experts, n, c0))
    gr.experts.w0 = HostTensor("Tessel::moe::cuda::grad_w0", local_experts, n, c0);
  if (!shape_is(gr.experts.w1, local_experts, ffn_per_rank, n))
    gr.experts.w1 = HostTensor("Tessel::moe::cuda::grad_w1", local_experts, ffn_per_rank, n);
  if (gate_weight && !shape_is(gr.gate_weight, n, e_all))
    gr.gate_weight = HostMatrix("Tessel::moe::cuda::grad_gate_weight", n, e_all);
  if (gate_weight && gate_bias && gr.gate_bias.extent(0) != e_all)
    gr.gate_bias = HostVector("Tessel::moe::cuda::grad_gate_bias", e_all);
  cudaStream_t const stream = rank_state.stream.get();
  if (m > 0) {
    rb.grad_x.copy_to_host(gr.tokens.data(), m * n, stream);
    rb.dlogits.copy_to_host(gr.logits.data(), m * e_all, stream);
  }
  rb.grad_w0.copy_to_host(gr.experts.w0.data(), gr.experts.w0.size(), stream);
  rb.grad_w1.copy_to_host(gr.experts.w1.data(), gr.experts.w1.size(), stream);
  gate_partial.assign(gate_weight ? n * e_all : 0, 0.0f);
  if (gate_weight)
    rb.grad_gate_w.copy_to_host(gate_partial.data(), n * e_all, stream);
}

std::vector<double> aux_gradient(MoeConfig const &config, std::vector<double> const &counts, double tokens,
                                 double aux_loss_coef) {
  std::vector<double> grad(static_cast<std::size_t>(config.experts), 0.0);
  if (aux_loss_coef > 0.0 && tokens > 0)
    for (std::size_t e = 0; e < grad.size(); ++e)
      grad[e] = aux_loss_coef * config.experts * (counts[e] / (tokens * config.topk)) / tokens;
  return grad;
}

std::vector<float> gate_share(std::vector<float> const &gate_partial, ConstHostMatrix logits) {
  std::size_t const e_all = logits.extent(1);
  std::vector<float> share(gate_partial);
  std::vector<float> column(e_all, 0.0f);
  for (std::size_t t = 0; t < logits.extent(0); ++t)
    for (std::size_t e = 0; e < e_all; ++e)
      column[e] += logits(t, e);
  share.insert(share.end(), column.begin(), column.end());
  return share;
}

void set_gate_gradients(std::vector<float> const &shares, int world, MoeGradients &grads, bool gate_bias) {
  std::size_t const weight = grads.gate_weight.size(), e_all = grads.gate_weight.extent(1), each = weight + e_all;
  TESSEL_REQUIRE(shares.size() == each * static_cast<std::size_t>(world), "internal: gate shares of ", shares.size(),
                 " values for ", world, " ranks of ", each);
  std::vector<float> sum(each, 0.0f);
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < each; ++i)
      sum[i] += shares[static_cast<std::size_t>(r) * each + i];
  std::copy(sum.begin(), sum.begin() + static_cast<std::ptrdiff_t>(weight), grads.gate_weight.data());
  if (gate_bias)
    std::copy(sum.begin() + static_cast<std::ptrdiff_t>(weight), sum.end(), grads.gate_bias.data());
}

} // namespace tessel::moe::cuda::Impl

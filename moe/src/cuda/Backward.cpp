#include "Backward.hpp"

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

float const *w0_of(RankState const &rs, MoeConfig const &config, int e) {
  return reinterpret_cast<float const *>(rs.w0.data()) + e * config.hidden * config.gemm0_cols();
}
float const *w1_of(RankState const &rs, MoeConfig const &config, int e) {
  return reinterpret_cast<float const *>(rs.w1.data()) + e * config.ffn_per_rank() * config.hidden;
}

} // namespace

void ensure_backward(RankBackward &rb, MoeConfig const &config, std::int64_t rows, std::int64_t slots_in,
                     std::int64_t slots_out) {
  auto const z = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  std::int64_t const m = config.tokens, n = config.hidden, kp = config.ffn_per_rank(), c0 = config.gemm0_cols(),
                     e = config.experts, eg = config.experts_per_group(), topk = config.topk;
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
  ensure(rb.q, z(rows * kp), "Tessel::moe::cuda::grad_q");
  ensure(rb.aw, z(rows * kp), "Tessel::moe::cuda::grad_weighted_hidden");
  ensure(rb.grad_w0, z(eg * n * c0), "Tessel::moe::cuda::grad_w0");
  ensure(rb.grad_w1, z(eg * kp * n), "Tessel::moe::cuda::grad_w1");
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

void expert_backward(RankState &rs, RankBackward &rb, MoeConfig const &config, ExpertGemm const &p) {
  if (p.rows == 0)
    return;
  std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), c0 = config.gemm0_cols(), r = p.rows;
  cublasHandle_t const h = rs.cublas.get();
  float const *x = reinterpret_cast<float const *>(rs.x_recv.data()) + p.row * n;
  float const *w0 = w0_of(rs, config, p.expert), *w1 = w1_of(rs, config, p.expert);
  float *pre = rb.pre.data() + p.row * c0, *dpre = rb.dpre.data() + p.row * c0;
  float *q = rb.q.data() + p.row * kp, *aw = rb.aw.data() + p.row * kp;
  float const *g = rb.g.data() + p.row * n;
  // pre = x W0_e (GEMM0 again: the forward keeps x, not the hidden rows).
  sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, c0, r, n, w0, c0, x, n, 0.0f, pre, c0);
  // q = g W1_e^T.
  sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, kp, r, n, w1, n, g, n, 0.0f, q, kp);
  TESSEL_CUDA_CHECK(activation_backward(rs.stream.get(), static_cast<int>(config.activation), config.gated, pre, q,
                                        rb.row_weight.data() + p.row, r, kp, aw, dpre, rb.dw.data() + p.row));
  // dx = dpre W0_e^T.
  sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, r, c0, w0, c0, dpre, c0, 0.0f, rb.dx.data() + p.row * n, n);
}

void weight_gradients(RankState const &rs, RankBackward &rb, MoeConfig const &config, ExpertGemm const &p,
                      cublasHandle_t handle) {
  if (p.rows == 0)
    return;
  std::int64_t const n = config.hidden, kp = config.ffn_per_rank(), c0 = config.gemm0_cols(), r = p.rows;
  float const *x = reinterpret_cast<float const *>(rs.x_recv.data()) + p.row * n;
  // dW1_e [kp, N] += aw^T g.
  sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, n, kp, r, rb.g.data() + p.row * n, n, rb.aw.data() + p.row * kp, kp, 1.0f,
        rb.grad_w1.data() + p.expert * kp * n, n);
  // dW0_e [N, cols0] += x^T dpre.
  sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, c0, n, r, rb.dpre.data() + p.row * c0, c0, x, n, 1.0f,
        rb.grad_w0.data() + p.expert * n * c0, c0);
}

void gate_gemms(RankState &rs, RankBackward &rb, MoeConfig const &config) {
  std::int64_t const m = config.tokens, n = config.hidden, e = config.experts;
  cublasHandle_t const h = rs.cublas.get();
  // grad_x [M, N] += dlogits Wg^T.
  sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, e, rb.gate_w.data(), e, rb.dlogits.data(), e, 1.0f, rb.grad_x.data(), n);
  // grad_gate_w [N, E] = tokens^T dlogits.
  if (m == 0)
    TESSEL_CUDA_CHECK(
        cudaMemsetAsync(rb.grad_gate_w.data(), 0, static_cast<std::size_t>(n * e) * sizeof(float), rs.stream.get()));
  else
    sgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, e, n, m, rb.dlogits.data(), e, rs.tokens.data(), n, 0.0f, rb.grad_gate_w.data(),
          e);
}

} // namespace tessel::moe::cuda::Impl

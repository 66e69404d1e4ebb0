#include "impl/Kernels.hpp"

#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <cmath>

namespace tessel::moe::Impl {

namespace {

KOKKOS_INLINE_FUNCTION float silu(float x) { return x / (1.0f + std::exp(-x)); }
KOKKOS_INLINE_FUNCTION float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x); d gelu / dx = Phi(x) + x phi(x).
KOKKOS_INLINE_FUNCTION float silu_grad(float x) {
  float const sig = 1.0f / (1.0f + std::exp(-x));
  return sig * (1.0f + x * (1.0f - sig));
}
KOKKOS_INLINE_FUNCTION float gelu_grad(float x) {
  return 0.5f * (1.0f + std::erf(x * 0.70710678118654752f)) + x * 0.39894228040143268f * std::exp(-0.5f * x * x);
}

} // namespace

template <class ExecSpace>
void layer0_tile(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, int expert,
                 MatrixRef<float const> x, MatrixRef<float> h, Layer0Scratch &scratch, std::int64_t panel_cols,
                 std::function<void()> const &between) {
  std::int64_t const rows = x.rows, ffn_per_rank = config.ffn_per_rank(), n = config.hidden;
  if (rows == 0)
    return;
  std::int64_t const cols0 = config.gemm0_cols();
  MatrixRef<float const> const w0{&weights.w0(expert, 0, 0), n, cols0, cols0};
  bool const silu_act = config.activation == Activation::silu;
  // out[:, c) = x W0[:, c), whole or in column panels (each panel packs only its columns of W0).
  auto const gemm0 = [&](MatrixRef<float> out) {
    std::int64_t const step = panel_cols > 0 ? panel_cols : cols0;
    for (std::int64_t c = 0; c < cols0; c += step) {
      auto const width = std::min(step, cols0 - c);
      tessel::gemm(space, Op::none, Op::none, 1.0f, x, w0.cols_range(c, c + width), 0.0f, out.cols_range(c, c + width));
      if (c + width < cols0 && between)
        between();
    }
  };
  if (!config.gated) {
    gemm0(h);
    float *const hd = h.data;
    std::int64_t const ld = h.ld;
    Kokkos::parallel_for(
        "Tessel::moe::activation", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t i) {
          float *row = hd + i * ld;
          for (std::int64_t j = 0; j < ffn_per_rank; ++j)
            row[j] = silu_act ? silu(row[j]) : gelu(row[j]);
        });
    return;
  }
  if (static_cast<std::int64_t>(scratch.pre.extent(0)) < rows ||
      static_cast<std::int64_t>(scratch.pre.extent(1)) != cols0)
    scratch.pre = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::layer0_scratch"),
                             static_cast<std::size_t>(rows), static_cast<std::size_t>(cols0));
  MatrixRef<float> const pre{scratch.pre.data(), rows, cols0, cols0};
  gemm0(pre);
  float const *const pd = pre.data;
  float *const hd = h.data;
  std::int64_t const ld = h.ld;
  Kokkos::parallel_for(
      "Tessel::moe::gated_activation", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t i) {
        float const *gate = pd + i * cols0;
        float const *up = gate + ffn_per_rank;
        float *out = hd + i * ld;
        for (std::int64_t j = 0; j < ffn_per_rank; ++j)
          out[j] = (silu_act ? silu(gate[j]) : gelu(gate[j])) * up[j];
      });
}

template <class ExecSpace>
void layer1_block(ExecSpace const &space, MoeConfig const &config, ExpertWeights const &weights, int expert,
                  MatrixRef<float const> h, std::int64_t col_begin, std::int64_t col_end, MatrixRef<float> y) {
  std::int64_t const n = config.hidden, ffn_per_rank = config.ffn_per_rank();
  MatrixRef<float const> const w1{&weights.w1(expert, 0, 0) + col_begin, ffn_per_rank, col_end - col_begin, n};
  tessel::gemm(space, Op::none, Op::none, 1.0f, h, w1, 0.0f, y);
}

template <class ExecSpace>
void activation_backward(ExecSpace const &space, MoeConfig const &config, MatrixRef<float const> pre,
                         MatrixRef<float const> q, float const *weight, MatrixRef<float> aw, MatrixRef<float> dpre,
                         float *dw) {
  std::int64_t const rows = pre.rows, ffn_per_rank = config.ffn_per_rank();
  TESSEL_REQUIRE(pre.cols == config.gemm0_cols() && q.cols == ffn_per_rank && aw.cols == ffn_per_rank &&
                     dpre.cols == pre.cols && q.rows == rows && aw.rows == rows && dpre.rows == rows,
                 "activation_backward: shapes do not match");
  bool const gated = config.gated, silu_act = config.activation == Activation::silu;
  float const *const pd = pre.data;
  float const *const qd = q.data;
  float *const ad = aw.data;
  float *const dd = dpre.data;
  std::int64_t const pld = pre.ld, qld = q.ld, ald = aw.ld, dld = dpre.ld;
  Kokkos::parallel_for(
      "Tessel::moe::activation_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
      KOKKOS_LAMBDA(std::int64_t i) {
        float const *g = pd + i * pld;
        float const *qi = qd + i * qld;
        float *a = ad + i * ald;
        float *d = dd + i * dld;
        float const w = weight[i];
        float dot = 0.0f;
        for (std::int64_t j = 0; j < ffn_per_rank; ++j) {
          float const act = silu_act ? silu(g[j]) : gelu(g[j]);
          float const slope = silu_act ? silu_grad(g[j]) : gelu_grad(g[j]);
          float const up = gated ? g[ffn_per_rank + j] : 1.0f;
          float const h = act * up;
          dot += qi[j] * h;
          float const dh = w * qi[j]; // dL/dh of the row: its combine weight times the output gradient's W1^T
          a[j] = w * h;
          d[j] = dh * up * slope;
          if (gated)
            d[ffn_per_rank + j] = dh * act;
        }
        dw[i] = dot;
      });
}

SlotRows make_slot_rows(std::int64_t slots, std::vector<std::int32_t> const &row_slot, std::vector<float> const &weight,
                        std::int64_t row_offset) {
  SlotRows out;
  out.ptr.assign(static_cast<std::size_t>(slots) + 1, 0);
  for (auto s : row_slot) {
    auto const u = static_cast<std::int64_t>(s) - row_offset;
    TESSEL_REQUIRE(u >= 0 && u < slots, "routing metadata names slot ", s, ", outside [", row_offset, ", ",
                   row_offset + slots, ")");
    out.ptr[static_cast<std::size_t>(u) + 1] += 1;
  }
  for (std::size_t u = 0; u < static_cast<std::size_t>(slots); ++u)
    out.ptr[u + 1] += out.ptr[u];
  out.row.resize(row_slot.size());
  out.weight.resize(row_slot.size());
  std::vector<std::int64_t> cursor(out.ptr.begin(), out.ptr.end() - 1);
  for (std::size_t r = 0; r < row_slot.size(); ++r) {
    auto const i = static_cast<std::size_t>(cursor[static_cast<std::size_t>(row_slot[r] - row_offset)]++);
    out.row[i] = static_cast<std::int64_t>(r);
    out.weight[i] = weight[r];
  }
  return out;
}

template <class ExecSpace>
void topk_reduce(ExecSpace const &space, SlotRows const &slots, std::vector<std::int64_t> const &row_map,
                 MatrixRef<float const> y, MatrixRef<float> out) {
  std::int64_t const cols = out.cols;
  TESSEL_REQUIRE(y.cols == cols, "topk_reduce: ", y.cols, " columns in, ", cols, " out");
  std::int64_t const *const ptr = slots.ptr.data();
  std::int64_t const *const row = slots.row.data();
  float const *const weight = slots.weight.data();
  std::int64_t const *const map = row_map.empty() ? nullptr : row_map.data();
  float const *const yd = y.data;
  float *const od = out.data;
  std::int64_t const yld = y.ld, old = out.ld;
  Kokkos::parallel_for(
      "Tessel::moe::topk_reduce", Kokkos::RangePolicy<ExecSpace>(space, 0, slots.slots()),
      KOKKOS_LAMBDA(std::int64_t u) {
        float *o = od + u * old;
        for (std::int64_t j = 0; j < cols; ++j)
          o[j] = 0.0f;
        for (std::int64_t i = ptr[u]; i < ptr[u + 1]; ++i) {
          std::int64_t const r = map ? map[row[i]] : row[i];
          float const w = weight[i];
          float const *src = yd + r * yld;
          for (std::int64_t j = 0; j < cols; ++j)
            o[j] += w * src[j];
        }
      });
}

namespace {
template <class ExecSpace, class Index>
void gather_rows_impl(ExecSpace const &space, MatrixRef<float const> src, Index const *index, std::int64_t count,
                      MatrixRef<float> dst) {
  std::int64_t const cols = dst.cols, sld = src.ld, dld = dst.ld;
  float const *const sd = src.data;
  float *const dd = dst.data;
  Kokkos::parallel_for(
      "Tessel::moe::gather_rows", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(std::int64_t i) {
        float const *s = sd + static_cast<std::int64_t>(index[i]) * sld;
        float *d = dd + i * dld;
        for (std::int64_t j = 0; j < cols; ++j)
          d[j] = s[j];
      });
}
} // namespace

template <class ExecSpace>
void scatter_add(ExecSpace const &space, std::int64_t rows, std::int32_t const *slot, std::int64_t slot_base,
                 float const *weight, MatrixRef<float const> y, MatrixRef<float> out) {
  std::int64_t const cols = out.cols, yld = y.ld, old = out.ld;
  TESSEL_REQUIRE(y.cols == cols, "scatter_add: ", y.cols, " columns in, ", cols, " out");
  float const *const yd = y.data;
  float *const od = out.data;
  Kokkos::parallel_for(
      "Tessel::moe::scatter_add", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(std::int64_t j) {
        float *o = od + (static_cast<std::int64_t>(slot[j]) - slot_base) * old;
        float const *src = yd + j * yld;
        float const w = weight ? weight[j] : 1.0f;
        for (std::int64_t c = 0; c < cols; ++c)
          o[c] += w * src[c];
      });
}

template <class ExecSpace> void zero(ExecSpace const &space, float *dst, std::int64_t count) {
  Kokkos::parallel_for(
      "Tessel::moe::zero", Kokkos::RangePolicy<ExecSpace>(space, 0, count),
      KOKKOS_LAMBDA(std::int64_t i) { dst[i] = 0.0f; });
}

template <class ExecSpace> void copy_rows(ExecSpace const &space, MatrixRef<float const> src, MatrixRef<float> dst) {
  TESSEL_REQUIRE(src.rows == dst.rows && src.cols == dst.cols, "copy_rows: shapes differ");
  std::int64_t const cols = dst.cols, sld = src.ld, dld = dst.ld;
  float const *const sd = src.data;
  float *const dd = dst.data;
  Kokkos::parallel_for(
      "Tessel::moe::copy_rows", Kokkos::RangePolicy<ExecSpace>(space, 0, dst.rows), KOKKOS_LAMBDA(std::int64_t i) {
        float const *s = sd + i * sld;
        float *d = dd + i * dld;
        for (std::int64_t j = 0; j < cols; ++j)
          d[j] = s[j];
      });
}

template <class ExecSpace>
void gather_rows(ExecSpace const &space, MatrixRef<float const> src, std::int64_t const *index, std::int64_t count,
                 MatrixRef<float> dst) {
  gather_rows_impl(space, src, index, count, dst);
}
template <class ExecSpace>
void gather_rows(ExecSpace const &space, MatrixRef<float const> src, std::int32_t const *index, std::int64_t count,
                 MatrixRef<float> dst) {
  gather_rows_impl(space, src, index, count, dst);
}

template <class ExecSpace>
void combine_sum(ExecSpace const &space, std::vector<Contribution> const &parts,
                 std::vector<std::int64_t> const &split_cols, MatrixRef<float> out) {
  std::int64_t const n = out.cols, ld = out.ld;
  auto const nparts = static_cast<std::int64_t>(parts.size());
  auto const nblocks = static_cast<std::int64_t>(split_cols.size()) - 1;
  Contribution const *const p = parts.data();
  std::int64_t const *const cols = split_cols.data();
  float *const od = out.data;
  Kokkos::parallel_for(
      "Tessel::moe::combine_sum", Kokkos::RangePolicy<ExecSpace>(space, 0, out.rows), KOKKOS_LAMBDA(std::int64_t t) {
        float *o = od + t * ld;
        for (std::int64_t j = 0; j < n; ++j)
          o[j] = 0.0f;
        for (std::int64_t q = 0; q < nparts; ++q) {
          std::int64_t const slot = p[q].token_slot[t];
          if (slot < 0)
            continue;
          for (std::int64_t b = 0; b < nblocks; ++b) {
            std::int64_t const cb = cols[b], width = cols[b + 1] - cols[b];
            float const *src = p[q].data + p[q].slots * cb + slot * width;
            for (std::int64_t j = 0; j < width; ++j)
              o[cb + j] += src[j];
          }
        }
      });
}

#define TESSEL_MOE_INSTANTIATE_KERNELS(SPACE)                                                                          \
  template void layer0_tile(SPACE const &, MoeConfig const &, ExpertWeights const &, int, MatrixRef<float const>,      \
                            MatrixRef<float>, Layer0Scratch &, std::int64_t, std::function<void()> const &);           \
  template void layer1_block(SPACE const &, MoeConfig const &, ExpertWeights const &, int, MatrixRef<float const>,     \
                             std::int64_t, std::int64_t, MatrixRef<float>);                                            \
  template void activation_backward(SPACE const &, MoeConfig const &, MatrixRef<float const>, MatrixRef<float const>,  \
                                    float const *, MatrixRef<float>, MatrixRef<float>, float *);                       \
  template void topk_reduce(SPACE const &, SlotRows const &, std::vector<std::int64_t> const &,                        \
                            MatrixRef<float const>, MatrixRef<float>);                                                 \
  template void scatter_add(SPACE const &, std::int64_t, std::int32_t const *, std::int64_t, float const *,            \
                            MatrixRef<float const>, MatrixRef<float>);                                                 \
  template void zero(SPACE const &, float *, std::int64_t);                                                            \
  template void copy_rows(SPACE const &, MatrixRef<float const>, MatrixRef<float>);                                    \
  template void gather_rows(SPACE const &, MatrixRef<float const>, std::int64_t const *, std::int64_t,                 \
                            MatrixRef<float>);                                                                         \
  template void gather_rows(SPACE const &, MatrixRef<float const>, std::int32_t const *, std::int64_t,                 \
                            MatrixRef<float>);                                                                         \
  template void combine_sum(SPACE const &, std::vector<Contribution> const &, std::vector<std::int64_t> const &,       \
                            MatrixRef<float>);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_KERNELS)

} // namespace tessel::moe::Impl

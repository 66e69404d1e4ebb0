// The device layout of dense blocks (src/impl/DenseLayout.hpp), checked on the host without a GPU: padding and
// alignment, strips, the waves of the grouped cuBLAS GEMMs (no two blocks of a row part in one wave), and two
// emulations that follow the device code's index arithmetic step by step: the WMMA kernel's strip / block /
// k-step loop, and cublasGemmGroupedBatchedEx's column-major definition with the arguments the handle passes.
#include <tessel/gnn/Graph.hpp>

#include "impl/Builders.hpp"
#include "impl/DenseLayout.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace {

using namespace tessel::gnn;
using Impl::DenseLayout;
using Impl::HostDenseBlock;

/// Row parts of random sizes (1 .. 70 rows), each with a random set of dense blocks against random column parts.
std::vector<HostDenseBlock> random_blocks(std::uint64_t seed, std::int64_t &n) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> size(1, 70), count(1, 4);
  std::uniform_real_distribution<float> value(-1, 1);
  std::vector<std::int64_t> offsets{0};
  while (offsets.size() < 12)
    offsets.push_back(offsets.back() + size(rng));
  n = offsets.back();
  std::vector<HostDenseBlock> out;
  std::uniform_int_distribution<std::size_t> part(0, offsets.size() - 2);
  for (std::size_t p = 0; p + 1 < offsets.size(); ++p) {
    if (p % 5 == 3)
      continue; // a row part without dense blocks
    std::set<std::size_t> qs{p};
    for (int k = count(rng); k > 1; --k)
      qs.insert(part(rng));
    for (auto q : qs) {
      HostDenseBlock b;
      b.row0 = offsets[p];
      b.rows = offsets[p + 1] - offsets[p];
      b.col0 = offsets[q];
      b.cols = offsets[q + 1] - offsets[q];
      b.values.resize(static_cast<std::size_t>(b.rows * b.cols));
      for (auto &v : b.values)
        v = value(rng);
      out.push_back(b);
    }
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::vector<double> reference(std::vector<HostDenseBlock> const &blocks, std::vector<float> const &x, std::int64_t n,
                              int f) {
  std::vector<double> y(static_cast<std::size_t>(n * f), 0.0);
  for (auto const &b : blocks)
    for (std::int64_t i = 0; i < b.rows; ++i)
      for (std::int64_t j = 0; j < b.cols; ++j)
        for (int c = 0; c < f; ++c)
          y[static_cast<std::size_t>((b.row0 + i) * f + c)] +=
              static_cast<double>(b.values[static_cast<std::size_t>(i * b.cols + j)]) *
              x[static_cast<std::size_t>((b.col0 + j) * f + c)];
  return y;
}

TEST(DenseLayout, padding_alignment_and_strips) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    std::int64_t n = 0;
    auto const blocks = random_blocks(seed, n);
    auto const layout = Impl::make_dense_layout(blocks);
    ASSERT_EQ(layout.blocks.size(), blocks.size());
    std::map<std::pair<std::int64_t, std::int64_t>, HostDenseBlock const *> by_origin;
    for (auto const &b : blocks)
      by_origin[{b.row0, b.col0}] = &b;
    for (std::size_t k = 0; k < layout.blocks.size(); ++k) {
      auto const &d = layout.blocks[k];
      if (k > 0) {
        auto const &e = layout.blocks[k - 1];
        EXPECT_TRUE(e.row0 < d.row0 || (e.row0 == d.row0 && e.col0 < d.col0)) << "blocks not sorted";
      }
      EXPECT_EQ(d.offset % 128, 0) << "WMMA fragments need 32-byte alignment";
      EXPECT_EQ(d.ld % 8, 0);
      EXPECT_GE(d.ld, d.cols);
      EXPECT_LT(d.ld, d.cols + 8);
      auto const &b = *by_origin.at({d.row0, d.col0});
      std::int64_t const rows16 = (d.rows + 15) / 16 * 16;
      for (std::int64_t i = 0; i < rows16; ++i)
        for (std::int64_t j = 0; j < d.ld; ++j) {
          float const stored = layout.values[static_cast<std::size_t>(d.offset + i * d.ld + j)];
          float const want = i < b.rows && j < b.cols ? b.values[static_cast<std::size_t>(i * b.cols + j)] : 0.0f;
          ASSERT_EQ(stored, want) << "block (" << d.row0 << ", " << d.col0 << ") element " << i << ", " << j;
        }
    }
    // Every row of every row part with blocks is in exactly one strip of at most 16 rows.
    std::map<std::int64_t, int> covered;
    for (auto const &s : layout.strips) {
      EXPECT_GE(s.nrows, 1);
      EXPECT_LE(s.nrows, 16);
      ASSERT_LT(s.block_begin, s.block_end);
      for (int b = s.block_begin; b < s.block_end; ++b)
        EXPECT_EQ(layout.blocks[static_cast<std::size_t>(b)].row0 + s.local_row, s.row0);
      for (int r = 0; r < s.nrows; ++r)
        ++covered[s.row0 + r];
    }
    for (auto const &b : blocks)
      for (std::int64_t r = b.row0; r < b.row0 + b.rows; ++r)
        EXPECT_EQ(covered[r], 1) << "row " << r;
  }
}

TEST(DenseLayout, wmma_kernel_loop_computes_the_product) {
  // Follows dense_kernel (src/cuda/TensorCore.cu): per strip and 16-column slice, blocks b in [begin, end), k-steps
  // of 8, the 16 x 8 A fragment at values + offset + local_row * ld + k, X rows col0 + k + i (zero past cols).
  for (int f : {1, 17, 64}) {
    std::int64_t n = 0;
    auto const blocks = random_blocks(7 + static_cast<std::uint64_t>(f), n);
    auto const layout = Impl::make_dense_layout(blocks);
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x(static_cast<std::size_t>(n * f));
    for (auto &v : x)
      v = u(rng);
    std::vector<double> y(x.size(), 0.0);
    int const slices = (f + 15) / 16;
    for (auto const &s : layout.strips)
      for (int slice = 0; slice < slices; ++slice) {
        double acc[16][16] = {};
        int b = s.block_begin, k = 0;
        auto d = layout.blocks[static_cast<std::size_t>(b)];
        while (b < s.block_end) {
          std::int64_t const a0 = d.offset + static_cast<std::int64_t>(s.local_row) * d.ld + k;
          int const lda = d.ld;
          auto const cur = d;
          int const kc = k;
          k += 8;
          if (k >= d.ld) {
            k = 0;
            if (++b < s.block_end)
              d = layout.blocks[static_cast<std::size_t>(b)];
          }
          for (int m = 0; m < 16; ++m)
            for (int i = 0; i < 8; ++i) {
              double const a = layout.values[static_cast<std::size_t>(a0 + m * lda + i)];
              std::int64_t const row = kc + i < cur.cols ? cur.col0 + kc + i : -1;
              for (int c = 0; c < 16; ++c) {
                int const col = slice * 16 + c;
                if (row >= 0 && col < f)
                  acc[m][c] += a * x[static_cast<std::size_t>(row * f + col)];
              }
            }
        }
        for (int m = 0; m < s.nrows; ++m)
          for (int c = 0; c < 16 && slice * 16 + c < f; ++c)
            y[static_cast<std::size_t>((s.row0 + m) * f + slice * 16 + c)] += acc[m][c];
      }
    auto const want = reference(blocks, x, n, f);
    for (std::size_t k = 0; k < y.size(); ++k)
      ASSERT_NEAR(y[k], want[k], 1e-9) << "F = " << f << ", element " << k;
  }
}

TEST(DenseLayout, grouped_gemm_waves_compute_the_product) {
  // cublasGemmGroupedBatchedEx as documented (column-major, C = alpha op(A) op(B) + beta C per problem) with the
  // handle's arguments: m = F, n = block rows, k = block columns, A = X + col0 * ldx (lda = ldx), B = the padded
  // block (ldb = its ld), C = Y + row0 * ldy (ldc = ldy), alpha = beta = 1; X and Y padded (ld = F + 3).
  int const f = 19;
  std::int64_t const ld = f + 3;
  std::int64_t n = 0;
  auto const blocks = random_blocks(11, n);
  auto const layout = Impl::make_dense_layout(blocks);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xc(static_cast<std::size_t>(n * f)), x(static_cast<std::size_t>(n * ld), 0.0f);
  for (std::int64_t r = 0; r < n; ++r)
    for (int c = 0; c < f; ++c)
      x[static_cast<std::size_t>(r * ld + c)] = xc[static_cast<std::size_t>(r * f + c)] = u(rng);
  std::vector<double> y(static_cast<std::size_t>(n * ld), 0.0);
  std::size_t problems = 0;
  for (auto const &w : layout.waves) {
    std::set<std::int64_t> rows_in_wave;
    std::int64_t p = w.first;
    for (std::size_t g = 0; g < w.n.size(); ++g)
      for (int s = 0; s < w.size[g]; ++s, ++p) {
        ++problems;
        auto const pi = static_cast<std::size_t>(p);
        EXPECT_TRUE(rows_in_wave.insert(layout.problem_row0[pi]).second)
            << "two blocks of row part " << layout.problem_row0[pi] << " in one wave: their outputs overlap";
        // The problem's block has this group's shape.
        bool found = false;
        for (auto const &d : layout.blocks)
          if (d.row0 == layout.problem_row0[pi] && d.col0 == layout.problem_col0[pi]) {
            found = true;
            EXPECT_EQ(d.offset, layout.problem_offset[pi]);
            EXPECT_EQ(d.rows, w.n[g]);
            EXPECT_EQ(d.cols, w.k[g]);
            EXPECT_EQ(d.ld, w.ld[g]);
          }
        EXPECT_TRUE(found);
        std::int64_t const m = f, nn = w.n[g], kk = w.k[g], lda = ld, ldb = w.ld[g], ldc = ld;
        float const *a = x.data() + layout.problem_col0[pi] * ld;
        float const *bm = layout.values.data() + layout.problem_offset[pi];
        double *c = y.data() + layout.problem_row0[pi] * ld;
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < nn; ++j) {
            double sum = 0;
            for (std::int64_t l = 0; l < kk; ++l)
              sum += static_cast<double>(a[i + l * lda]) * bm[l + j * ldb];
            c[i + j * ldc] += sum;
          }
      }
  }
  EXPECT_EQ(problems, blocks.size());
  auto const want = reference(blocks, xc, n, f);
  for (std::int64_t r = 0; r < n; ++r)
    for (int c = 0; c < f; ++c)
      ASSERT_NEAR(y[static_cast<std::size_t>(r * ld + c)], want[static_cast<std::size_t>(r * f + c)], 1e-9)
          << "row " << r << ", column " << c;
}

} // namespace

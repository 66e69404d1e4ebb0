#include <tessel/core/Error.hpp>
#include <tessel/core/Gemm.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// C = alpha op(A) op(B) + beta C, in double, element by element: the reference the BLAS path is checked against.
template <class T>
std::vector<double> reference(tessel::Op op_a, tessel::Op op_b, double alpha, tessel::MatrixRef<T const> a,
                              tessel::MatrixRef<T const> b, double beta, tessel::MatrixRef<T const> c) {
  bool const ta = op_a == tessel::Op::transpose, tb = op_b == tessel::Op::transpose;
  std::int64_t const m = c.rows, n = c.cols, k = ta ? a.rows : a.cols;
  std::vector<double> out(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p)
        sum += double(ta ? a(p, i) : a(i, p)) * double(tb ? b(j, p) : b(p, j));
      out[static_cast<std::size_t>(i * n + j)] = alpha * sum + (beta == 0 ? 0.0 : beta * double(c(i, j)));
    }
  return out;
}

template <class T> struct Stored {
  std::vector<T> data;
  tessel::MatrixRef<T> ref;
  // rows x cols with \p pad extra columns per row (ld > cols), filled with random values; the padding holds NaN,
  // which must neither be read nor written.
  Stored(std::int64_t rows, std::int64_t cols, std::int64_t pad, std::mt19937 &rng)
      : data(static_cast<std::size_t>(std::max<std::int64_t>(rows * (cols + pad), 1)),
             std::numeric_limits<T>::quiet_NaN()),
        ref(data.data(), rows, cols, cols + pad) {
    std::uniform_real_distribution<T> u(-1, 1);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j)
        ref(i, j) = u(rng);
  }
};

template <class T>
void check_gemm(std::int64_t m, std::int64_t n, std::int64_t k, tessel::Op op_a, tessel::Op op_b, T alpha, T beta,
                std::int64_t pad, std::mt19937 &rng) {
  bool const ta = op_a == tessel::Op::transpose, tb = op_b == tessel::Op::transpose;
  Stored<T> a(ta ? k : m, ta ? m : k, pad, rng), b(tb ? n : k, tb ? k : n, pad, rng), c(m, n, pad, rng);
  auto const expect = reference<T>(op_a, op_b, alpha, a.ref, b.ref, beta, c.ref);
  auto const padding = c.data;
  tessel::gemm(TEST_EXECSPACE(), op_a, op_b, alpha, tessel::MatrixRef<T const>(a.ref),
               tessel::MatrixRef<T const>(b.ref), beta, c.ref);
  TEST_EXECSPACE().fence();
  double const tol = (std::is_same_v<T, float> ? 1e-5 : 1e-13) * double(std::max<std::int64_t>(k, 1));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j)
      ASSERT_NEAR(double(c.ref(i, j)), expect[static_cast<std::size_t>(i * n + j)], tol)
          << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb << " at (" << i << ", " << j << ")";
    for (std::int64_t j = n; j < n + pad; ++j) // the padding is not written
      ASSERT_TRUE(std::isnan(c.ref.data[i * c.ref.ld + j]));
  }
}

template <class T> void check_shapes() {
  std::mt19937 rng(42);
  using tessel::Op;
  for (auto [m, n, k] : {std::array<std::int64_t, 3>{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 64, 64}, {3, 130, 9}})
    for (Op op_a : {Op::none, Op::transpose})
      for (Op op_b : {Op::none, Op::transpose})
        for (std::int64_t pad : {0, 3})
          for (T beta : {T(0), T(1), T(-0.5)})
            check_gemm<T>(m, n, k, op_a, op_b, T(1.25), beta, pad, rng);
}

TEST(TEST_CATEGORY, gemm_float_matches_reference) { check_shapes<float>(); }
TEST(TEST_CATEGORY, gemm_double_matches_reference) { check_shapes<double>(); }

TEST(TEST_CATEGORY, gemm_empty_products) {
  std::mt19937 rng(7);
  using tessel::Op;
  // k = 0 only scales C (beta = 0 writes zeros over NaN); m = 0 or n = 0 touch nothing.
  for (double beta : {0.0, 1.0, 2.0})
    check_gemm<double>(4, 6, 0, Op::none, Op::none, 1.0, beta, 2, rng);
  check_gemm<float>(0, 6, 5, Op::none, Op::transpose, 1.0f, 0.0f, 1, rng);
  check_gemm<float>(6, 0, 5, Op::transpose, Op::none, 1.0f, 0.0f, 1, rng);
  Stored<double> c(4, 6, 0, rng);
  for (auto &v : c.data)
    v = std::numeric_limits<double>::quiet_NaN();
  tessel::gemm(TEST_EXECSPACE(), Op::none, Op::none, 1.0, tessel::MatrixRef<double const>(nullptr, 4, 0),
               tessel::MatrixRef<double const>(nullptr, 0, 6), 0.0, c.ref);
  TEST_EXECSPACE().fence();
  for (double v : c.data)
    EXPECT_EQ(v, 0.0);
}

TEST(TEST_CATEGORY, gemm_shape_mismatch_is_an_error) {
  std::vector<float> x(64, 1.0f);
  tessel::MatrixRef<float> c(x.data(), 4, 4);
  auto const bad = [&] {
    tessel::gemm(TEST_EXECSPACE(), tessel::Op::none, tessel::Op::none, 1.0f,
                 tessel::MatrixRef<float const>(x.data(), 4, 3), tessel::MatrixRef<float const>(x.data(), 2, 4), 0.0f,
                 c);
  };
  try {
    bad();
    FAIL() << "a 4x3 by 2x4 product was accepted";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("op(A) is 4 x 3, op(B) is 2 x 4"), std::string::npos) << e.what();
  }
}

} // namespace

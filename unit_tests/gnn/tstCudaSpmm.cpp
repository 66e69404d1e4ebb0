// Every CUDA aggregation path against a double-precision host reference on random graphs with empty rows, one dense
// block, a star, self-loops and duplicates, for F in {1, 17, 64, 70}. Every test is skipped (and reported as
// skipped) where no CUDA device is visible; where one is, it asserts.
//
// Error bounds, per output element (i, j), relative to s_ij = sum_k |A_ik| |X_kj| (the scale the rounding errors
// of a sum of products live on; a bound against |Y_ij| alone cannot hold under cancellation):
//  * fp32 CUDA-core paths (csr, csr_feature_tiled, coo_atomic, cusparse, dense with allow_tf32 = false):
//    |err| <= max(1e-5, 2 deg_i u32) s_ij, u32 = 2^-24: a recursive fp32 sum of deg_i products has relative error
//    at most deg_i u32 (Higham's gamma_n), doubled for safety; 1e-5 covers rows of degree <= 80.
//  * TF32 tensor-core paths (tiles, dense blocks, whole-graph dense, adaptive): |err| <= (2^-8 + 4 deg_i u32) s_ij.
//    TF32 keeps 10 explicit mantissa bits: rounding A and X (to nearest in our WMMA kernels, possibly truncation
//    in cuBLAS) costs at most 2^-10 relative per operand, so 2^-9 per product; tensor cores accumulate in fp32.
//    2^-8 = 3.9e-3 doubles that for the hardware's accumulation order; the normwise relative error is ~1e-3.
#include <tessel/core/Config.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/cuda/Spmm.hpp>

#include <GnnTestGraphs.hpp>

#include "impl/ForceKernel.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

namespace {

using namespace tessel::gnn;
using tessel::cuda::DeviceBuffer;
using tessel::cuda::Stream;
namespace gc = tessel::gnn::cuda;

#define TESSEL_REQUIRE_DEVICE()                                                                                        \
  if (tessel::cuda::device_count() == 0)                                                                               \
  GTEST_SKIP() << "no CUDA device visible"

std::vector<int> const widths{1, 17, 64, 70};
constexpr double u32 = 5.9604644775390625e-08; // 2^-24

bool device_has_tensor_cores() {
  int device = 0;
  cudaDeviceProp prop{};
  return cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess &&
         prop.major >= 8;
}

enum class Precision { fp32, tf32 };

double rtol(Precision p, std::int64_t degree) {
  double const d = static_cast<double>(degree);
  return p == Precision::fp32 ? std::max(1e-5, 2 * d * u32) : 1.0 / 256 + 4 * d * u32;
}

std::vector<float> random_x(std::size_t n, std::size_t f, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n * f);
  for (auto &v : x)
    v = u(rng);
  return x;
}

/// Device operands with a leading dimension of F + pad, starting \p shift floats into their buffers (shift 1
/// breaks the 16-byte alignment that the vectorized paths need).
struct Operands {
  DeviceBuffer<float> x, y;
  std::int64_t ld = 0, shift = 0, rows = 0, cols = 0;
  Operands(std::int64_t rows_, std::int64_t cols_, std::int64_t f, std::int64_t pad, std::int64_t shift_)
      : x(static_cast<std::size_t>(shift_ + std::max<std::int64_t>(cols_, 1) * (f + pad)), "Tessel::test::x"),
        y(static_cast<std::size_t>(shift_ + std::max<std::int64_t>(rows_, 1) * (f + pad)), "Tessel::test::y"),
        ld(f + pad), shift(shift_), rows(rows_), cols(cols_) {}
  tessel::MatrixRef<float const> xm(std::int64_t f) const { return {x.data() + shift, cols, f, ld}; }
  tessel::MatrixRef<float> ym(std::int64_t f) const { return {y.data() + shift, rows, f, ld}; }
};

/// Y = A X with the handle (until its plan is frozen, then twice more), every result compared with the
/// reference; Y is filled with NaN before each apply so that a row left unwritten fails.
template <class Index>
void check_handle(gc::SpmmHandle<Index> &h, Graph<Index> const &g, int f, Precision precision, std::string const &what,
                  std::int64_t pad = 0, std::int64_t shift = 0, std::vector<float> *first_result = nullptr) {
  Stream stream;
  auto const n = static_cast<std::size_t>(g.num_rows());
  auto const fs = static_cast<std::size_t>(f);
  auto const xh = random_x(n, fs, 101 + static_cast<std::uint64_t>(f));
  // Reference and scale in the original order.
  std::vector<double> ref(n * fs, 0.0), scale(n * fs, 0.0);
  std::vector<std::int64_t> degree(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k) {
      ++degree[i];
      double const a = g.values()(k);
      auto const col = static_cast<std::size_t>(g.entries()(k));
      for (std::size_t c = 0; c < fs; ++c) {
        ref[i * fs + c] += a * xh[col * fs + c];
        scale[i * fs + c] += std::abs(a) * std::abs(xh[col * fs + c]);
      }
    }
  // X in the handle's order, padded rows.
  auto const &perm = h.permutation().old_of_new;
  Operands op(g.num_rows(), g.num_cols(), f, pad, shift);
  std::vector<float> xp(static_cast<std::size_t>(op.ld) * n, 0.0f);
  for (std::size_t k = 0; k < n; ++k)
    std::memcpy(&xp[k * static_cast<std::size_t>(op.ld)], &xh[static_cast<std::size_t>(perm[k]) * fs],
                fs * sizeof(float));
  TESSEL_CUDA_CHECK(
      cudaMemcpyAsync(op.x.data() + shift, xp.data(), xp.size() * sizeof(float), cudaMemcpyHostToDevice, stream.get()));
  std::vector<float> yp(xp.size());
  int applies = 0, after_tuned = 0;
  double worst = 0, worst_normwise = 0, max_ref = 0;
  for (double r : ref)
    max_ref = std::max(max_ref, std::abs(r));
  while (after_tuned < 2) {
    ASSERT_LT(applies, 200) << what << ": the plan never froze";
    TESSEL_CUDA_CHECK(cudaMemsetAsync(op.y.data(), 0xff, op.y.bytes(), stream.get())); // NaN everywhere
    h.apply(stream, op.xm(f), op.ym(f));
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(yp.data(), op.y.data() + shift, yp.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream.get()));
    stream.synchronize(std::chrono::seconds(60));
    for (std::size_t k = 0; k < n; ++k) {
      auto const i = static_cast<std::size_t>(perm[k]);
      double const tol = rtol(precision, degree[i]);
      for (std::size_t c = 0; c < fs; ++c) {
        double const got = yp[k * static_cast<std::size_t>(op.ld) + c], want = ref[i * fs + c];
        double const err = std::abs(got - want), s = scale[i * fs + c];
        ASSERT_TRUE(std::isfinite(got)) << what << ", F = " << f << ", apply " << applies << ": row " << i
                                        << " (handle row " << k << "), column " << c << " not written";
        ASSERT_LE(err, tol * s + 1e-30) << what << ", F = " << f << ", apply " << applies << ", row " << i
                                        << ", column " << c << ": got " << got << ", want " << want;
        if (s > 0)
          worst = std::max(worst, err / s);
        worst_normwise = std::max(worst_normwise, err / std::max(max_ref, 1e-30));
      }
    }
    if (first_result && applies == 0) {
      first_result->resize(n * fs);
      for (std::size_t k = 0; k < n; ++k)
        std::memcpy(&(*first_result)[k * fs], &yp[k * static_cast<std::size_t>(op.ld)], fs * sizeof(float));
    }
    ++applies;
    if (h.tuned(f))
      ++after_tuned;
  }
  std::printf("  %s, F = %d: %d applies, max |err| / (|A||X|) = %.3g, max |err| / max |Y| = %.3g\n", what.c_str(), f,
              applies, worst, worst_normwise);
  EXPECT_LE(worst_normwise, precision == Precision::fp32 ? 1e-5 : 1e-2) << what << ", F = " << f;
}

gc::SpmmOptions with(SpmmAlgorithm algorithm) {
  gc::SpmmOptions o;
  o.algorithm = algorithm;
  return o;
}

template <class Index>
void check_algorithm(gc::SpmmOptions const &o, Precision p, std::string const &what, Index n = 300) {
  Stream stream;
  for (std::uint64_t seed : {1u, 2u}) {
    auto const g = test::awkward_graph<Index>(n, seed);
    gc::SpmmHandle<Index> h(stream, g, o);
    for (int f : widths)
      check_handle(h, g, f, p, what + " seed " + std::to_string(seed));
  }
}

TEST(CudaSpmm, csr_and_feature_tiled_csr) {
  TESSEL_REQUIRE_DEVICE();
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::csr), Precision::fp32, "csr");
  check_algorithm<std::int64_t>(with(SpmmAlgorithm::csr), Precision::fp32, "csr int64");
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::csr_feature_tiled), Precision::fp32, "csr_feature_tiled");
}

TEST(CudaSpmm, coo_atomic_and_cusparse_baselines) {
  TESSEL_REQUIRE_DEVICE();
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::coo_atomic), Precision::fp32, "coo_atomic");
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::cusparse), Precision::fp32, "cusparse");
  check_algorithm<std::int64_t>(with(SpmmAlgorithm::cusparse), Precision::fp32, "cusparse int64");
}

TEST(CudaSpmm, tensor_core_tiles_and_dense) {
  TESSEL_REQUIRE_DEVICE();
  if (!device_has_tensor_cores())
    GTEST_SKIP() << "device older than sm_80: no TF32 tensor cores";
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::tiles), Precision::tf32, "tiles");
  check_algorithm<std::int64_t>(with(SpmmAlgorithm::tiles), Precision::tf32, "tiles int64", std::int64_t{37});
  check_algorithm<std::int32_t>(with(SpmmAlgorithm::dense), Precision::tf32, "dense");
  auto o = with(SpmmAlgorithm::dense);
  o.allow_tf32 = false;
  check_algorithm<std::int32_t>(o, Precision::fp32, "dense fp32");
}

TEST(CudaSpmm, adaptive_every_class_kernel_and_dense_engine) {
  TESSEL_REQUIRE_DEVICE();
  if (!device_has_tensor_cores())
    GTEST_SKIP() << "device older than sm_80: no TF32 tensor cores";
  // Forcing each class kernel makes every kernel run inside the decomposition: compressed-row CSR pieces,
  // condensed tiles and dense blocks on diagonal and off-diagonal blocks (several blocks per row part, so the
  // cuBLAS engine needs several waves).
  Stream stream;
  for (int kernel = 0; kernel < 3; ++kernel)
    for (auto engine : {gc::DenseEngine::wmma, gc::DenseEngine::cublas})
      for (bool timing : {true, false}) {
        if (kernel != 2 && engine == gc::DenseEngine::cublas)
          continue;
        auto o = with(SpmmAlgorithm::adaptive);
        o.part_size = 20;
        tessel::gnn::Impl::ForceKernel const force(kernel);
        o.dense_engine = engine;
        o.timing = timing;
        o.tuning_repeats = 1;
        std::string const what = std::string("adaptive forced ") + name_of(static_cast<BlockKernel>(kernel)) + " " +
                                 gc::name_of(engine) + (timing ? " timed" : " model");
        check_algorithm<std::int32_t>(o, Precision::tf32, what);
        auto const g = test::awkward_graph<std::int32_t>(200, 3);
        gc::SpmmHandle<std::int32_t> h(stream, g, o);
        check_handle(h, g, 24, Precision::tf32, what + " plan");
        auto const plan = h.plan(24);
        EXPECT_TRUE(plan.frozen);
        EXPECT_EQ(plan.backend.rfind("cuda: ", 0), 0u) << plan.backend;
        for (auto const &c : plan.classes) {
          if (c.nnz > 0) {
            EXPECT_EQ(c.kernel, static_cast<BlockKernel>(kernel)) << what;
          }
        }
        if (kernel == 2) {
          EXPECT_EQ(plan.dense_engine, gc::name_of(engine)) << what;
        }
      }
  check_algorithm<std::int64_t>(
      [] {
        auto o = with(SpmmAlgorithm::adaptive);
        o.part_size = 16;
        return o;
      }(),
      Precision::tf32, "adaptive int64");
}

TEST(CudaSpmm, adaptive_times_candidates_on_a_community_graph) {
  TESSEL_REQUIRE_DEVICE();
  // Planted communities: dense diagonal blocks and a sparse remainder, so that every kernel is a real candidate.
  SbmOptions so;
  so.nodes = 3000;
  so.community_size = 64;
  so.p_in = 0.4;
  so.inter_degree = 3;
  so.features = 0;
  auto const g = gcn_normalize(generate_sbm(so).graph);
  Stream stream;
  for (bool timing : {true, false}) {
    auto o = with(SpmmAlgorithm::adaptive);
    o.timing = timing;
    o.probe_features = {64};
    gc::SpmmHandle<std::int32_t> h(stream, g, o);
    for (int f : {17, 64}) {
      check_handle(h, g, f, Precision::tf32, timing ? "adaptive timed" : "adaptive cost model");
      auto const plan = h.plan(f);
      EXPECT_TRUE(plan.frozen);
      EXPECT_EQ(plan.timed, timing);
      if (timing) {
        EXPECT_GT(plan.tuning_applies, 0);
        EXPECT_GT(plan.tuning_seconds, 0.0);
        ASSERT_FALSE(plan.final_measured.empty());
        for (auto const &[variant, seconds] : plan.final_measured)
          EXPECT_TRUE(std::isfinite(seconds) && seconds > 0) << variant << ": " << seconds;
        for (auto const &c : plan.classes)
          for (auto const &[kernel, seconds] : c.measured)
            EXPECT_TRUE(std::isfinite(seconds) && seconds > 0) << name_of(kernel) << ": " << seconds;
      }
      std::printf("%s\n", plan.to_json().c_str());
    }
    EXPECT_GT(h.device_bytes(), 0);
    EXPECT_GT(h.overhead_seconds(), 0.0);
  }
}

TEST(CudaSpmm, fp32_only_when_tf32_is_disallowed) {
  TESSEL_REQUIRE_DEVICE();
  auto o = with(SpmmAlgorithm::adaptive);
  o.allow_tf32 = false;
  o.part_size = 20;
  o.tuning_repeats = 1;
  {
    tessel::gnn::Impl::ForceKernel const force(2); // dense blocks through cuBLAS in full fp32
    check_algorithm<std::int32_t>(o, Precision::fp32, "adaptive dense fp32");
  }
  Stream stream;
  auto const g = test::awkward_graph<std::int32_t>(100, 1);
  {
    tessel::gnn::Impl::ForceKernel const force(1); // tiles need tensor cores
    EXPECT_THROW((gc::SpmmHandle<std::int32_t>(stream, g, o)), tessel::Exception);
  }
  EXPECT_THROW((gc::SpmmHandle<std::int32_t>(stream, g,
                                             [] {
                                               auto t = with(SpmmAlgorithm::tiles);
                                               t.allow_tf32 = false;
                                               return t;
                                             }())),
               tessel::Exception);
}

TEST(CudaSpmm, deterministic_kernels_repeat_bitwise) {
  TESSEL_REQUIRE_DEVICE();
  Stream stream;
  auto const g = test::awkward_graph<std::int32_t>(300, 7);
  tessel::gnn::Impl::ForceKernel const force(
      2); // the adaptive case's classes run dense blocks; fixed algorithms ignore it
  std::vector<gc::SpmmOptions> options{with(SpmmAlgorithm::csr), with(SpmmAlgorithm::csr_feature_tiled)};
  if (device_has_tensor_cores()) {
    options.push_back(with(SpmmAlgorithm::tiles));
    auto o = with(SpmmAlgorithm::adaptive);
    o.part_size = 20;
    o.dense_engine = gc::DenseEngine::wmma;
    o.timing = false;
    options.push_back(o);
  }
  for (auto const &o : options) {
    gc::SpmmHandle<std::int32_t> h(stream, g, o);
    std::vector<float> a, b;
    auto const p = o.algorithm == SpmmAlgorithm::csr || o.algorithm == SpmmAlgorithm::csr_feature_tiled
                       ? Precision::fp32
                       : Precision::tf32;
    check_handle(h, g, 33, p, std::string("determinism ") + name_of(o.algorithm), 0, 0, &a);
    check_handle(h, g, 33, p, std::string("determinism ") + name_of(o.algorithm), 0, 0, &b);
    EXPECT_EQ(a, b) << name_of(o.algorithm) << " is not bitwise reproducible";
  }
}

TEST(CudaSpmm, strided_and_misaligned_operands) {
  TESSEL_REQUIRE_DEVICE();
  Stream stream;
  auto const g = test::awkward_graph<std::int32_t>(250, 4);
  tessel::gnn::Impl::ForceKernel const force(2); // the adaptive cases run dense blocks; fixed algorithms ignore it
  std::vector<std::pair<gc::SpmmOptions, Precision>> cases{{with(SpmmAlgorithm::csr), Precision::fp32}};
  if (device_has_tensor_cores()) {
    cases.emplace_back(with(SpmmAlgorithm::tiles), Precision::tf32);
    for (auto engine : {gc::DenseEngine::wmma, gc::DenseEngine::cublas}) {
      auto o = with(SpmmAlgorithm::adaptive);
      o.part_size = 20;
      o.dense_engine = engine;
      o.timing = false;
      cases.emplace_back(o, Precision::tf32);
    }
  }
  // cuSPARSE: any leading dimension, but 16-byte aligned X and Y (misaligned ones are refused).
  {
    gc::SpmmHandle<std::int32_t> h(stream, g, with(SpmmAlgorithm::cusparse));
    for (int f : {16, 17, 64})
      check_handle(h, g, f, Precision::fp32, "cusparse ld = F + 3", 3, 0);
    Operands op(250, 250, 8, 0, 1);
    EXPECT_THROW(h.apply(stream, op.xm(8), op.ym(8)), tessel::Exception);
  }
  for (auto const &[o, p] : cases) {
    gc::SpmmHandle<std::int32_t> h(stream, g, o);
    for (int f : {16, 17, 64})
      for (auto [pad, shift] : {std::pair<int, int>{3, 0}, {0, 1}, {4, 4}})
        check_handle(h, g, f, p,
                     std::string(name_of(o.algorithm)) + " ld = F + " + std::to_string(pad) + ", shift " +
                         std::to_string(shift),
                     pad, shift);
  }
}

TEST(CudaSpmm, empty_and_tiny_graphs) {
  TESSEL_REQUIRE_DEVICE();
  Stream stream;
  std::vector<SpmmAlgorithm> algorithms{SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo_atomic,
                                        SpmmAlgorithm::cusparse, SpmmAlgorithm::adaptive};
  if (device_has_tensor_cores()) {
    algorithms.push_back(SpmmAlgorithm::tiles);
    algorithms.push_back(SpmmAlgorithm::dense);
  }
  for (auto algorithm : algorithms) {
    auto const p =
        algorithm == SpmmAlgorithm::tiles || algorithm == SpmmAlgorithm::dense || algorithm == SpmmAlgorithm::adaptive
            ? Precision::tf32
            : Precision::fp32;
    auto const empty = graph_from_edges<std::int32_t>("empty", 30, {});
    gc::SpmmHandle<std::int32_t> h(stream, empty, with(algorithm));
    check_handle(h, empty, 5, p, std::string("empty graph, ") + name_of(algorithm));
    auto const one = graph_from_edges<std::int32_t>("one", 1, {{0, 0}});
    gc::SpmmHandle<std::int32_t> h1(stream, one, with(algorithm));
    check_handle(h1, one, 3, p, std::string("one node, ") + name_of(algorithm));
  }
}

TEST(CudaSpmm, applies_on_different_streams_are_ordered) {
  TESSEL_REQUIRE_DEVICE();
  // Y1 = A X on stream 1, then Y2 = A Y1 on stream 2: the handle makes stream 2 wait for the first apply.
  auto const g = test::awkward_graph<std::int32_t>(4000, 5, 8.0);
  Stream s1, s2;
  gc::SpmmHandle<std::int32_t> h(s1, g, with(SpmmAlgorithm::csr));
  int const f = 64;
  auto const n = static_cast<std::size_t>(g.num_rows());
  auto const xh = random_x(n, f, 3);
  DeviceBuffer<float> x(n * f, "Tessel::test::x"), y1(n * f, "Tessel::test::y1"), y2(n * f, "Tessel::test::y2");
  x.copy_from_host(xh.data(), xh.size(), s1.get());
  TESSEL_CUDA_CHECK(cudaMemsetAsync(y1.data(), 0xff, y1.bytes(), s1.get()));
  auto const rows = static_cast<std::int64_t>(n);
  h.apply(s1, tessel::MatrixRef<float const>(x.data(), rows, f), tessel::MatrixRef<float>(y1.data(), rows, f));
  h.apply(s2, tessel::MatrixRef<float const>(y1.data(), rows, f), tessel::MatrixRef<float>(y2.data(), rows, f));
  std::vector<float> out(n * f);
  y2.copy_to_host(out.data(), out.size(), s2.get());
  s2.synchronize(std::chrono::seconds(60));
  auto const once = test::reference_spmm(g, xh, f);
  std::vector<float> once_f(once.begin(), once.end());
  auto const twice = test::reference_spmm(g, once_f, f);
  for (std::size_t k = 0; k < out.size(); ++k)
    ASSERT_NEAR(out[k], twice[k], 1e-3 * (1.0 + std::abs(twice[k]))) << "element " << k;
}

TEST(CudaSpmm, rejects_bad_operands_and_host_only_algorithms) {
  TESSEL_REQUIRE_DEVICE();
  Stream stream;
  auto const g = test::awkward_graph<std::int32_t>(50, 1);
  gc::SpmmHandle<std::int32_t> h(stream, g, with(SpmmAlgorithm::csr));
  DeviceBuffer<float> x(50 * 4, "Tessel::test::x"), y(50 * 4, "Tessel::test::y");
  EXPECT_THROW(
      h.apply(stream, tessel::MatrixRef<float const>(x.data(), 49, 4), tessel::MatrixRef<float>(y.data(), 50, 4)),
      tessel::Exception);
  EXPECT_THROW(
      h.apply(stream, tessel::MatrixRef<float const>(x.data(), 50, 4, 2), tessel::MatrixRef<float>(y.data(), 50, 4)),
      tessel::Exception);
  EXPECT_THROW(
      h.apply(stream, tessel::MatrixRef<float const>(x.data(), 50, 4), tessel::MatrixRef<float>(x.data(), 50, 4)),
      tessel::Exception); // in place
  for (auto algorithm : {SpmmAlgorithm::coo, SpmmAlgorithm::kk}) {
    try {
      gc::SpmmHandle<std::int32_t> bad(stream, g, with(algorithm));
      ADD_FAILURE() << name_of(algorithm) << " was accepted on the device";
    } catch (tessel::Exception const &e) {
      EXPECT_NE(std::string(e.what()).find("host-only"), std::string::npos) << e.what();
    }
  }
}

} // namespace

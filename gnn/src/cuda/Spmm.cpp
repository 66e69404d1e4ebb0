// The CUDA SpmmHandle: host-side preprocessing through the shared decomposition and selection
// (src/impl/Decomposition.hpp, Selection.hpp), uploads into tessel::cuda::DeviceBuffers, and the kernels of
// src/cuda/*.cu, cuBLAS and cuSPARSE behind the thin interface of KernelApi.hpp. Compiled by the host compiler; no
// Kokkos in the kernels.
#include <tessel/gnn/cuda/Spmm.hpp>

#include "../impl/AdaptiveDriver.hpp"
#include "../impl/Builders.hpp"
#include "CusparseSpmm.hpp"
#include "DeviceStructures.hpp"
#include "KernelApi.hpp"

#include <tessel/core/cuda/Blas.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

namespace tessel::gnn::cuda {

char const *name_of(DenseEngine engine) {
  switch (engine) {
  case DenseEngine::automatic:
    return "automatic";
  case DenseEngine::wmma:
    return "wmma";
  case DenseEngine::cublas:
    return "cublas";
  }
  return "?";
}

CostModel device_cost_model() {
  // Estimates for an H200 (4.8 TB/s HBM3e, 50 MB L2, ~67 TFLOP/s fp32, ~495 TFLOP/s dense TF32), not
  // measurements: CSR gathers 4 bytes of X per 2 flops, mostly from L2 (~1 TFLOP/s effective); the tile kernels
  // run one m16n16k8 MMA per 8 gathered rows of 16 features (tiles) or 8 contiguous rows (dense), bounded by the
  // gathers and by per-warp staging, a few percent of the TF32 peak. They imply: dense wins above a block density
  // of 1000 / 15000 = 6.7%, tiles above a tile fill of 1000 / 8000 = 12.5%.
  CostModel m;
  m.csr_gflops = 1000.0;
  m.tiles_gflops = 8000.0;
  m.dense_gflops = 15000.0;
  return m;
}

namespace Impl {

using gnn::BlockKernel;
using gnn::Impl::Decomposition;
using gnn::Impl::WholeVariant;

/// What the device executor keeps per feature width: the final structure, and the timing events of its tuning
/// applies.
template <class Index> struct DeviceWidth {
  bool use_all_csr = false, dense_cublas = false, has_tiles = false;
  DevCsr<Index> rest;
  DevTiles<Index> tiles;
  DevDense dense;
  std::vector<Event> events;
  std::size_t used_events = 0;
};

/// "cuda: <device>", once a device is known to be visible.
template <class Index> std::string device_backend(Graph<Index> const &g) {
  TESSEL_REQUIRE(tessel::cuda::device_count() > 0, "tessel::gnn::cuda::SpmmHandle on graph '", g.name(),
                 "': no CUDA device is visible");
  int device = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  return "cuda: " + tessel::cuda::device_name(device);
}

/// The device handle: the whole-graph algorithms, and the executor of the adaptive driver on CUDA streams.
template <class Index> struct DeviceSpmmState {
  using Driver = gnn::Impl::AdaptiveDriver<Index, DeviceWidth<Index>>;
  using Width = typename Driver::Width;

  // The executor's interface (AdaptiveDriver.hpp).
  using instance_type = cudaStream_t;
  using input_type = MatrixRef<float const>;
  using output_type = MatrixRef<float>;
  static constexpr bool synchronous_timing = false;
  static constexpr bool warm_up = true;
  static constexpr bool time_frozen = false;
  static constexpr bool time_single_variant = true;

  cuda::SpmmOptions options;
  std::string name;
  Index rows = 0, cols = 0;
  offset_type nnz = 0;
  std::string backend;
  Driver driver;
  bool tensor_cores = false; // the WMMA kernels run (allow_tf32 and an sm_80+ image for this device)
  bool cublas_grouped = false;
  double setup_seconds = 0; // uploads and host-side structure building outside the decomposition

  // Whole-graph algorithms (original order).
  DevCsr<Index> graph;
  DeviceBuffer<Index> edge_rows;
  DevTiles<Index> tiles;
  DeviceBuffer<float> dense;
  std::unique_ptr<CusparseSpmm<Index>> vendor; // the cusparse algorithm
  // Created with the first call that needs them.
  std::optional<tessel::cuda::CublasHandle> cublas;

  // Adaptive.
  bool structures_ready = false;
  DevCsr<Index> tuning_rest, all_csr;
  bool all_csr_ready = false;
  std::vector<DevCsr<Index>> class_csr;
  std::vector<DevTiles<Index>> class_tiles;
  std::vector<DevDense> class_dense;

  // Applies are ordered among themselves, also across streams (created with the first apply).
  std::unique_ptr<Event> last_apply;
  cudaStream_t last_stream = nullptr;

  DeviceSpmmState(Graph<Index> const &g, cuda::SpmmOptions const &o)
      : options(o), name(g.name()), rows(g.num_rows()), cols(g.num_cols()), nnz(g.nnz()), backend(device_backend(g)),
        driver(g, o, backend) {
    validate(g);
    tensor_cores = options.allow_tf32 && tensor_core_kernels_available();
#ifdef TESSEL_CUBLAS_HAS_GROUPED_GEMM
    cublas_grouped = true;
#endif
  }
  DeviceSpmmState(DeviceSpmmState const &) = delete;
  DeviceSpmmState &operator=(DeviceSpmmState const &) = delete;

  bool dense_available() const { return tensor_cores || cublas_grouped; }

  cublasHandle_t blas(cudaStream_t stream) {
    if (cublas)
      cublas->set_stream(stream);
    else
      cublas.emplace(stream);
    return cublas->get();
  }
  cublasComputeType_t gemm_compute() const {
    return options.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Setup

  std::string unavailable_reason() const {
    if (!options.allow_tf32)
      return "tensor cores disabled by allow_tf32 = false";
    return "this device has no TF32 tensor cores or Tessel was not compiled for it (sm_80 or newer needed)";
  }

  void setup_fixed(cudaStream_t stream, Graph<Index> const &g) {
    auto const t0 = std::chrono::steady_clock::now();
    std::vector<char> all(static_cast<std::size_t>(nnz), 1);
    switch (options.algorithm) {
    case SpmmAlgorithm::csr:
    case SpmmAlgorithm::csr_feature_tiled:
      graph = DevCsr<Index>(gnn::Impl::make_csr(g, all, false), stream);
      break;
    case SpmmAlgorithm::coo_atomic: {
      graph = DevCsr<Index>(gnn::Impl::make_csr(g, all, false), stream);
      edge_rows = upload(gnn::Impl::entry_rows(g), "Tessel::gnn::cuda::edge_rows", stream);
      break;
    }
    case SpmmAlgorithm::tiles:
      TESSEL_REQUIRE(tensor_cores, "tessel::gnn::cuda::SpmmHandle: the tiles algorithm runs on tensor cores, ",
                     unavailable_reason());
      tiles = DevTiles<Index>(gnn::Impl::make_tiles(g, nullptr, {0, static_cast<std::int64_t>(rows)}, true), stream);
      break;
    case SpmmAlgorithm::dense: {
      gnn::Impl::require_dense_fits(name, rows, cols, options.dense_max_bytes);
      std::vector<float> h(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols), 0.0f);
      for (Index i = 0; i < rows; ++i)
        for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
          h[static_cast<std::size_t>(i) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(g.entries()(k))] +=
              g.values()(k);
      dense = upload(h, "Tessel::gnn::cuda::dense", stream);
      break;
    }
    case SpmmAlgorithm::cusparse:
      vendor = std::make_unique<CusparseSpmm<Index>>(stream, g);
      break;
    case SpmmAlgorithm::coo:
    case SpmmAlgorithm::kk:
      TESSEL_THROW("tessel::gnn::cuda::SpmmHandle: the ", gnn::name_of(options.algorithm),
                   " algorithm is host-only (device algorithms: csr, csr_feature_tiled, coo_atomic, tiles, dense, "
                   "cusparse, adaptive)");
    case SpmmAlgorithm::adaptive:
      break;
    }
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(stream));
    setup_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void setup_adaptive(cudaStream_t stream, Graph<Index> const &g, Partition const *given) {
    DeviceCsrProbe<Index> probe(stream, options.sync_timeout);
    unsigned available = 1u << static_cast<int>(BlockKernel::csr);
    if (tensor_cores)
      available |= 1u << static_cast<int>(BlockKernel::tiles);
    if (dense_available())
      available |= 1u << static_cast<int>(BlockKernel::dense);
    TESSEL_REQUIRE(options.dense_engine != DenseEngine::wmma || tensor_cores,
                   "tessel::gnn::cuda::SpmmHandle: dense_engine = wmma, but ", unavailable_reason());
    TESSEL_REQUIRE(options.dense_engine != DenseEngine::cublas || cublas_grouped,
                   "tessel::gnn::cuda::SpmmHandle: dense_engine = cublas needs cublasGemmGroupedBatchedEx (cuBLAS "
                   "12.5 or newer); this Tessel was built against an older cuBLAS");
    driver.decompose(g, given, &probe, available, unavailable_reason());
  }

  // ---------------------------------------------------------------------------------------------------------
  // Execution

  void run_csr(cudaStream_t stream, DevCsr<Index> const &piece, MatrixRef<float const> const &x,
               MatrixRef<float> const &y, bool accumulate, CsrSlicing slicing = CsrSlicing::automatic) const {
    TESSEL_CUDA_CHECK(csr_spmm<Index>(stream, piece.args(), x.data, x.ld, y.data, y.ld, static_cast<int>(x.cols),
                                      accumulate, slicing));
  }

  void run_tiles(cudaStream_t stream, DevTiles<Index> const &t, MatrixRef<float const> const &x,
                 MatrixRef<float> const &y, bool accumulate) const {
    TESSEL_CUDA_CHECK(
        tiles_spmm<Index>(stream, t.args(), x.data, x.ld, y.data, y.ld, static_cast<int>(x.cols), accumulate));
  }

  /// Y += the dense blocks times X, with cuBLAS (grouped GEMMs per wave) or with the WMMA kernel.
  void run_dense(cudaStream_t stream, DevDense &d, MatrixRef<float const> const &x, MatrixRef<float> const &y,
                 bool use_cublas) {
    if (d.empty())
      return;
    // TF32 GEMMs need 16-byte aligned operands; other X/Y run the WMMA kernel (same rounding, other order).
    bool const cublas_fits = x.ld % 4 == 0 && y.ld % 4 == 0 && aligned16(x.data) && aligned16(y.data);
    if (!tensor_cores || (use_cublas && (cublas_fits || !options.allow_tf32))) {
      run_dense_cublas(stream, d, x, y);
      return;
    }
    TESSEL_CUDA_CHECK(dense_blocks_spmm(stream, d.args(), x.data, x.ld, y.data, y.ld, static_cast<int>(x.cols)));
  }

  void run_dense_cublas(cudaStream_t stream, DevDense &d, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
#ifdef TESSEL_CUBLAS_HAS_GROUPED_GEMM
    if (d.filled_x != x.data || d.filled_y != y.data || d.filled_ldx != x.ld || d.filled_ldy != y.ld) {
      TESSEL_CUDA_CHECK(fill_gemm_pointers(stream, d.problems, d.row0.data(), d.col0.data(), x.data, x.ld, y.data, y.ld,
                                           d.x_ptr.data(), d.y_ptr.data()));
      d.filled_x = x.data;
      d.filled_y = y.data;
      d.filled_ldx = x.ld;
      d.filled_ldy = y.ld;
    }
    auto handle = blas(stream);
    int const f = to_int(x.cols, "F"), ldx = to_int(x.ld, "X leading dimension"),
              ldy = to_int(y.ld, "Y leading dimension");
    for (auto const &w : d.waves) {
      auto const groups = w.n.size();
      std::vector<cublasOperation_t> op(groups, CUBLAS_OP_N);
      std::vector<int> m(groups, f), lda(groups, ldx), ldc(groups, ldy);
      std::vector<float> alpha(groups, 1.0f), beta(groups, 1.0f);
      // Column-major view: Y^T (F x rows) += X^T (F x cols) * block^T (cols x rows).
      TESSEL_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
          handle, op.data(), op.data(), m.data(), w.n.data(), w.k.data(), alpha.data(),
          reinterpret_cast<void const *const *>(d.x_ptr.data() + w.first), CUDA_R_32F, lda.data(),
          reinterpret_cast<void const *const *>(d.block_ptr.data() + w.first), CUDA_R_32F, w.ld.data(), beta.data(),
          reinterpret_cast<void *const *>(d.y_ptr.data() + w.first), CUDA_R_32F, ldc.data(), static_cast<int>(groups),
          w.size.data(), gemm_compute()));
    }
#else
    (void)stream;
    (void)d;
    (void)x;
    (void)y;
    TESSEL_THROW("tessel::gnn::cuda::SpmmHandle: the cuBLAS dense engine needs cuBLAS 12.5 or newer");
#endif
  }

  void run_whole_dense(cudaStream_t stream, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
    // Column-major view: Y^T (F x rows) = X^T (F x cols) * A^T (cols x rows), A row-major with ld = cols.
    float const alpha = 1.0f, beta = 0.0f;
    TESSEL_CUBLAS_CHECK(cublasGemmEx(blas(stream), CUBLAS_OP_N, CUBLAS_OP_N, to_int(x.cols, "F"), to_int(rows, "rows"),
                                     to_int(cols, "columns"), &alpha, x.data, CUDA_R_32F, to_int(x.ld, "X ld"),
                                     dense.data(), CUDA_R_32F, to_int(cols, "columns"), &beta, y.data, CUDA_R_32F,
                                     to_int(y.ld, "Y ld"), gemm_compute(), CUBLAS_GEMM_DEFAULT));
  }

  // ---------------------------------------------------------------------------------------------------------
  // Structures of the adaptive executor

  void build_tuning(cudaStream_t const &stream) {
    if (structures_ready)
      return;
    auto const &d = driver.decomposition();
    tuning_rest = DevCsr<Index>(gnn::Impl::csr_piece(d, d.tuning_rest_mask(), false), stream);
    class_csr.resize(static_cast<std::size_t>(d.num_classes));
    class_tiles.resize(static_cast<std::size_t>(d.num_classes));
    class_dense.resize(static_cast<std::size_t>(d.num_classes));
    for (int c = 0; c < d.num_classes; ++c) {
      if (!d.separate(c))
        continue;
      auto const keep = d.class_mask(c);
      auto const cc = static_cast<std::size_t>(c);
      for (auto kernel : d.candidates[cc]) {
        if (kernel == BlockKernel::csr)
          class_csr[cc] = DevCsr<Index>(gnn::Impl::csr_piece(d, keep, true), stream);
        else if (kernel == BlockKernel::tiles)
          class_tiles[cc] = DevTiles<Index>(gnn::Impl::tile_set(d, keep), stream);
        else
          class_dense[cc] = DevDense(gnn::Impl::dense_blocks(d, d.class_blocks(c)), stream);
      }
    }
    structures_ready = true;
  }

  bool default_dense_cublas() const { return options.dense_engine == DenseEngine::cublas || !tensor_cores; }

  void build_final(cudaStream_t const &stream, Width &w) {
    auto const &d = driver.decomposition();
    auto const &choice = w.sel.choice;
    w.rest = DevCsr<Index>(gnn::Impl::csr_piece(d, d.choice_mask(choice, BlockKernel::csr), false), stream);
    auto const tile_mask = d.choice_mask(choice, BlockKernel::tiles);
    w.has_tiles = std::find(tile_mask.begin(), tile_mask.end(), 1) != tile_mask.end();
    if (w.has_tiles)
      w.tiles = DevTiles<Index>(gnn::Impl::tile_set(d, tile_mask), stream);
    w.dense = DevDense(gnn::Impl::dense_blocks(d, d.choice_blocks(choice, BlockKernel::dense)), stream);
    w.dense_cublas = default_dense_cublas();
  }

  void build_all_csr(cudaStream_t const &stream) {
    if (all_csr_ready)
      return;
    all_csr = DevCsr<Index>(
        gnn::Impl::csr_piece(driver.decomposition(), std::vector<char>(static_cast<std::size_t>(nnz), 1), false),
        stream);
    all_csr_ready = true;
  }

  std::vector<WholeVariant> final_variants(Width const &w, bool with_all_csr) const {
    std::vector<WholeVariant> variants;
    if (with_all_csr)
      variants.push_back(WholeVariant::all_csr);
    variants.push_back(WholeVariant::plan);
    if (!w.dense.empty() && options.dense_engine == DenseEngine::automatic && tensor_cores && cublas_grouped)
      variants.push_back(WholeVariant::plan_cublas_dense);
    return variants;
  }

  static char const *dense_engine_name(bool cublas_engine) { return cublas_engine ? "cublas" : "wmma"; }

  void frozen(Width &w) {
    auto const winner = w.sel.winner;
    w.sel.plan.rest_kernel = SpmmAlgorithm::csr;
    if (winner == WholeVariant::all_csr) {
      w.use_all_csr = true;
      w.rest = {};
      w.tiles = {};
      w.dense = {};
      w.has_tiles = false;
    } else if (winner == WholeVariant::plan_cublas_dense) {
      w.dense_cublas = true;
    } else if (!w.built) { // decided by the cost model: built with the first apply
      w.dense_cublas = default_dense_cublas();
    }
    auto const &choice = w.sel.choice;
    bool const dense = std::find(choice.begin(), choice.end(), BlockKernel::dense) != choice.end();
    w.sel.plan.dense_engine = dense ? dense_engine_name(w.dense_cublas) : "";
  }

  // ---------------------------------------------------------------------------------------------------------
  // Execution of the adaptive executor

  void run_rest(cudaStream_t const &stream, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
    run_csr(stream, tuning_rest, x, y, false);
  }

  void run_class(cudaStream_t const &stream, int c, BlockKernel kernel, MatrixRef<float const> const &x,
                 MatrixRef<float> const &y) {
    auto const cc = static_cast<std::size_t>(c);
    if (kernel == BlockKernel::csr)
      run_csr(stream, class_csr[cc], x, y, true);
    else if (kernel == BlockKernel::tiles)
      run_tiles(stream, class_tiles[cc], x, y, true);
    else
      run_dense(stream, class_dense[cc], x, y, options.dense_engine == DenseEngine::cublas);
  }

  void run_final(cudaStream_t stream, Width &w, MatrixRef<float const> const &x, MatrixRef<float> const &y,
                 bool dense_cublas) {
    if (w.use_all_csr) {
      run_csr(stream, all_csr, x, y, false);
      return;
    }
    run_csr(stream, w.rest, x, y, false);
    if (w.has_tiles)
      run_tiles(stream, w.tiles, x, y, true);
    run_dense(stream, w.dense, x, y, dense_cublas);
  }

  void run_variant(cudaStream_t const &stream, Width &w, WholeVariant variant, MatrixRef<float const> const &x,
                   MatrixRef<float> const &y) {
    if (variant == WholeVariant::all_csr)
      run_csr(stream, all_csr, x, y, false);
    else
      run_final(stream, w, x, y, variant == WholeVariant::plan_cublas_dense || w.dense_cublas);
  }

  void run_frozen(cudaStream_t const &stream, Width &w, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
    run_final(stream, w, x, y, w.dense_cublas);
  }

  // Timing marks: CUDA events, read once the stage's applies are issued.
  std::size_t stamp(cudaStream_t const &stream, Width &w) const {
    if (w.used_events == w.events.size())
      w.events.emplace_back(true);
    w.events[w.used_events].record(stream);
    return w.used_events++;
  }
  double seconds(Width const &w, std::size_t a, std::size_t b) const {
    return 1e-3 * Event::elapsed_ms(w.events[a], w.events[b]);
  }
  void wait(Width const &w, std::size_t last) const { w.events[last].synchronize(options.sync_timeout); }
  void reset(Width &w) const { w.used_events = 0; }

  // ---------------------------------------------------------------------------------------------------------

  void check_operands(MatrixRef<float const> const &x, MatrixRef<float> const &y) const {
    TESSEL_REQUIRE(x.rows == static_cast<std::int64_t>(cols) && y.rows == static_cast<std::int64_t>(rows) &&
                       x.cols == y.cols,
                   "tessel::gnn::cuda::SpmmHandle::apply on graph '", name, "' (", rows, " x ", cols, "): X is ",
                   x.rows, " x ", x.cols, ", Y is ", y.rows, " x ", y.cols);
    TESSEL_REQUIRE(x.ld >= x.cols && y.ld >= y.cols && x.cols <= std::numeric_limits<int>::max(),
                   "tessel::gnn::cuda::SpmmHandle::apply on graph '", name, "': leading dimensions must be >= the ",
                   "columns (X: ld ", x.ld, ", ", x.cols, " columns; Y: ld ", y.ld, ", ", y.cols, " columns)");
    if (x.rows * x.cols > 0 && y.rows * y.cols > 0) {
      TESSEL_REQUIRE(x.data && y.data, "tessel::gnn::cuda::SpmmHandle::apply on graph '", name,
                     "': X or Y is a null pointer");
      auto const xb = reinterpret_cast<std::uintptr_t>(x.data), yb = reinterpret_cast<std::uintptr_t>(y.data);
      auto const xe = xb + static_cast<std::uintptr_t>((x.rows - 1) * x.ld + x.cols) * sizeof(float);
      auto const ye = yb + static_cast<std::uintptr_t>((y.rows - 1) * y.ld + y.cols) * sizeof(float);
      TESSEL_REQUIRE(xe <= yb || ye <= xb, "tessel::gnn::cuda::SpmmHandle::apply on graph '", name,
                     "': X and Y overlap (Y = A X cannot run in place)");
    }
  }

  void apply(tessel::cuda::Stream const &s, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
    check_operands(x, y);
    int const f = static_cast<int>(x.cols);
    if (f == 0 || rows == 0)
      return;
    cudaStream_t const stream = s.get();
    if (!last_apply)
      last_apply = std::make_unique<Event>(false);
    else if (last_stream != stream)
      last_apply->wait_on(stream);
    run_apply(stream, f, x, y);
    last_apply->record(stream);
    last_stream = stream;
  }

  void run_apply(cudaStream_t stream, int f, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
    if (options.algorithm == SpmmAlgorithm::adaptive) {
      driver.apply(*this, stream, x, y, f);
      return;
    }
    driver.width(*this, f, nullptr); // records the (fixed) plan of this width for plans()
    if (options.algorithm == SpmmAlgorithm::cusparse || options.algorithm == SpmmAlgorithm::dense)
      // cuSPARSE's vector loads and cuBLAS's TF32 kernels need 16-byte aligned matrices (cudaMalloc gives 256).
      TESSEL_REQUIRE(aligned16(x.data) && aligned16(y.data), "tessel::gnn::cuda::SpmmHandle::apply on graph '", name,
                     "': the ", gnn::name_of(options.algorithm), " algorithm needs 16-byte aligned X and Y");
    switch (options.algorithm) {
    case SpmmAlgorithm::csr:
      run_csr(stream, graph, x, y, false);
      return;
    case SpmmAlgorithm::csr_feature_tiled:
      run_csr(stream, graph, x, y, false, CsrSlicing::narrow32);
      return;
    case SpmmAlgorithm::coo_atomic:
      TESSEL_CUDA_CHECK(cudaMemset2DAsync(y.data, static_cast<std::size_t>(y.ld) * sizeof(float), 0,
                                          static_cast<std::size_t>(f) * sizeof(float), static_cast<std::size_t>(rows),
                                          stream));
      TESSEL_CUDA_CHECK(coo_atomic_spmm<Index>(stream, nnz, edge_rows.data(), graph.entries.data(), graph.values.data(),
                                               x.data, x.ld, y.data, y.ld, f));
      return;
    case SpmmAlgorithm::tiles:
      run_tiles(stream, tiles, x, y, false);
      return;
    case SpmmAlgorithm::dense:
      run_whole_dense(stream, x, y);
      return;
    case SpmmAlgorithm::cusparse:
      if (auto const reason = vendor->run(stream, x, y); !reason.empty())
        driver.widths[f].sel.plan.reason = reason;
      return;
    case SpmmAlgorithm::coo: // refused at construction
    case SpmmAlgorithm::kk:
    case SpmmAlgorithm::adaptive:
      return;
    }
  }

  std::int64_t device_bytes() const {
    std::int64_t b = graph.bytes() + edge_rows.bytes() + tiles.bytes() + dense.bytes() +
                     (vendor ? vendor->bytes() : 0) + tuning_rest.bytes() + all_csr.bytes();
    for (auto const &p : class_csr)
      b += p.bytes();
    for (auto const &t : class_tiles)
      b += t.bytes();
    for (auto const &t : class_dense)
      b += t.bytes();
    for (auto const &[f, w] : driver.widths)
      b += w.rest.bytes() + w.tiles.bytes() + w.dense.bytes();
    return b;
  }
};

} // namespace Impl

template <class Index>
SpmmHandle<Index>::SpmmHandle(tessel::cuda::Stream const &stream, Graph<Index> const &graph, SpmmOptions const &options)
    : _state(std::make_unique<Impl::DeviceSpmmState<Index>>(graph, options)) {
  if (options.algorithm == SpmmAlgorithm::adaptive)
    _state->setup_adaptive(stream.get(), graph, nullptr);
  else
    _state->setup_fixed(stream.get(), graph);
}

template <class Index>
SpmmHandle<Index>::SpmmHandle(tessel::cuda::Stream const &stream, Graph<Index> const &graph, SpmmOptions const &options,
                              Partition const &partition) {
  TESSEL_REQUIRE(options.algorithm == SpmmAlgorithm::adaptive,
                 "tessel::gnn::cuda::SpmmHandle: a given partition needs the adaptive algorithm, got ",
                 gnn::name_of(options.algorithm));
  _state = std::make_unique<Impl::DeviceSpmmState<Index>>(graph, options);
  _state->setup_adaptive(stream.get(), graph, &partition);
}

template <class Index> SpmmHandle<Index>::~SpmmHandle() = default;
template <class Index> SpmmHandle<Index>::SpmmHandle(SpmmHandle &&) noexcept = default;
template <class Index> SpmmHandle<Index> &SpmmHandle<Index>::operator=(SpmmHandle &&) noexcept = default;

template <class Index>
void SpmmHandle<Index>::apply(tessel::cuda::Stream const &stream, MatrixRef<float const> const &x,
                              MatrixRef<float> const &y) {
  _state->apply(stream, x, y);
}

template <class Index> SpmmAlgorithm SpmmHandle<Index>::algorithm() const { return _state->options.algorithm; }

template <class Index> Permutation const &SpmmHandle<Index>::permutation() const {
  return _state->driver.partition().permutation;
}

template <class Index> Partition const &SpmmHandle<Index>::partition() const { return _state->driver.partition(); }

template <class Index> bool SpmmHandle<Index>::tuned(int features) const { return _state->driver.tuned(features); }

template <class Index> SpmmPlan SpmmHandle<Index>::plan(int features) const {
  return _state->driver.width(*_state, features, nullptr).sel.plan;
}

template <class Index> std::vector<SpmmPlan> SpmmHandle<Index>::plans() const { return _state->driver.plans(); }

template <class Index> double SpmmHandle<Index>::overhead_seconds() const {
  return _state->driver.overhead_seconds() + _state->setup_seconds;
}

template <class Index> std::int64_t SpmmHandle<Index>::device_bytes() const { return _state->device_bytes(); }

template class SpmmHandle<std::int32_t>;
template class SpmmHandle<std::int64_t>;

} // namespace tessel::gnn::cuda

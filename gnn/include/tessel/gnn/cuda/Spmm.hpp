#ifndef TESSEL_GNN_CUDA_SPMM_HPP
#define TESSEL_GNN_CUDA_SPMM_HPP

/// \file cuda/Spmm.hpp
/// \brief Y = A X on a CUDA device: the device counterpart of tessel::gnn::SpmmHandle. The handle is built from a
/// host Graph (preprocessed on the host with the same decomposition and plan as the host path), uploads its
/// structures once, and applies on a tessel::cuda::Stream. Needs the CUDA runtime only, not a CUDA-enabled Kokkos.

#include <tessel/core/Gemm.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Reorder.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessel::gnn::cuda {

/// \brief How dense blocks run on the device.
enum class DenseEngine {
  automatic, ///< the adaptive handle times both and keeps the faster
  wmma,      ///< Tessel's TF32 WMMA kernel: all blocks in one launch, a warp owns each output tile
  cublas     ///< cublasGemmGroupedBatchedEx, blocks in waves that never share output rows (cuBLAS 12.5+)
};
/// "auto", "wmma" or "cublas".
char const *name_of(DenseEngine engine);

/// \brief Effective rates that predict device kernel times when timing is off (and prune candidates when it is
/// on). These are estimates from the H200's bandwidth and TF32 throughput, not measurements: calibrate them
/// with `tessel-gnn-bench --backend cuda` (see gnn/README.md, "CUDA").
CostModel device_cost_model();

/// \brief Options of the device handle: the host options (algorithm, timing, partition, class bounds, ...) with
/// the device cost model, plus what only the device has.
struct SpmmOptions : gnn::SpmmOptions {
  SpmmOptions() { cost_model = device_cost_model(); }
  /// Tensor-core kernels (TF32 inputs, fp32 accumulation; relative error ~1e-3 of |A| |X|). Off: tiles are not a
  /// candidate, dense blocks run cuBLAS in full fp32, and the tiles algorithm is refused.
  bool allow_tf32 = true;
  DenseEngine dense_engine = DenseEngine::automatic; ///< how dense blocks run
  /// Longest wait for the device while reading tuning timings (never hangs).
  Timeout sync_timeout{60000};
};

namespace Impl {
template <class Index> struct DeviceSpmmState;
}

/// \brief Y = A X on the current CUDA device for a fixed A and any feature width.
///
/// Algorithms: csr (row-parallel, warp or sub-warp per row, vectorized features, deterministic), csr_feature_tiled
/// (32-feature slices), coo_atomic (edge-parallel atomics, non-deterministic), tiles (TC-GNN condensed row
/// windows on tensor cores), dense (the whole adjacency, one cuBLAS GEMM), cusparse (cusparseSpMM CSR_ALG2,
/// row-major: the vendor baseline) and adaptive (AdaptGear: the host path's decomposition and plan, the
/// candidates timed on the device with CUDA events during the first applies). coo and kk are host-only.
///
/// As on the host, X and Y are in the handle's vertex order (permutation()). Applies are ordered among
/// themselves even across streams (the handle makes a new stream wait for the previous apply). Not thread-safe.
template <class Index = std::int32_t> class SpmmHandle {
public:
  /// Preprocesses \p graph on the host and uploads the structures on \p stream (synchronised before returning).
  SpmmHandle(tessel::cuda::Stream const &stream, Graph<Index> const &graph, SpmmOptions const &options = {});
  /// Adaptive with a given vertex order and parts (e.g. those of the forward handle, for the backward A^T).
  SpmmHandle(tessel::cuda::Stream const &stream, Graph<Index> const &graph, SpmmOptions const &options,
             Partition const &partition);
  ~SpmmHandle();
  /// \name Move-only
  //@{
  /// Move-only.
  SpmmHandle(SpmmHandle &&) noexcept;
  SpmmHandle &operator=(SpmmHandle &&) noexcept;
  //@}
  SpmmHandle(SpmmHandle const &) = delete;
  SpmmHandle &operator=(SpmmHandle const &) = delete;

  /// Y = A X, enqueued on \p stream (X: num_cols x F, Y: num_rows x F, device memory, row-major with any leading
  /// dimension). While the plan of this width is being tuned each call runs candidate kernels between timing events
  /// (the result is always complete) and the call that ends a tuning stage waits for the device to read the timings.
  void apply(tessel::cuda::Stream const &stream, MatrixRef<float const> const &x, MatrixRef<float> const &y);

#if defined(KOKKOS_ENABLE_CUDA)
  /// Y = A X on Kokkos views in CUDA memory (LayoutRight).
  template <class XView, class YView,
            class = std::enable_if_t<Kokkos::is_view<XView>::value && Kokkos::is_view<YView>::value>>
  void apply(tessel::cuda::Stream const &stream, XView const &x, YView const &y) {
    apply(stream, MatrixRef<float const>(x.data(), x.extent(0), x.extent(1), x.stride(0)),
          MatrixRef<float>(y.data(), y.extent(0), y.extent(1), y.stride(0)));
  }
#endif

  /// The handle's algorithm.
  SpmmAlgorithm algorithm() const;
  /// The vertex order X and Y are in (see tessel::gnn::SpmmHandle::permutation).
  Permutation const &permutation() const;
  /// The parts of that order.
  Partition const &partition() const;
  /// True when the plan for \p features is decided (always for non-adaptive algorithms).
  bool tuned(int features) const;
  /// The plan for \p features (a prediction until tuned(features)); the same SpmmPlan as the host handle's.
  SpmmPlan plan(int features) const;
  /// Plans of every width applied so far.
  std::vector<SpmmPlan> plans() const;
  /// Seconds spent so far in preprocessing, uploads and tuning applies (selection overhead).
  double overhead_seconds() const;
  /// Bytes of device memory held by the handle.
  std::int64_t device_bytes() const;

private:
  std::unique_ptr<Impl::DeviceSpmmState<Index>> _state;
};

} // namespace tessel::gnn::cuda

#endif

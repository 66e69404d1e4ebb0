#ifndef TESSEL_MOE_CUDA_DEVICEOPTIONS_HPP
#define TESSEL_MOE_CUDA_DEVICEOPTIONS_HPP

/// \file cuda/DeviceOptions.hpp
/// \brief What the moe package's device layers (VirtualRanksLayer, NcclMoeLayer) take and report.
///
/// Built only with Tessel_ENABLE_CUDA.

#include <tessel/core/Config.hpp>

#ifndef TESSEL_ENABLE_CUDA
#error "tessel/moe/cuda/DeviceOptions.hpp needs a Tessel built with Tessel_ENABLE_CUDA=ON"
#endif

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Tuning.hpp>

#include <cstdint>
#include <optional>

namespace tessel::moe::cuda {

/// \brief True when a CUDA device is visible (never throws).
bool device_available();

/// \brief A kind of device-side wait of the comet schedule (see DeviceDebug::skip_wait).
enum class DeviceWait {
  none = 0,    ///< every wait is kept
  packed = 1,  ///< layer0's communication blocks on a source's packed flag (VirtualRanksLayer: stream order holds too)
  message = 2, ///< layer0's GEMM blocks on the arrival of a message's rows
  split = 3,   ///< layer1's communication blocks on the GEMM tiles of a column block
  combine = 4  ///< the final sum on every rank's combine stores (VirtualRanksLayer: events order it too)
};

/// \brief Debug switches of the device layers, for tests: they make a synchronization bug visible.
struct DeviceDebug {
  /// Before every forward, fill every buffer the forward writes (dispatch rows, received rows, hidden layer, expert
  /// outputs, combine buffers, output) with NaN, so that a read before the write it should wait for cannot pass on
  /// data left by an earlier forward. Outside the timed region (DeviceStats::device_ms).
  bool poison_buffers = false;
  /// Tests only: skip every wait of this kind, to prove that the tests fail when a wait is missing.
  DeviceWait skip_wait = DeviceWait::none;
};

/// \brief Options of a device layer.
struct DeviceOptions {
  /// Parameters of the comet schedule; unset: looked up in \p registry under backend "cuda".
  std::optional<CometParams> comet;
  /// Registry for the lookup; nullptr: TuningRegistry::builtin().
  TuningRegistry const *registry = nullptr;
  /// Token chunks of the pipelined schedule.
  int pipeline_chunks = 4;
  /// Device-side waits give up after this long; the host's synchronizations after this plus a margin (a quarter,
  /// at least one second), so that the device's error, which names what was waited for, is the one reported
  /// (TimeoutError).
  double timeout_seconds = 60.0;
  /// Debug switches (off by default).
  DeviceDebug debug;
};

/// \brief What the last forward did (all virtual ranks).
struct DeviceStats {
  Schedule schedule = Schedule::sequential; ///< the schedule that ran
  /// CUDA events: from the start of the first rank's packing to the end of the last rank's final sum (excludes
  /// the host's routing and the uploads of tokens and plans).
  double device_ms = 0.0;
  /// Host routing, plans and uploads.
  double host_seconds = 0.0;
  /// Expert rows computed, all ranks.
  std::int64_t rows = 0;
  // comet: communication blocks (n_c) and grid sizes of the fused kernels (per rank; layer0 grids vary by rank,
  // the largest is reported).
  int comm_blocks = 0; ///< comet: communication blocks (n_c) per fused kernel
  int grid0 = 0;       ///< comet: grid of the layer0 kernel (the largest rank's)
  int grid1 = 0;       ///< comet: grid of the layer1 kernel
};

} // namespace tessel::moe::cuda

#endif

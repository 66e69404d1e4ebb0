#ifndef TESSEL_GNN_CUDA_DISTSPMM_HPP
#define TESSEL_GNN_CUDA_DISTSPMM_HPP

/// \file cuda/DistSpmm.hpp
/// \brief Y = A X on a DistGraph with device buffers and an NCCL communicator: the device counterpart of
/// tessel::gnn::DistSpmm. The rows the peers need are gathered on the compute stream, the exchange (one grouped
/// NCCL all-to-all of the halo rows) runs on the communicator's stream while the compute stream computes the local
/// block, and the peers' halo blocks follow once the exchange is done; their results are added in increasing peer
/// order, so the result does not depend on timing.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Gemm.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/cuda/Spmm.hpp>

#include <cstdint>
#include <memory>

namespace tessel::gnn::cuda {

namespace Impl {
struct DeviceDistSpmmState;
}

/// \brief Y = A X for a DistGraph on the current CUDA device, any feature width; X and Y hold this rank's rows
/// (DistGraph::owned_rows order), device memory, row-major. Every apply is collective over the communicator, which
/// must hold device buffers (make_nccl_communicator). Not thread-safe.
class DistSpmm {
public:
  /// The local block gets \p options (adaptive keeps the local order: PartitionMethod::none); the halo blocks run
  /// csr. Uploads on \p stream (synchronised before returning). \p graph must outlive this object.
  DistSpmm(tessel::cuda::Stream const &stream, Communicator comm, DistGraph<std::int32_t> const &graph,
           SpmmOptions const &options = {});
  ~DistSpmm();
  /// \name Move-only
  //@{
  /// Move-only.
  DistSpmm(DistSpmm &&) noexcept;
  DistSpmm &operator=(DistSpmm &&) noexcept;
  //@}

  /// y = A x on this rank's rows, enqueued on \p stream (the exchange on the communicator's own stream, ordered
  /// with \p stream by events). x and y: local_rows() x F, the same F on every rank.
  void apply(tessel::cuda::Stream const &stream, MatrixRef<float const> const &x, MatrixRef<float> const &y);

  /// overlapped (default): the local block while the halo rows move; sequential: after they have landed.
  void set_schedule(DistSchedule schedule);
  /// The schedule of the next applies.
  DistSchedule schedule() const;
  /// Bytes of the last apply (the times of device work are taken with events around apply, on the caller's side).
  DistSpmmTimings const &last() const;

private:
  std::unique_ptr<Impl::DeviceDistSpmmState> _s;
};

} // namespace tessel::gnn::cuda

#endif

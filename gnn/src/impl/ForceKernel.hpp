#ifndef TESSEL_GNN_IMPL_FORCEKERNEL_HPP
#define TESSEL_GNN_IMPL_FORCEKERNEL_HPP

// A test hook, not an option: the tests make every kernel run inside the adaptive decomposition by forcing it on
// every class that has blocks.
#include <tessel/gnn/Spmm.hpp>

namespace tessel::gnn::Impl {

/// The kernel forced on every nonempty class of adaptive handles built now (-1: none, the selection decides).
int forced_kernel();

/// While it lives, adaptive handles (host and device) built on this process run \p kernel on every nonempty class.
class ForceKernel {
public:
  explicit ForceKernel(BlockKernel kernel);
  explicit ForceKernel(int kernel) : ForceKernel(static_cast<BlockKernel>(kernel)) {}
  ~ForceKernel();
  ForceKernel(ForceKernel const &) = delete;
  ForceKernel &operator=(ForceKernel const &) = delete;

private:
  int _previous;
};

} // namespace tessel::gnn::Impl

#endif

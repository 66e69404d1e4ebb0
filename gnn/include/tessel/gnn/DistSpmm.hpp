#ifndef TESSEL_GNN_DISTSPMM_HPP
#define TESSEL_GNN_DISTSPMM_HPP

/// \file DistSpmm.hpp
/// \brief Y = A X on a DistGraph. Per apply the halo rows go out to the peers and come in through the
/// communicator's isend / irecv (every wait with its timeout), the local block is computed while they are in flight
/// (with any SpmmHandle algorithm, adaptive included), then each peer's halo block as soon as that peer's rows have
/// landed, in arrival order. The halo results are added to the local one in increasing peer order, so the result
/// does not depend on the order in which messages arrive.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Gemm.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace tessel::gnn {

/// \brief When DistSpmm computes relative to its messages.
enum class DistSchedule {
  overlapped, ///< the local block while the halo rows are in flight, then each peer's block as its rows land
  sequential  ///< all halo rows first, then the local block and the peers' blocks (the baseline of the overlap)
};
/// "overlapped" or "sequential".
char const *name_of(DistSchedule schedule);
/// Parses "overlapped" or "sequential".
DistSchedule parse_dist_schedule(std::string const &text);

/// \brief Where the time of the last DistSpmm::apply went (seconds) and what it moved.
struct DistSpmmTimings {
  double pack_seconds = 0;         ///< copying the rows the peers need into send buffers
  double local_seconds = 0;        ///< the local block (overlaps the messages in flight)
  double wait_seconds = 0;         ///< waiting for halo rows that had not landed when the local block finished
  double halo_seconds = 0;         ///< the peers' halo blocks and their fixed-order sum
  double product_seconds = 0;      ///< apply_product, apply_reduce: the dense products (except the peers' rows')
  double total_seconds = 0;        ///< the whole apply
  std::int64_t bytes_sent = 0;     ///< feature bytes sent to the peers
  std::int64_t bytes_received = 0; ///< feature bytes received from the peers
};

/// \brief Y = A X for a DistGraph and any feature width; X and Y hold this rank's rows (DistGraph::owned_rows order).
/// Every apply is collective over the communicator.
template <class ExecSpace = Kokkos::DefaultHostExecutionSpace> class DistSpmm {
  static_assert(is_host_execution_space_v<ExecSpace>, "tessel::gnn::DistSpmm runs on the host execution spaces");

public:
  using execution_space = ExecSpace;                     ///< where the applies run
  using memory_space = typename ExecSpace::memory_space; ///< where X and Y live

  /// The local block gets \p options (an adaptive handle keeps the local order: its parts are cut from it); the halo
  /// blocks, few entries per row in a rectangular block, run csr. \p graph must outlive this object.
  DistSpmm(ExecSpace const &space, Communicator comm, DistGraph<std::int32_t> const &graph,
           SpmmOptions const &options = {});
  ~DistSpmm();
  /// \name Move-only
  //@{
  /// Move-only.
  DistSpmm(DistSpmm &&) noexcept;
  DistSpmm &operator=(DistSpmm &&) noexcept;
  //@}

  /// y = A x on this rank's rows (x and y: local_rows() x F, the same F on every rank).
  void apply(ExecSpace const &space, ConstMatrix<memory_space> const &x, Matrix<memory_space> const &y);
  /// The same with any row-major rank-2 Views of float in host memory (a plain Kokkos::View<float **>, ...).
  template <class XView, class YView> void apply(ExecSpace const &space, XView const &x, YView const &y) {
    static_assert(Impl::check_feature_view<XView, false>() && Impl::check_feature_view<YView, true>());
    static_assert(std::is_same_v<typename XView::memory_space, memory_space> &&
                      std::is_same_v<typename YView::memory_space, memory_space>,
                  "tessel::gnn::DistSpmm::apply: x and y live in host memory");
    apply(space, ConstMatrix<memory_space>(x), Matrix<memory_space>(y));
  }
  /// y = A t with t = x op(w) (a GNN layer that transforms, then aggregates), t returned too: the rows of t the
  /// peers need are computed first and sent, and the rest of t is computed while they are in flight, so the dense
  /// product hides the exchange as the local block does. x: local_rows() x K, op(w): K x F, t and y: local_rows() x F.
  void apply_product(ExecSpace const &space, ConstMatrix<memory_space> const &x, ConstMatrix<memory_space> const &w,
                     Op op_w, Matrix<memory_space> const &t, Matrix<memory_space> const &y);
  /// y = A x and g = z^T y (a layer's weight gradient after its aggregation): z^T times the local block's result is
  /// computed while the halo rows are in flight, and only the rows with halo entries are added once they land
  /// (sequential: one product after everything). y is apply's, bitwise; g equals z^T y up to the order of its sums.
  /// z: local_rows() x K, g: K x F.
  void apply_reduce(ExecSpace const &space, ConstMatrix<memory_space> const &x, Matrix<memory_space> const &y,
                    ConstMatrix<memory_space> const &z, Matrix<memory_space> const &g);

  /// Where the time of the last apply went.
  DistSpmmTimings const &last() const;
  /// The schedule of the next applies (overlapped unless set; both give bitwise the same result).
  void set_schedule(DistSchedule schedule);
  /// The schedule of the next applies.
  DistSchedule schedule() const;
  /// The local handle's plans (empty on a rank without rows).
  std::vector<SpmmPlan> local_plans() const;
  /// Seconds the local block's handles spent on AdaptGear's selection (SpmmHandle::overhead_seconds).
  double overhead_seconds() const;

private:
  struct State;
  struct Product;
  struct Reduction;
  class Apply;
  void run(ExecSpace const &space, ConstMatrix<memory_space> const &x, Matrix<memory_space> const &y,
           Product const *product, Reduction const *reduction);
  std::unique_ptr<State> _s;
};

} // namespace tessel::gnn

#endif

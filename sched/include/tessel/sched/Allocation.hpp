#ifndef TESSEL_SCHED_ALLOCATION_HPP
#define TESSEL_SCHED_ALLOCATION_HPP

/// \file Allocation.hpp
/// \brief Which job holds each GPU: an indexed allocation table with per-node and per-type free counts kept up to
/// date on every change, so policies query free capacity in O(1) and copy a whole cluster state in one memcpy.

#include <tessel/sched/Cluster.hpp>

#include <vector>

namespace tessel::sched {

/// Owner of a free GPU.
inline constexpr int kFree = -1;
/// Owner of a GPU on a failed node.
inline constexpr int kDown = -2;

/// \brief GPU ownership of a cluster.
class Allocation {
public:
  /// An allocation of no cluster (assign a constructed one before use).
  Allocation() = default;
  /// Every GPU of \p cluster free and up; \p cluster must outlive the allocation.
  explicit Allocation(Cluster const &cluster);

  /// The cluster.
  Cluster const &cluster() const { return *_cluster; }
  /// The job holding \p gpu, or a negative value when it is free (or down).
  int owner(int gpu) const { return _owner[static_cast<std::size_t>(gpu)]; }
  /// Free (and up) GPUs of a node.
  int free_on_node(int node) const { return _free_node[static_cast<std::size_t>(node)]; }
  /// Free (and up) GPUs of a type.
  int free_of_type(int type) const { return _free_type[static_cast<std::size_t>(type)]; }
  /// True while \p node is down (failed, not yet repaired).
  bool node_down(int node) const;

  /// Gives free GPU \p gpu to \p job (>= 0).
  void assign(int gpu, int job);
  /// Frees \p gpu (held by a job).
  void release_gpu(int gpu);
  /// Frees every GPU of \p job; returns how many.
  int release(int job);
  /// Marks every GPU of \p node down (they must be free) or back up.
  void set_node_down(int node, bool down);

  /// GPUs held by \p job, in GPU order.
  std::vector<int> gpus_of(int job) const;
  /// Number of GPUs held by \p job on \p node.
  int held_on_node(int job, int node) const;

  /// owner() of every GPU, in GPU order.
  std::vector<int> const &owners() const { return _owner; }

private:
  Cluster const *_cluster = nullptr;
  std::vector<int> _owner, _free_node, _free_type;
};

/// \brief Where a running job is: GPU type, GPU count and the per-node counts in node order.
struct Placement {
  int gpu_type = -1;       ///< index of the GPU type, or -1 when the job holds nothing
  int num_gpus = 0;        ///< GPUs held
  std::vector<int> nodes;  ///< nodes holding the job's GPUs, in node order
  std::vector<int> counts; ///< GPUs on each of those nodes
  /// Hosts and GPUs per host when the layout is uniform (every node the same count), else hosts = -1.
  int hosts() const;
  /// GPUs per host when the layout is uniform, else -1.
  int per_host() const;
  /// True when every node holds the same number of the job's GPUs.
  bool uniform() const;
};

/// \brief Placement of \p job in \p alloc (empty when it holds nothing); throws if it spans GPU types.
Placement placement_of(Allocation const &alloc, int job);

} // namespace tessel::sched

#endif

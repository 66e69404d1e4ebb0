#ifndef TESSEL_SCHED_CLUSTER_HPP
#define TESSEL_SCHED_CLUSTER_HPP

/// \file Cluster.hpp
/// \brief A heterogeneous GPU cluster: typed GPUs (memory, peak FLOP/s, bandwidths) on nodes of one type each.

#include <string>
#include <string_view>
#include <vector>

namespace tessel::sched {

/// \brief Hardware of one GPU type.
struct GpuSpec {
  std::string name;              ///< lower-case type name used in traces and profiles ("a100", "h100")
  double memory_gb = 0;          ///< device memory (GB) available to a job
  double peak_tflops = 0;        ///< dense 16-bit tensor-core peak (TFLOP/s)
  double mem_bandwidth_gbps = 0; ///< device memory bandwidth (GB/s)
  double intra_node_gbps = 0;    ///< GPU-to-GPU bandwidth inside a node, per direction (GB/s)
  double inter_node_gbps = 0;    ///< per-GPU network bandwidth between nodes (GB/s)
};

/// \brief `num_nodes` identical nodes with `gpus_per_node` GPUs of type `gpu_type` (index into the type list).
struct NodeGroup {
  int gpu_type = 0;      ///< index into the cluster's GPU types
  int num_nodes = 0;     ///< nodes in the group
  int gpus_per_node = 0; ///< GPUs on each node (a power of two)
};

/// \brief Nodes of typed GPUs. Nodes are numbered group by group; GPUs node by node. All nodes of one type have
/// the same power-of-two GPU count (Arena's per-type node capacity), which placement relies on.
class Cluster {
public:
  /// The most GPUs a cluster may have: every GPU is tracked on its own (owner, node), and a policy's search copies
  /// those tables.
  static constexpr long long kMaxGpus = 1 << 20;

  /// An empty cluster (no types, no nodes).
  Cluster() = default;
  /// A cluster of \p types whose nodes are \p groups, numbered in the groups' order.
  /// \throws tessel::Exception naming the offending group or type on invalid input, and the size of a cluster of
  /// more than kMaxGpus GPUs.
  Cluster(std::vector<GpuSpec> types, std::vector<NodeGroup> groups);

  /// Crius/Arena's simulated cluster (`resources/sim_cluster_spec.json` + `NODE_CAPACITY`): A100 80 nodes x 4,
  /// V100 20 x 16, A40 160 x 2, A10 160 x 2 = 1,280 GPUs, with Arena's memory sizes (40 / 32 / 48 / 24 GB).
  static Cluster crius_simulated();
  /// Specs of well-known GPU types (a100, a100-80g, v100, a40, a10, h100, h200, l20, t4, p100); throws if unknown.
  static GpuSpec known_gpu(std::string_view name);

  /// Number of GPU types.
  int num_types() const { return static_cast<int>(_types.size()); }
  /// The spec of type \p t (std::out_of_range for another index).
  GpuSpec const &type(int t) const { return _types.at(static_cast<std::size_t>(t)); }
  /// The GPU types, by index.
  std::vector<GpuSpec> const &types() const { return _types; }
  /// The node groups, in node order.
  std::vector<NodeGroup> const &groups() const { return _groups; }
  /// Index of the type called \p name, or -1.
  int find_type(std::string_view name) const;

  /// Number of nodes.
  int num_nodes() const { return static_cast<int>(_node_type.size()); }
  /// Number of GPUs over all nodes.
  int num_gpus() const { return _num_gpus; }
  /// GPU type of node \p node.
  int node_type(int node) const { return _node_type[static_cast<std::size_t>(node)]; }
  /// GPUs on node \p node.
  int node_capacity(int node) const { return _node_cap[static_cast<std::size_t>(node)]; }
  /// Number of the first GPU of node \p node (its GPUs are consecutive).
  int node_first_gpu(int node) const { return _node_first[static_cast<std::size_t>(node)]; }
  /// Node owning GPU \p gpu.
  int gpu_node(int gpu) const { return _gpu_node[static_cast<std::size_t>(gpu)]; }
  /// GPUs per node of type \p t (0 when the cluster has no node of that type).
  int type_capacity(int t) const { return _type_cap[static_cast<std::size_t>(t)]; }
  /// Total GPUs of type \p t.
  int type_gpus(int t) const { return _type_gpus[static_cast<std::size_t>(t)]; }
  /// Nodes of type \p t in node order.
  std::vector<int> const &type_nodes(int t) const { return _type_nodes[static_cast<std::size_t>(t)]; }

private:
  std::vector<GpuSpec> _types;
  std::vector<NodeGroup> _groups;
  std::vector<int> _node_type, _node_cap, _node_first, _gpu_node, _type_cap, _type_gpus;
  std::vector<std::vector<int>> _type_nodes;
  int _num_gpus = 0;
};

/// \brief Loads a cluster from HDF5 (schema `tessel.sched.cluster`) or from CSV with header
/// `gpu_type,num_nodes,gpus_per_node[,memory_gb,peak_tflops,mem_bandwidth_gbps,intra_node_gbps,inter_node_gbps]`
/// (one row per node group; omitted spec columns are taken from Cluster::known_gpu). The special name
/// `crius` gives Cluster::crius_simulated(). Errors name the file, the row and the field.
Cluster load_cluster(std::string const &path);

/// \brief Builds a cluster from Crius's `resources/sim_cluster_spec.json` (`[{type: {"node_num": n}}]`) with Arena's
/// per-type node capacities (a100 4, v100 16, a40 2, a10 2, p100 8, 1080ti 8, 3090 8, h100 8, l20 16) and GPU specs
/// from Cluster::known_gpu; memory bandwidth is taken from \p device_infos_json (Crius's device_infos.json) when given.
Cluster load_crius_cluster_spec(std::string const &spec_json, std::string const &device_infos_json);

/// \brief Writes \p cluster as HDF5 (schema `tessel.sched.cluster`, see datasets/sched/README.md).
void save_cluster(Cluster const &cluster, std::string const &path, std::string const &source);

/// \brief Writes \p cluster as the CSV accepted by load_cluster.
void save_cluster_csv(Cluster const &cluster, std::string const &path);

} // namespace tessel::sched

#endif

#ifndef TESSEL_GNN_DISTGRAPH_HPP
#define TESSEL_GNN_DISTGRAPH_HPP

/// \file DistGraph.hpp
/// \brief A graph's rows spread over the ranks of a Communicator: each rank holds its rows as a local block (the
/// columns it owns) and one halo block per peer (the columns that peer owns), with the exchange plan (which of its
/// feature rows each peer needs). AdaptGear's intra/inter split at the scale of ranks: the local block is computed
/// while the halo rows are in flight (DistSpmm).
#include <tessel/core/Communicator.hpp>
#include <tessel/gnn/Graph.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::gnn {

namespace Impl {
template <class Index> struct HostCsr;
}

/// \brief How DistGraph assigns rows to ranks.
enum class DistPartitionMethod {
  automatic,  ///< metis where Tessel has METIS, else contiguous
  metis,      ///< METIS k-way, one part per rank, vertices weighted by their row's entries + 1 (edge cut)
  contiguous, ///< contiguous ranges of rows with about equal entries + rows per rank
  given       ///< DistGraphOptions::owner
};
/// "auto", "metis", "contiguous" or "given".
char const *name_of(DistPartitionMethod method);
/// Parses "auto", "metis", "contiguous" (the names of name_of; "given" is not a command-line choice).
DistPartitionMethod parse_dist_partition_method(std::string const &text);

/// \brief Options of DistGraph.
struct DistGraphOptions {
  DistPartitionMethod method = DistPartitionMethod::automatic; ///< how rows are assigned to ranks
  /// method given: the rank of every vertex (the same on every rank).
  std::vector<int> owner;
  std::uint64_t seed = 1; ///< METIS's seed (every rank computes the same partition)
};

/// \brief The rows of a square graph partitioned over the ranks of a Communicator.
///
/// Rank r owns the vertices whose owner is r, numbered locally in increasing global id (owned_rows()). Its local
/// block holds their rows restricted to owned columns (local numbering); halo(k) holds their rows restricted to the
/// columns owned by peer halo(k).peer, numbered by position in that peer's recv_rows. Built collectively; every
/// rank must pass the same graph and options (checked: a mismatch is one error on every rank).
template <class Index = std::int32_t> class DistGraph {
public:
  /// One peer whose rows this rank's rows read, or whose rows read this rank's.
  struct Halo {
    int peer = -1;                       ///< the peer's rank
    Graph<Index> block;                  ///< owned rows x recv_rows.size(): the entries whose column the peer owns
    std::vector<std::int64_t> recv_rows; ///< global ids of the peer's rows this rank needs, increasing
    std::vector<Index> send_rows;        ///< local ids of this rank's rows the peer needs, increasing global id
  };

  /// Collective over \p comm: partitions \p graph (the whole graph, on every rank) and builds this rank's blocks.
  DistGraph(Communicator const &comm, Graph<Index> const &graph, DistGraphOptions const &options = {});

  /// Collective: the adjacency of a Tessel data set file (graph/indptr, graph/indices, graph/values). With the
  /// contiguous method every rank reads graph/indptr and only its own rows of the rest (HDF5 hyperslabs), so a graph
  /// larger than one rank's memory loads; metis, automatic and given read the whole graph on every rank.
  static DistGraph load(Communicator const &comm, std::string const &path, DistGraphOptions const &options = {});

  /// The graph's name.
  std::string const &name() const { return _name; }
  /// Rows of the whole graph (all ranks).
  std::int64_t global_rows() const { return _global_rows; }
  /// Entries of the whole graph.
  std::int64_t global_nnz() const { return _global_nnz; }
  /// This rank.
  int rank() const { return _rank; }
  /// The ranks the rows are spread over.
  int size() const { return _size; }
  /// How the rows were assigned.
  DistPartitionMethod method() const { return _method; }
  /// Global ids of this rank's rows, increasing (local row k is global row owned_rows()[k]).
  std::vector<std::int64_t> const &owned_rows() const { return _owned; }
  /// Rows this rank owns (the rows of its X and Y).
  std::int64_t local_rows() const { return static_cast<std::int64_t>(_owned.size()); }
  /// The rank of every global vertex.
  std::vector<int> const &owner() const { return _owner; }
  /// This rank's rows restricted to the columns it owns (local numbering).
  Graph<Index> const &local_block() const { return _local; }
  /// Peers in increasing rank, only those with rows to send or to receive.
  std::vector<Halo> const &halos() const { return _halos; }
  /// Feature rows this rank receives per apply (sum of recv_rows over the peers) and sends.
  std::int64_t halo_recv_rows() const;
  /// Feature rows this rank sends per apply (sum of send_rows over the peers).
  std::int64_t halo_send_rows() const;
  /// Seconds spent partitioning (on every rank: each computes the same assignment).
  double partition_seconds() const { return _partition_seconds; }

private:
  DistGraph() = default;
  /// The blocks and exchange plans from this rank's rows (global columns) and _owner, _owned: collective.
  void build(Communicator const &comm, Impl::HostCsr<std::int64_t> &&mine);

  std::string _name;
  std::int64_t _global_rows = 0, _global_nnz = 0;
  int _rank = 0, _size = 1;
  DistPartitionMethod _method = DistPartitionMethod::contiguous;
  std::vector<int> _owner;
  std::vector<std::int64_t> _owned;
  Graph<Index> _local;
  std::vector<Halo> _halos;
  double _partition_seconds = 0;
};

} // namespace tessel::gnn

#endif

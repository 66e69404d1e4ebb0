#include <tessel/core/Digest.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/Reorder.hpp>

#include "impl/HostCsr.hpp"
#include "impl/KwayParts.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <type_traits>

namespace tessel::gnn {

char const *name_of(DistPartitionMethod method) {
  switch (method) {
  case DistPartitionMethod::automatic:
    return "auto";
  case DistPartitionMethod::metis:
    return "metis";
  case DistPartitionMethod::contiguous:
    return "contiguous";
  case DistPartitionMethod::given:
    return "given";
  }
  return "?";
}

DistPartitionMethod parse_dist_partition_method(std::string const &text) {
  if (text == "auto")
    return DistPartitionMethod::automatic;
  if (text == "metis")
    return DistPartitionMethod::metis;
  if (text == "contiguous")
    return DistPartitionMethod::contiguous;
  TESSEL_THROW("unknown distributed partition method '", text, "' (expected auto, metis or contiguous)");
}

namespace {

/// Continues the digest \p h over \p n values at \p data (the identity of a graph or options across ranks).
template <class T> void fnv(std::uint64_t &h, T const *data, std::size_t n) { h = fnv1a(h, data, n * sizeof(T)); }

/// Contiguous ranges with about equal weight (the row's entries + 1) per rank, from the row offsets.
template <class Offsets> std::vector<int> contiguous_owner(Offsets const &row_map, std::int64_t n, int size) {
  double const total = static_cast<double>(row_map[static_cast<std::size_t>(n)] + n);
  std::vector<int> owner(static_cast<std::size_t>(n));
  double acc = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    auto const u = static_cast<std::size_t>(i);
    double const w = static_cast<double>(row_map[u + 1] - row_map[u] + 1);
    // The rank whose share of the total contains the middle of this row's weight.
    owner[static_cast<std::size_t>(i)] = std::min(size - 1, static_cast<int>((acc + 0.5 * w) * size / total));
    acc += w;
  }
  return owner;
}

} // namespace

template <class Index>
DistGraph<Index>::DistGraph(Communicator const &comm, Graph<Index> const &graph, DistGraphOptions const &options)
    : _name(graph.name()), _global_rows(static_cast<std::int64_t>(graph.num_rows())), _global_nnz(graph.nnz()),
      _rank(comm.rank()), _size(comm.size()), _method(options.method) {
  TESSEL_REQUIRE(graph.num_rows() == graph.num_cols(), "DistGraph: graph '", graph.name(), "' is ", graph.num_rows(),
                 " x ", graph.num_cols(), ", expected a square adjacency");
  auto const n = _global_rows;
  // Every rank must hold the same graph and options: a mismatch would silently exchange wrong rows.
  std::uint64_t h = fnv1a_basis;
  fnv(h, &n, 1);
  fnv(h, graph.row_map().data(), graph.row_map().extent(0));
  fnv(h, graph.entries().data(), graph.entries().extent(0));
  fnv(h, graph.values().data(), graph.values().extent(0));
  comm.require_same("DistGraph: the graph (rows, entries and values) of '" + graph.name() + "'", h);
  std::uint64_t o = fnv1a_basis;
  auto const method = static_cast<int>(options.method);
  fnv(o, &method, 1);
  fnv(o, &options.seed, 1);
  fnv(o, options.owner.data(), options.owner.size());
  comm.require_same("DistGraph: the options (partition method, seed, owners)", o);

  auto const t0 = std::chrono::steady_clock::now();
  if (_method == DistPartitionMethod::automatic)
    _method = metis_available() && _size > 1 ? DistPartitionMethod::metis : DistPartitionMethod::contiguous;
  switch (_method) {
  case DistPartitionMethod::given:
    TESSEL_REQUIRE(static_cast<std::int64_t>(options.owner.size()) == n, "DistGraph: DistGraphOptions::owner has ",
                   options.owner.size(), " entries, expected one per vertex (", n, ")");
    for (std::size_t i = 0; i < options.owner.size(); ++i)
      TESSEL_REQUIRE(options.owner[i] >= 0 && options.owner[i] < _size, "DistGraph: DistGraphOptions::owner[", i,
                     "] = ", options.owner[i], ", expected a rank in [0, ", _size, ")");
    _owner = options.owner;
    break;
  case DistPartitionMethod::metis: {
    std::vector<std::int64_t> weight(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      weight[static_cast<std::size_t>(i)] = graph.row_map()(i + 1) - graph.row_map()(i) + 1;
    auto const parts = Impl::kway_parts(graph, _size, weight, options.seed);
    _owner.assign(parts.begin(), parts.end());
    // METIS is deterministic for a seed, but the assignment must agree bit for bit: rank 0's wins.
    comm.broadcast(_owner.data(), _owner.size(), DataType::int32, 0);
    break;
  }
  default:
    _owner = contiguous_owner(graph.row_map().data(), n, _size);
    break;
  }
  _partition_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // This rank's rows with their global columns, then the blocks and plans from them alone.
  Impl::HostCsr<std::int64_t> mine;
  mine.row_map.push_back(0);
  for (std::int64_t i = 0; i < n; ++i) {
    if (_owner[static_cast<std::size_t>(i)] != _rank)
      continue;
    _owned.push_back(i);
    for (offset_type k = graph.row_map()(i); k < graph.row_map()(i + 1); ++k) {
      mine.entries.push_back(static_cast<std::int64_t>(graph.entries()(k)));
      mine.values.push_back(graph.values()(k));
    }
    mine.row_map.push_back(static_cast<offset_type>(mine.entries.size()));
  }
  build(comm, std::move(mine));
}

template <class Index> void DistGraph<Index>::build(Communicator const &comm, Impl::HostCsr<std::int64_t> &&mine) {
  auto const size = static_cast<std::size_t>(_size);
  auto const local_of = [this](std::int64_t global) {
    auto const it = std::lower_bound(_owned.begin(), _owned.end(), global);
    return static_cast<std::int64_t>(it - _owned.begin());
  };
  // What this rank receives from each peer: the peer's columns in its rows (sorted, unique).
  std::vector<std::vector<std::int64_t>> recv(size);
  for (auto const j : mine.entries) {
    int const p = _owner[static_cast<std::size_t>(j)];
    if (p != _rank)
      recv[static_cast<std::size_t>(p)].push_back(j);
  }
  for (auto &v : recv) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  // What it sends: each peer's receive list for this rank, exchanged (counts first, then the global ids).
  std::vector<std::uint64_t> counts(size), all(size * size);
  for (std::size_t p = 0; p < size; ++p)
    counts[p] = recv[p].size();
  comm.host_allgather(counts.data(), all.data(), size * sizeof(std::uint64_t));
  std::vector<std::size_t> send_counts(size), send_displs(size), recv_counts(size), recv_displs(size);
  std::vector<std::int64_t> wanted, asked;
  for (std::size_t p = 0; p < size; ++p) {
    send_counts[p] = recv[p].size();
    send_displs[p] = wanted.size();
    wanted.insert(wanted.end(), recv[p].begin(), recv[p].end());
    recv_counts[p] = static_cast<std::size_t>(all[p * size + static_cast<std::size_t>(_rank)]);
    recv_displs[p] = p == 0 ? 0 : recv_displs[p - 1] + recv_counts[p - 1];
  }
  asked.resize(recv_displs[size - 1] + recv_counts[size - 1]);
  comm.alltoallv(wanted.data(), send_counts.data(), send_displs.data(), asked.data(), recv_counts.data(),
                 recv_displs.data(), DataType::int64);

  // The blocks: local columns, and per peer the position in this rank's recv list from that peer.
  std::vector<Impl::HostCsr<Index>> blocks(size);
  for (auto &b : blocks)
    b.row_map.assign(_owned.size() + 1, 0);
  for (std::size_t r = 0; r < _owned.size(); ++r) {
    for (offset_type k = mine.row_map[r]; k < mine.row_map[r + 1]; ++k) {
      auto const j = mine.entries[static_cast<std::size_t>(k)];
      int const p = _owner[static_cast<std::size_t>(j)];
      auto &b = blocks[static_cast<std::size_t>(p)];
      if (p == _rank) {
        b.entries.push_back(static_cast<Index>(local_of(j)));
      } else {
        auto const &rv = recv[static_cast<std::size_t>(p)];
        b.entries.push_back(static_cast<Index>(std::lower_bound(rv.begin(), rv.end(), j) - rv.begin()));
      }
      b.values.push_back(mine.values[static_cast<std::size_t>(k)]);
    }
    for (auto &b : blocks)
      b.row_map[r + 1] = static_cast<offset_type>(b.entries.size());
  }
  auto const rows = static_cast<Index>(_owned.size());
  for (std::size_t p = 0; p < size; ++p) {
    auto &b = blocks[p];
    if (static_cast<int>(p) == _rank) {
      _local = Impl::to_graph(_name + " (rank " + std::to_string(_rank) + ")", rows, rows, std::move(b));
      continue;
    }
    if (recv[p].empty() && recv_counts[p] == 0)
      continue;
    Halo h;
    h.peer = static_cast<int>(p);
    h.block = Impl::to_graph(_name + " (rank " + std::to_string(_rank) + " <- " + std::to_string(p) + ")", rows,
                             static_cast<Index>(recv[p].size()), std::move(b));
    h.recv_rows = std::move(recv[p]);
    for (std::size_t k = recv_displs[p]; k < recv_displs[p] + recv_counts[p]; ++k) {
      TESSEL_REQUIRE(_owner[static_cast<std::size_t>(asked[k])] == _rank, "DistGraph '", _name, "': rank ", p,
                     " asked rank ", _rank, " for row ", asked[k], ", which it does not own");
      h.send_rows.push_back(static_cast<Index>(local_of(asked[k])));
    }
    _halos.push_back(std::move(h));
  }
}

template <class Index>
DistGraph<Index> DistGraph<Index>::load(Communicator const &comm, std::string const &path,
                                        DistGraphOptions const &options) {
  auto const method =
      options.method == DistPartitionMethod::automatic
          ? (metis_available() && comm.size() > 1 ? DistPartitionMethod::metis : DistPartitionMethod::contiguous)
          : options.method;
  if (method != DistPartitionMethod::contiguous) { // the partitioner needs the whole graph
    auto const data = load_dataset(path);
    if constexpr (std::is_same_v<Index, std::int32_t>)
      return DistGraph(comm, data.graph, options);
    else
      return DistGraph(comm, convert_index<Index>(data.graph), options);
  }
  h5::File const file(path);
  std::string const name = file.has_attribute("/", "name") ? file.read_string_attribute("/", "name") : path;
  auto const indptr = file.read<std::int64_t>("graph/indptr").data;
  TESSEL_REQUIRE(indptr.size() >= 1 && indptr.front() == 0, path,
                 ": graph/indptr must start with 0 and hold num_nodes "
                 "+ 1 entries");
  auto const n = static_cast<std::int64_t>(indptr.size()) - 1;
  for (std::size_t i = 0; i + 1 < indptr.size(); ++i)
    TESSEL_REQUIRE(indptr[i + 1] >= indptr[i], path, ": graph/indptr is not monotone at row ", i, ": indptr[", i,
                   "] = ", indptr[i], " > indptr[", i + 1, "] = ", indptr[i + 1]);
  auto const nnz = static_cast<std::size_t>(indptr.back());
  auto const index_rows = file.shape("graph/indices");
  TESSEL_REQUIRE(index_rows.size() == 1 && index_rows[0] == nnz, path, ": graph/indices has shape [",
                 index_rows.empty() ? 0 : index_rows[0], "], expected [", nnz, "] (graph/indptr[", n, "])");
  bool const weighted = file.has("graph/values");
  std::uint64_t h = fnv1a_basis;
  fnv(h, indptr.data(), indptr.size());
  comm.require_same("DistGraph::load: graph/indptr of '" + path + "'", h);
  std::uint64_t o = fnv1a_basis;
  fnv(o, &options.seed, 1);
  comm.require_same("DistGraph::load: the options (partition method, seed)", o ^ static_cast<std::uint64_t>(method));

  DistGraph g;
  g._name = name;
  g._global_rows = n;
  g._global_nnz = static_cast<std::int64_t>(nnz);
  g._rank = comm.rank();
  g._size = comm.size();
  g._method = method;
  g._owner = contiguous_owner(indptr.data(), n, g._size);
  // This rank's rows form one range; only that range of indices and values is read.
  auto const first = std::find(g._owner.begin(), g._owner.end(), g._rank) - g._owner.begin();
  auto const last = g._owner.rend() - std::find(g._owner.rbegin(), g._owner.rend(), g._rank);
  Impl::HostCsr<std::int64_t> mine;
  mine.row_map.push_back(0);
  // A bad entry or a failed read in one rank's range must end every rank, not leave the others waiting in build.
  comm.all_or_none(
      [&] {
        if (first < last) {
          auto const b = static_cast<std::size_t>(indptr[static_cast<std::size_t>(first)]);
          auto const e = static_cast<std::size_t>(indptr[static_cast<std::size_t>(last)]);
          mine.entries = file.read_rows<std::int64_t>("graph/indices", b, e - b).data;
          mine.values =
              weighted ? file.read_rows<float>("graph/values", b, e - b).data : std::vector<float>(e - b, 1.0f);
          for (std::size_t k = 0; k < mine.entries.size(); ++k)
            TESSEL_REQUIRE(mine.entries[k] >= 0 && mine.entries[k] < n, path, ": graph/indices[", b + k,
                           "] = ", mine.entries[k], " is out of range [0, ", n, ")");
          for (auto i = first; i < last; ++i) {
            g._owned.push_back(i);
            mine.row_map.push_back(static_cast<offset_type>(indptr[static_cast<std::size_t>(i) + 1]) -
                                   static_cast<offset_type>(b));
          }
        }
      },
      path + ": another rank found its rows of graph/indices or graph/values bad (see its error)");
  g.build(comm, std::move(mine));
  return g;
}

template <class Index> std::int64_t DistGraph<Index>::halo_recv_rows() const {
  std::int64_t s = 0;
  for (auto const &h : _halos)
    s += static_cast<std::int64_t>(h.recv_rows.size());
  return s;
}

template <class Index> std::int64_t DistGraph<Index>::halo_send_rows() const {
  std::int64_t s = 0;
  for (auto const &h : _halos)
    s += static_cast<std::int64_t>(h.send_rows.size());
  return s;
}

template class DistGraph<std::int32_t>;
template class DistGraph<std::int64_t>;

} // namespace tessel::gnn

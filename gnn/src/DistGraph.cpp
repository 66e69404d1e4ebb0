#include <tessel/core/Error.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/Reorder.hpp>

#include "impl/HostCsr.hpp"
#include "impl/KwayParts.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

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

/// FNV-1a over the bytes of a range: the graph's identity for the check that every rank passed the same one.
template <class T> void fnv(std::uint64_t &h, T const *data, std::size_t n) {
  auto const *p = reinterpret_cast<unsigned char const *>(data);
  for (std::size_t k = 0; k < n * sizeof(T); ++k) {
    h ^= p[k];
    h *= 0x100000001b3ull;
  }
}

/// Contiguous ranges with about equal weight (the row's entries + 1) per rank.
template <class Index> std::vector<int> contiguous_owner(Graph<Index> const &g, int size) {
  auto const n = static_cast<std::int64_t>(g.num_rows());
  double const total = static_cast<double>(g.nnz() + n);
  std::vector<int> owner(static_cast<std::size_t>(n));
  double acc = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    double const w = static_cast<double>(g.row_map()(i + 1) - g.row_map()(i) + 1);
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
  std::uint64_t h = 0xcbf29ce484222325ull;
  fnv(h, &n, 1);
  fnv(h, graph.row_map().data(), graph.row_map().extent(0));
  fnv(h, graph.entries().data(), graph.entries().extent(0));
  fnv(h, graph.values().data(), graph.values().extent(0));
  comm.require_same("DistGraph: the graph (rows, entries and values) of '" + graph.name() + "'", h);
  std::uint64_t o = 0xcbf29ce484222325ull;
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
    _owner = contiguous_owner(graph, _size);
    break;
  }
  _partition_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Local numbering: owned vertices in increasing global id; every vertex's index within its owner.
  std::vector<std::int64_t> index_in_owner(static_cast<std::size_t>(n));
  std::vector<std::int64_t> count(static_cast<std::size_t>(_size), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    auto const r = static_cast<std::size_t>(_owner[static_cast<std::size_t>(i)]);
    index_in_owner[static_cast<std::size_t>(i)] = count[r]++;
    if (static_cast<int>(r) == _rank)
      _owned.push_back(i);
  }

  // What this rank receives from each peer: the peer's columns in its rows (sorted, unique) ...
  std::vector<std::vector<std::int64_t>> recv(static_cast<std::size_t>(_size));
  for (auto const i : _owned)
    for (offset_type k = graph.row_map()(i); k < graph.row_map()(i + 1); ++k) {
      auto const j = static_cast<std::int64_t>(graph.entries()(k));
      int const p = _owner[static_cast<std::size_t>(j)];
      if (p != _rank)
        recv[static_cast<std::size_t>(p)].push_back(j);
    }
  for (auto &v : recv) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  // ... and what it sends: every rank holds the whole graph, so it finds each peer's needs itself, in the same order
  // as the peer's recv list (increasing global id); no exchange of plans is needed.
  std::vector<std::vector<std::int64_t>> send(static_cast<std::size_t>(_size));
  {
    std::vector<std::int64_t> last_reader(static_cast<std::size_t>(n), -1);
    for (std::int64_t i = 0; i < n; ++i) {
      int const p = _owner[static_cast<std::size_t>(i)];
      if (p == _rank)
        continue;
      for (offset_type k = graph.row_map()(i); k < graph.row_map()(i + 1); ++k) {
        auto const j = static_cast<std::int64_t>(graph.entries()(k));
        // Mark (peer, vertex) once: a vertex's readers on one peer are counted once.
        if (_owner[static_cast<std::size_t>(j)] == _rank && last_reader[static_cast<std::size_t>(j)] != p) {
          last_reader[static_cast<std::size_t>(j)] = p;
          send[static_cast<std::size_t>(p)].push_back(j);
        }
      }
    }
    for (auto &v : send) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
  }

  // The blocks: local columns, and per peer the position in that peer's recv list.
  std::vector<std::int64_t> halo_col(static_cast<std::size_t>(n), -1);
  for (int p = 0; p < _size; ++p)
    for (std::size_t c = 0; c < recv[static_cast<std::size_t>(p)].size(); ++c)
      halo_col[static_cast<std::size_t>(recv[static_cast<std::size_t>(p)][c])] = static_cast<std::int64_t>(c);
  std::vector<Impl::HostCsr<Index>> blocks(static_cast<std::size_t>(_size));
  for (auto &b : blocks)
    b.row_map.assign(_owned.size() + 1, 0);
  for (std::size_t r = 0; r < _owned.size(); ++r) {
    auto const i = _owned[r];
    for (offset_type k = graph.row_map()(i); k < graph.row_map()(i + 1); ++k) {
      auto const j = static_cast<std::int64_t>(graph.entries()(k));
      int const p = _owner[static_cast<std::size_t>(j)];
      auto &b = blocks[static_cast<std::size_t>(p)];
      b.entries.push_back(static_cast<Index>(p == _rank ? index_in_owner[static_cast<std::size_t>(j)]
                                                        : halo_col[static_cast<std::size_t>(j)]));
      b.values.push_back(graph.values()(k));
    }
    for (auto &b : blocks)
      b.row_map[r + 1] = static_cast<offset_type>(b.entries.size());
  }
  auto const rows = static_cast<Index>(_owned.size());
  for (int p = 0; p < _size; ++p) {
    auto &b = blocks[static_cast<std::size_t>(p)];
    if (p == _rank) {
      _local = Impl::to_graph(_name + " (rank " + std::to_string(_rank) + ")", rows, rows, std::move(b));
      continue;
    }
    auto const &rv = recv[static_cast<std::size_t>(p)];
    auto const &sv = send[static_cast<std::size_t>(p)];
    if (rv.empty() && sv.empty())
      continue;
    Halo h;
    h.peer = p;
    h.block = Impl::to_graph(_name + " (rank " + std::to_string(_rank) + " <- " + std::to_string(p) + ")", rows,
                             static_cast<Index>(rv.size()), std::move(b));
    h.recv_rows = rv;
    h.send_rows.reserve(sv.size());
    for (auto const j : sv)
      h.send_rows.push_back(static_cast<Index>(index_in_owner[static_cast<std::size_t>(j)]));
    _halos.push_back(std::move(h));
  }
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

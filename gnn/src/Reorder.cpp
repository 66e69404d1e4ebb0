#include <tessel/core/Execution.hpp>
#include <tessel/gnn/Reorder.hpp>

#include "impl/HostCsr.hpp"

#ifdef TESSEL_GNN_HAVE_METIS
#include <metis.h>
#endif

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_map>

namespace tessel::gnn {

char const *name_of(PartitionMethod method) {
  switch (method) {
  case PartitionMethod::automatic:
    return "auto";
  case PartitionMethod::metis:
    return "metis";
  case PartitionMethod::label_propagation:
    return "lp";
  case PartitionMethod::rcm:
    return "rcm";
  case PartitionMethod::none:
    return "none";
  }
  return "?";
}

PartitionMethod parse_partition_method(std::string const &text) {
  if (text == "auto")
    return PartitionMethod::automatic;
  if (text == "metis")
    return PartitionMethod::metis;
  if (text == "lp" || text == "label_propagation")
    return PartitionMethod::label_propagation;
  if (text == "rcm")
    return PartitionMethod::rcm;
  if (text == "none")
    return PartitionMethod::none;
  TESSEL_THROW("unknown partition method '", text, "' (expected auto, metis, lp, rcm or none)");
}

bool metis_available() {
#ifdef TESSEL_GNN_HAVE_METIS
  return true;
#else
  return false;
#endif
}

Permutation Permutation::identity(std::int64_t n) {
  Permutation p;
  p.old_of_new.resize(static_cast<std::size_t>(n));
  std::iota(p.old_of_new.begin(), p.old_of_new.end(), std::int64_t{0});
  p.new_of_old = p.old_of_new;
  return p;
}

Permutation Permutation::from_order(std::vector<std::int64_t> old_of_new) {
  Permutation p;
  auto const n = old_of_new.size();
  p.new_of_old.assign(n, -1);
  for (std::size_t k = 0; k < n; ++k) {
    auto const old = old_of_new[k];
    TESSEL_REQUIRE(old >= 0 && static_cast<std::size_t>(old) < n, "permutation: position ", k, " holds vertex ", old,
                   ", out of range [0, ", n, ")");
    TESSEL_REQUIRE(p.new_of_old[static_cast<std::size_t>(old)] < 0, "permutation: vertex ", old,
                   " appears twice (positions ", p.new_of_old[static_cast<std::size_t>(old)], " and ", k, ")");
    p.new_of_old[static_cast<std::size_t>(old)] = static_cast<std::int64_t>(k);
  }
  p.old_of_new = std::move(old_of_new);
  return p;
}

bool Permutation::is_identity() const {
  for (std::size_t k = 0; k < old_of_new.size(); ++k)
    if (old_of_new[k] != static_cast<std::int64_t>(k))
      return false;
  return true;
}

namespace {

/// Undirected neighbour lists without self-loops or duplicates (the pattern of A + A^T).
struct Adjacency {
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> neighbours;
  std::int64_t degree(std::int64_t v) const { return offsets[v + 1] - offsets[v]; }
};

template <class Index> Adjacency undirected(Graph<Index> const &g) {
  auto const n = static_cast<std::size_t>(g.num_rows());
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
  pairs.reserve(static_cast<std::size_t>(g.nnz()) * 2);
  for (std::size_t i = 0; i < n; ++i)
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k) {
      auto const j = static_cast<std::int64_t>(g.entries()(k));
      if (j == static_cast<std::int64_t>(i))
        continue;
      pairs.emplace_back(static_cast<std::int64_t>(i), j);
      pairs.emplace_back(j, static_cast<std::int64_t>(i));
    }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  Adjacency adj;
  adj.offsets.assign(n + 1, 0);
  adj.neighbours.resize(pairs.size());
  for (std::size_t e = 0; e < pairs.size(); ++e) {
    ++adj.offsets[static_cast<std::size_t>(pairs[e].first) + 1];
    adj.neighbours[e] = pairs[e].second;
  }
  for (std::size_t i = 0; i < n; ++i)
    adj.offsets[i + 1] += adj.offsets[i];
  return adj;
}

/// Groups vertices by label (labels kept in first-appearance order of \p order) and cuts groups into parts.
Partition parts_from_labels(std::vector<std::int64_t> const &label, std::vector<std::int64_t> const &order,
                            std::int64_t part_size, std::int64_t max_part_size) {
  std::size_t const n = label.size();
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> groups;
  std::vector<std::int64_t> label_order;
  for (auto v : order) {
    auto &members = groups[label[static_cast<std::size_t>(v)]];
    if (members.empty())
      label_order.push_back(label[static_cast<std::size_t>(v)]);
    members.push_back(v);
  }
  Partition p;
  std::vector<std::int64_t> old_of_new;
  old_of_new.reserve(n);
  p.part_offsets.push_back(0);
  std::int64_t open = 0; // vertices in the part being filled with small groups
  for (auto l : label_order) {
    auto const &members = groups[l];
    auto const size = static_cast<std::int64_t>(members.size());
    if (size >= part_size) {
      // A large community: close the open part, then cut the community into nearly equal parts.
      if (open > 0) {
        p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
        open = 0;
      }
      std::int64_t const pieces = (size + max_part_size - 1) / max_part_size;
      for (std::int64_t q = 0; q < pieces; ++q) {
        std::int64_t const b = size * q / pieces, e = size * (q + 1) / pieces;
        old_of_new.insert(old_of_new.end(), members.begin() + b, members.begin() + e);
        p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
      }
    } else {
      if (open + size > part_size && open > 0) {
        p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
        open = 0;
      }
      old_of_new.insert(old_of_new.end(), members.begin(), members.end());
      open += size;
    }
  }
  if (open > 0)
    p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
  p.permutation = Permutation::from_order(std::move(old_of_new));
  return p;
}

std::vector<std::int64_t> bfs_order(Adjacency const &adj, bool reverse_cuthill_mckee) {
  auto const n = static_cast<std::int64_t>(adj.offsets.size() - 1);
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(n));
  std::vector<char> seen(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> by_degree(static_cast<std::size_t>(n));
  std::iota(by_degree.begin(), by_degree.end(), std::int64_t{0});
  std::stable_sort(by_degree.begin(), by_degree.end(),
                   [&](std::int64_t a, std::int64_t b) { return adj.degree(a) < adj.degree(b); });
  std::vector<std::int64_t> next;
  for (auto start : by_degree) {
    if (seen[static_cast<std::size_t>(start)])
      continue;
    std::size_t head = order.size();
    order.push_back(start);
    seen[static_cast<std::size_t>(start)] = 1;
    while (head < order.size()) {
      auto const v = order[head++];
      next.clear();
      for (auto k = adj.offsets[v]; k < adj.offsets[v + 1]; ++k) {
        auto const u = adj.neighbours[static_cast<std::size_t>(k)];
        if (!seen[static_cast<std::size_t>(u)]) {
          seen[static_cast<std::size_t>(u)] = 1;
          next.push_back(u);
        }
      }
      std::stable_sort(next.begin(), next.end(),
                       [&](std::int64_t a, std::int64_t b) { return adj.degree(a) < adj.degree(b); });
      order.insert(order.end(), next.begin(), next.end());
    }
  }
  if (reverse_cuthill_mckee)
    std::reverse(order.begin(), order.end());
  return order;
}

std::vector<std::int64_t> label_propagation(Adjacency const &adj, std::uint64_t seed, std::int64_t max_size) {
  auto const n = adj.offsets.size() - 1;
  std::vector<std::int64_t> label(n), size(n, 1);
  std::iota(label.begin(), label.end(), std::int64_t{0});
  std::vector<std::int64_t> visit(n);
  std::iota(visit.begin(), visit.end(), std::int64_t{0});
  std::mt19937_64 rng(seed);
  std::unordered_map<std::int64_t, std::int64_t> count;
  for (int iter = 0; iter < 20; ++iter) {
    std::shuffle(visit.begin(), visit.end(), rng);
    std::size_t changed = 0;
    for (auto v : visit) {
      count.clear();
      for (auto k = adj.offsets[v]; k < adj.offsets[v + 1]; ++k)
        ++count[label[static_cast<std::size_t>(adj.neighbours[static_cast<std::size_t>(k)])]];
      auto const current = label[static_cast<std::size_t>(v)];
      // Most frequent allowed label; ties keep the current label, else take the smallest (deterministic).
      std::int64_t best_count = count.count(current) ? count[current] : 0, best = current;
      for (auto const &[l, c] : count) {
        // The size cap keeps one label from swallowing a whole connected graph.
        if (l == current || size[static_cast<std::size_t>(l)] >= max_size)
          continue;
        if (c > best_count || (c == best_count && best != current && l < best)) {
          best = l;
          best_count = c;
        }
      }
      if (best != current) {
        --size[static_cast<std::size_t>(current)];
        ++size[static_cast<std::size_t>(best)];
        label[static_cast<std::size_t>(v)] = best;
        ++changed;
      }
    }
    if (changed * 1000 < n)
      break;
  }
  return label;
}

template <class Index> double intra_fraction(Graph<Index> const &g, Partition const &p) {
  if (g.nnz() == 0)
    return 0;
  std::vector<std::int64_t> part_of(static_cast<std::size_t>(g.num_rows()));
  for (std::size_t q = 0; q + 1 < p.part_offsets.size(); ++q)
    for (auto k = p.part_offsets[q]; k < p.part_offsets[q + 1]; ++k)
      part_of[static_cast<std::size_t>(p.permutation.old_of_new[static_cast<std::size_t>(k)])] =
          static_cast<std::int64_t>(q);
  std::int64_t intra = 0;
  for (Index i = 0; i < g.num_rows(); ++i)
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
      intra += part_of[static_cast<std::size_t>(i)] == part_of[static_cast<std::size_t>(g.entries()(k))];
  return static_cast<double>(intra) / static_cast<double>(g.nnz());
}

} // namespace

template <class Index>
Partition partition(Graph<Index> const &g, std::int64_t part_size, PartitionMethod method, std::int64_t max_part_size,
                    std::uint64_t seed) {
  auto const t0 = std::chrono::steady_clock::now();
  TESSEL_REQUIRE(g.num_rows() == g.num_cols(), "partition: graph '", g.name(), "' is ", g.num_rows(), " x ",
                 g.num_cols(), ", not square");
  TESSEL_REQUIRE(part_size >= 1, "partition: part size must be positive, got ", part_size);
  if (max_part_size <= 0)
    max_part_size = 2 * part_size;
  TESSEL_REQUIRE(max_part_size >= part_size, "partition: max part size ", max_part_size, " < part size ", part_size);
  // Label propagation by default: on the graphs of gnn/README.md it puts as many entries inside parts as METIS
  // (and more on planted communities) in a fifth to a tenth of the time, which counts against training.
  if (method == PartitionMethod::automatic)
    method = PartitionMethod::label_propagation;
  auto const n = static_cast<std::int64_t>(g.num_rows());
  std::vector<std::int64_t> identity(static_cast<std::size_t>(n));
  std::iota(identity.begin(), identity.end(), std::int64_t{0});
  Partition p;
  switch (method) {
  case PartitionMethod::none:
  case PartitionMethod::rcm: {
    std::vector<std::int64_t> order =
        method == PartitionMethod::rcm ? bfs_order(undirected(g), /*reverse_cuthill_mckee=*/true) : identity;
    p.permutation = Permutation::from_order(std::move(order));
    for (std::int64_t b = 0; b < n; b += part_size)
      p.part_offsets.push_back(b);
    p.part_offsets.push_back(n);
    break;
  }
  case PartitionMethod::label_propagation: {
    auto const adj = undirected(g);
    auto const label = label_propagation(adj, seed, max_part_size);
    // Walk the vertices in BFS order so that consecutive communities are neighbours.
    p = parts_from_labels(label, bfs_order(adj, false), part_size, max_part_size);
    break;
  }
  case PartitionMethod::metis: {
#ifdef TESSEL_GNN_HAVE_METIS
    idx_t const nparts = static_cast<idx_t>(std::max<std::int64_t>(1, (n + part_size - 1) / part_size));
    std::vector<std::int64_t> label(static_cast<std::size_t>(n), 0);
    if (nparts > 1) {
      auto const adj = undirected(g);
      TESSEL_REQUIRE(n < std::numeric_limits<idx_t>::max() &&
                         adj.neighbours.size() < static_cast<std::size_t>(std::numeric_limits<idx_t>::max()),
                     "partition: graph '", g.name(), "' is too large for METIS' ", sizeof(idx_t) * 8, "-bit indices");
      std::vector<idx_t> xadj(adj.offsets.begin(), adj.offsets.end());
      std::vector<idx_t> adjncy(adj.neighbours.begin(), adj.neighbours.end());
      std::vector<idx_t> part(static_cast<std::size_t>(n));
      idx_t nvtxs = static_cast<idx_t>(n), ncon = 1, nparts_io = nparts, objval = 0;
      idx_t options[METIS_NOPTIONS];
      METIS_SetDefaultOptions(options);
      options[METIS_OPTION_SEED] = static_cast<idx_t>(seed % 1000003);
      options[METIS_OPTION_NUMBERING] = 0;
      int const rc = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), nullptr, nullptr, nullptr,
                                         &nparts_io, nullptr, nullptr, options, &objval, part.data());
      TESSEL_REQUIRE(rc == METIS_OK, "partition: METIS_PartGraphKway failed on graph '", g.name(), "' with code ", rc);
      label.assign(part.begin(), part.end());
    }
    p = parts_from_labels(label, identity, part_size, max_part_size);
    break;
#else
    TESSEL_THROW("partition: this Tessel was built without METIS (Tessel_ENABLE_METIS=OFF or libmetis not found); "
                 "use 'lp' or 'rcm'");
#endif
  }
  case PartitionMethod::automatic:
    break;
  }
  p.method = method;
  p.intra_fraction = intra_fraction(g, p);
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

template <class Index> Graph<Index> permute(Graph<Index> const &g, Permutation const &perm) {
  TESSEL_REQUIRE(g.num_rows() == g.num_cols() && perm.size() == static_cast<std::int64_t>(g.num_rows()),
                 "permute: graph '", g.name(), "' is ", g.num_rows(), " x ", g.num_cols(), ", permutation has size ",
                 perm.size());
  auto const n = static_cast<std::size_t>(g.num_rows());
  Impl::HostCsr<Index> csr;
  csr.row_map.assign(n + 1, 0);
  csr.entries.resize(static_cast<std::size_t>(g.nnz()));
  csr.values.resize(static_cast<std::size_t>(g.nnz()));
  for (std::size_t k = 0; k < n; ++k) {
    auto const old = static_cast<std::size_t>(perm.old_of_new[k]);
    csr.row_map[k + 1] = csr.row_map[k] + (g.row_map()(old + 1) - g.row_map()(old));
  }
  std::vector<std::pair<Index, float>> row;
  for (std::size_t k = 0; k < n; ++k) {
    auto const old = static_cast<std::size_t>(perm.old_of_new[k]);
    row.clear();
    for (offset_type e = g.row_map()(old); e < g.row_map()(old + 1); ++e)
      row.emplace_back(static_cast<Index>(perm.new_of_old[static_cast<std::size_t>(g.entries()(e))]), g.values()(e));
    std::stable_sort(row.begin(), row.end(), [](auto const &a, auto const &b) { return a.first < b.first; });
    for (std::size_t e = 0; e < row.size(); ++e) {
      csr.entries[static_cast<std::size_t>(csr.row_map[k]) + e] = row[e].first;
      csr.values[static_cast<std::size_t>(csr.row_map[k]) + e] = row[e].second;
    }
  }
  return Impl::to_graph(g.name(), g.num_rows(), g.num_cols(), std::move(csr));
}

namespace {
template <class ExecSpace, class MemorySpace>
void gather_rows(ExecSpace const &space, std::vector<std::int64_t> const &index, bool scatter,
                 ConstMatrix<MemorySpace> const &x, Matrix<MemorySpace> const &out, char const *label) {
  TESSEL_REQUIRE(x.extent(0) == index.size() && out.extent(0) == index.size() && x.extent(1) == out.extent(1), label,
                 ": input ", x.extent(0), " x ", x.extent(1), ", output ", out.extent(0), " x ", out.extent(1),
                 ", permutation of ", index.size());
  Kokkos::View<std::int64_t *, MemorySpace> idx(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "Tessel::gnn::permutation"), index.size());
  auto host = Kokkos::create_mirror_view(idx);
  std::copy(index.begin(), index.end(), host.data());
  Kokkos::deep_copy(space, idx, host);
  auto const f = static_cast<std::int64_t>(x.extent(1));
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(index.size())),
      KOKKOS_LAMBDA(std::int64_t k) {
        auto const src = scatter ? k : idx(k);
        auto const dst = scatter ? idx(k) : k;
        for (std::int64_t c = 0; c < f; ++c)
          out(dst, c) = x(src, c);
      });
}
} // namespace

template <class ExecSpace, class MemorySpace>
void permute_rows(ExecSpace const &space, Permutation const &perm, ConstMatrix<MemorySpace> const &x,
                  Matrix<MemorySpace> const &out) {
  gather_rows<ExecSpace, MemorySpace>(space, perm.old_of_new, false, x, out, "Tessel::gnn::permute_rows");
}

template <class ExecSpace, class MemorySpace>
void unpermute_rows(ExecSpace const &space, Permutation const &perm, ConstMatrix<MemorySpace> const &x,
                    Matrix<MemorySpace> const &out) {
  gather_rows<ExecSpace, MemorySpace>(space, perm.old_of_new, true, x, out, "Tessel::gnn::unpermute_rows");
}

template Partition partition(Graph<std::int32_t> const &, std::int64_t, PartitionMethod, std::int64_t, std::uint64_t);
template Partition partition(Graph<std::int64_t> const &, std::int64_t, PartitionMethod, std::int64_t, std::uint64_t);
template Graph<std::int32_t> permute(Graph<std::int32_t> const &, Permutation const &);
template Graph<std::int64_t> permute(Graph<std::int64_t> const &, Permutation const &);
using HostExec = Kokkos::DefaultHostExecutionSpace;
template void permute_rows(HostExec const &, Permutation const &, ConstMatrix<Kokkos::HostSpace> const &,
                           Matrix<Kokkos::HostSpace> const &);
template void unpermute_rows(HostExec const &, Permutation const &, ConstMatrix<Kokkos::HostSpace> const &,
                             Matrix<Kokkos::HostSpace> const &);

} // namespace tessel::gnn

#include <tessel/core/Execution.hpp>
#include <tessel/gnn/Reorder.hpp>

#include "impl/HostCsr.hpp"
#include "impl/KwayParts.hpp"

#ifdef TESSEL_GNN_HAVE_METIS
#include <metis.h>
#endif

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <numeric>
#include <random>

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

/// Undirected neighbour lists without self-loops or duplicates (the pattern of A + A^T), vertex ids of the
/// graph's index type (half the memory traffic of 64-bit ids for int32 graphs).
template <class V> struct Adjacency {
  std::vector<std::int64_t> offsets;
  std::vector<V> neighbours;
  std::int64_t degree(std::int64_t v) const { return offsets[v + 1] - offsets[v]; }
};

template <class Index> Adjacency<Index> undirected(Graph<Index> const &g) {
  // Row i of A + A^T is the union of row i of A and row i of A^T. A^T by a counting pass comes out with sorted rows;
  // rows of A are usually sorted already (else sorted here), so a linear merge per row de-duplicates: no sort of
  // all 2 nnz (row, column) pairs, which dominated the preprocessing of large graphs.
  auto const n = static_cast<std::size_t>(g.num_rows());
  auto const *rm = g.row_map().data();
  auto const *ent = g.entries().data();
  std::vector<std::int64_t> tstart(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (offset_type k = rm[i]; k < rm[i + 1]; ++k)
      if (static_cast<std::size_t>(ent[k]) != i)
        ++tstart[static_cast<std::size_t>(ent[k]) + 1];
  for (std::size_t i = 0; i < n; ++i)
    tstart[i + 1] += tstart[i];
  std::vector<Index> transposed(static_cast<std::size_t>(tstart[n]));
  {
    std::vector<std::int64_t> next(tstart.begin(), tstart.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      for (offset_type k = rm[i]; k < rm[i + 1]; ++k) {
        auto const j = static_cast<std::size_t>(ent[k]);
        if (j != i)
          transposed[static_cast<std::size_t>(next[j]++)] = static_cast<Index>(i);
      }
  }
  Adjacency<Index> adj;
  adj.offsets.assign(n + 1, 0);
  adj.neighbours.resize(2 * transposed.size());
  std::vector<Index> row;
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    row.clear();
    for (offset_type k = rm[i]; k < rm[i + 1]; ++k)
      if (static_cast<std::size_t>(ent[k]) != i)
        row.push_back(ent[k]);
    if (!std::is_sorted(row.begin(), row.end()))
      std::sort(row.begin(), row.end());
    auto const *t = transposed.data() + tstart[i];
    auto const *te = transposed.data() + tstart[i + 1];
    auto const *a = row.data(), *ae = row.data() + row.size();
    Index *dst = adj.neighbours.data();
    while (a != ae || t != te) {
      Index const v = (t == te || (a != ae && *a < *t)) ? *a++ : *t++;
      if (out == static_cast<std::size_t>(adj.offsets[i]) || dst[out - 1] != v)
        dst[out++] = v;
    }
    adj.offsets[i + 1] = static_cast<std::int64_t>(out);
  }
  adj.neighbours.resize(out);
  return adj;
}

/// Groups vertices by label (labels kept in first-appearance order of \p order) and cuts groups into parts.
Partition parts_from_labels(std::vector<std::int64_t> const &label, std::vector<std::int64_t> const &order,
                            std::int64_t part_size, std::int64_t max_part_size) {
  std::size_t const n = label.size();
  // Labels are vertex ids (< n): number them by first appearance in order and bucket the members (counting sort).
  std::vector<std::int64_t> rank_of(n, -1), group_start(1, 0);
  for (auto v : order) {
    auto &r = rank_of[static_cast<std::size_t>(label[static_cast<std::size_t>(v)])];
    if (r < 0) {
      r = static_cast<std::int64_t>(group_start.size()) - 1;
      group_start.push_back(0);
    }
    ++group_start[static_cast<std::size_t>(r) + 1];
  }
  for (std::size_t r = 0; r + 1 < group_start.size(); ++r)
    group_start[r + 1] += group_start[r];
  std::vector<std::int64_t> members(n);
  {
    std::vector<std::int64_t> next(group_start.begin(), group_start.end() - 1);
    for (auto v : order)
      members[static_cast<std::size_t>(
          next[static_cast<std::size_t>(rank_of[static_cast<std::size_t>(label[static_cast<std::size_t>(v)])])]++)] = v;
  }
  Partition p;
  std::vector<std::int64_t> old_of_new;
  old_of_new.reserve(n);
  p.part_offsets.push_back(0);
  std::int64_t open = 0; // vertices in the part being filled with small groups
  for (std::size_t r = 0; r + 1 < group_start.size(); ++r) {
    auto const first = members.begin() + group_start[r];
    auto const size = group_start[r + 1] - group_start[r];
    if (size >= part_size) {
      // A large community: close the open part, then cut the community into nearly equal parts.
      if (open > 0) {
        p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
        open = 0;
      }
      std::int64_t const pieces = (size + max_part_size - 1) / max_part_size;
      for (std::int64_t q = 0; q < pieces; ++q) {
        std::int64_t const b = size * q / pieces, e = size * (q + 1) / pieces;
        old_of_new.insert(old_of_new.end(), first + b, first + e);
        p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
      }
    } else {
      if (open + size > part_size && open > 0) {
        p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
        open = 0;
      }
      old_of_new.insert(old_of_new.end(), first, first + size);
      open += size;
    }
  }
  if (open > 0)
    p.part_offsets.push_back(static_cast<std::int64_t>(old_of_new.size()));
  p.permutation = Permutation::from_order(std::move(old_of_new));
  return p;
}

template <class V> std::vector<std::int64_t> bfs_order(Adjacency<V> const &adj, bool reverse_cuthill_mckee) {
  auto const n = static_cast<std::int64_t>(adj.offsets.size() - 1);
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(n));
  std::vector<char> seen(static_cast<std::size_t>(n), 0);
  // By degree, ties by id: the order of a stable sort by degree of ids in increasing order (neighbour lists are
  // sorted), without stable_sort's buffer allocation per vertex.
  auto const by_degree_then_id = [&](std::int64_t a, std::int64_t b) {
    auto const da = adj.degree(a), db = adj.degree(b);
    return da < db || (da == db && a < b);
  };
  std::vector<std::int64_t> by_degree(static_cast<std::size_t>(n));
  std::iota(by_degree.begin(), by_degree.end(), std::int64_t{0});
  std::sort(by_degree.begin(), by_degree.end(), by_degree_then_id);
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
        auto const u = static_cast<std::int64_t>(adj.neighbours[static_cast<std::size_t>(k)]);
        if (!seen[static_cast<std::size_t>(u)]) {
          seen[static_cast<std::size_t>(u)] = 1;
          next.push_back(u);
        }
      }
      std::sort(next.begin(), next.end(), by_degree_then_id);
      order.insert(order.end(), next.begin(), next.end());
    }
  }
  if (reverse_cuthill_mckee)
    std::reverse(order.begin(), order.end());
  return order;
}

template <class V>
std::vector<std::int64_t> label_propagation(Adjacency<V> const &adj, std::uint64_t seed, std::int64_t max_size) {
  auto const n = adj.offsets.size() - 1;
  // Labels are vertex ids: the graph's index type keeps the randomly accessed arrays small.
  std::vector<V> label(n), size(n, 1);
  std::iota(label.begin(), label.end(), V{0});
  std::vector<V> visit(n);
  std::iota(visit.begin(), visit.end(), V{0});
  std::mt19937_64 rng(seed);
  // Neighbour label counts in a dense array with the list of labels touched, reset after each vertex: a hash map
  // here cost more than the rest of the partitioning.
  std::vector<V> count(n, 0), touched;
  auto const *offsets = adj.offsets.data();
  auto const *neighbours = adj.neighbours.data();
  for (int iter = 0; iter < 20; ++iter) {
    std::shuffle(visit.begin(), visit.end(), rng);
    std::size_t changed = 0;
    for (auto v : visit) {
      touched.clear();
      for (auto k = offsets[v]; k < offsets[v + 1]; ++k) {
        auto const l = label[static_cast<std::size_t>(neighbours[k])];
        if (count[static_cast<std::size_t>(l)]++ == 0)
          touched.push_back(l);
      }
      auto const current = label[static_cast<std::size_t>(v)];
      // Most frequent allowed label; ties keep the current label, else take the smallest (deterministic, and
      // independent of the order in which labels are visited).
      V best_count = count[static_cast<std::size_t>(current)], best = current;
      for (auto l : touched) {
        auto const c = count[static_cast<std::size_t>(l)];
        // The size cap keeps one label from swallowing a whole connected graph.
        if (l == current || size[static_cast<std::size_t>(l)] >= max_size)
          continue;
        if (c > best_count || (c == best_count && best != current && l < best)) {
          best = l;
          best_count = c;
        }
      }
      for (auto l : touched)
        count[static_cast<std::size_t>(l)] = 0;
      if (best != current) {
        --size[static_cast<std::size_t>(current)];
        ++size[static_cast<std::size_t>(best)];
        label[static_cast<std::size_t>(v)] = best;
        ++changed;
      }
    }
    // Stop when under 1% of the vertices still move: later sweeps change the parts' share of entries by well
    // under a point on the graphs of gnn/README.md and cost as much as the first ones.
    if (changed * 100 < n)
      break;
  }
  return std::vector<std::int64_t>(label.begin(), label.end());
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
    std::int64_t const nparts = std::max<std::int64_t>(1, (n + part_size - 1) / part_size);
    p = parts_from_labels(Impl::kway_parts(g, nparts, {}, seed), identity, part_size, max_part_size);
    break;
  }
  case PartitionMethod::automatic:
    break;
  }
  p.method = method;
  p.intra_fraction = intra_fraction(g, p);
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

namespace Impl {

template <class Index>
std::vector<std::int64_t> kway_parts(Graph<Index> const &g, std::int64_t nparts,
                                     std::vector<std::int64_t> const &vertex_weights, std::uint64_t seed) {
  auto const n = static_cast<std::int64_t>(g.num_rows());
  std::vector<std::int64_t> label(static_cast<std::size_t>(n), 0);
  TESSEL_REQUIRE(vertex_weights.empty() || static_cast<std::int64_t>(vertex_weights.size()) == n, "graph '", g.name(),
                 "': ", vertex_weights.size(), " vertex weights for ", n, " vertices");
#ifdef TESSEL_GNN_HAVE_METIS
  if (nparts > 1 && n > 0) {
    auto const adj = undirected(g);
    TESSEL_REQUIRE(n < std::numeric_limits<idx_t>::max() &&
                       adj.neighbours.size() < static_cast<std::size_t>(std::numeric_limits<idx_t>::max()),
                   "partition: graph '", g.name(), "' is too large for METIS' ", sizeof(idx_t) * 8, "-bit indices");
    std::vector<idx_t> xadj(adj.offsets.begin(), adj.offsets.end());
    std::vector<idx_t> adjncy(adj.neighbours.begin(), adj.neighbours.end());
    std::vector<idx_t> vwgt(vertex_weights.begin(), vertex_weights.end());
    std::vector<idx_t> part(static_cast<std::size_t>(n));
    idx_t nvtxs = static_cast<idx_t>(n), ncon = 1, nparts_io = static_cast<idx_t>(nparts), objval = 0;
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_SEED] = static_cast<idx_t>(seed % 1000003);
    options[METIS_OPTION_NUMBERING] = 0;
    int const rc = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.empty() ? nullptr : vwgt.data(),
                                       nullptr, nullptr, &nparts_io, nullptr, nullptr, options, &objval, part.data());
    TESSEL_REQUIRE(rc == METIS_OK, "partition: METIS_PartGraphKway failed on graph '", g.name(), "' with code ", rc);
    label.assign(part.begin(), part.end());
  }
  return label;
#else
  (void)seed;
  if (nparts > 1 && n > 0)
    TESSEL_THROW("partition: this Tessel was built without METIS (Tessel_ENABLE_METIS=OFF or libmetis not found); "
                 "use 'lp' or 'rcm'");
  return label;
#endif
}

template std::vector<std::int64_t> kway_parts(Graph<std::int32_t> const &, std::int64_t,
                                              std::vector<std::int64_t> const &, std::uint64_t);
template std::vector<std::int64_t> kway_parts(Graph<std::int64_t> const &, std::int64_t,
                                              std::vector<std::int64_t> const &, std::uint64_t);

} // namespace Impl

template <class Index> Graph<Index> permute(Graph<Index> const &g, Permutation const &perm) {
  TESSEL_REQUIRE(g.num_rows() == g.num_cols() && perm.size() == static_cast<std::int64_t>(g.num_rows()),
                 "permute: graph '", g.name(), "' is ", g.num_rows(), " x ", g.num_cols(), ", permutation has size ",
                 perm.size());
  auto const n = static_cast<std::size_t>(g.num_rows());
  auto const nnz = static_cast<std::size_t>(g.nnz());
  using G = Graph<Index>;
  typename G::row_map_type row_map(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Graph::row_map"),
                                   n + 1);
  typename G::entries_type entries(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Graph::entries"), nnz);
  typename G::values_type values(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Graph::values"), nnz);
  auto const *rm = g.row_map().data();
  auto const *ent = g.entries().data();
  auto const *val = g.values().data();
  row_map(0) = 0;
  for (std::size_t k = 0; k < n; ++k) {
    auto const old = static_cast<std::size_t>(perm.old_of_new[k]);
    row_map(k + 1) = row_map(k) + (rm[old + 1] - rm[old]);
  }
  // Rows sorted by new column, entries of equal column in their original order, by two counting passes (a stable
  // radix sort on (row, column)): bucket the entries by new column, visiting new rows in order, then deal each
  // bucket out to its rows. Linear, where a sort per row dominated the reordering of large graphs.
  std::vector<offset_type> bucket(n + 1, 0);
  for (std::size_t e = 0; e < nnz; ++e)
    ++bucket[static_cast<std::size_t>(perm.new_of_old[static_cast<std::size_t>(ent[e])]) + 1];
  for (std::size_t c = 0; c < n; ++c)
    bucket[c + 1] += bucket[c];
  std::vector<Index> by_column_row(nnz);
  std::vector<float> by_column_value(nnz);
  {
    std::vector<offset_type> next(bucket.begin(), bucket.end() - 1);
    for (std::size_t k = 0; k < n; ++k) {
      auto const old = static_cast<std::size_t>(perm.old_of_new[k]);
      for (offset_type q = rm[old]; q < rm[old + 1]; ++q) {
        auto const at = static_cast<std::size_t>(
            next[static_cast<std::size_t>(perm.new_of_old[static_cast<std::size_t>(ent[q])])]++);
        by_column_row[at] = static_cast<Index>(k);
        by_column_value[at] = val[q];
      }
    }
  }
  std::vector<offset_type> next(row_map.data(), row_map.data() + n);
  for (std::size_t c = 0; c < n; ++c)
    for (offset_type e = bucket[c]; e < bucket[c + 1]; ++e) {
      auto const at = next[static_cast<std::size_t>(by_column_row[static_cast<std::size_t>(e)])]++;
      entries(at) = static_cast<Index>(c);
      values(at) = by_column_value[static_cast<std::size_t>(e)];
    }
  return G(g.name(), g.num_rows(), g.num_cols(), row_map, entries, values);
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

namespace Impl {

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

} // namespace Impl

template Partition partition(Graph<std::int32_t> const &, std::int64_t, PartitionMethod, std::int64_t, std::uint64_t);
template Partition partition(Graph<std::int64_t> const &, std::int64_t, PartitionMethod, std::int64_t, std::uint64_t);
template Graph<std::int32_t> permute(Graph<std::int32_t> const &, Permutation const &);
template Graph<std::int64_t> permute(Graph<std::int64_t> const &, Permutation const &);
#define TESSEL_GNN_INSTANTIATE_PERMUTE(SPACE)                                                                          \
  template void Impl::permute_rows(SPACE const &, Permutation const &, ConstMatrix<Kokkos::HostSpace> const &,         \
                                   Matrix<Kokkos::HostSpace> const &);                                                 \
  template void Impl::unpermute_rows(SPACE const &, Permutation const &, ConstMatrix<Kokkos::HostSpace> const &,       \
                                     Matrix<Kokkos::HostSpace> const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_PERMUTE)

} // namespace tessel::gnn

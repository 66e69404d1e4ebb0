#include <tessel/gnn/Graph.hpp>

#include "impl/HostCsr.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tessel::gnn {

namespace Impl {

template <class Index> Graph<Index> to_graph(std::string const &name, Index rows, Index cols, HostCsr<Index> &&csr) {
  using G = Graph<Index>;
  typename G::row_map_type row_map(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Graph::row_map"),
                                   csr.row_map.size());
  typename G::entries_type entries(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Graph::entries"),
                                   csr.entries.size());
  typename G::values_type values(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Graph::values"),
                                 csr.entries.size());
  std::copy(csr.row_map.begin(), csr.row_map.end(), row_map.data());
  std::copy(csr.entries.begin(), csr.entries.end(), entries.data());
  if (csr.values.empty())
    std::fill(values.data(), values.data() + values.size(), 1.0f);
  else
    std::copy(csr.values.begin(), csr.values.end(), values.data());
  return G(name, rows, cols, row_map, entries, values);
}

template <class Index> HostCsr<Index> to_host_csr(Graph<Index> const &g) {
  HostCsr<Index> csr;
  csr.row_map.assign(g.row_map().data(), g.row_map().data() + g.row_map().size());
  csr.entries.assign(g.entries().data(), g.entries().data() + g.entries().size());
  csr.values.assign(g.values().data(), g.values().data() + g.values().size());
  return csr;
}

/// Sorts the columns of every row (stable, values follow) and optionally sums duplicate columns.
template <class Index> void sort_rows(HostCsr<Index> &csr, bool merge) {
  std::size_t const rows = csr.row_map.size() - 1;
  std::vector<std::pair<Index, float>> row;
  offset_type out = 0;
  std::vector<offset_type> new_map(csr.row_map.size(), 0);
  for (std::size_t i = 0; i < rows; ++i) {
    row.clear();
    for (offset_type k = csr.row_map[i]; k < csr.row_map[i + 1]; ++k)
      row.emplace_back(csr.entries[k], csr.values[k]);
    std::stable_sort(row.begin(), row.end(), [](auto const &a, auto const &b) { return a.first < b.first; });
    for (std::size_t k = 0; k < row.size(); ++k) {
      if (merge && k > 0 && row[k].first == row[k - 1].first) {
        csr.values[out - 1] += row[k].second;
        continue;
      }
      csr.entries[out] = row[k].first;
      csr.values[out] = row[k].second;
      ++out;
    }
    new_map[i + 1] = out;
  }
  csr.row_map = std::move(new_map);
  csr.entries.resize(out);
  csr.values.resize(out);
}

template <class Index> HostCsr<Index> transpose_csr(HostCsr<Index> const &a, std::size_t cols) {
  HostCsr<Index> t;
  std::size_t const rows = a.row_map.size() - 1;
  t.row_map.assign(cols + 1, 0);
  for (Index c : a.entries)
    ++t.row_map[static_cast<std::size_t>(c) + 1];
  for (std::size_t c = 0; c < cols; ++c)
    t.row_map[c + 1] += t.row_map[c];
  t.entries.resize(a.entries.size());
  t.values.resize(a.entries.size());
  std::vector<offset_type> next(t.row_map.begin(), t.row_map.end() - 1);
  // Rows in increasing order, so each transposed row comes out sorted by column.
  for (std::size_t i = 0; i < rows; ++i)
    for (offset_type k = a.row_map[i]; k < a.row_map[i + 1]; ++k) {
      auto const c = static_cast<std::size_t>(a.entries[k]);
      t.entries[next[c]] = static_cast<Index>(i);
      t.values[next[c]] = a.values[k];
      ++next[c];
    }
  return t;
}

template Graph<std::int32_t> to_graph(std::string const &, std::int32_t, std::int32_t, HostCsr<std::int32_t> &&);
template Graph<std::int64_t> to_graph(std::string const &, std::int64_t, std::int64_t, HostCsr<std::int64_t> &&);
template HostCsr<std::int32_t> to_host_csr(Graph<std::int32_t> const &);
template HostCsr<std::int64_t> to_host_csr(Graph<std::int64_t> const &);
template void sort_rows(HostCsr<std::int32_t> &, bool);
template void sort_rows(HostCsr<std::int64_t> &, bool);
template HostCsr<std::int32_t> transpose_csr(HostCsr<std::int32_t> const &, std::size_t);
template HostCsr<std::int64_t> transpose_csr(HostCsr<std::int64_t> const &, std::size_t);

} // namespace Impl

template <class Index>
Graph<Index> make_graph(std::string const &name, Index num_rows, Index num_cols,
                        std::vector<offset_type> const &row_map, std::vector<Index> const &entries,
                        std::vector<float> const &values) {
  TESSEL_REQUIRE(num_rows >= 0 && num_cols >= 0, "graph '", name, "': negative size ", num_rows, " x ", num_cols);
  TESSEL_REQUIRE(row_map.size() == static_cast<std::size_t>(num_rows) + 1, "graph '", name, "': row_map has ",
                 row_map.size(), " entries, expected num_rows + 1 = ", static_cast<std::size_t>(num_rows) + 1);
  TESSEL_REQUIRE(values.empty() || values.size() == entries.size(), "graph '", name, "': ", values.size(),
                 " values for ", entries.size(), " entries");
  Impl::HostCsr<Index> csr{row_map, entries, values};
  auto g = Impl::to_graph(name, num_rows, num_cols, std::move(csr));
  validate(g);
  return g;
}

template <class Index>
Graph<Index> graph_from_edges(std::string const &name, Index num_nodes,
                              std::vector<std::pair<Index, Index>> const &edges, EdgeListOptions const &options) {
  bool const symmetrize = options.symmetrize, merge_duplicates = options.merge_duplicates,
             drop_self_loops = options.drop_self_loops;
  TESSEL_REQUIRE(num_nodes >= 0, "graph '", name, "': negative node count ", num_nodes);
  for (std::size_t e = 0; e < edges.size(); ++e) {
    auto const [s, d] = edges[e];
    TESSEL_REQUIRE(s >= 0 && s < num_nodes && d >= 0 && d < num_nodes, "graph '", name, "': edge ", e, " (", s, " -> ",
                   d, ") is out of range [0, ", num_nodes, ")");
  }
  std::size_t const n = static_cast<std::size_t>(num_nodes);
  Impl::HostCsr<Index> csr;
  csr.row_map.assign(n + 1, 0);
  auto keep = [&](Index s, Index d) { return !(drop_self_loops && s == d); };
  for (auto const &[s, d] : edges) {
    if (!keep(s, d))
      continue;
    ++csr.row_map[static_cast<std::size_t>(d) + 1];
    if (symmetrize && s != d)
      ++csr.row_map[static_cast<std::size_t>(s) + 1];
  }
  for (std::size_t i = 0; i < n; ++i)
    csr.row_map[i + 1] += csr.row_map[i];
  csr.entries.resize(static_cast<std::size_t>(csr.row_map[n]));
  csr.values.assign(csr.entries.size(), 1.0f);
  std::vector<offset_type> next(csr.row_map.begin(), csr.row_map.end() - 1);
  for (auto const &[s, d] : edges) {
    if (!keep(s, d))
      continue;
    csr.entries[next[d]++] = s;
    if (symmetrize && s != d)
      csr.entries[next[s]++] = d;
  }
  Impl::sort_rows(csr, merge_duplicates);
  if (merge_duplicates)
    std::fill(csr.values.begin(), csr.values.end(), 1.0f);
  return Impl::to_graph(name, num_nodes, num_nodes, std::move(csr));
}

template <class Index> void validate(Graph<Index> const &g) {
  std::string const &name = g.name();
  TESSEL_REQUIRE(g.num_rows() >= 0 && g.num_cols() >= 0, "graph '", name, "': negative size ", g.num_rows(), " x ",
                 g.num_cols());
  auto const &row_map = g.row_map();
  TESSEL_REQUIRE(row_map.extent(0) == static_cast<std::size_t>(g.num_rows()) + 1, "graph '", name, "': indptr has ",
                 row_map.extent(0), " entries, expected num_nodes + 1 = ", static_cast<std::size_t>(g.num_rows()) + 1);
  TESSEL_REQUIRE(row_map(0) == 0, "graph '", name, "': indptr[0] = ", row_map(0), ", expected 0");
  for (std::size_t i = 0; i + 1 < row_map.extent(0); ++i)
    TESSEL_REQUIRE(row_map(i + 1) >= row_map(i), "graph '", name, "': indptr is not monotone at row ", i, ": indptr[",
                   i, "] = ", row_map(i), " > indptr[", i + 1, "] = ", row_map(i + 1));
  offset_type const nnz = row_map(row_map.extent(0) - 1);
  TESSEL_REQUIRE(static_cast<std::size_t>(nnz) == g.entries().extent(0), "graph '", name, "': indptr[last] = ", nnz,
                 " but indices has ", g.entries().extent(0), " entries");
  TESSEL_REQUIRE(g.values().extent(0) == g.entries().extent(0), "graph '", name, "': ", g.values().extent(0),
                 " values for ", g.entries().extent(0), " indices");
  auto const &entries = g.entries();
  for (std::size_t k = 0; k < entries.extent(0); ++k) {
    if (entries(k) < 0 || entries(k) >= g.num_cols()) {
      auto const row =
          std::upper_bound(row_map.data(), row_map.data() + row_map.extent(0), static_cast<offset_type>(k)) -
          row_map.data() - 1;
      TESSEL_THROW("graph '", name, "': indices[", k, "] = ", entries(k), " (row ", row, ") is out of range [0, ",
                   g.num_cols(), ")");
    }
  }
  std::size_t const bad = first_non_finite(g.values().data(), g.values().extent(0));
  TESSEL_REQUIRE(bad == g.values().extent(0), "graph '", name, "': values[", bad, "] = ", g.values()(bad),
                 " is not finite");
}

template <class Index> DegreeStats degree_stats(Graph<Index> const &g) {
  DegreeStats s;
  s.num_rows = g.num_rows();
  s.num_cols = g.num_cols();
  s.nnz = g.nnz();
  if (g.num_rows() == 0)
    return s;
  s.min_degree = std::numeric_limits<std::int64_t>::max();
  double sum = 0, sum2 = 0;
  std::vector<Index> cols;
  for (Index i = 0; i < g.num_rows(); ++i) {
    std::int64_t const d = g.row_map()(i + 1) - g.row_map()(i);
    s.min_degree = std::min(s.min_degree, d);
    s.max_degree = std::max(s.max_degree, d);
    sum += static_cast<double>(d);
    sum2 += static_cast<double>(d) * static_cast<double>(d);
    s.empty_rows += d == 0;
    cols.assign(g.entries().data() + g.row_map()(i), g.entries().data() + g.row_map()(i + 1));
    std::sort(cols.begin(), cols.end());
    for (std::size_t k = 0; k < cols.size(); ++k) {
      s.self_loops += cols[k] == i;
      s.duplicates += k > 0 && cols[k] == cols[k - 1];
    }
  }
  s.mean_degree = sum / static_cast<double>(s.num_rows);
  s.stddev_degree = std::sqrt(std::max(0.0, sum2 / static_cast<double>(s.num_rows) - s.mean_degree * s.mean_degree));
  s.symmetric = is_symmetric(g);
  return s;
}

template <class Index> Graph<Index> add_self_loops(Graph<Index> const &g, float weight) {
  TESSEL_REQUIRE(g.num_rows() == g.num_cols(), "graph '", g.name(), "': self-loops need a square matrix, got ",
                 g.num_rows(), " x ", g.num_cols());
  auto const n = static_cast<std::size_t>(g.num_rows());
  Impl::HostCsr<Index> csr;
  csr.row_map.assign(n + 1, 0);
  csr.entries.reserve(static_cast<std::size_t>(g.nnz()) + n);
  csr.values.reserve(static_cast<std::size_t>(g.nnz()) + n);
  for (std::size_t i = 0; i < n; ++i) {
    for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k) {
      csr.entries.push_back(g.entries()(k));
      csr.values.push_back(g.values()(k));
    }
    csr.entries.push_back(static_cast<Index>(i));
    csr.values.push_back(weight);
    csr.row_map[i + 1] = static_cast<offset_type>(csr.entries.size());
  }
  Impl::sort_rows(csr, /*merge=*/true);
  return Impl::to_graph(g.name(), g.num_rows(), g.num_cols(), std::move(csr));
}

template <class Index> Graph<Index> gcn_normalize(Graph<Index> const &g) {
  auto a = add_self_loops(g, 1.0f);
  auto const n = static_cast<std::size_t>(a.num_rows());
  std::vector<double> dinv(n);
  for (std::size_t i = 0; i < n; ++i) {
    double d = 0;
    for (offset_type k = a.row_map()(i); k < a.row_map()(i + 1); ++k)
      d += a.values()(k);
    TESSEL_REQUIRE(d > 0, "graph '", g.name(), "': row ", i, " of A + I sums to ", d,
                   ", the GCN normalization needs positive degrees");
    dinv[i] = 1.0 / std::sqrt(d);
  }
  for (std::size_t i = 0; i < n; ++i)
    for (offset_type k = a.row_map()(i); k < a.row_map()(i + 1); ++k)
      a.values()(k) = static_cast<float>(dinv[i] * a.values()(k) * dinv[static_cast<std::size_t>(a.entries()(k))]);
  return a;
}

template <class Index> Graph<Index> transpose(Graph<Index> const &g) {
  auto t = Impl::transpose_csr(Impl::to_host_csr(g), static_cast<std::size_t>(g.num_cols()));
  return Impl::to_graph(g.name(), g.num_cols(), g.num_rows(), std::move(t));
}

template <class Index> bool is_symmetric(Graph<Index> const &g) {
  if (g.num_rows() != g.num_cols())
    return false;
  if (g.num_rows() == 0)
    return true;
  auto a = Impl::to_host_csr(g);
  Impl::sort_rows(a, /*merge=*/true);
  auto t = Impl::transpose_csr(a, static_cast<std::size_t>(g.num_cols()));
  return a.row_map == t.row_map && a.entries == t.entries && a.values == t.values;
}

template <class To, class From> Graph<To> convert_index(Graph<From> const &g) {
  TESSEL_REQUIRE(static_cast<std::int64_t>(g.num_rows()) <= std::numeric_limits<To>::max() &&
                     static_cast<std::int64_t>(g.num_cols()) <= std::numeric_limits<To>::max(),
                 "graph '", g.name(), "': ", g.num_rows(), " x ", g.num_cols(), " does not fit the index type");
  Impl::HostCsr<To> csr;
  auto from = Impl::to_host_csr(g);
  csr.row_map = std::move(from.row_map);
  csr.entries.assign(from.entries.begin(), from.entries.end());
  csr.values = std::move(from.values);
  return Impl::to_graph(g.name(), static_cast<To>(g.num_rows()), static_cast<To>(g.num_cols()), std::move(csr));
}

#define TESSEL_GNN_INSTANTIATE_GRAPH(I)                                                                                \
  template Graph<I> make_graph(std::string const &, I, I, std::vector<offset_type> const &, std::vector<I> const &,    \
                               std::vector<float> const &);                                                            \
  template Graph<I> graph_from_edges(std::string const &, I, std::vector<std::pair<I, I>> const &,                     \
                                     EdgeListOptions const &);                                                         \
  template void validate(Graph<I> const &);                                                                            \
  template DegreeStats degree_stats(Graph<I> const &);                                                                 \
  template Graph<I> gcn_normalize(Graph<I> const &);                                                                   \
  template Graph<I> add_self_loops(Graph<I> const &, float);                                                           \
  template Graph<I> transpose(Graph<I> const &);                                                                       \
  template bool is_symmetric(Graph<I> const &);

TESSEL_GNN_INSTANTIATE_GRAPH(std::int32_t)
TESSEL_GNN_INSTANTIATE_GRAPH(std::int64_t)
template Graph<std::int64_t> convert_index(Graph<std::int32_t> const &);
template Graph<std::int32_t> convert_index(Graph<std::int64_t> const &);
template Graph<std::int32_t> convert_index(Graph<std::int32_t> const &);
template Graph<std::int64_t> convert_index(Graph<std::int64_t> const &);

} // namespace tessel::gnn

#ifndef TESSEL_UNIT_TESTS_GNN_TEST_GRAPHS_HPP
#define TESSEL_UNIT_TESTS_GNN_TEST_GRAPHS_HPP

// Random graphs with the awkward cases of real adjacency (empty rows, self-loops, duplicate edges, isolated
// nodes, one dense block, a star) and a double-precision reference for Y = A X.
#include <tessel/gnn/Graph.hpp>

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tessel::gnn::test {

/// A square graph on n nodes: random sparse edges (directed), a dense block on nodes [b0, b0 + bs), a star
/// centred at node 1 (a hub row and column), self-loops and duplicates; the last n / 10 nodes are isolated.
template <class Index> Graph<Index> awkward_graph(Index n, std::uint64_t seed, double mean_degree = 3.0) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<Index, Index>> edges;
  Index const active = n - n / 10;
  if (active >= 2) {
    std::uniform_int_distribution<Index> node(0, active - 1);
    auto const m = static_cast<std::size_t>(mean_degree * static_cast<double>(active));
    for (std::size_t e = 0; e < m; ++e)
      edges.emplace_back(node(rng), node(rng)); // includes self-loops and duplicates by chance
    // Explicit duplicates and self-loops.
    for (Index k = 0; k < std::min<Index>(active, 5); ++k) {
      edges.emplace_back(k, static_cast<Index>((k + 1) % active));
      edges.emplace_back(k, static_cast<Index>((k + 1) % active));
      edges.emplace_back(k, k);
    }
    // A dense block (a clique with 90% of its pairs).
    Index const bs = std::min<Index>(active, 24), b0 = active / 3;
    std::uniform_real_distribution<double> u(0, 1);
    for (Index i = b0; i < std::min<Index>(active, b0 + bs); ++i)
      for (Index j = b0; j < std::min<Index>(active, b0 + bs); ++j)
        if (u(rng) < 0.9)
          edges.emplace_back(i, j);
    // A star: node 1 linked with a third of the nodes, both ways.
    for (Index j = 0; j < active; j += 3) {
      edges.emplace_back(1 % active, j);
      edges.emplace_back(j, 1 % active);
    }
  }
  std::shuffle(edges.begin(), edges.end(), rng);
  auto g =
      graph_from_edges<Index>("awkward", n, edges, EdgeListOptions{/*symmetrize=*/false, /*merge_duplicates=*/false});
  // Non-unit weights, so that a kernel that ignores values fails.
  std::uniform_real_distribution<float> w(0.25f, 2.0f);
  for (std::size_t k = 0; k < g.values().extent(0); ++k)
    g.values()(k) = w(rng);
  return g;
}

/// y = A x in double precision.
template <class Index>
std::vector<double> reference_spmm(Graph<Index> const &a, std::vector<float> const &x, std::size_t f) {
  std::vector<double> y(static_cast<std::size_t>(a.num_rows()) * f, 0.0);
  for (Index i = 0; i < a.num_rows(); ++i)
    for (offset_type k = a.row_map()(i); k < a.row_map()(i + 1); ++k)
      for (std::size_t c = 0; c < f; ++c)
        y[static_cast<std::size_t>(i) * f + c] +=
            static_cast<double>(a.values()(k)) * x[static_cast<std::size_t>(a.entries()(k)) * f + c];
  return y;
}

} // namespace tessel::gnn::test

#endif

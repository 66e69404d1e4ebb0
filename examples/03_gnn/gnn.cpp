// Example 3 (gnn): a graph the application has as an edge list, aggregated and learned on.
//   - an edge list -> a tessel::gnn::Graph (graph_from_edges);
//   - Y = A X with the adaptive handle on the application's own Kokkos::Views, moved into the handle's vertex order
//     and back, checked against a plain loop over the edge list;
//   - a 2-layer GCN trained from in-memory features and labels (make_dataset, make_split, train).
// Run: ./tessel_example_gnn
#include <tessel/core/Main.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Model.hpp>
#include <tessel/gnn/Reorder.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;

// The application's data: nodes in `classes` communities, many edges inside a community and few across, and
// features that hint at the community through noise (so that aggregating over neighbours helps).
struct Communities {
  std::int32_t nodes = 0;
  std::vector<std::pair<std::int32_t, std::int32_t>> edges; // (src, dst), each undirected edge once, no duplicate
  std::vector<std::int32_t> labels;
};

Communities make_communities(int classes, int per_class, std::uint64_t seed) {
  Communities c;
  c.nodes = classes * per_class;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> any(0, c.nodes - 1), member(0, per_class - 1);
  std::set<std::pair<std::int32_t, std::int32_t>> unique;
  auto add = [&](std::int32_t a, std::int32_t b) {
    if (a != b)
      unique.insert({std::min(a, b), std::max(a, b)});
  };
  for (std::int32_t v = 0; v < c.nodes; ++v) {
    int const community = v / per_class;
    for (int k = 0; k < 10; ++k) // 10 edges into the own community
      add(v, community * per_class + member(rng));
    add(v, any(rng)); // 1 edge anywhere
    c.labels.push_back(community);
  }
  c.edges.assign(unique.begin(), unique.end());
  return c;
}

int run(int /*argc*/, char ** /*argv*/) {
  int const classes = 4, per_class = 300, width = 16;
  Communities const app = make_communities(classes, per_class, /*seed=*/7);
  Space const space;
  int failures = 0;
  auto check = [&](bool ok, char const *what) {
    if (!ok) {
      std::fprintf(stderr, "check failed: %s\n", what);
      ++failures;
    }
  };

  // The edge list becomes a CSR graph. An edge (src, dst) means "dst aggregates from src" (entry (dst, src));
  // symmetrize adds (dst, src) too, which an undirected graph needs.
  // [snippet:gnn-graph]
  tessel::gnn::EdgeListOptions edge_options;
  edge_options.symmetrize = true; // undirected: every edge both ways
  tessel::gnn::Graph<std::int32_t> graph =
      tessel::gnn::graph_from_edges<std::int32_t>("communities", app.nodes, app.edges, edge_options);
  // [snippet:gnn-graph]
  std::printf("graph: %d nodes, %lld entries\n", app.nodes, static_cast<long long>(graph.nnz()));

  // Features as the application holds them: a plain Kokkos::View, one row per node.
  Kokkos::View<float **, Kokkos::LayoutRight, Kokkos::HostSpace> x("x", app.nodes, width);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int32_t v = 0; v < app.nodes; ++v)
    for (int f = 0; f < width; ++f)
      x(v, f) = noise(rng) + (f % classes == app.labels[static_cast<std::size_t>(v)] ? 1.0f : 0.0f);

  // Y = A X with the adaptive handle. It computes in its own vertex order (it reorders the graph into dense and
  // sparse blocks), so X goes into that order once and Y comes back; both moves are exact. The first applies of a
  // width time candidate kernels (every result is exact) and then keep the fastest per block class.
  // [snippet:gnn-adaptive]
  tessel::gnn::SpmmHandle<std::int32_t, Space> handle(space, graph, tessel::gnn::SpmmOptions{});
  auto const &order = handle.permutation();
  Kokkos::View<float **, Kokkos::LayoutRight, Kokkos::HostSpace> x_ordered("x_ordered", app.nodes, width),
      y_ordered("y_ordered", app.nodes, width), y("y", app.nodes, width);
  tessel::gnn::permute_rows(space, order, x, x_ordered);
  for (int apply = 0; apply < 4; ++apply) // the first ones tune; all give the same Y
    handle.apply(space, x_ordered, y_ordered);
  tessel::gnn::unpermute_rows(space, order, y_ordered, y);
  space.fence();
  // [snippet:gnn-adaptive]

  // The reference: a loop over the edge list (each edge in both directions, weight 1).
  std::vector<double> reference(static_cast<std::size_t>(app.nodes) * width, 0.0);
  for (auto const &[a, b] : app.edges)
    for (int f = 0; f < width; ++f) {
      reference[static_cast<std::size_t>(b) * width + f] += x(a, f);
      reference[static_cast<std::size_t>(a) * width + f] += x(b, f);
    }
  double worst = 0;
  for (std::int32_t v = 0; v < app.nodes; ++v)
    for (int f = 0; f < width; ++f) {
      double const want = reference[static_cast<std::size_t>(v) * width + f];
      worst = std::max(worst, std::abs(y(v, f) - want) / std::max(1.0, std::abs(want)));
    }
  std::printf("adaptive Y = A X (%s): largest relative difference from the edge loop %.2e\n",
              tessel::gnn::name_of(handle.algorithm()), worst);
  check(worst < 1e-5, "Y = A X equals the loop over the edge list");

  // A data set from the application's arrays: the graph, one feature row per node, a class per node. make_split
  // draws 20 training nodes per class, 200 validation and 400 test nodes.
  // [snippet:gnn-train]
  tessel::gnn::Dataset data = tessel::gnn::make_dataset("communities", graph, x, app.labels);
  tessel::gnn::make_split(data, /*per_class=*/20, /*val=*/200, /*test=*/400, /*seed=*/1);
  tessel::gnn::TrainOptions options; // GCN, 2 layers, 16 hidden, Adam, dropout 0.5 (Kipf & Welling)
  options.epochs = 200;
  tessel::gnn::TrainResult const result = tessel::gnn::train(space, data, options);
  // [snippet:gnn-train]
  double const first_loss = result.history.front().train_loss, last_loss = result.history.back().train_loss;
  std::printf("GCN: %d epochs, training loss %.3f -> %.3f, test accuracy %.3f (chance %.3f)\n", result.epochs_run,
              first_loss, last_loss, result.test_acc, 1.0 / classes);
  check(last_loss < first_loss, "training lowers the loss");
  check(result.test_acc > 0.8, "the GCN classifies the communities (test accuracy above 0.8)");

  if (failures == 0)
    std::printf("gnn example: all checks passed\n");
  return failures == 0 ? tessel::exit_success : tessel::exit_failure;
}

} // namespace

int main(int argc, char **argv) { return tessel::run_main("tessel_example_gnn", argc, argv, run); }

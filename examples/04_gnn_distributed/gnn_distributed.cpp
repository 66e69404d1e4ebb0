// Example 4 (gnn across ranks): Y = A X on a mesh already spread over MPI ranks, as a simulation code has it.
//   - the mesh: an nx x ny grid, node (i, j) connected to its 4 neighbours (a 5-point stencil);
//   - the application's partition: rank r owns the columns j in its block (DistPartitionMethod::given);
//   - each rank fills the features of its own nodes, DistSpmm exchanges the halo rows with the neighbouring ranks
//     while it computes, and each rank checks its rows of Y against the stencil.
// Run: mpiexec -n 3 ./tessel_example_gnn_distributed   (any number of ranks up to ny, or one process)
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/Graph.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;

constexpr std::int32_t nx = 40, ny = 30; // the mesh
constexpr int width = 3;                 // features per node: 1, i, j

std::int32_t node(std::int32_t i, std::int32_t j) { return i * ny + j; }

// The feature f of node (i, j): what a simulation would hold per cell.
float feature(std::int32_t i, std::int32_t j, int f) {
  return f == 0 ? 1.0f : f == 1 ? static_cast<float>(i) : static_cast<float>(j);
}

int run(int /*argc*/, char ** /*argv*/) {
  tessel::Communicator comm = tessel::Communicator::world();
  int const rank = comm.rank(), ranks = comm.size();
  Space const space;

  // The mesh's edges: node (i, j) aggregates from its neighbours. Every rank passes the same whole graph; each
  // keeps only its own rows (DistGraph::load reads only them from a file, for meshes too large for one rank).
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  for (std::int32_t i = 0; i < nx; ++i)
    for (std::int32_t j = 0; j < ny; ++j) {
      if (i + 1 < nx)
        edges.push_back({node(i, j), node(i + 1, j)});
      if (j + 1 < ny)
        edges.push_back({node(i, j), node(i, j + 1)});
    }
  tessel::gnn::EdgeListOptions edge_options;
  edge_options.symmetrize = true;
  auto const mesh = tessel::gnn::graph_from_edges<std::int32_t>("mesh", nx * ny, edges, edge_options);

  // The application's partition: column blocks of the mesh, as its domain decomposition made them.
  auto const first_column = [&](int r) { return static_cast<std::int32_t>(std::int64_t{ny} * r / ranks); };
  // [snippet:gnn-dist-partition]
  tessel::gnn::DistGraphOptions options;
  options.method = tessel::gnn::DistPartitionMethod::given;
  options.owner.resize(static_cast<std::size_t>(nx) * ny); // the rank of every node, the same on every rank
  for (std::int32_t i = 0; i < nx; ++i)
    for (int r = 0; r < ranks; ++r)
      for (std::int32_t j = first_column(r); j < first_column(r + 1); ++j)
        options.owner[static_cast<std::size_t>(node(i, j))] = r;
  tessel::gnn::DistGraph<std::int32_t> dist(comm, mesh, options); // collective
  tessel::gnn::DistSpmm<Space> spmm(space, comm, dist);           // collective; the local block is adaptive
  // [snippet:gnn-dist-partition]

  // This rank's features, one row per node it owns, in owned_rows() order (increasing global id): sizes are per
  // rank (local_rows()), ids global.
  // [snippet:gnn-dist-apply]
  auto const &owned = dist.owned_rows();
  Kokkos::View<float **, Kokkos::LayoutRight, Kokkos::HostSpace> x("x", dist.local_rows(), width),
      y("y", dist.local_rows(), width);
  for (std::size_t k = 0; k < owned.size(); ++k)
    for (int f = 0; f < width; ++f)
      x(k, f) = feature(static_cast<std::int32_t>(owned[k] / ny), static_cast<std::int32_t>(owned[k] % ny), f);
  for (int apply = 0; apply < 3; ++apply) // collective; the first applies tune the local block's kernels
    spmm.apply(space, x, y);
  space.fence();
  // [snippet:gnn-dist-apply]

  // The reference: the stencil on the mesh coordinates.
  int failures = 0;
  double worst = 0;
  for (std::size_t k = 0; k < owned.size(); ++k) {
    auto const i = static_cast<std::int32_t>(owned[k] / ny), j = static_cast<std::int32_t>(owned[k] % ny);
    for (int f = 0; f < width; ++f) {
      double want = 0;
      for (auto const [di, dj] : {std::pair{-1, 0}, std::pair{1, 0}, std::pair{0, -1}, std::pair{0, 1}})
        if (i + di >= 0 && i + di < nx && j + dj >= 0 && j + dj < ny)
          want += feature(i + di, j + dj, f);
      worst = std::max(worst, std::abs(y(k, f) - want));
    }
  }
  if (worst > 1e-3) {
    std::fprintf(stderr, "rank %d: Y differs from the stencil by %g\n", rank, worst);
    ++failures;
  }
  // A column block borrows the nearest column of each neighbouring block: nx rows from each neighbour.
  std::int64_t const expected_halo = std::int64_t{nx} * ((rank > 0 ? 1 : 0) + (rank + 1 < ranks ? 1 : 0));
  if (dist.halo_recv_rows() != expected_halo) {
    std::fprintf(stderr, "rank %d: receives %lld halo rows, expected %lld\n", rank,
                 static_cast<long long>(dist.halo_recv_rows()), static_cast<long long>(expected_halo));
    ++failures;
  }
  std::printf("rank %d of %d: %lld of %lld rows, %lld halo rows from %zu peer(s), largest difference %.1e\n", rank,
              ranks, static_cast<long long>(dist.local_rows()), static_cast<long long>(dist.global_rows()),
              static_cast<long long>(dist.halo_recv_rows()), dist.halos().size(), worst);

  int const all_failures = comm.allreduce_value(failures, tessel::ReduceOp::sum);
  if (rank == 0 && all_failures == 0)
    std::printf("gnn distributed example: all checks passed\n");
  return all_failures == 0 ? tessel::exit_success : tessel::exit_failure;
}

} // namespace

int main(int argc, char **argv) { return tessel::run_main("tessel_example_gnn_distributed", argc, argv, run); }

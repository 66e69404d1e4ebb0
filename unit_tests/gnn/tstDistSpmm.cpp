// Distributed Y = A X (DistGraph, DistSpmm) under mpiexec at 1, 2 and 4 ranks: every rank's rows against the
// single-process handle on the whole graph, for every kernel of the local block, every partition method, uneven
// partitions, ranks without rows or without halo; and the errors every rank must see alike.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/Reorder.hpp>

#include <gtest/gtest.h>

#include <GnnTestGraphs.hpp>
#include <TesselTestError.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

namespace {

using namespace tessel::gnn;
using Exec = Kokkos::DefaultHostExecutionSpace;
using Mem = Exec::memory_space;
using tessel::Communicator;

/// Fresh random X (the same on every rank for a seed), the single-process csr result on the whole graph, and the
/// distributed one on this rank's rows: the largest difference relative to the largest value of the reference.
double relative_error(Communicator const &comm, DistSpmm<Exec> &dist, DistGraph<std::int32_t> const &dg,
                      Graph<std::int32_t> const &g, int f, std::uint64_t seed) {
  Exec space;
  auto const n = static_cast<std::size_t>(g.num_rows()), uf = static_cast<std::size_t>(f);
  Matrix<Mem> x("x", n, uf), ref("ref", n, uf);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.data()[k] = u(rng);
  SpmmOptions csr;
  csr.algorithm = SpmmAlgorithm::csr;
  SpmmHandle<std::int32_t, Exec>(space, g, csr).apply(space, x, ref);
  auto const rows = static_cast<std::size_t>(dg.local_rows());
  Matrix<Mem> xl("xl", rows, uf), yl("yl", rows, uf);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < uf; ++c)
      xl(r, c) = x(static_cast<std::size_t>(dg.owned_rows()[r]), c);
  Kokkos::deep_copy(yl, std::nanf(""));
  dist.apply(space, xl, yl);
  double diff = 0, scale = 0;
  for (std::size_t k = 0; k < ref.size(); ++k)
    scale = std::max(scale, static_cast<double>(std::abs(ref.data()[k])));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < uf; ++c) {
      double const d = std::abs(static_cast<double>(yl(r, c)) -
                                static_cast<double>(ref(static_cast<std::size_t>(dg.owned_rows()[r]), c)));
      diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(diff, d);
    }
  // The worst rank decides, on every rank.
  double worst = 0;
  comm.allreduce(&diff, &worst, 1, tessel::ReduceOp::max);
  return scale > 0 ? worst / scale : worst;
}

/// Every row owned by exactly one rank, and the blocks hold every entry once.
void check_partition(Communicator const &comm, DistGraph<std::int32_t> const &dg, Graph<std::int32_t> const &g) {
  std::int64_t rows = dg.local_rows(), entries = dg.local_block().nnz();
  for (auto const &h : dg.halos())
    entries += h.block.nnz();
  std::int64_t total_rows = 0, total_entries = 0;
  comm.allreduce(&rows, &total_rows, 1, tessel::ReduceOp::sum);
  comm.allreduce(&entries, &total_entries, 1, tessel::ReduceOp::sum);
  EXPECT_EQ(total_rows, static_cast<std::int64_t>(g.num_rows()));
  EXPECT_EQ(total_entries, static_cast<std::int64_t>(g.nnz()));
  for (auto const i : dg.owned_rows())
    EXPECT_EQ(dg.owner()[static_cast<std::size_t>(i)], comm.rank());
  // What this rank sends a peer is what the peer receives from it, and the other way round (a peer that shares
  // no rows with this rank has no halo entry on either side).
  for (auto const &h : dg.halos()) {
    std::int64_t const mine[2] = {static_cast<std::int64_t>(h.send_rows.size()),
                                  static_cast<std::int64_t>(h.recv_rows.size())};
    std::int64_t theirs[2] = {-1, -1};
    auto send = comm.isend(mine, 2, h.peer, 11);
    comm.irecv(theirs, 2, h.peer, 11).wait();
    send.wait();
    EXPECT_EQ(mine[0], theirs[1]) << "rows sent to rank " << h.peer;
    EXPECT_EQ(mine[1], theirs[0]) << "rows received from rank " << h.peer;
  }
  comm.barrier();
}

SpmmOptions csr_options() {
  SpmmOptions o;
  o.algorithm = SpmmAlgorithm::csr;
  return o;
}

Graph<std::int32_t> symmetric_graph(std::int32_t n, std::uint64_t seed) {
  auto const a = test::awkward_graph<std::int32_t>(n, seed);
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  for (std::int32_t i = 0; i < a.num_rows(); ++i)
    for (offset_type k = a.row_map()(i); k < a.row_map()(i + 1); ++k)
      edges.emplace_back(i, a.entries()(k));
  return gcn_normalize(graph_from_edges<std::int32_t>("symmetric", n, edges, EdgeListOptions{/*symmetrize=*/true}));
}

/// Planted communities in id order (few rows have halo entries under any partition): the product and reduce forms
/// then split the peers' rows from the rest, which the awkward graphs (a hub reaches a third of the vertices) do not.
Graph<std::int32_t> community_graph(std::uint64_t seed) {
  SbmOptions o;
  o.nodes = 800;
  o.community_size = 50;
  o.p_in = 0.2;
  o.inter_degree = 0.1;
  o.features = 0;
  o.shuffle = false;
  o.seed = seed;
  return gcn_normalize(generate_sbm(o).graph);
}

TEST(DistSpmm, equals_the_single_process_result_for_every_kernel) {
  auto const comm = Communicator::world();
  Exec space;
  std::vector<DistPartitionMethod> methods{DistPartitionMethod::contiguous};
  if (metis_available())
    methods.push_back(DistPartitionMethod::metis);
  std::uint64_t seed = 100;
  for (bool directed : {true, false}) {
    auto const g = directed ? test::awkward_graph<std::int32_t>(301, 5) : symmetric_graph(257, 6);
    for (auto method : methods) {
      DistGraphOptions o;
      o.method = method;
      DistGraph<std::int32_t> const dg(comm, g, o);
      check_partition(comm, dg, g);
      for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo,
                             SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::adaptive}) {
        SpmmOptions so;
        so.algorithm = algorithm;
        so.part_size = 16;
        DistSpmm<Exec> dist(space, comm, dg, so);
        for (int f : {1, 5, 37, 64})
          for (int apply = 0; apply < (algorithm == SpmmAlgorithm::adaptive ? 8 : 1); ++apply) // through tuning
            EXPECT_LT(relative_error(comm, dist, dg, g, f, ++seed), 1e-6)
                << (directed ? "directed" : "symmetric") << ", " << name_of(method) << ", " << name_of(algorithm)
                << ", F = " << f << ", apply " << apply;
      }
    }
  }
}

TEST(DistSpmm, uneven_partitions_and_ranks_without_rows_or_halo) {
  auto const comm = Communicator::world();
  Exec space;
  int const w = comm.size();
  auto const g = test::awkward_graph<std::int32_t>(200, 9); // its last 20 vertices are isolated
  // Rank 0 gets two thirds of the rows, rank 1 (if any) the isolated vertices only (rows but no halo), the others
  // a few rows each, and the last of four ranks none.
  std::vector<int> owner(200, 0);
  for (int i = 0; i < 200; ++i) {
    if (i >= 180)
      owner[static_cast<std::size_t>(i)] = std::min(1, w - 1);
    else if (i % 3 == 2 && w > 2)
      owner[static_cast<std::size_t>(i)] = 2 + (i / 3) % std::max(1, w - 3);
  }
  DistGraphOptions o;
  o.method = DistPartitionMethod::given;
  o.owner = owner;
  DistGraph<std::int32_t> const dg(comm, g, o);
  check_partition(comm, dg, g);
  if (w >= 2 && comm.rank() == 1) {
    EXPECT_EQ(dg.local_rows(), 20);
    EXPECT_TRUE(dg.halos().empty());
  }
  if (w == 4 && comm.rank() == 3) {
    EXPECT_EQ(dg.local_rows(), 0);
  }
  for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
    SpmmOptions so;
    so.algorithm = algorithm;
    DistSpmm<Exec> dist(space, comm, dg, so);
    for (int f : {3, 32})
      for (int apply = 0; apply < 4; ++apply)
        EXPECT_LT(relative_error(comm, dist, dg, g, f, 1000 + static_cast<std::uint64_t>(f * 10 + apply)), 1e-6)
            << name_of(algorithm) << ", F = " << f;
  }
}

TEST(DistSpmm, the_same_result_at_every_arrival_order) {
  // Repeated applies on the same X give bitwise the same Y, whatever order the messages landed in.
  auto const comm = Communicator::world();
  Exec space;
  auto const g = symmetric_graph(400, 3);
  DistGraph<std::int32_t> const dg(comm, g);
  DistSpmm<Exec> dist(space, comm, dg, csr_options());
  auto const rows = static_cast<std::size_t>(dg.local_rows());
  Matrix<Mem> x("x", rows, 16), y0("y0", rows, 16), y("y", rows, 16);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.data()[k] = static_cast<float>(std::sin(static_cast<double>(k + 1)));
  dist.apply(space, x, y0);
  for (int rep = 0; rep < 20; ++rep) {
    if (comm.rank() == rep % comm.size()) // one rank late: the others' messages land in another order
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    dist.apply(space, x, y);
    for (std::size_t k = 0; k < y.size(); ++k)
      ASSERT_EQ(y.data()[k], y0.data()[k]) << "apply " << rep << ", element " << k;
  }
  dist.set_schedule(DistSchedule::sequential); // the baseline schedule computes the same sums in the same order
  dist.apply(space, x, y);
  for (std::size_t k = 0; k < y.size(); ++k)
    ASSERT_EQ(y.data()[k], y0.data()[k]) << "sequential schedule, element " << k;
  EXPECT_EQ(dist.last().bytes_sent, static_cast<std::int64_t>(dg.halo_send_rows() * 16 * sizeof(float)));
  EXPECT_EQ(dist.last().bytes_received, static_cast<std::int64_t>(dg.halo_recv_rows() * 16 * sizeof(float)));
}

TEST(DistSpmm, the_product_form_equals_the_product_then_the_aggregation) {
  // apply_product(x, w, op, t, y): t = x op(w) on every rank and y = A t against the single-process result, both
  // schedules alike; the peers' rows of t are computed apart from the rest, so only rounding may differ.
  auto const comm = Communicator::world();
  Exec space;
  for (int which = 0; which < 3; ++which) {
    bool const directed = which == 0;
    auto const g = which == 0   ? test::awkward_graph<std::int32_t>(300, 4)
                   : which == 1 ? symmetric_graph(300, 4)
                                : community_graph(4);
    for (auto method : {DistPartitionMethod::contiguous, DistPartitionMethod::automatic}) {
      DistGraphOptions go;
      go.method = method;
      DistGraph<std::int32_t> const dg(comm, g, go);
      for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
        SpmmOptions so;
        so.algorithm = algorithm;
        so.timing = false; // a plan from the first apply on (tuning applies would run other kernels)
        DistSpmm<Exec> dist(space, comm, dg, so);
        for (auto op : {tessel::Op::none, tessel::Op::transpose}) {
          std::size_t const k = 7, f = 12, n = static_cast<std::size_t>(g.num_rows());
          auto const rows = static_cast<std::size_t>(dg.local_rows());
          Matrix<Mem> x("x", n, k), w("w", op == tessel::Op::none ? k : f, op == tessel::Op::none ? f : k);
          std::mt19937_64 rng(31 + static_cast<std::uint64_t>(directed));
          std::uniform_real_distribution<float> u(-1, 1);
          for (std::size_t e = 0; e < x.size(); ++e)
            x.data()[e] = u(rng);
          for (std::size_t e = 0; e < w.size(); ++e)
            w.data()[e] = u(rng);
          // The reference in double: Y = A (X op(W)) on the whole graph.
          std::vector<double> tx(n * f, 0.0), ref(n * f, 0.0);
          for (std::size_t i = 0; i < n; ++i)
            for (std::size_t c = 0; c < f; ++c)
              for (std::size_t q = 0; q < k; ++q)
                tx[i * f + c] += static_cast<double>(x(i, q)) * (op == tessel::Op::none ? w(q, c) : w(c, q));
          for (std::size_t i = 0; i < n; ++i)
            for (offset_type e = g.row_map()(i); e < g.row_map()(i + 1); ++e)
              for (std::size_t c = 0; c < f; ++c)
                ref[i * f + c] +=
                    static_cast<double>(g.values()(e)) * tx[static_cast<std::size_t>(g.entries()(e)) * f + c];
          Matrix<Mem> xl("xl", rows, k), t("t", rows, f), y("y", rows, f), y2("y2", rows, f);
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t q = 0; q < k; ++q)
              xl(r, q) = x(static_cast<std::size_t>(dg.owned_rows()[r]), q);
          dist.set_schedule(DistSchedule::overlapped);
          dist.apply_product(space, xl, w, op, t, y);
          dist.set_schedule(DistSchedule::sequential);
          dist.apply_product(space, xl, w, op, t, y2);
          double diff = 0, scale = 0, tdiff = 0;
          for (double v : ref)
            scale = std::max(scale, std::abs(v));
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < f; ++c) {
              auto const i = static_cast<std::size_t>(dg.owned_rows()[r]);
              diff = std::max(diff, std::abs(y(r, c) - ref[i * f + c]));
              tdiff = std::max(tdiff, std::abs(t(r, c) - tx[i * f + c]));
              EXPECT_EQ(y(r, c), y2(r, c)) << "the schedules differ";
            }
          double const worst = comm.allreduce_value(std::max(diff / scale, tdiff), tessel::ReduceOp::max);
          EXPECT_LT(worst, 1e-5) << name_of(algorithm) << (directed ? " directed" : " symmetric")
                                 << (op == tessel::Op::none ? "" : " transposed w");
        }
      }
    }
  }
}

TEST(DistSpmm, the_reduce_form_adds_the_gradient_of_every_rank) {
  // apply_reduce(x, y, z, g): y bitwise apply's, and the sum of every rank's g = z^T y against a double reference
  // of Z^T (A X) on the whole graph, both schedules, csr and adaptive (whose remainder is added before the product).
  auto const comm = Communicator::world();
  Exec space;
  for (int which = 0; which < 3; ++which) {
    bool const directed = which == 0;
    auto const g = which == 0   ? test::awkward_graph<std::int32_t>(300, 6)
                   : which == 1 ? symmetric_graph(300, 6)
                                : community_graph(6);
    DistGraph<std::int32_t> const dg(comm, g);
    for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
      SpmmOptions so;
      so.algorithm = algorithm;
      so.timing = false;
      DistSpmm<Exec> dist(space, comm, dg, so);
      std::size_t const k = 9, f = 5, n = static_cast<std::size_t>(g.num_rows());
      auto const rows = static_cast<std::size_t>(dg.local_rows());
      Matrix<Mem> x("x", n, f), z("z", n, k);
      std::mt19937_64 rng(41 + static_cast<std::uint64_t>(directed));
      std::uniform_real_distribution<float> u(-1, 1);
      for (std::size_t e = 0; e < x.size(); ++e)
        x.data()[e] = u(rng);
      for (std::size_t e = 0; e < z.size(); ++e)
        z.data()[e] = u(rng);
      std::vector<double> ax(n * f, 0.0), ref(k * f, 0.0);
      for (std::size_t i = 0; i < n; ++i)
        for (offset_type e = g.row_map()(i); e < g.row_map()(i + 1); ++e)
          for (std::size_t c = 0; c < f; ++c)
            ax[i * f + c] += static_cast<double>(g.values()(e)) * x(static_cast<std::size_t>(g.entries()(e)), c);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t q = 0; q < k; ++q)
          for (std::size_t c = 0; c < f; ++c)
            ref[q * f + c] += static_cast<double>(z(i, q)) * ax[i * f + c];
      Matrix<Mem> xl("xl", rows, f), zl("zl", rows, k), y("y", rows, f), y0("y0", rows, f), gl("g", k, f);
      for (std::size_t r = 0; r < rows; ++r) {
        auto const i = static_cast<std::size_t>(dg.owned_rows()[r]);
        for (std::size_t c = 0; c < f; ++c)
          xl(r, c) = x(i, c);
        for (std::size_t q = 0; q < k; ++q)
          zl(r, q) = z(i, q);
      }
      dist.apply(space, xl, y0);
      for (auto schedule : {DistSchedule::overlapped, DistSchedule::sequential}) {
        dist.set_schedule(schedule);
        Kokkos::deep_copy(gl, std::nanf(""));
        dist.apply_reduce(space, xl, y, zl, gl);
        for (std::size_t e = 0; e < y.size(); ++e)
          ASSERT_EQ(y.data()[e], y0.data()[e]) << "y differs from apply's";
        std::vector<float> sum(k * f);
        comm.allreduce(gl.data(), sum.data(), sum.size(), tessel::ReduceOp::sum);
        double diff = 0, scale = 0;
        for (std::size_t e = 0; e < ref.size(); ++e) {
          scale = std::max(scale, std::abs(ref[e]));
          double const d = std::abs(sum[e] - ref[e]);
          diff = std::isnan(d) ? INFINITY : std::max(diff, d);
        }
        EXPECT_LT(diff / scale, 1e-5) << name_of(algorithm) << (directed ? " directed " : " symmetric ")
                                      << name_of(schedule);
      }
    }
  }
}

TEST(DistSpmm, large_halos_go_in_several_messages) {
  // A peer's rows go in messages of 1024 rows; each message's part of the halo block runs when it lands, added in
  // message order: against the single-process result, and bitwise the same over applies with one rank late.
  auto const comm = Communicator::world();
  if (comm.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  Exec space;
  // Random directed edges, about 5 per row, no hub (a hub row of thousands of entries would make the fp32 sums of
  // one process and of W ranks differ by more than the 1e-6 this file holds them to).
  auto const n = static_cast<std::int32_t>(3000 * comm.size());
  std::mt19937_64 rng(8);
  std::uniform_int_distribution<std::int32_t> node(0, n - 1);
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  for (std::int32_t e = 0; e < 5 * n; ++e)
    edges.emplace_back(node(rng), node(rng));
  auto const g = graph_from_edges<std::int32_t>("random", n, edges);
  DistGraphOptions o;
  o.method = DistPartitionMethod::contiguous;
  DistGraph<std::int32_t> const dg(comm, g, o);
  std::int64_t most = 0;
  for (auto const &h : dg.halos())
    most = std::max<std::int64_t>(most, static_cast<std::int64_t>(h.recv_rows.size()));
  EXPECT_GT(comm.allreduce_value(most, tessel::ReduceOp::max), 2 * 1024) << "the graph no longer needs 3 messages";
  for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
    SpmmOptions so;
    so.algorithm = algorithm;
    so.timing = false;
    DistSpmm<Exec> dist(space, comm, dg, so);
    EXPECT_LT(relative_error(comm, dist, dg, g, 6, 77), 1e-6) << name_of(algorithm);
    auto const rows = static_cast<std::size_t>(dg.local_rows());
    Matrix<Mem> x("x", rows, 6), y0("y0", rows, 6), y("y", rows, 6);
    for (std::size_t k = 0; k < x.size(); ++k)
      x.data()[k] = static_cast<float>(std::cos(static_cast<double>(k)));
    dist.apply(space, x, y0);
    for (int rep = 0; rep < 6; ++rep) {
      if (comm.rank() == rep % comm.size())
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
      dist.set_schedule(rep % 3 == 2 ? DistSchedule::sequential : DistSchedule::overlapped);
      dist.apply(space, x, y);
      for (std::size_t k = 0; k < y.size(); ++k)
        ASSERT_EQ(y.data()[k], y0.data()[k]) << name_of(algorithm) << ", apply " << rep;
    }
    EXPECT_EQ(dist.last().bytes_received, static_cast<std::int64_t>(dg.halo_recv_rows() * 6 * sizeof(float)));
  }
}

/// The same blocks and plans, entry for entry.
void expect_same(DistGraph<std::int32_t> const &a, DistGraph<std::int32_t> const &b) {
  auto const same_graph = [](Graph<std::int32_t> const &x, Graph<std::int32_t> const &y) {
    ASSERT_EQ(x.num_rows(), y.num_rows());
    ASSERT_EQ(x.num_cols(), y.num_cols());
    ASSERT_EQ(x.nnz(), y.nnz());
    for (std::size_t k = 0; k < x.row_map().extent(0); ++k)
      ASSERT_EQ(x.row_map()(k), y.row_map()(k));
    for (std::size_t k = 0; k < x.entries().extent(0); ++k) {
      ASSERT_EQ(x.entries()(k), y.entries()(k));
      ASSERT_EQ(x.values()(k), y.values()(k));
    }
  };
  EXPECT_EQ(a.owned_rows(), b.owned_rows());
  EXPECT_EQ(a.owner(), b.owner());
  same_graph(a.local_block(), b.local_block());
  ASSERT_EQ(a.halos().size(), b.halos().size());
  for (std::size_t k = 0; k < a.halos().size(); ++k) {
    EXPECT_EQ(a.halos()[k].peer, b.halos()[k].peer);
    EXPECT_EQ(a.halos()[k].recv_rows, b.halos()[k].recv_rows);
    EXPECT_EQ(a.halos()[k].send_rows, b.halos()[k].send_rows);
    same_graph(a.halos()[k].block, b.halos()[k].block);
  }
}

TEST(DistSpmm, each_rank_reads_its_own_rows_of_the_file) {
  auto const comm = Communicator::world();
  std::string const path =
      (std::filesystem::temp_directory_path() / ("tessel_dist_graph_" + std::to_string(comm.size()) + ".h5")).string();
  Dataset data;
  data.name = "awkward";
  data.graph = test::awkward_graph<std::int32_t>(240, 21);
  if (comm.rank() == 0)
    save_dataset(path, data);
  comm.barrier();
  DistGraphOptions o;
  o.method = DistPartitionMethod::contiguous;
  auto const loaded = DistGraph<std::int32_t>::load(comm, path, o);
  DistGraph<std::int32_t> const built(comm, data.graph, o);
  expect_same(loaded, built);
  check_partition(comm, loaded, data.graph);
  Exec space;
  DistSpmm<Exec> dist(space, comm, loaded);
  EXPECT_LT(relative_error(comm, dist, loaded, data.graph, 7, 77), 1e-6);
  // Every method through the file: the ones that partition the whole graph read it whole.
  DistGraphOptions automatic;
  expect_same(DistGraph<std::int32_t>::load(comm, path, automatic), DistGraph<std::int32_t>(comm, data.graph));
  comm.barrier();
  if (comm.rank() == 0)
    std::filesystem::remove(path);
}

TEST(DistSpmm, a_bad_entry_in_one_ranks_rows_ends_every_rank) {
  auto const comm = Communicator::world();
  std::string const path =
      (std::filesystem::temp_directory_path() / ("tessel_dist_graph_bad_" + std::to_string(comm.size()) + ".h5"))
          .string();
  if (comm.rank() == 0) {
    // The last row's last column out of range: only the last rank reads it.
    std::vector<std::int64_t> indptr{0, 1, 2, 3, 4, 5, 6, 7, 8}, indices{1, 2, 3, 4, 5, 6, 7, 99};
    tessel::h5::File f(path, tessel::h5::Mode::truncate);
    f.write("graph/indptr", indptr.data(), {indptr.size()});
    f.write("graph/indices", indices.data(), {indices.size()});
    f.close();
  }
  comm.barrier();
  DistGraphOptions o;
  o.method = DistPartitionMethod::contiguous;
  auto const message = tessel::test::error_of([&] { DistGraph<std::int32_t>::load(comm, path, o); });
  if (comm.rank() == comm.size() - 1)
    EXPECT_NE(message.find("graph/indices[7] = 99 is out of range [0, 8)"), std::string::npos) << message;
  else
    EXPECT_NE(message.find("another rank found"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  comm.barrier();
  if (comm.rank() == 0)
    std::filesystem::remove(path);
}

TEST(DistSpmm, ranks_given_different_graphs_or_options_fail_alike) {
  auto const comm = Communicator::world();
  if (comm.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  auto const g = test::awkward_graph<std::int32_t>(100, comm.rank() == 1 ? 8 : 7);
  auto const message = tessel::test::error_of([&] { DistGraph<std::int32_t> const dg(comm, g); });
  EXPECT_NE(message.find("differs across ranks"), std::string::npos) << message;
  EXPECT_NE(message.find("the graph"), std::string::npos) << message;
  auto const same = test::awkward_graph<std::int32_t>(100, 7);
  DistGraphOptions o;
  o.method = comm.rank() == 0 ? DistPartitionMethod::contiguous : DistPartitionMethod::given;
  o.owner.assign(comm.rank() == 0 ? 0 : 100, 0);
  auto const options = tessel::test::error_of([&] { DistGraph<std::int32_t> const dg(comm, same, o); });
  EXPECT_NE(options.find("the options"), std::string::npos) << options;
  DistGraph<std::int32_t> const dg(comm, same);
  Exec space;
  DistSpmm<Exec> dist(space, comm, dg);
  auto const rows = static_cast<std::size_t>(dg.local_rows());
  std::size_t const f = comm.rank() == 0 ? 8 : 9;
  Matrix<Mem> x("x", rows, f), y("y", rows, f);
  auto const width = tessel::test::error_of([&] { dist.apply(space, x, y); });
  EXPECT_NE(width.find("feature width differs across ranks"), std::string::npos) << width;
}

TEST(DistSpmm, a_silent_peer_times_out_naming_it) {
  auto const world = Communicator::world();
  if (world.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  // Its own communicator: the abandoned messages of this test cannot match another test's.
  auto comm = world.split(0, world.rank());
  comm.set_timeout(std::chrono::milliseconds(300));
  auto const g = symmetric_graph(120, 4);
  DistGraphOptions o;
  o.method = DistPartitionMethod::contiguous;
  DistGraph<std::int32_t> const dg(comm, g, o);
  Exec space;
  DistSpmm<Exec> dist(space, comm, dg, csr_options());
  auto const rows = static_cast<std::size_t>(dg.local_rows());
  Matrix<Mem> x("x", rows, 4), y("y", rows, 4);
  dist.apply(space, x, y); // every rank: the width is checked once, collectively
  bool const reads_rank_1 = std::any_of(dg.halos().begin(), dg.halos().end(),
                                        [](auto const &h) { return h.peer == 1 && !h.recv_rows.empty(); });
  if (comm.rank() != 1) { // rank 1 stays silent in the second apply
    auto const message = tessel::test::error_of([&] { dist.apply(space, x, y); });
    if (reads_rank_1)
      EXPECT_NE(message.find("from rank 1"), std::string::npos) << message;
    else // nothing to wait for from rank 1
      EXPECT_EQ(message, "") << message;
  }
  world.barrier();
}

} // namespace

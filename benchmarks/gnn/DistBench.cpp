#include "DistBench.hpp"

#include "Report.hpp"

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/PacedCommunicator.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/tools/Tool.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

namespace tessel::gnn::bench {

namespace {

using Exec = Kokkos::DefaultHostExecutionSpace;
using Mem = Exec::memory_space;

/// Per schedule, the slowest rank's figures of every timed apply (an apply ends when its last rank ends).
struct Samples {
  std::vector<double> total, compute, wait;
};

} // namespace

int bench_dist(DistBenchConfig const &c) {
  auto const world = Communicator::world();
  auto const comm = c.bandwidth_mbps > 0 || c.latency_us > 0
                        ? make_paced_communicator(world, LinkModel{c.bandwidth_mbps * 1e6, c.latency_us * 1e-6})
                        : world;
  require_same_file(world, "data set", c.data);
  auto const data = load_dataset(c.data);
  auto const op = c.op_name == "gcn" ? gcn_normalize(data.graph) : data.graph;
  Exec space;
  DistGraphOptions go;
  go.method = c.partition;
  DistGraph<std::int32_t> const dg(comm, op, go);
  bool const root = comm.rank() == 0;
  // The partition as the ranks see it: rows, entries and halo rows per rank.
  std::vector<std::int64_t> mine{dg.local_rows(), dg.local_block().nnz(), dg.halo_recv_rows()}, all(3 * comm.size());
  comm.allgather(mine.data(), all.data(), 3);
  if (root) {
    std::printf("tessel-gnn-bench --backend dist: '%s' (%lld nodes, %lld entries, operator %s) on %d ranks, partition "
                "%s (%.3f s), link %s\n",
                data.name.c_str(), static_cast<long long>(op.num_rows()), static_cast<long long>(op.nnz()),
                c.op_name.c_str(), comm.size(), name_of(dg.method()), dg.partition_seconds(),
                c.bandwidth_mbps > 0 || c.latency_us > 0 ? "emulated" : "as is (MPI)");
    if (c.bandwidth_mbps > 0 || c.latency_us > 0)
      std::printf("  emulated link: %.1f MB/s per direction, %.1f us per message\n", c.bandwidth_mbps, c.latency_us);
    for (int r = 0; r < comm.size(); ++r)
      std::printf("  rank %d: %lld rows, %lld local entries, %lld halo rows received per apply\n", r,
                  static_cast<long long>(all[3 * r]), static_cast<long long>(all[3 * r + 1]),
                  static_cast<long long>(all[3 * r + 2]));
  }
  DistSpmm<Exec> dist(space, comm, dg, c.options);
  auto results = Json::array();
  bool wrong = false;
  for (int f : c.widths) {
    auto const n = static_cast<std::size_t>(op.num_rows()), uf = static_cast<std::size_t>(f);
    auto const rows = static_cast<std::size_t>(dg.local_rows());
    // X: the same on every rank (one seed), this rank's rows of it.
    Matrix<Mem> x("Tessel::gnn::bench::dist_x", n, uf), xl("Tessel::gnn::bench::dist_xl", rows, uf),
        yl("Tessel::gnn::bench::dist_yl", rows, uf), ref("Tessel::gnn::bench::dist_ref", n, uf);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (std::size_t k = 0; k < x.size(); ++k)
      x.data()[k] = u(rng);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < uf; ++j)
        xl(r, j) = x(static_cast<std::size_t>(dg.owned_rows()[r]), j);
    SpmmOptions csr;
    csr.algorithm = SpmmAlgorithm::csr;
    SpmmHandle<std::int32_t, Exec>(space, op, csr).apply(space, x, ref);

    DistSchedule const schedules[2] = {DistSchedule::sequential, DistSchedule::overlapped};
    Samples samples[2];
    double err[2] = {0, 0};
    for (int s = 0; s < 2; ++s) { // warm-up (and the adaptive handle's tuning), then the check
      dist.set_schedule(schedules[s]);
      for (int k = 0; k < c.warmup + 8; ++k)
        dist.apply(space, xl, yl);
      double diff = 0, scale = 0;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < uf; ++j) {
          double const want = ref(static_cast<std::size_t>(dg.owned_rows()[r]), j);
          double const d = std::abs(static_cast<double>(yl(r, j)) - want);
          diff = std::isnan(d) ? INFINITY : std::max(diff, d);
          scale = std::max(scale, std::abs(want));
        }
      double const mine_err = scale > 0 ? diff / scale : diff;
      comm.allreduce(&mine_err, &err[s], 1, ReduceOp::max);
    }
    for (int rep = 0; rep < c.reps; ++rep)
      for (int k = 0; k < 2; ++k) {
        int const s = rep % 2 == 0 ? k : 1 - k; // mirrored rounds
        dist.set_schedule(schedules[s]);
        comm.barrier();
        dist.apply(space, xl, yl);
        auto const &t = dist.last();
        double const local[3] = {t.total_seconds, t.pack_seconds + t.local_seconds + t.halo_seconds, t.wait_seconds};
        double slowest[3];
        comm.allreduce(local, slowest, 3, ReduceOp::max);
        samples[s].total.push_back(slowest[0]);
        samples[s].compute.push_back(slowest[1]);
        samples[s].wait.push_back(slowest[2]);
      }
    double const seq = median(samples[0].total), ovl = median(samples[1].total);
    double const compute = median(samples[1].compute);
    // Exposed communication: what an apply takes beyond its computation; hidden: the part overlap removed.
    double const exposed_seq = std::max(0.0, seq - median(samples[0].compute)),
                 exposed_ovl = std::max(0.0, ovl - compute);
    double const hidden = exposed_seq > 0 ? 1.0 - exposed_ovl / exposed_seq : 0.0;
    std::int64_t const bytes = dist.last().bytes_received;
    std::int64_t total_bytes = 0;
    comm.allreduce(&bytes, &total_bytes, 1, ReduceOp::sum);
    wrong = wrong || !(err[0] < 1e-5 && err[1] < 1e-5);
    if (root) {
      std::printf("\nF = %d: halo %.2f MB per apply (all ranks)\n  %-12s %10s %12s %10s %12s\n", f, total_bytes * 1e-6,
                  "schedule", "median ms", "compute ms", "wait ms", "max rel err");
      for (int s = 0; s < 2; ++s)
        std::printf("  %-12s %10.3f %12.3f %10.3f %12.2e%s\n", name_of(schedules[s]), 1e3 * median(samples[s].total),
                    1e3 * median(samples[s].compute), 1e3 * median(samples[s].wait), err[s],
                    err[s] < 1e-5 ? "" : "  WRONG RESULT");
      std::printf("  overlapped / sequential: %.2fx faster; communication exposed %.3f -> %.3f ms (%.0f%% hidden)\n",
                  seq / ovl, 1e3 * exposed_seq, 1e3 * exposed_ovl, 100 * hidden);
    }
    results.push_back({{"features", f},
                       {"halo_bytes", total_bytes},
                       {"sequential_ms", 1e3 * seq},
                       {"overlapped_ms", 1e3 * ovl},
                       {"compute_ms", 1e3 * compute},
                       {"exposed_sequential_ms", 1e3 * exposed_seq},
                       {"exposed_overlapped_ms", 1e3 * exposed_ovl},
                       {"hidden_fraction", hidden},
                       {"max_relative_error", {{"sequential", err[0]}, {"overlapped", err[1]}}}});
  }
  if (root && !c.json.empty()) {
    Json doc = {{"command", "bench"}, {"backend", "dist"}, {"ranks", comm.size()}};
    add_run_fields(doc, c.data, data.name, op, c.op_name, c.reps);
    doc["partition"] = name_of(dg.method());
    doc["link"] = {{"bandwidth_mbps", c.bandwidth_mbps}, {"latency_us", c.latency_us}};
    doc["results"] = std::move(results);
    write_json(c.json, doc);
    std::printf("results written to %s\n", c.json.c_str());
  }
  if (wrong && root)
    std::fprintf(stderr, "tessel-gnn-bench --backend dist: a rank's result differs from the single-process one\n");
  return wrong ? 3 : exit_success;
}

} // namespace tessel::gnn::bench

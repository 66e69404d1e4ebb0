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

DistSchedule const schedules[2] = {DistSchedule::sequential, DistSchedule::overlapped};

/// One width: this rank's rows of a random X (the same on every rank), the single-process reference, both
/// schedules checked after their warm-up, then timed in mirrored rounds.
class DistWidthBench {
public:
  DistWidthBench(Exec const &space, Communicator const &comm, DistGraph<std::int32_t> const &dg,
                 Graph<std::int32_t> const &op, DistSpmm<Exec> &dist, DistBenchConfig const &c, int f)
      : _space(space), _comm(comm), _dg(dg), _dist(dist), _c(c), _f(f), _uf(static_cast<std::size_t>(f)),
        _rows(static_cast<std::size_t>(dg.local_rows())), _xl("Tessel::gnn::bench::dist_xl", _rows, _uf),
        _yl("Tessel::gnn::bench::dist_yl", _rows, _uf) {
    auto const n = static_cast<std::size_t>(op.num_rows());
    Matrix<Mem> x("Tessel::gnn::bench::dist_x", n, _uf);
    _ref = Matrix<Mem>("Tessel::gnn::bench::dist_ref", n, _uf);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (std::size_t k = 0; k < x.size(); ++k)
      x.data()[k] = u(rng);
    for (std::size_t r = 0; r < _rows; ++r)
      for (std::size_t j = 0; j < _uf; ++j)
        _xl(r, j) = x(static_cast<std::size_t>(dg.owned_rows()[r]), j);
    SpmmOptions csr;
    csr.algorithm = SpmmAlgorithm::csr;
    SpmmHandle<std::int32_t, Exec>(space, op, csr).apply(space, x, _ref);
  }

  /// Runs the width; returns its record and sets \p wrong when a rank's result differs.
  Json run(bool &wrong) {
    for (int s = 0; s < 2; ++s)
      _err[s] = warm_up_and_check(schedules[s]);
    time_rounds();
    wrong = wrong || !(_err[0] < 1e-5 && _err[1] < 1e-5);
    return report();
  }

private:
  /// Warm-up (and the adaptive handle's tuning), then the largest relative error over the ranks.
  double warm_up_and_check(DistSchedule schedule) {
    _dist.set_schedule(schedule);
    for (int k = 0; k < _c.warmup + 8; ++k)
      _dist.apply(_space, _xl, _yl);
    double diff = 0, scale = 0;
    for (std::size_t r = 0; r < _rows; ++r)
      for (std::size_t j = 0; j < _uf; ++j) {
        double const want = _ref(static_cast<std::size_t>(_dg.owned_rows()[r]), j);
        double const d = std::abs(static_cast<double>(_yl(r, j)) - want);
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
        scale = std::max(scale, std::abs(want));
      }
    double const mine = scale > 0 ? diff / scale : diff;
    double err = 0;
    _comm.allreduce(&mine, &err, 1, ReduceOp::max);
    return err;
  }

  void time_rounds() {
    for (int rep = 0; rep < _c.reps; ++rep)
      for (int k = 0; k < 2; ++k) {
        int const s = rep % 2 == 0 ? k : 1 - k; // mirrored rounds
        _dist.set_schedule(schedules[s]);
        _comm.barrier();
        _dist.apply(_space, _xl, _yl);
        auto const &t = _dist.last();
        double const local[3] = {t.total_seconds, t.pack_seconds + t.local_seconds + t.halo_seconds, t.wait_seconds};
        double slowest[3];
        _comm.allreduce(local, slowest, 3, ReduceOp::max);
        _samples[s].total.push_back(slowest[0]);
        _samples[s].compute.push_back(slowest[1]);
        _samples[s].wait.push_back(slowest[2]);
      }
  }

  Json report() {
    double const seq = median(_samples[0].total), ovl = median(_samples[1].total);
    double const compute = median(_samples[1].compute);
    // Exposed communication: what an apply takes beyond its computation; hidden: the part overlap removed.
    double const exposed_seq = std::max(0.0, seq - median(_samples[0].compute)),
                 exposed_ovl = std::max(0.0, ovl - compute);
    double const hidden = exposed_seq > 0 ? 1.0 - exposed_ovl / exposed_seq : 0.0;
    std::int64_t const bytes = _dist.last().bytes_received;
    std::int64_t total_bytes = 0;
    _comm.allreduce(&bytes, &total_bytes, 1, ReduceOp::sum);
    if (_comm.rank() == 0) {
      std::printf("\nF = %d: halo %.2f MB per apply (all ranks)\n  %-12s %10s %12s %10s %12s\n", _f, total_bytes * 1e-6,
                  "schedule", "median ms", "compute ms", "wait ms", "max rel err");
      for (int s = 0; s < 2; ++s)
        std::printf("  %-12s %10.3f %12.3f %10.3f %12.2e%s\n", name_of(schedules[s]), 1e3 * median(_samples[s].total),
                    1e3 * median(_samples[s].compute), 1e3 * median(_samples[s].wait), _err[s],
                    _err[s] < 1e-5 ? "" : "  WRONG RESULT");
      std::printf("  overlapped / sequential: %.2fx faster; communication exposed %.3f -> %.3f ms (%.0f%% hidden)\n",
                  seq / ovl, 1e3 * exposed_seq, 1e3 * exposed_ovl, 100 * hidden);
    }
    return {{"features", _f},
            {"halo_bytes", total_bytes},
            {"sequential_ms", 1e3 * seq},
            {"overlapped_ms", 1e3 * ovl},
            {"compute_ms", 1e3 * compute},
            {"exposed_sequential_ms", 1e3 * exposed_seq},
            {"exposed_overlapped_ms", 1e3 * exposed_ovl},
            {"hidden_fraction", hidden},
            {"max_relative_error", {{"sequential", _err[0]}, {"overlapped", _err[1]}}}};
  }

  Exec _space;
  Communicator const &_comm;
  DistGraph<std::int32_t> const &_dg;
  DistSpmm<Exec> &_dist;
  DistBenchConfig const &_c;
  int _f;
  std::size_t _uf, _rows;
  Matrix<Mem> _xl, _yl, _ref;
  Samples _samples[2];
  double _err[2] = {0, 0};
};

/// The partition as the ranks see it: rows, entries and halo rows per rank.
void print_partition(Communicator const &comm, DistGraph<std::int32_t> const &dg, Dataset const &data,
                     Graph<std::int32_t> const &op, DistBenchConfig const &c) {
  std::vector<std::int64_t> mine{dg.local_rows(), dg.local_block().nnz(), dg.halo_recv_rows()}, all(3 * comm.size());
  comm.allgather(mine.data(), all.data(), 3);
  if (comm.rank() != 0)
    return;
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

} // namespace

int bench_dist(DistBenchConfig const &c) {
  auto const world = Communicator::world();
  auto const comm = c.bandwidth_mbps > 0 || c.latency_us > 0
                        ? make_paced_communicator(world, LinkModel{c.bandwidth_mbps * 1e6, c.latency_us * 1e-6})
                        : world;
  require_same_file(world, "data set", c.data);
  auto const data = load_dataset(c.data);
  require_nodes(data, c.data);
  auto const op = c.op_name == "gcn" ? gcn_normalize(data.graph) : data.graph;
  Exec space;
  DistGraphOptions go;
  go.method = c.partition;
  DistGraph<std::int32_t> const dg(comm, op, go);
  bool const root = comm.rank() == 0;
  print_partition(comm, dg, data, op, c);
  DistSpmm<Exec> dist(space, comm, dg, c.options);
  auto results = Json::array();
  bool wrong = false;
  for (int f : c.widths)
    results.push_back(DistWidthBench(space, comm, dg, op, dist, c, f).run(wrong));
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

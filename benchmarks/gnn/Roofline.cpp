#include "Roofline.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>

#include <algorithm>
#include <cstddef>

namespace tessel::gnn::bench {

namespace {

using Exec = Kokkos::DefaultHostExecutionSpace;
constexpr int repeats = 5;

double triad_gbs(Exec const &space) {
  // 3 x 64 MiB: far beyond any last-level cache, so the triad streams from memory.
  std::size_t const n = std::size_t{16} << 20;
  Kokkos::View<float *, Kokkos::HostSpace> a("Tessel::gnn::bench::triad_a", n), b("Tessel::gnn::bench::triad_b", n),
      c("Tessel::gnn::bench::triad_c", n);
  Kokkos::RangePolicy<Exec> const range(space, 0, n);
  Kokkos::parallel_for( // first touch by the threads that stream them
      "Tessel::gnn::bench::triad_init", range, KOKKOS_LAMBDA(std::size_t i) {
        a(i) = 0.0f;
        b(i) = 1.0f;
        c(i) = 2.0f;
      });
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    float const s = 0.5f + static_cast<float>(r);
    Timer<Exec> timer(space, "Tessel::gnn::bench::triad");
    Kokkos::parallel_for(
        "Tessel::gnn::bench::triad", range, KOKKOS_LAMBDA(std::size_t i) { a(i) = b(i) + s * c(i); });
    double const t = timer.seconds();
    best = std::max(best, 3.0 * sizeof(float) * static_cast<double>(n) / t * 1e-9);
  }
  TESSEL_REQUIRE(a(n - 1) == 1.0f + (0.5f + repeats - 1) * 2.0f, "triad: wrong result");
  return best;
}

double fma_gflops(Exec const &space, int threads) {
  // Per thread, 64 independent chains (enough to hide the FMA latency in every vector unit) that the compiler keeps
  // in vector registers; the sum is checked so that no chain is dropped.
  constexpr int chains = 64;
  int const steps = 1 << 16;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    float const m = 0.999999f, add = 1e-7f * static_cast<float>(r + 1);
    double total = 0;
    Timer<Exec> timer(space, "Tessel::gnn::bench::fma");
    Kokkos::parallel_reduce(
        "Tessel::gnn::bench::fma", Kokkos::RangePolicy<Exec>(space, 0, threads),
        KOKKOS_LAMBDA(int t, double &sum) {
          float acc[chains];
          for (int l = 0; l < chains; ++l)
            acc[l] = static_cast<float>(l + t);
          for (int s = 0; s < steps; ++s)
            for (int l = 0; l < chains; ++l)
              acc[l] = acc[l] * m + add;
          for (int l = 0; l < chains; ++l)
            sum += acc[l];
        },
        total);
    double const t = timer.seconds();
    TESSEL_REQUIRE(total > 0, "fma: wrong result");
    best = std::max(best, 2.0 * chains * static_cast<double>(steps) * threads / t * 1e-9);
  }
  return best;
}

} // namespace

Json HostLimits::json() const { return {{"threads", threads}, {"triad_gbs", triad_gbs}, {"fma_gflops", fma_gflops}}; }

HostLimits measure_host_limits(Exec const &space) {
  HostLimits l;
  l.threads = compat::concurrency(space);
  l.triad_gbs = triad_gbs(space);
  l.fma_gflops = fma_gflops(space, l.threads);
  return l;
}

double compulsory_bytes(Graph<std::int32_t> const &a, int f) {
  double const nnz = static_cast<double>(a.nnz());
  double const rows = static_cast<double>(a.num_rows()), cols = static_cast<double>(a.num_cols());
  double const matrix = (rows + 1) * sizeof(offset_type) + nnz * (sizeof(std::int32_t) + sizeof(float));
  return matrix + (cols + rows) * f * sizeof(float);
}

double roofline_seconds(HostLimits const &limits, double bytes, double flops) {
  return std::max(bytes / (limits.triad_gbs * 1e9), flops / (limits.fma_gflops * 1e9));
}

} // namespace tessel::gnn::bench

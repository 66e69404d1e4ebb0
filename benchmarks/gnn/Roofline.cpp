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

#if defined(__GNUC__)
// Eight floats per vector, as the library's host kernels: the accumulators of a W-wide chunk stay in registers.
typedef float gather_vec __attribute__((vector_size(32)));
#endif

/// Output row r sums the rows idx(r * per_row ..) of x, W columns at a time in registers (as the csr kernel).
template <int W> struct GatherRows {
  static constexpr int per_row = 16;
  Kokkos::View<float const **, Kokkos::LayoutRight, Kokkos::HostSpace> x;
  Kokkos::View<float **, Kokkos::LayoutRight, Kokkos::HostSpace> y;
  Kokkos::View<std::int32_t const *, Kokkos::HostSpace> idx;
  void operator()(std::int64_t r) const {
    auto const f = static_cast<std::int64_t>(x.extent(1));
    float const *xd = x.data();
    std::int32_t const *id = idx.data() + r * per_row;
    for (std::int64_t c0 = 0; c0 < f; c0 += W) {
#if defined(__GNUC__)
      if constexpr (W % 8 == 0) {
        gather_vec acc[W / 8] = {};
        for (int k = 0; k < per_row; ++k) {
          float const *xr = xd + static_cast<std::int64_t>(id[k]) * f + c0;
          for (int v = 0; v < W / 8; ++v) {
            gather_vec t;
            __builtin_memcpy(&t, xr + 8 * v, sizeof(t));
            acc[v] += t;
          }
        }
        __builtin_memcpy(&y(r, c0), acc, sizeof(acc));
        continue;
      }
#endif
      float acc[W] = {};
      for (int k = 0; k < per_row; ++k) {
        float const *xr = xd + static_cast<std::int64_t>(id[k]) * f + c0;
        for (int w = 0; w < W; ++w)
          acc[w] += xr[w];
      }
      for (int w = 0; w < W; ++w)
        y(r, c0 + w) = acc[w];
    }
  }
};

template <int W> double gather_gbs(Exec const &space, int f) {
  using Mem = Kokkos::HostSpace;
  std::int64_t const table_rows = (std::int64_t{64} << 20) / (4 * f), out_rows = (std::int64_t{16} << 20) / (4 * f);
  Kokkos::View<float **, Kokkos::LayoutRight, Mem> x(
      Kokkos::view_alloc(space, std::string("Tessel::gnn::bench::gather_x")), table_rows, f);
  Kokkos::View<float **, Kokkos::LayoutRight, Mem> y(
      Kokkos::view_alloc(space, std::string("Tessel::gnn::bench::gather_y")), out_rows, f);
  Kokkos::View<std::int32_t *, Mem> idx(Kokkos::view_alloc(space, std::string("Tessel::gnn::bench::gather_idx")),
                                        out_rows * GatherRows<W>::per_row);
  Kokkos::deep_copy(space, x, 1.0f);
  Kokkos::parallel_for(
      "Tessel::gnn::bench::gather_init", Kokkos::RangePolicy<Exec>(space, 0, idx.extent(0)),
      KOKKOS_LAMBDA(std::int64_t k) { // splitmix64: uniform rows, no RNG state
        std::uint64_t z = static_cast<std::uint64_t>(k) + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        idx(k) = static_cast<std::int32_t>((z ^ (z >> 31)) % static_cast<std::uint64_t>(table_rows));
      });
  GatherRows<W> const body{x, y, idx};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    Timer<Exec> timer(space, "Tessel::gnn::bench::gather");
    Kokkos::parallel_for("Tessel::gnn::bench::gather", Kokkos::RangePolicy<Exec>(space, 0, out_rows), body);
    double const t = timer.seconds();
    best = std::max(best, static_cast<double>(idx.extent(0)) * f * sizeof(float) / t * 1e-9);
  }
  TESSEL_REQUIRE(y(out_rows - 1, f - 1) == static_cast<float>(GatherRows<W>::per_row), "gather: wrong result");
  return best;
}

double gather_gbs(Exec const &space, int f) {
  // The widest register chunk that divides the width, as the csr kernel's chunks.
  if (f % 64 == 0)
    return gather_gbs<64>(space, f);
  if (f % 16 == 0)
    return gather_gbs<16>(space, f);
  if (f % 8 == 0)
    return gather_gbs<8>(space, f);
  return gather_gbs<1>(space, f);
}

} // namespace

Json HostLimits::json() const {
  Json gather = Json::object();
  for (auto const &[f, g] : gather_gbs)
    gather[std::to_string(f)] = g;
  return {{"threads", threads}, {"triad_gbs", triad_gbs}, {"fma_gflops", fma_gflops}, {"gather_gbs", gather}};
}

HostLimits measure_host_limits(Exec const &space, std::vector<int> const &widths) {
  HostLimits l;
  l.threads = compat::concurrency(space);
  l.triad_gbs = triad_gbs(space);
  l.fma_gflops = fma_gflops(space, l.threads);
  for (int f : widths)
    l.gather_gbs[f] = gather_gbs(space, f);
  return l;
}

double no_reuse_seconds(HostLimits const &limits, Graph<std::int32_t> const &a, int f) {
  return static_cast<double>(a.nnz()) * f * sizeof(float) / (limits.gather_gbs.at(f) * 1e9);
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

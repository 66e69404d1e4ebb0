#include "Gemm.hpp"

#include <tessel/core/Error.hpp>

#include <Kokkos_Core.hpp>

#define TESSEL_COMPAT_KOKKOS_BLAS
#include <tessel/core/KokkosCompat.hpp>

#include <dlfcn.h>

#include <cstdlib>

namespace tessel::moe::Impl {

namespace {

template <class T>
void gemm_impl(HostExecSpace const &space, MatRef<T const> a, MatRef<T const> b, T beta, MatRef<T> c) {
  TESSEL_REQUIRE(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows, "gemm: shapes do not match: A ", a.rows, "x",
                 a.cols, ", B ", b.rows, "x", b.cols, ", C ", c.rows, "x", c.cols);
  if (c.rows == 0 || c.cols == 0)
    return;
  if (a.cols == 0) {
    for (std::int64_t i = 0; i < c.rows; ++i)
      for (std::int64_t j = 0; j < c.cols; ++j)
        c.data[i * c.ld + j] = beta == T(0) ? T(0) : beta * c.data[i * c.ld + j];
    return;
  }
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using ConstView = Kokkos::View<T const **, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
  using View = Kokkos::View<T **, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
  // A parent of ld columns, then a column subview: a LayoutRight View with stride ld, which Kokkos Kernels
  // hands to the BLAS as the leading dimension.
  auto const pair = [](std::int64_t n) { return Kokkos::make_pair(std::int64_t{0}, n); };
  ConstView const pa(a.data, a.rows, a.ld), pb(b.data, b.rows, b.ld);
  View const pc(c.data, c.rows, c.ld);
  auto const sa = Kokkos::subview(pa, Kokkos::ALL, pair(a.cols));
  auto const sb = Kokkos::subview(pb, Kokkos::ALL, pair(b.cols));
  auto const sc = Kokkos::subview(pc, Kokkos::ALL, pair(c.cols));
  static_assert(std::is_same<typename decltype(sc)::array_layout, Kokkos::LayoutRight>::value,
                "column subviews must stay LayoutRight to reach the BLAS");
  compat::gemm(space, "N", "N", T(1), sa, sb, beta, sc);
}

} // namespace

void gemm(HostExecSpace const &space, MatRef<float const> a, MatRef<float const> b, float beta, MatRef<float> c) {
  gemm_impl(space, a, b, beta, c);
}
void gemm(HostExecSpace const &space, MatRef<double const> a, MatRef<double const> b, double beta, MatRef<double> c) {
  gemm_impl(space, a, b, beta, c);
}

int limit_blas_threads() {
  using GetFn = int (*)();
  using SetFn = void (*)(int);
  auto const get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  auto const set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!set)
    return -1;
  int const previous = get ? get() : -1;
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && std::getenv("OMP_NUM_THREADS") == nullptr)
    set(1);
  return previous;
}

} // namespace tessel::moe::Impl

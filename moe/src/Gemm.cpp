#include "Gemm.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>

#include <Kokkos_Core.hpp>

#define TESSEL_COMPAT_KOKKOS_BLAS
#include <tessel/core/KokkosCompat.hpp>

#include <dlfcn.h>

#include <cstdlib>

namespace tessel::moe::Impl {

template <class ExecSpace, class T>
void gemm(ExecSpace const &space, MatRef<T const> a, MatRef<T const> b, T beta, MatRef<T> c) {
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
  // The device names the instance's space: Kokkos Kernels 4 calls the BLAS only for views of that device.
  using Device = Kokkos::Device<ExecSpace, Kokkos::HostSpace>;
  using ConstView = Kokkos::View<T const **, Kokkos::LayoutRight, Device, Unmanaged>;
  using View = Kokkos::View<T **, Kokkos::LayoutRight, Device, Unmanaged>;
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

#define TESSEL_MOE_INSTANTIATE_GEMM(SPACE)                                                                             \
  template void gemm(SPACE const &, MatRef<float const>, MatRef<float const>, float, MatRef<float>);                   \
  template void gemm(SPACE const &, MatRef<double const>, MatRef<double const>, double, MatRef<double>);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_GEMM)

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

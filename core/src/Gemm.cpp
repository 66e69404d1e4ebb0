#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Gemm.hpp>

#include <Kokkos_Core.hpp>

#define TESSEL_COMPAT_KOKKOS_BLAS
#include <tessel/core/KokkosCompat.hpp>

#include <dlfcn.h>

#include <cstdlib>

namespace tessel {

template <class ExecSpace, class T>
void gemm(ExecSpace const &space, Op op_a, Op op_b, T alpha, MatrixRef<T const> a, MatrixRef<T const> b, T beta,
          MatrixRef<T> c) {
  bool const ta = op_a == Op::transpose, tb = op_b == Op::transpose;
  auto const m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  auto const kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  TESSEL_REQUIRE(k == kb && c.rows == m && c.cols == n, "gemm: op(A) is ", m, " x ", k, ", op(B) is ", kb, " x ", n,
                 ", C is ", c.rows, " x ", c.cols);
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    if (beta != T(1))
      Kokkos::parallel_for(
          "Tessel::core::gemm_scale", Kokkos::RangePolicy<ExecSpace>(space, 0, c.rows), KOKKOS_LAMBDA(std::int64_t i) {
            for (std::int64_t j = 0; j < c.cols; ++j)
              c(i, j) = beta == T(0) ? T(0) : beta * c(i, j);
          });
    return;
  }
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  // The device names the instance's space: Kokkos Kernels 4 calls the BLAS only for views of that device.
  using Device = Kokkos::Device<ExecSpace, Kokkos::HostSpace>;
  using ConstView = Kokkos::View<T const **, Kokkos::LayoutRight, Device, Unmanaged>;
  using View = Kokkos::View<T **, Kokkos::LayoutRight, Device, Unmanaged>;
  // A parent of ld columns, then a column subview: a LayoutRight View with stride ld, which Kokkos Kernels hands to
  // the BLAS as the leading dimension.
  auto const first = [](std::int64_t count) { return Kokkos::make_pair(std::int64_t{0}, count); };
  ConstView const pa(a.data, a.rows, a.ld), pb(b.data, b.rows, b.ld);
  View const pc(c.data, c.rows, c.ld);
  auto const sa = Kokkos::subview(pa, Kokkos::ALL, first(a.cols));
  auto const sb = Kokkos::subview(pb, Kokkos::ALL, first(b.cols));
  auto const sc = Kokkos::subview(pc, Kokkos::ALL, first(c.cols));
  static_assert(std::is_same<typename decltype(sc)::array_layout, Kokkos::LayoutRight>::value,
                "column subviews must stay LayoutRight to reach the BLAS");
  compat::gemm(space, ta ? "T" : "N", tb ? "T" : "N", alpha, sa, sb, beta, sc);
}

#define TESSEL_CORE_INSTANTIATE_GEMM(SPACE)                                                                            \
  template void gemm(SPACE const &, Op, Op, float, MatrixRef<float const>, MatrixRef<float const>, float,              \
                     MatrixRef<float>);                                                                                \
  template void gemm(SPACE const &, Op, Op, double, MatrixRef<double const>, MatrixRef<double const>, double,          \
                     MatrixRef<double>);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_CORE_INSTANTIATE_GEMM)

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

} // namespace tessel

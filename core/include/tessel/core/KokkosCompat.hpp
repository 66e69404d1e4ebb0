#ifndef TESSEL_CORE_KOKKOSCOMPAT_HPP
#define TESSEL_CORE_KOKKOSCOMPAT_HPP

/// \file KokkosCompat.hpp
/// \brief The one place where Tessel absorbs differences between Kokkos 3.4 (Debian's) and Kokkos 4.x.
///
/// Every guard names the Kokkos release that retires it. Nothing else in Tessel may test KOKKOS_VERSION.

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/// True when the Kokkos in use is at least major.minor.patch.
// FIXME: remove when Kokkos 4.0 is required (KOKKOS_VERSION_GREATER_EQUAL appeared in 4.0).
#define TESSEL_KOKKOS_AT_LEAST(major, minor, patch) (KOKKOS_VERSION >= ((major)*10000 + (minor)*100 + (patch)))

namespace tessel::compat {

/// \brief True where Kokkos can split an execution space into independent instances (partition_space, 3.6+).
// FIXME: remove when Kokkos 3.6 is required.
inline constexpr bool has_partition_space = TESSEL_KOKKOS_AT_LEAST(3, 6, 0);

/// \brief Kokkos::is_view (3.6+) or Kokkos::Impl::is_view (3.4).
// FIXME: remove when Kokkos 3.6 is required.
#if TESSEL_KOKKOS_AT_LEAST(3, 6, 0)
template <class T> inline constexpr bool is_view_v = Kokkos::is_view<T>::value;
#else
template <class T> inline constexpr bool is_view_v = Kokkos::Impl::is_view<T>::value;
#endif

/// \brief Number of dimensions of a View type (View::rank() is a function from 4.1; a static member before).
// FIXME: remove when Kokkos 4.1 is required.
template <class View> constexpr int view_rank() { return static_cast<int>(View::rank); }

/// \brief Concurrency of an execution space instance (static in 3.x, a member from 4.0).
// FIXME: remove when Kokkos 4.0 is required.
template <class ExecSpace> int concurrency(ExecSpace const &space) {
#if TESSEL_KOKKOS_AT_LEAST(4, 0, 0)
  return space.concurrency();
#else
  (void)space;
  return ExecSpace::concurrency();
#endif
}

/// \brief True where fences carry a label to Kokkos Tools (3.6+).
// FIXME: remove when Kokkos 3.6 is required.
inline constexpr bool has_labelled_fences = TESSEL_KOKKOS_AT_LEAST(3, 6, 0);

/// \brief Fences one execution space instance; the label reaches Kokkos Tools where Kokkos supports it.
// FIXME: remove when Kokkos 3.6 is required (labelled fences).
template <class ExecSpace> void fence(ExecSpace const &space, std::string const &label) {
#if TESSEL_KOKKOS_AT_LEAST(3, 6, 0)
  space.fence(label);
#else
  (void)label;
  space.fence();
#endif
}

/// \brief Splits \p space into \p n instances with equal weights.
///
/// Kokkos 3.6+ returns independent instances from partition_space (on CUDA each owns a new stream). A host space
/// cannot give more parts than it has threads (Kokkos 4.6's OpenMP aborts when a part would get none): there
/// \p space is split into as many parts as it has threads and the \p n instances share them round-robin, which
/// is correct (work on a shared instance is ordered) but runs those instances' work one after another. Kokkos 3.4
/// has no partition_space: there the result is \p n copies of \p space. Tessel's CUDA layer does not depend on
/// this (it owns its streams, see tessel::cuda::Stream).
// FIXME: remove the 3.4 fallback when Kokkos 3.6 is required.
template <class ExecSpace> std::vector<ExecSpace> partition_space(ExecSpace const &space, int n) {
  std::vector<ExecSpace> instances;
  instances.reserve(static_cast<std::size_t>(n));
#if TESSEL_KOKKOS_AT_LEAST(3, 6, 0)
  int parts = n;
  if constexpr (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible)
    parts = std::max(1, std::min(n, concurrency(space)));
  if (parts == 1) {
    for (int i = 0; i < n; ++i)
      instances.push_back(space);
    return instances;
  }
  // The vector overload needs a non-const lvalue before 4.1 and returns std::vector up to 4.6, std::array-like
  // after; copying element by element accepts every spelling.
  std::vector<int> weights(static_cast<std::size_t>(parts), 1);
  auto split = Kokkos::Experimental::partition_space(space, weights);
  for (int i = 0; i < n; ++i)
    instances.push_back(split[static_cast<std::size_t>(i % parts)]);
#else
  for (int i = 0; i < n; ++i)
    instances.push_back(space);
#endif
  return instances;
}

/// \brief Kokkos::Profiling::ScopedRegion (4.1+) for every version: a region visible to Kokkos Tools.
// FIXME: remove when Kokkos 4.1 is required.
class ScopedRegion {
public:
  /// Opens the region \p name; it closes when the object is destroyed.
  explicit ScopedRegion(std::string const &name) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(ScopedRegion const &) = delete;
  ScopedRegion &operator=(ScopedRegion const &) = delete;
};

/// \brief Kokkos release as "major.minor.patch".
inline std::string kokkos_version_string() {
  int const v = KOKKOS_VERSION;
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

} // namespace tessel::compat

#endif

// Kokkos Kernels differences, compiled only in translation units that use Kokkos Kernels (so that core does not
// depend on it, and its heavy headers stay where they are needed): define TESSEL_COMPAT_KOKKOS_BLAS (gemm) or
// TESSEL_COMPAT_KOKKOS_SPARSE (spmv) before including this header. These sections sit outside the include guard,
// so they are added even when this header was included earlier.
#if defined(TESSEL_COMPAT_KOKKOS_BLAS) || defined(TESSEL_COMPAT_KOKKOS_SPARSE)
#include <KokkosKernels_config.h>
// Standalone Kokkos Kernels releases state their version in KokkosKernels_config.h (4.6.01 does); Debian's Trilinos
// 13.2 package (the Kokkos Kernels of its Kokkos 3.4) states none and is tied to the Kokkos of the same Trilinos
// installation, which TesselFindKokkos checks.
#if defined(KOKKOSKERNELS_VERSION_MAJOR) && defined(KOKKOSKERNELS_VERSION_MINOR)
static_assert(KOKKOSKERNELS_VERSION_MAJOR == KOKKOS_VERSION / 10000 &&
                  KOKKOSKERNELS_VERSION_MINOR == KOKKOS_VERSION / 100 % 100,
              "Kokkos Kernels must be the release of the Kokkos it is compiled with");
// Kokkos Kernels 4.0 takes an execution space instance first in gemm and spmv.
#define TESSEL_KOKKOS_KERNELS_HAS_INSTANCES (KOKKOSKERNELS_VERSION_MAJOR >= 4)
#else
#define TESSEL_KOKKOS_KERNELS_HAS_INSTANCES 0
#endif
#endif

#if defined(TESSEL_COMPAT_KOKKOS_BLAS) && !defined(TESSEL_CORE_KOKKOSCOMPAT_BLAS)
#define TESSEL_CORE_KOKKOSCOMPAT_BLAS
#include <KokkosBlas3_gemm.hpp>
namespace tessel::compat {
namespace Impl {
/// \p v as an unmanaged View whose device type names \p ExecSpace. Kokkos Kernels 4 calls the system BLAS only
/// when the views' device matches the instance it is given (a Serial instance with views of the default host
/// device, OpenMP, silently runs its own, slower and differently rounded, GEMM).
template <class ExecSpace, class V> auto on_device_of(V const &v) {
  using Device = Kokkos::Device<ExecSpace, typename V::memory_space>;
  if constexpr (std::is_same_v<typename V::device_type, Device>) {
    return v;
  } else {
    static_assert(!std::is_same_v<typename V::array_layout, Kokkos::LayoutStride>, "gemm: strided views");
    if (!v.span_is_contiguous())
      Kokkos::abort("Tessel::compat::gemm: a view whose device is not the instance's must be contiguous");
    return Kokkos::View<typename V::data_type, typename V::array_layout, Device,
                        Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.layout());
  }
}
} // namespace Impl

/// \brief KokkosBlas::gemm on \p space. Before Kokkos Kernels 4.0 there is no instance overload: the call is
/// ordered after the instance's work by a fence and runs on the default instance of the space.
// FIXME: remove the fallback when Kokkos Kernels 4.0 is required.
template <class ExecSpace, class A, class B, class C>
void gemm(ExecSpace const &space, char const *trans_a, char const *trans_b, typename C::const_value_type alpha,
          A const &a, B const &b, typename C::const_value_type beta, C const &c) {
#if TESSEL_KOKKOS_KERNELS_HAS_INSTANCES
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, Impl::on_device_of<ExecSpace>(a), Impl::on_device_of<ExecSpace>(b),
                   beta, Impl::on_device_of<ExecSpace>(c));
#else
  fence(space, "Tessel::compat::gemm");
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
#endif
}
} // namespace tessel::compat
#endif

#if defined(TESSEL_COMPAT_KOKKOS_SPARSE) && !defined(TESSEL_CORE_KOKKOSCOMPAT_SPARSE)
#define TESSEL_CORE_KOKKOSCOMPAT_SPARSE
#include <KokkosSparse_spmv.hpp>
namespace tessel::compat {
/// \brief KokkosSparse::spmv on \p space (see gemm for Kokkos Kernels before 4.0).
// FIXME: remove the fallback when Kokkos Kernels 4.0 is required.
template <class ExecSpace, class Matrix, class X, class Y>
void spmv(ExecSpace const &space, char const *mode, typename Y::const_value_type alpha, Matrix const &a, X const &x,
          typename Y::const_value_type beta, Y const &y) {
#if TESSEL_KOKKOS_KERNELS_HAS_INSTANCES
  KokkosSparse::spmv(space, mode, alpha, a, x, beta, y);
#else
  fence(space, "Tessel::compat::spmv");
  KokkosSparse::spmv(mode, alpha, a, x, beta, y);
#endif
}
} // namespace tessel::compat
#endif

#ifndef TESSEL_CORE_KOKKOSCOMPAT_HPP
#define TESSEL_CORE_KOKKOSCOMPAT_HPP

/// \file KokkosCompat.hpp
/// \brief The one place where Tessel absorbs differences between Kokkos 3.4 (Debian's) and Kokkos 4.x.
///
/// Every guard names the Kokkos release that retires it. Nothing else in Tessel may test KOKKOS_VERSION.

#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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
/// Kokkos 3.6+ returns independent instances from partition_space (on CUDA each owns a new stream). Kokkos 3.4
/// has no partition_space: there the fallback returns \p n copies of \p space, which are correct but execute
/// one after another. Tessel's CUDA layer does not depend on this (it owns its streams, see tessel::cuda::Stream).
// FIXME: remove the fallback when Kokkos 3.6 is required.
template <class ExecSpace> std::vector<ExecSpace> partition_space(ExecSpace const &space, int n) {
  std::vector<ExecSpace> instances;
  instances.reserve(static_cast<std::size_t>(n));
#if TESSEL_KOKKOS_AT_LEAST(3, 6, 0)
  // The vector overload needs a non-const lvalue before 4.1 and returns std::vector up to 4.6, std::array-like
  // after; copying element by element accepts every spelling.
  std::vector<int> weights(static_cast<std::size_t>(n), 1);
  auto parts = Kokkos::Experimental::partition_space(space, weights);
  for (std::size_t i = 0; i < parts.size(); ++i)
    instances.push_back(parts[i]);
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

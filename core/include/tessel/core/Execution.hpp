#ifndef TESSEL_CORE_EXECUTION_HPP
#define TESSEL_CORE_EXECUTION_HPP

/// \file Execution.hpp
/// \brief Independent execution-space instances, a fencing timer and profiling regions.

#include <tessel/core/Error.hpp>
#include <tessel/core/KokkosCompat.hpp>

#include <Kokkos_Core.hpp>

#include <chrono>
#include <string>
#include <vector>

// One per host backend, empty where Kokkos lacks it (for TESSEL_FOR_EACH_HOST_EXECUTION_SPACE).
#ifdef KOKKOS_ENABLE_SERIAL
#define TESSEL_IMPL_HOST_SPACE_SERIAL(MACRO) MACRO(Kokkos::Serial)
#else
#define TESSEL_IMPL_HOST_SPACE_SERIAL(MACRO)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
#define TESSEL_IMPL_HOST_SPACE_OPENMP(MACRO) MACRO(Kokkos::OpenMP)
#else
#define TESSEL_IMPL_HOST_SPACE_OPENMP(MACRO)
#endif
#ifdef KOKKOS_ENABLE_THREADS
#define TESSEL_IMPL_HOST_SPACE_THREADS(MACRO) MACRO(Kokkos::Threads)
#else
#define TESSEL_IMPL_HOST_SPACE_THREADS(MACRO)
#endif
/// \brief Calls \p MACRO(Space) once for every host execution space enabled in the Kokkos Tessel is built with
/// (Serial, OpenMP, Threads): the list from which the libraries instantiate their templates on an execution
/// space. Derived from Kokkos's own configuration macros, so it cannot disagree with the Kokkos in use.
#define TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(MACRO)                                                                    \
  TESSEL_IMPL_HOST_SPACE_SERIAL(MACRO) TESSEL_IMPL_HOST_SPACE_OPENMP(MACRO) TESSEL_IMPL_HOST_SPACE_THREADS(MACRO)

namespace tessel {

/// \brief True for the host execution spaces of TESSEL_FOR_EACH_HOST_EXECUTION_SPACE, for which Tessel's
/// libraries hold their host templates.
template <class ExecSpace> inline constexpr bool is_host_execution_space_v = false;
#define TESSEL_IMPL_HOST_SPACE_TRAIT(SPACE) template <> inline constexpr bool is_host_execution_space_v<SPACE> = true;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_IMPL_HOST_SPACE_TRAIT)
#undef TESSEL_IMPL_HOST_SPACE_TRAIT

namespace Impl {
template <class ExecSpace> struct RequireHostExecutionSpace {
  static_assert(is_host_execution_space_v<ExecSpace>,
                "this Tessel operation runs on the host execution spaces enabled in Kokkos (Serial, OpenMP, Threads); "
                "the execution space given is not one of them");
  using type = ExecSpace;
};
} // namespace Impl

/// \brief \p ExecSpace itself when it is one of the enabled host execution spaces; a compile-time error naming
/// them otherwise. Host operations declare it as a defaulted template parameter
/// (`template <class ExecSpace, class = host_execution_space_t<ExecSpace>>`), so that a call with another space
/// fails where it is written rather than at link time.
template <class ExecSpace> using host_execution_space_t = typename Impl::RequireHostExecutionSpace<ExecSpace>::type;

/// \brief \p n independent instances of \p space's execution space.
///
/// With Kokkos >= 3.6 this is partition_space: on CUDA each instance owns a new stream; a host space with fewer
/// threads than \p n gives one instance per thread, shared round-robin by the \p n returned. On Kokkos 3.4 the
/// instances are copies of \p space (work on them is correct but serialized); see compat::partition_space.
/// \pre n >= 1
template <class ExecSpace> std::vector<ExecSpace> make_instances(ExecSpace const &space, int n) {
  TESSEL_REQUIRE(n >= 1, "need at least one instance, asked for ", n);
  return compat::partition_space(space, n);
}

/// \brief A wall-clock timer that fences its execution space instance before reading the clock, so that the
/// time covers the work enqueued on the instance, not just its launch.
template <class ExecSpace = Kokkos::DefaultExecutionSpace> class Timer {
public:
  /// Fences \p space and starts; \p label names the fences for Kokkos Tools.
  explicit Timer(ExecSpace const &space = ExecSpace(), std::string label = "Tessel::Timer")
      : _space(space), _label(std::move(label)) {
    reset();
  }
  /// Fences and restarts.
  void reset() {
    compat::fence(_space, _label);
    _start = clock::now();
  }
  /// Fences and returns the seconds since construction or the last reset().
  double seconds() const {
    compat::fence(_space, _label);
    return std::chrono::duration<double>(clock::now() - _start).count();
  }

private:
  using clock = std::chrono::steady_clock;
  ExecSpace _space;
  std::string _label;
  clock::time_point _start;
};

/// \brief A profiling region visible to Kokkos Tools for the lifetime of the object.
using ScopedRegion = compat::ScopedRegion;

} // namespace tessel

#endif

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

namespace tessel {

/// \brief \p n independent instances of \p space's execution space.
///
/// With Kokkos >= 3.6 this is partition_space: on CUDA each instance owns a new stream. On Kokkos 3.4 the
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

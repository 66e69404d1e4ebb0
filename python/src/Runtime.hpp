#ifndef TESSEL_PYTHON_RUNTIME_HPP
#define TESSEL_PYTHON_RUNTIME_HPP
/// \file Runtime.hpp
/// \brief The Python module's hold on MPI and Kokkos (initialized at import, finalized at interpreter exit) and the
/// objects that keep Kokkos memory alive, which are released before Kokkos is finalized.
#include <nanobind/nanobind.h>

namespace tessel::python {

/// \brief Base of every bound object that owns Kokkos memory or a communicator: registered while alive, so that
/// finalize() can release what it holds before Kokkos and MPI end (Python may destroy the object later).
class Resource {
public:
  Resource();
  virtual ~Resource();
  Resource(Resource const &) = delete;
  Resource &operator=(Resource const &) = delete;
  /// Drops everything that holds Kokkos memory or a communicator; the object is unusable afterwards.
  virtual void release() = 0;
};

/// Initializes MPI (under an MPI launcher) and Kokkos once; later calls do nothing.
void initialize();
/// Releases every live Resource, then finalizes Kokkos and MPI (what this module initialized).
void finalize();
/// Throws a Python RuntimeError when finalize() already ran (a call after interpreter shutdown began).
void require_initialized(char const *where);
/// Raises KeyboardInterrupt (as a nanobind python_error) when Ctrl-C arrived; takes the GIL for the check.
void check_signals();

} // namespace tessel::python

#endif

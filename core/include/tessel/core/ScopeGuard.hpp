#ifndef TESSEL_CORE_SCOPEGUARD_HPP
#define TESSEL_CORE_SCOPEGUARD_HPP

/// \file ScopeGuard.hpp
/// \brief Initializes MPI (when launched under an MPI launcher) and then Kokkos; finalizes in reverse order.

#include <string>

namespace tessel {

/// \brief Owns the lifetime of MPI and Kokkos for an application or test driver.
///
/// MPI is initialized (with MPI_THREAD_MULTIPLE requested, so a dedicated communication thread may call MPI)
/// only when Tessel was built with MPI and the process was started by a launcher (mpiexec, srun, ...), or when
/// \p force_mpi is set. Kokkos is initialized next and strips its own --kokkos-* flags from argv, so the
/// application parses its flags after constructing the guard. Whatever was already initialized by the caller is
/// left alone and not finalized.
class ScopeGuard {
public:
  /// Initializes MPI (see above) and Kokkos with main()'s arguments, from which Kokkos removes its flags.
  /// \throws tessel::UsageError for a malformed `--kokkos-*` option.
  ScopeGuard(int &argc, char **&argv, bool force_mpi = false);
  /// Finalizes Kokkos, then MPI, where this guard initialized them.
  ~ScopeGuard();
  ScopeGuard(ScopeGuard const &) = delete;
  ScopeGuard &operator=(ScopeGuard const &) = delete;

  /// True when MPI is initialized (by this guard or before it).
  static bool mpi_active();
  /// The thread support MPI granted (an MPI_THREAD_* value), or -1 without MPI.
  static int mpi_thread_level();

private:
  bool _finalize_mpi = false;
  bool _finalize_kokkos = false;
};

/// \brief True when the environment shows an MPI launcher started this process.
bool launched_by_mpi();

/// \brief One-line description of the build: version, git hash, Kokkos version and enabled features.
std::string build_summary();

} // namespace tessel

#endif

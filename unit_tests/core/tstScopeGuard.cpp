// ScopeGuard with its own main: Kokkos strips its flags before the application parses argv, MPI stays down when
// the process was not started by an MPI launcher, and everything is finalized at scope exit.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
int failures = 0;
void check(bool ok, char const *what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}
} // namespace

int main() {
  char arg0[] = "tstScopeGuard", kokkos_flag[] = "--kokkos-disable-warnings", app_flag[] = "--app-flag",
       app_value[] = "7";
  char *args[] = {arg0, kokkos_flag, app_flag, app_value, nullptr};
  int argc = 4;
  char **argv = args;
  bool const launched = tessel::launched_by_mpi();
  {
    tessel::ScopeGuard guard(argc, argv);
    check(Kokkos::is_initialized(), "Kokkos is initialized inside the guard");
    check(argc == 3, "Kokkos removed its own flag from argv");
    check(argc >= 3 && std::strcmp(argv[1], "--app-flag") == 0 && std::strcmp(argv[2], "7") == 0,
          "the application's flags are left in order");
    check(tessel::ScopeGuard::mpi_active() == launched, "MPI is initialized exactly when launched by mpiexec");
    auto const world = tessel::Communicator::world();
    check(launched || world.kind() == tessel::CommBackend::self, "without mpiexec, world() is a Self communicator");
    check(!tessel::build_summary().empty(), "build summary");
    std::printf("%s\n", tessel::build_summary().c_str());
  }
  check(!Kokkos::is_initialized(), "Kokkos is finalized when the guard leaves scope");
  std::printf("%s\n", failures == 0 ? "[  PASSED  ] ScopeGuard" : "[  FAILED  ] ScopeGuard");
  return failures == 0 ? 0 : 1;
}

// ScopeGuard with its own main (the shared test main already owns a guard): Kokkos strips its flags before the
// application parses argv, MPI stays down when the process was not started by an MPI launcher, and everything is
// finalized at scope exit.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <Kokkos_Core.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

TEST(ScopeGuard, initializes_strips_kokkos_flags_and_finalizes) {
  char arg0[] = "tstScopeGuard", kokkos_flag[] = "--kokkos-disable-warnings", app_flag[] = "--app-flag",
       app_value[] = "7";
  char *args[] = {arg0, kokkos_flag, app_flag, app_value, nullptr};
  int argc = 4;
  char **argv = args;
  bool const launched = tessel::launched_by_mpi();
  {
    tessel::ScopeGuard guard(argc, argv);
    EXPECT_TRUE(Kokkos::is_initialized()) << "Kokkos is initialized inside the guard";
    ASSERT_EQ(argc, 3) << "Kokkos removed its own flag from argv";
    EXPECT_EQ(std::string(argv[1]), "--app-flag") << "the application's flags are left in order";
    EXPECT_EQ(std::string(argv[2]), "7");
    EXPECT_EQ(tessel::ScopeGuard::mpi_active(), launched) << "MPI is initialized exactly when launched by mpiexec";
    auto const world = tessel::Communicator::world();
    EXPECT_TRUE(launched || world.kind() == tessel::CommBackend::self)
        << "without mpiexec, world() is a Self communicator";
    EXPECT_FALSE(tessel::build_summary().empty());
    std::printf("%s\n", tessel::build_summary().c_str());
  }
  EXPECT_FALSE(Kokkos::is_initialized()) << "Kokkos is finalized when the guard leaves scope";
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

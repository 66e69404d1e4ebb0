// run_main with its own main: what each rank does is chosen by the first argument, and RunMainCheck.cmake checks
// the job's exit status and what it printed (each error message once, the abort only where a rank is blocked).
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Main.hpp>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

#ifdef TESSEL_ENABLE_MPI
#include <mpi.h>
#endif

int main(int argc, char **argv) {
  return tessel::run_main("tstMain", argc, argv, [](int argc, char **argv) {
    if (argc != 2)
      throw tessel::UsageError("expected one argument: the case to run");
    std::string const mode = argv[1];
    if (!Kokkos::is_initialized())
      throw std::logic_error("Kokkos is not initialized inside run_main");
    auto const comm = tessel::Communicator::world();
    int const rank = comm.rank();
    if (mode == "success") {
      double const ranks = comm.allreduce_value(1.0, tessel::ReduceOp::sum);
      if (static_cast<int>(ranks) != comm.size())
        throw std::logic_error("allreduce of ones gave " + std::to_string(ranks));
      std::printf("rank %d of %d: success\n", rank, comm.size());
      return tessel::exit_success;
    }
    if (mode == "status")
      return rank == comm.size() - 1 ? 3 : tessel::exit_success; // the worst status wins on every rank
    if (mode == "throw_all")
      throw tessel::Exception("every rank failed the same way");
    if (mode == "throw_std")
      throw std::runtime_error("a standard exception on rank " + std::to_string(rank));
    if (mode == "usage")
      throw tessel::UsageError("option --size expects a positive integer, got '-1'");
    if (mode == "throw_last_others_return") {
      if (rank == comm.size() - 1)
        throw tessel::Exception("only the last rank failed");
      return tessel::exit_success;
    }
    if (mode == "throw_last_others_blocked") {
      if (rank == comm.size() - 1)
        throw tessel::Exception("the last rank failed while the others wait for it");
#ifdef TESSEL_ENABLE_MPI
      // A collective of the application's own, without a timeout, that the failed rank never joins.
      MPI_Barrier(MPI_COMM_WORLD);
#endif
      return tessel::exit_success;
    }
    throw tessel::UsageError("unknown case '" + mode + "'");
  });
}

// Uses the installed headers and libraries: config header, ScopeGuard, a communicator, a Kokkos kernel on an
// execution-space instance, and (when built in) HDF5 I/O.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/ScopeGuard.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <string>

int main(int argc, char **argv) {
  tessel::ScopeGuard guard(argc, argv);
  std::printf("%s\n", tessel::build_summary().c_str());
  auto const comm = tessel::Communicator::world();
  auto const instances = tessel::make_instances(Kokkos::DefaultHostExecutionSpace(), 2);
  double sum = 0;
  Kokkos::parallel_reduce(
      "Tessel::consumer::sum", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(instances[1], 0, 100),
      KOKKOS_LAMBDA(int i, double &s) { s += i; }, sum);
  double const total = comm.allreduce_value(sum, tessel::ReduceOp::sum);
  bool ok = total == 4950.0 * comm.size();
#ifdef TESSEL_ENABLE_HDF5
  {
    std::string const path = "consumer_" + std::to_string(comm.rank()) + ".h5";
    {
      tessel::h5::File f(path, tessel::h5::Mode::truncate);
      f.write("x", std::vector<double>{sum});
      f.close();
    }
    ok = ok && tessel::h5::File(path).read<double>("x").data.at(0) == sum;
  }
#endif
  std::printf("consumer: %s (Tessel %s)\n", ok ? "ok" : "FAILED", TESSEL_VERSION_STRING);
  return ok ? 0 : 1;
}

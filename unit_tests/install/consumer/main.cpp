// Uses the installed headers and libraries: config header, ScopeGuard, a communicator, a Kokkos kernel on an
// execution-space instance, and (when built in) HDF5 I/O.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Gemm.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/ScopeGuard.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {
// Prints the check that failed, so that "consumer: FAILED" says which part of the installed library broke.
bool check(bool ok, char const *what) {
  if (!ok)
    std::printf("consumer: check failed: %s\n", what);
  return ok;
}
} // namespace

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
  bool ok = check(total == 4950.0 * comm.size(), "allreduce of a Kokkos reduction");
  // The GEMM reaches Kokkos Kernels and the BLAS through libtessel_core alone (the consumer links neither).
  std::vector<double> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4, -1.0);
  tessel::gemm(Kokkos::DefaultHostExecutionSpace(), tessel::Op::none, tessel::Op::none, 1.0,
               tessel::MatrixRef<double const>(a.data(), 2, 2), tessel::MatrixRef<double const>(b.data(), 2, 2), 0.0,
               tessel::MatrixRef<double>(c.data(), 2, 2));
  Kokkos::fence();
  ok = check(c == std::vector<double>{19, 22, 43, 50}, "tessel::gemm of two 2x2 matrices") && ok;
  auto const doc = tessel::parse_json(R"({"ranks": 2, "name": "x"})", "consumer");
  ok = check(tessel::json_get<int>(doc, "ranks", "consumer") == 2 && doc.dump() == R"({"ranks":2,"name":"x"})",
             "tessel::Json keeps values and key order") &&
       ok;
#ifdef TESSEL_ENABLE_HDF5
  {
    std::string const path = "consumer_" + std::to_string(comm.rank()) + ".h5";
    {
      tessel::h5::File f(path, tessel::h5::Mode::truncate);
      f.write("x", std::vector<double>{sum});
      f.close();
    }
    ok = check(tessel::h5::File(path).read<double>("x").data.at(0) == sum, "HDF5 write and read back") && ok;
  }
#endif
  std::printf("consumer: %s (Tessel %s)\n", ok ? "ok" : "FAILED", TESSEL_VERSION_STRING);
  return ok ? 0 : 1;
}

// Example 1 (core): what every Tessel application starts with.
//   - tessel::run_main: MPI (under mpiexec) and Kokkos up, the application's body, one clean end on every rank;
//   - a communicator (MPI's world, or one rank without mpiexec) and a collective;
//   - independent execution-space instances, each given its own share of a computation, and a fencing timer;
//   - a non-blocking message exchange, and a wait that gives up after a timeout instead of hanging.
// Run: mpiexec -n 2 ./tessel_example_core   (or ./tessel_example_core on one process)
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/core/Version.hpp>

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

namespace {

// The sum of i for i in [begin, end), computed on one instance; the caller fences.
double partial_sum(Kokkos::DefaultHostExecutionSpace const &instance, long begin, long end) {
  double sum = 0;
  Kokkos::parallel_reduce(
      "example::partial_sum", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(instance, begin, end),
      KOKKOS_LAMBDA(long i, double &s) { s += static_cast<double>(i); }, sum);
  return sum;
}

int run(int /*argc*/, char ** /*argv*/) {
  // [snippet:core-communicator]
  tessel::Communicator comm = tessel::Communicator::world(); // MPI world under mpiexec, one rank otherwise
  int const rank = comm.rank(), size = comm.size();
  // [snippet:core-communicator]
  if (rank == 0)
    std::printf("Tessel %s (git %s) on %d rank(s)\n", tessel::version().c_str(), tessel::git_hash().c_str(), size);
  int failures = 0;
  auto check = [&](bool ok, char const *what) {
    if (!ok) {
      std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what);
      ++failures;
    }
  };

  // Instances: this rank's share of 0 + 1 + ... + (n - 1) is split over two instances of the host execution
  // space. Work on different instances may run concurrently (with Kokkos >= 3.6 and a parallel backend); the
  // Timer fences the instance it was given before reading the clock.
  long const n = 1000000;
  long const begin = n * rank / size, end = n * (rank + 1) / size, middle = (begin + end) / 2;
  // [snippet:core-instances]
  auto const instances = tessel::make_instances(Kokkos::DefaultHostExecutionSpace(), 2);
  tessel::Timer<Kokkos::DefaultHostExecutionSpace> timer(instances[0]);
  double const local = partial_sum(instances[0], begin, middle) + partial_sum(instances[1], middle, end);
  double const total = comm.allreduce_value(local, tessel::ReduceOp::sum); // every rank gets the sum
  // [snippet:core-instances]
  double const seconds = timer.seconds();
  double const expected = 0.5 * static_cast<double>(n) * static_cast<double>(n - 1);
  check(total == expected, "the allreduce of the partial sums equals n (n - 1) / 2");
  if (rank == 0)
    std::printf("sum of 0..%ld over %d rank(s) x 2 instances: %.0f (expected %.0f), %.3f ms\n", n - 1, size, total,
                expected, 1e3 * seconds);

  // Point to point: each rank sends its rank number to the next one (a ring) and receives from the previous.
  // The messages are non-blocking; wait() has a timeout (the communicator's, 120 s unless TESSEL_COMM_TIMEOUT or
  // set_timeout() say otherwise).
  int const next = (rank + 1) % size, previous = (rank + size - 1) % size;
  int const sent = 100 + rank;
  int received = -1;
  tessel::Request recv = comm.irecv(&received, 1, previous, /*tag=*/1);
  tessel::Request send = comm.isend(&sent, 1, next, /*tag=*/1);
  send.wait();
  recv.wait();
  check(received == 100 + previous, "the ring delivered the previous rank's number");

  // A timed wait: a message nobody sends. Instead of hanging, the wait throws tessel::TimeoutError after the
  // timeout given, naming the peer it waited for; the request is cancelled, so the buffer may be reused.
  // [snippet:core-timed-wait]
  int never = 0;
  tessel::Request silent = comm.irecv(&never, 1, previous, /*tag=*/2);
  auto const start = std::chrono::steady_clock::now();
  try {
    silent.wait(std::chrono::milliseconds(200));
    check(false, "a message nobody sent was received");
  } catch (tessel::TimeoutError const &e) {
    // e.what(): "irecv of 4 bytes from rank 1 (tag 2) did not complete within 200 ms" (or similar)
    check(e.peer() == previous, "the timeout names the rank waited for");
  }
  // [snippet:core-timed-wait]
  double const waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  check(waited >= 0.2 && waited < 10, "the wait gave up after about its timeout");
  if (rank == 0)
    std::printf("a wait for a message nobody sends gave up after %.0f ms\n", 1e3 * waited);

  // Every rank's outcome: the job fails when any rank's checks failed.
  int const all_failures = comm.allreduce_value(failures, tessel::ReduceOp::sum);
  if (rank == 0 && all_failures == 0)
    std::printf("core example: all checks passed\n");
  else if (rank == 0)
    std::printf("core example: %d check(s) FAILED\n", all_failures);
  return all_failures == 0 ? tessel::exit_success : tessel::exit_failure;
}

} // namespace

// [snippet:core-main]
int main(int argc, char **argv) {
  // Starts MPI (when launched by mpiexec) and Kokkos, runs the body, and ends the same way on every rank: an
  // exception thrown on some ranks is printed once, and every rank exits with the worst status.
  return tessel::run_main("tessel_example_core", argc, argv, run);
}
// [snippet:core-main]

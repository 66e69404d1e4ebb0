#ifndef TESSEL_CORE_MAIN_HPP
#define TESSEL_CORE_MAIN_HPP

/// \file Main.hpp
/// \brief The documented way for an application's main() to start MPI and Kokkos and to end the same way on every
/// rank, also when an exception escapes.

#include <functional>

namespace tessel {

/// \name Exit statuses of run_main and of every Tessel tool
//@{
/// Plain `int`s, so that a body may return them and other statuses alike.
inline constexpr int exit_success = 0; ///< success
inline constexpr int exit_failure = 1; ///< a runtime error, a failed check of the results, or a communication fault
inline constexpr int exit_usage = 2;   ///< a malformed or out-of-range option, argument or environment variable
//@}

/// \brief Runs an application's main body under MPI and Kokkos and ends the job cleanly on every rank.
///
/// Starts MPI (when launched by mpiexec, srun, ...) and Kokkos with a tessel::ScopeGuard, calls \p body with the
/// arguments Kokkos left (its `--kokkos-*` flags removed), and returns the status the process should exit with:
/// \p body's result, or, when \p body throws, exit_usage for a tessel::UsageError and exit_failure for any other
/// exception, after printing `NAME: error: MESSAGE` on standard error. A malformed `--kokkos-*` option is a usage
/// error too.
///
/// Under MPI every rank, failed or not, reports its outcome before MPI is finalized, so the job ends the same way
/// everywhere: rank 0 prints each distinct message once (`NAME: error on rank 1 of 4: ...` when only some ranks
/// failed), and every rank returns the worst status. No rank is left waiting in `MPI_Finalize` for a rank that
/// threw: a rank that does not report within a few seconds of another's failure (for example one blocked in a
/// collective the failed rank never joined), or within the communication timeout (`TESSEL_COMM_TIMEOUT`) plus the
/// time it worked since the ranks last communicated when nobody failed, and any tessel::CommunicationError
/// (an MPI or NCCL error, a peer that did not answer) end the job on every rank with `MPI_Abort`.
///
/// Use it as the whole of main():
/// \code
/// int main(int argc, char **argv) {
///   return tessel::run_main("my-app", argc, argv, [](int argc, char **argv) {
///     auto comm = tessel::Communicator::world();
///     // ... the application; throw on an error
///     return tessel::exit_success;
///   });
/// }
/// \endcode
/// Objects that hold Kokkos Views or communicators must live inside \p body: MPI and Kokkos are finalized after it
/// returns. If MPI or Kokkos is already initialized, run_main leaves them as they are (and does not finalize them).
///
/// \param name the program's name, the prefix of error messages
/// \param argc, argv main()'s arguments
/// \param body the application; its return value is the exit status when it does not throw
int run_main(char const *name, int argc, char **argv, std::function<int(int argc, char **argv)> const &body);

/// \brief Whether run_main adds to an error's message where in Tessel's sources it was raised
/// (tessel::Exception::where(), for developers). Initially true when the environment has `TESSEL_DEBUG=1`.
bool debug_messages();
/// \brief Sets debug_messages() (the tools do for `--debug`).
void set_debug_messages(bool on);

} // namespace tessel

#endif

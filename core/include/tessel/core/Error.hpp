#ifndef TESSEL_CORE_ERROR_HPP
#define TESSEL_CORE_ERROR_HPP

/// \file Error.hpp
/// \brief Tessel's exception types and the precondition / library-call checking macros.

#include <chrono>
#include <cmath>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessel {

/// \brief Base of every error Tessel raises on the host (a std::runtime_error).
///
/// what() is the message for people (the file, option or rank at fault and what was expected); where() is the
/// place in Tessel's sources that raised it, for developers (tools print it with --debug or TESSEL_DEBUG=1).
class Exception : public std::runtime_error {
public:
  /// An error with the message \p what and the place in Tessel's sources \p where that raised it.
  explicit Exception(std::string const &what, std::string where = {})
      : std::runtime_error(what), _where(std::move(where)) {}
  /// "tessel::function (file:line)", or empty when the raiser did not say.
  std::string const &where() const noexcept { return _where; }

private:
  std::string _where;
};

/// \brief A command-line option, environment variable or argument that is malformed or out of range: the tools
/// exit with status 2 (usage) instead of 1 (runtime error).
class UsageError : public Exception {
public:
  using Exception::Exception;
};

/// \brief A communication failure (an MPI or NCCL error, or a peer that did not answer): the job cannot go on,
/// so the tools end it on every rank (MPI_Abort) instead of finalizing.
class CommunicationError : public Exception {
public:
  using Exception::Exception;
};

/// \brief Deadline length of every blocking wait in Tessel.
using Timeout = std::chrono::milliseconds;

/// \brief A wait that ran past its deadline; the message names the operation and the peer waited for.
class TimeoutError : public CommunicationError {
public:
  /// A timeout described by \p what, waiting for \p peer (-1 when unknown).
  TimeoutError(std::string const &what, int peer) : CommunicationError(what), _peer(peer) {}
  /// The rank that did not answer, or -1 when a collective cannot tell which one.
  int peer() const noexcept { return _peer; }

private:
  int _peer;
};

namespace Impl {
[[noreturn]] void throw_exception(char const *file, int line, char const *function, std::string const &message);
[[noreturn]] void throw_usage_error(char const *file, int line, char const *function, std::string const &message);
/// "tessel::function (file:line)" with the file relative to Tessel's source tree.
std::string source_location(char const *file, int line, char const *function);
[[noreturn]] void throw_mpi_error(char const *file, int line, char const *call, int code);

/// Concatenates its arguments with operator<< (so messages can mix strings and numbers).
template <class... Args> std::string concat(Args const &...args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
} // namespace Impl

/// \brief Index of the first non-finite value in [data, data + n), or n if all are finite.
template <class T> std::size_t first_non_finite(T const *data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(static_cast<double>(data[i])))
      return i;
  return n;
}

} // namespace tessel

/// \brief Throws tessel::Exception when \p cond is false; where() names the calling function, file and line.
/// The remaining arguments are streamed into the message: TESSEL_REQUIRE(n > 0, "n must be positive, got ", n).
#define TESSEL_REQUIRE(cond, ...)                                                                                      \
  do {                                                                                                                 \
    if (!(cond))                                                                                                       \
      ::tessel::Impl::throw_exception(__FILE__, __LINE__, __func__, ::tessel::Impl::concat(__VA_ARGS__));              \
  } while (false)

/// \brief Throws tessel::UsageError when \p cond is false (for options, arguments and environment variables).
#define TESSEL_REQUIRE_USAGE(cond, ...)                                                                                \
  do {                                                                                                                 \
    if (!(cond))                                                                                                       \
      ::tessel::Impl::throw_usage_error(__FILE__, __LINE__, __func__, ::tessel::Impl::concat(__VA_ARGS__));            \
  } while (false)

/// \brief Throws tessel::Exception unconditionally (for unreachable branches and failed lookups).
#define TESSEL_THROW(...)                                                                                              \
  ::tessel::Impl::throw_exception(__FILE__, __LINE__, __func__, ::tessel::Impl::concat(__VA_ARGS__))

/// \brief Checks an MPI return code; on failure throws CommunicationError with the MPI error string and the call.
#define TESSEL_MPI_CHECK(call)                                                                                         \
  do {                                                                                                                 \
    int const tessel_mpi_rc_ = (call);                                                                                 \
    if (tessel_mpi_rc_ != 0 /* MPI_SUCCESS */)                                                                         \
      ::tessel::Impl::throw_mpi_error(__FILE__, __LINE__, #call, tessel_mpi_rc_);                                      \
  } while (false)

#endif

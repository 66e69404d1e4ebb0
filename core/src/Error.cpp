#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>

#ifdef TESSEL_ENABLE_MPI
#include <mpi.h>
#endif

namespace tessel::Impl {

void throw_exception(char const *file, int line, char const *function, std::string const &message) {
  throw Exception(concat("tessel::", function, ": ", message, " [", file, ":", line, "]"));
}

void throw_mpi_error(char const *file, int line, char const *call, int code) {
  std::string text = "unknown MPI error";
#ifdef TESSEL_ENABLE_MPI
  char buffer[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, buffer, &length) == MPI_SUCCESS)
    text.assign(buffer, static_cast<std::size_t>(length));
#endif
  throw Exception(concat("MPI call ", call, " failed with code ", code, " (", text, ") [", file, ":", line, "]"));
}

} // namespace tessel::Impl

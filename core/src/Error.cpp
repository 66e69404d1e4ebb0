#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>

#include <cstring>

#ifdef TESSEL_ENABLE_MPI
#include <mpi.h>
#endif

namespace tessel::Impl {

std::string source_location(char const *file, int line, char const *function) {
  // The last three components ("core/src/H5File.cpp") say where without the build machine's directories.
  char const *start = file;
  int slashes = 0;
  for (char const *p = file + std::strlen(file); p > file; --p)
    if (p[-1] == '/' && ++slashes == 3) {
      start = p;
      break;
    }
  return concat("tessel::", function, " (", start, ":", line, ")");
}

void throw_exception(char const *file, int line, char const *function, std::string const &message) {
  throw Exception(message, source_location(file, line, function));
}

void throw_usage_error(char const *file, int line, char const *function, std::string const &message) {
  throw UsageError(message, source_location(file, line, function));
}

void throw_mpi_error(char const *file, int line, char const *call, int code) {
  std::string text = "unknown MPI error";
#ifdef TESSEL_ENABLE_MPI
  char buffer[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, buffer, &length) == MPI_SUCCESS)
    text.assign(buffer, static_cast<std::size_t>(length));
#endif
  throw CommunicationError(concat("MPI call failed: ", text, " (code ", code, ")"),
                           concat(call, " (", source_location(file, line, "mpi"), ")"));
}

} // namespace tessel::Impl

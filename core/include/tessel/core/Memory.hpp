#ifndef TESSEL_CORE_MEMORY_HPP
#define TESSEL_CORE_MEMORY_HPP

/// \file Memory.hpp
/// \brief Sizes checked against this machine's memory before they are allocated, so that a size read from a file
/// or derived from options fails with the size named instead of a bare "out of memory" (or the kernel's kill).

#include <string>

namespace tessel {

/// \brief Where a size came from, which decides how its refusal is reported.
enum class SizeSource {
  input,  ///< a file or a peer: tessel::Exception (exit status 1 in the tools)
  options ///< command-line options: tessel::UsageError (exit status 2)
};

/// \brief This machine's physical memory in bytes, or 0 when the system does not say.
double physical_memory_bytes();

/// \brief Refuses, before anything is allocated, \p bytes (non-finite or negative counts as too large) that this
/// machine's memory cannot hold: an error naming \p what, the size and the memory. The default suits the tools,
/// whose sizes come from their options; readers of files pass SizeSource::input.
void require_memory(std::string const &what, double bytes, SizeSource source = SizeSource::options);

/// \brief "1.5 GiB", "12 MiB", "512 bytes": a size for messages.
std::string format_bytes(double bytes);

} // namespace tessel

#endif

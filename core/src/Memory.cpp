#include <tessel/core/Error.hpp>
#include <tessel/core/Memory.hpp>

#include <cmath>
#include <cstdio>

#include <unistd.h>

namespace tessel {

double physical_memory_bytes() {
  long const pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::string format_bytes(double bytes) {
  char text[64];
  if (!std::isfinite(bytes))
    return "an unbounded size";
  if (bytes < 1024)
    std::snprintf(text, sizeof text, "%.0f bytes", bytes);
  else if (bytes < 1024.0 * 1024)
    std::snprintf(text, sizeof text, "%.3g KiB", bytes / 1024);
  else if (bytes < 1024.0 * 1024 * 1024)
    std::snprintf(text, sizeof text, "%.3g MiB", bytes / (1024.0 * 1024));
  else
    std::snprintf(text, sizeof text, "%.4g GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

void require_memory(std::string const &what, double bytes, SizeSource source) {
  double const memory = physical_memory_bytes();
  bool const fits = std::isfinite(bytes) && bytes >= 0 && (memory <= 0 || bytes <= memory);
  if (fits)
    return;
  double const gib = 1024.0 * 1024 * 1024;
  std::string const message = Impl::concat(what, " would need ", bytes / gib, " GiB, more than the ", memory / gib,
                                           " GiB of memory of this machine");
  if (source == SizeSource::options)
    TESSEL_REQUIRE_USAGE(false, message);
  TESSEL_THROW(message);
}

} // namespace tessel

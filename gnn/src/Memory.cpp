#include "impl/Memory.hpp"

#include <tessel/core/Error.hpp>

#include <unistd.h>

namespace tessel::gnn::Impl {

void require_memory_for(std::string const &what, double bytes) {
  double const memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  TESSEL_REQUIRE(memory <= 0 || !(bytes > memory), what, " would need ", bytes / (1 << 30), " GiB, more than the ",
                 memory / (1 << 30), " GiB of memory of this machine");
}

} // namespace tessel::gnn::Impl

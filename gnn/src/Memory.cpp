#include <tessel/core/Error.hpp>
#include <tessel/gnn/Memory.hpp>

#include "impl/HugePages.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

// Older C libraries (glibc < 2.37) do not name the collapse advice of Linux 6.1.
#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25
#endif

namespace tessel::gnn {

char const *name_of(HugePages mode) { return mode == HugePages::on ? "on" : "off"; }

HugePages parse_huge_pages(std::string const &text) {
  if (text == "on")
    return HugePages::on;
  if (text == "off")
    return HugePages::off;
  TESSEL_THROW("unknown huge-page mode '", text, "' (expected on or off)");
}

namespace {

std::mutex stats_mutex;
HugePageStats stats;

#if defined(__linux__) && defined(MADV_HUGEPAGE)
int system_advise(void *address, std::size_t length, int advice) { return ::madvise(address, length, advice); }
Impl::AdviseFunction advise_function = system_advise;
#else
Impl::AdviseFunction advise_function = nullptr;
#endif

std::uintptr_t round_down(std::uintptr_t a) { return a & ~(std::uintptr_t{huge_page_size} - 1); }
std::uintptr_t round_up(std::uintptr_t a) { return round_down(a + huge_page_size - 1); }

/// True when some page of [begin, begin + bytes) is in memory (or when that cannot be told).
bool any_resident(char *begin, std::size_t bytes) {
#if defined(__linux__)
  long const page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0)
    return true;
  std::vector<unsigned char> in_core((bytes + static_cast<std::size_t>(page) - 1) / static_cast<std::size_t>(page));
  if (::mincore(begin, bytes, in_core.data()) != 0)
    return true;
  return std::any_of(in_core.begin(), in_core.end(), [](unsigned char c) { return (c & 1) != 0; });
#else
  (void)begin;
  (void)bytes;
  return true;
#endif
}

std::string error_text(int error) {
  std::ostringstream s;
  s << std::strerror(error) << " (errno " << error << ")";
  return s.str();
}

} // namespace

HugePageStats huge_page_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return stats;
}

std::int64_t huge_page_bytes(void const *data, std::size_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps)
    return -1;
  auto const lo = reinterpret_cast<std::uintptr_t>(data), hi = lo + bytes;
  std::int64_t total = 0;
  std::uintptr_t overlap = 0;
  std::string line;
  while (std::getline(smaps, line)) {
    // A mapping's header is "start-end perms offset dev inode [path]"; its fields follow as "Name: value kB".
    auto const dash = line.find('-');
    auto const space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find(':') > space) { // a header (field lines have their colon before the first space)
      std::uintptr_t start = 0, end = 0;
      std::istringstream(line.substr(0, dash)) >> std::hex >> start;
      std::istringstream(line.substr(dash + 1, space - dash - 1)) >> std::hex >> end;
      overlap = start < hi && lo < end ? std::min(end, hi) - std::max(start, lo) : 0;
      continue;
    }
    if (overlap > 0 && line.rfind("AnonHugePages:", 0) == 0) {
      std::int64_t kb = 0;
      std::istringstream(line.substr(14)) >> kb;
      total += std::min<std::int64_t>(kb * 1024, static_cast<std::int64_t>(overlap));
    }
  }
  return total;
}

namespace Impl {

AdviseFunction set_advise_function(AdviseFunction f) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  std::swap(f, advise_function);
  return f;
}

void reset_huge_page_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats = HugePageStats{};
}

std::size_t units_to_huge_boundary(void const *base, std::size_t unit_bytes) {
  auto const b = reinterpret_cast<std::uintptr_t>(base);
  return (round_up(b) - b + unit_bytes - 1) / unit_bytes;
}

HugeSpan advise_huge_pages(void *data, std::size_t bytes) {
  auto const lo = round_down(reinterpret_cast<std::uintptr_t>(data));
  HugeSpan span;
  span.begin = reinterpret_cast<char *>(lo);
  span.bytes = round_up(reinterpret_cast<std::uintptr_t>(data) + bytes) - lo;
  std::lock_guard<std::mutex> lock(stats_mutex);
  if (advise_function == nullptr) {
    ++stats.refused;
    stats.last_refusal = "transparent huge pages are not available on this system (no madvise(MADV_HUGEPAGE))";
    return span;
  }
  // Pages already in memory (an allocation that reuses freed memory) keep their size when advised: they need a
  // collapse after the first use.
  span.resident = any_resident(span.begin, span.bytes);
#if defined(MADV_HUGEPAGE)
  int const advice = MADV_HUGEPAGE;
#else
  int const advice = 0;
#endif
  errno = 0;
  if (advise_function(span.begin, span.bytes, advice) != 0) {
    ++stats.refused;
    stats.last_refusal = "madvise(MADV_HUGEPAGE) refused: " + error_text(errno);
    return span;
  }
  span.advised = true;
  ++stats.advised;
  stats.advised_bytes += static_cast<std::int64_t>(span.bytes);
  return span;
}

void finish_huge_pages(HugeSpan const &span) {
  if (!span.advised || !span.resident)
    return;
  std::lock_guard<std::mutex> lock(stats_mutex);
#if defined(MADV_COLLAPSE)
  errno = 0;
  if (advise_function != nullptr && advise_function(span.begin, span.bytes, MADV_COLLAPSE) == 0) {
    ++stats.collapsed;
    return;
  }
  stats.last_refusal = "madvise(MADV_COLLAPSE) refused: " + error_text(errno);
#endif
  ++stats.not_collapsed;
}

} // namespace Impl

} // namespace tessel::gnn

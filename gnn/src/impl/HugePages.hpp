#ifndef TESSEL_GNN_IMPL_HUGEPAGES_HPP
#define TESSEL_GNN_IMPL_HUGEPAGES_HPP

// Test hooks of the huge-page allocations (Memory.hpp): the tests replace the advice call to make the OS's refusal
// happen on demand, and start each case from zero counts.
#include <tessel/gnn/Memory.hpp>

#include <cstddef>

namespace tessel::gnn::Impl {

/// madvise's signature: 0 on success, -1 with errno set on failure.
using AdviseFunction = int (*)(void *address, std::size_t length, int advice);
/// Replaces the function that gives the kernel the advice (madvise); returns the previous one.
AdviseFunction set_advise_function(AdviseFunction f);
/// Zeroes the counts of huge_page_stats().
void reset_huge_page_stats();

} // namespace tessel::gnn::Impl

#endif

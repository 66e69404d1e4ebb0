#ifndef TESSEL_GNN_IMPL_MEMORY_HPP
#define TESSEL_GNN_IMPL_MEMORY_HPP

// Sizes derived from data (a file's declared widths, a model's layers) checked against the machine's memory before
// anything is allocated, so that the error names what and how much instead of an allocator's failure.
#include <string>

namespace tessel::gnn::Impl {

/// Throws tessel::Exception naming \p what, \p bytes and the memory when \p bytes exceed this machine's memory.
void require_memory_for(std::string const &what, double bytes);

} // namespace tessel::gnn::Impl

#endif

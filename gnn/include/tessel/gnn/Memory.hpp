#ifndef TESSEL_GNN_MEMORY_HPP
#define TESSEL_GNN_MEMORY_HPP

/// \file Memory.hpp
/// \brief Allocation of the large gnn arrays (feature matrices, the graph arrays of handles and models) on
/// transparent huge pages where the OS allows: the aggregation gathers rows of X in an order the graph dictates, and
/// with 4 KiB pages most of those gathers also miss the TLB once X is larger than the TLB's reach.

#include <tessel/gnn/Graph.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace tessel::gnn {

/// \brief Whether the large gnn arrays ask the OS for transparent huge pages (madvise(MADV_HUGEPAGE)).
enum class HugePages {
  off, ///< ordinary allocations (4 KiB pages unless the system's THP mode is "always")
  on   ///< arrays of at least huge_page_size bytes on 2 MiB-aligned spans advised for huge pages
};
/// "off" or "on".
char const *name_of(HugePages mode);
/// Parses "off" / "on"; throws naming the accepted values.
HugePages parse_huge_pages(std::string const &text);

/// \brief The huge page size the allocations align to (2 MiB, x86-64 and aarch64 with 4 KiB base pages). Arrays
/// smaller than this are allocated as usual.
inline constexpr std::size_t huge_page_size = std::size_t{2} << 20;

/// \brief What the huge-page requests of this process got so far.
struct HugePageStats {
  std::int64_t advised = 0;       ///< allocations whose span the OS accepted for huge pages
  std::int64_t advised_bytes = 0; ///< bytes of those spans
  std::int64_t refused = 0;       ///< allocations whose advice the OS refused (they keep ordinary pages)
  std::int64_t collapsed = 0;     ///< spans already in memory before their first use, collapsed into huge pages
  std::int64_t not_collapsed = 0; ///< such spans the OS did not collapse (ordinary pages until khugepaged merges them)
  std::string last_refusal;       ///< the OS's reason for the last refusal ("" when none)
};
/// \brief The counts of this process since it started.
HugePageStats huge_page_stats();

/// \brief Bytes of [data, data + bytes) that the kernel backs by huge pages: the AnonHugePages of the mappings that
/// overlap the range in /proc/self/smaps, each at most its overlap with the range (an upper bound where one mapping
/// holds several advised arrays side by side). -1 where /proc/self/smaps cannot be read.
std::int64_t huge_page_bytes(void const *data, std::size_t bytes);

namespace Impl {
/// A span advised for huge pages: [begin, begin + bytes), 2 MiB-aligned; resident: some of its pages were in memory
/// before the advice (then only a collapse gives them huge pages).
struct HugeSpan {
  char *begin = nullptr;
  std::size_t bytes = 0;
  bool advised = false;
  bool resident = false;
};
/// Advises the 2 MiB-aligned span around [data, data + bytes) (which the caller's allocation must hold) before its
/// first use; a refusal is counted and leaves ordinary pages.
HugeSpan advise_huge_pages(void *data, std::size_t bytes);
/// After the first use: collapses a span that was already in memory when advised (MADV_COLLAPSE, Linux >= 6.1).
void finish_huge_pages(HugeSpan const &span);
/// Units of \p unit_bytes from \p base to the first unit that starts at or after a 2 MiB boundary.
std::size_t units_to_huge_boundary(void const *base, std::size_t unit_bytes);
/// Extra units of \p unit_bytes an allocation needs so that a 2 MiB-aligned span can hold the used part.
inline std::size_t huge_padding_units(std::size_t unit_bytes) { return 2 * huge_page_size / unit_bytes + 2; }
} // namespace Impl

/// \brief A zero-filled array of \p n elements labelled \p label in \p space's memory. With HugePages::on, host
/// memory and at least huge_page_size bytes, the elements lie on a 2 MiB-aligned span advised for huge pages before
/// their first touch (the allocation is padded by up to 4 MiB of address space, at most 2 MiB of it ever touched);
/// the View is a managed subview of that allocation and keeps its label. Where the OS refuses the advice the array
/// is the same, on ordinary pages (huge_page_stats() says why).
template <class T, class ExecSpace>
Kokkos::View<T *, typename ExecSpace::memory_space> make_array(ExecSpace const &space, std::string const &label,
                                                               std::size_t n, HugePages huge) {
  using M = typename ExecSpace::memory_space;
  using V = Kokkos::View<T *, M>;
  static_assert(std::is_trivially_copyable_v<T>);
  if (huge == HugePages::off || !std::is_same_v<M, Kokkos::HostSpace> || n * sizeof(T) < huge_page_size)
    return V(Kokkos::view_alloc(space, label), n);
  V all(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, label), n + Impl::huge_padding_units(sizeof(T)));
  std::size_t const off = Impl::units_to_huge_boundary(all.data(), sizeof(T));
  V used = Kokkos::subview(all, std::make_pair(off, off + n));
  auto const span = Impl::advise_huge_pages(used.data(), n * sizeof(T));
  Kokkos::deep_copy(space, used, T{});
  space.fence();
  Impl::finish_huge_pages(span);
  return used;
}

/// \brief A zero-filled rows x cols feature matrix labelled \p label in \p space's memory, on huge pages as
/// make_array, except that the padding is whole rows (the matrix is a managed subview of rows): it starts at the
/// allocation's first row on or after a 2 MiB boundary, less than a row past it, and the advised span starts at that
/// boundary.
template <class ExecSpace>
Matrix<typename ExecSpace::memory_space> make_matrix(ExecSpace const &space, std::string const &label, std::size_t rows,
                                                     std::size_t cols, HugePages huge) {
  using M = typename ExecSpace::memory_space;
  std::size_t const row_bytes = cols * sizeof(float);
  if (huge == HugePages::off || !std::is_same_v<M, Kokkos::HostSpace> || cols == 0 || rows * row_bytes < huge_page_size)
    return Matrix<M>(Kokkos::view_alloc(space, label), rows, cols);
  Matrix<M> all(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, label),
                rows + Impl::huge_padding_units(row_bytes), cols);
  std::size_t const off = Impl::units_to_huge_boundary(all.data(), row_bytes);
  Matrix<M> used = Kokkos::subview(all, std::make_pair(off, off + rows), Kokkos::ALL());
  auto const span = Impl::advise_huge_pages(used.data(), rows * row_bytes);
  Kokkos::deep_copy(space, used, 0.0f);
  space.fence();
  Impl::finish_huge_pages(span);
  return used;
}

/// \brief A copy of \p source (any host View of T) in a new array from make_array.
template <class ExecSpace, class Source>
Kokkos::View<typename Source::non_const_value_type *, typename ExecSpace::memory_space>
copy_array(ExecSpace const &space, std::string const &label, Source const &source, HugePages huge) {
  auto out = make_array<typename Source::non_const_value_type>(space, label, source.extent(0), huge);
  Kokkos::deep_copy(space, out, source);
  space.fence();
  return out;
}

} // namespace tessel::gnn

#endif

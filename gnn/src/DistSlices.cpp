#include "impl/DistSlices.hpp"

#include "impl/HostCsr.hpp"

#include <algorithm>

namespace tessel::gnn::Impl {

/// Rows [r0, r1) of \p a, with the entries \p part keeps.
Graph<std::int32_t> tile_slice(Graph<std::int32_t> const &a, std::int64_t r0, std::int64_t r1, TilePart part) {
  HostCsr<std::int32_t> csr;
  csr.row_map.push_back(0);
  for (std::int64_t r = r0; r < r1; ++r) {
    for (offset_type k = a.row_map()(r); k < a.row_map()(r + 1); ++k) {
      auto const c = static_cast<std::int64_t>(a.entries()(k));
      bool const in = c >= r0 && c < r1;
      if (part == TilePart::all || (part == TilePart::inside) == in) {
        csr.entries.push_back(static_cast<std::int32_t>(part == TilePart::inside ? c - r0 : c));
        csr.values.push_back(a.values()(k));
      }
    }
    csr.row_map.push_back(static_cast<offset_type>(csr.entries.size()));
  }
  auto const cols = part == TilePart::inside ? static_cast<std::int32_t>(r1 - r0) : a.num_cols();
  return to_graph(a.name(), static_cast<std::int32_t>(r1 - r0), cols, std::move(csr));
}

/// The rows \p rows (increasing) of \p a, renumbered 0, 1, ...: a halo block over the rows that have halo entries.
Graph<std::int32_t> rows_slice(Graph<std::int32_t> const &a, std::vector<std::int32_t> const &rows) {
  HostCsr<std::int32_t> csr;
  csr.row_map.push_back(0);
  for (auto const r : rows) {
    for (offset_type k = a.row_map()(r); k < a.row_map()(r + 1); ++k) {
      csr.entries.push_back(a.entries()(k));
      csr.values.push_back(a.values()(k));
    }
    csr.row_map.push_back(static_cast<offset_type>(csr.entries.size()));
  }
  return to_graph(a.name(), static_cast<std::int32_t>(rows.size()), a.num_cols(), std::move(csr));
}

/// The part of a halo block \p a that reads one message's rows (columns [c0, c1), renumbered from 0), over the rows
/// of \p a that have such entries only; \p rows receives their numbers in \p a.
Graph<std::int32_t> message_part(Graph<std::int32_t> const &a, std::int64_t c0, std::int64_t c1,
                                 std::vector<std::int32_t> &rows) {
  HostCsr<std::int32_t> csr;
  csr.row_map.push_back(0);
  rows.clear();
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(a.num_rows()); ++r) {
    auto const before = csr.entries.size();
    for (offset_type k = a.row_map()(r); k < a.row_map()(r + 1); ++k)
      if (a.entries()(k) >= c0 && a.entries()(k) < c1) {
        csr.entries.push_back(static_cast<std::int32_t>(a.entries()(k) - c0));
        csr.values.push_back(a.values()(k));
      }
    if (csr.entries.size() > before) {
      rows.push_back(static_cast<std::int32_t>(r));
      csr.row_map.push_back(static_cast<offset_type>(csr.entries.size()));
    }
  }
  return to_graph(a.name(), static_cast<std::int32_t>(rows.size()), static_cast<std::int32_t>(c1 - c0), std::move(csr));
}

/// Message boundaries of \p rows feature rows (the same on both sides of a pair: they depend on the count only).
std::vector<std::int64_t> message_bounds(std::size_t rows) {
  auto const r = static_cast<std::int64_t>(rows);
  auto const per = std::max(message_rows, (r + max_messages - 1) / max_messages);
  std::vector<std::int64_t> b{0};
  while (b.back() < r)
    b.push_back(std::min(r, b.back() + per));
  return b;
}

} // namespace tessel::gnn::Impl

#ifndef TESSEL_GNN_IMPL_HOSTCSR_HPP
#define TESSEL_GNN_IMPL_HOSTCSR_HPP

// Host-side CSR in std::vectors: the working form of graph preprocessing before it becomes a Graph.
#include <tessel/gnn/Graph.hpp>

#include <string>
#include <vector>

namespace tessel::gnn::Impl {

template <class Index> struct HostCsr {
  std::vector<offset_type> row_map;
  std::vector<Index> entries;
  std::vector<float> values;
};

template <class Index> Graph<Index> to_graph(std::string const &name, Index rows, Index cols, HostCsr<Index> &&csr);
template <class Index> HostCsr<Index> to_host_csr(Graph<Index> const &g);
template <class Index> void sort_rows(HostCsr<Index> &csr, bool merge);
template <class Index> HostCsr<Index> transpose_csr(HostCsr<Index> const &a, std::size_t cols);

} // namespace tessel::gnn::Impl

#endif

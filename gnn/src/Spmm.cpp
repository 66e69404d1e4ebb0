#include <tessel/core/Execution.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "impl/HostSpmmState.hpp"

#include <string>
#include <vector>

namespace tessel::gnn {

char const *name_of(SpmmAlgorithm algorithm) {
  switch (algorithm) {
  case SpmmAlgorithm::csr:
    return "csr";
  case SpmmAlgorithm::csr_feature_tiled:
    return "csr_feature_tiled";
  case SpmmAlgorithm::coo:
    return "coo";
  case SpmmAlgorithm::coo_atomic:
    return "coo_atomic";
  case SpmmAlgorithm::tiles:
    return "tiles";
  case SpmmAlgorithm::dense:
    return "dense";
  case SpmmAlgorithm::kk:
    return "kk";
  case SpmmAlgorithm::cusparse:
    return "cusparse";
  case SpmmAlgorithm::adaptive:
    return "adaptive";
  }
  return "?";
}

SpmmAlgorithm parse_spmm_algorithm(std::string const &text) {
  for (auto a : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo, SpmmAlgorithm::coo_atomic,
                 SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::kk, SpmmAlgorithm::cusparse,
                 SpmmAlgorithm::adaptive})
    if (text == name_of(a))
      return a;
  TESSEL_THROW("unknown kernel '", text,
               "' (expected csr, csr_feature_tiled, coo, coo_atomic, tiles, dense, kk, cusparse or adaptive)");
}

char const *name_of(BlockKernel kernel) {
  switch (kernel) {
  case BlockKernel::csr:
    return "csr";
  case BlockKernel::tiles:
    return "tiles";
  case BlockKernel::dense:
    return "dense";
  }
  return "?";
}

double CostModel::seconds(BlockKernel kernel, double elements, int features) const {
  double const rate = kernel == BlockKernel::csr     ? csr_gflops
                      : kernel == BlockKernel::tiles ? tiles_gflops
                                                     : dense_gflops;
  return 2.0 * elements * features / (rate * 1e9);
}

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>(space, graph, options)) {
  if (options.algorithm == SpmmAlgorithm::adaptive)
    _state->setup_adaptive(graph, nullptr);
  else
    _state->setup_fixed(graph);
}

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
                                         Partition const &partition) {
  TESSEL_REQUIRE(options.algorithm == SpmmAlgorithm::adaptive,
                 "SpmmHandle: a given partition needs the adaptive algorithm, got ", name_of(options.algorithm));
  _state = std::make_unique<Impl::SpmmState<Index, ExecSpace>>(space, graph, options);
  _state->setup_adaptive(graph, &partition);
}

template <class Index, class ExecSpace> SpmmHandle<Index, ExecSpace>::~SpmmHandle() = default;
template <class Index, class ExecSpace> SpmmHandle<Index, ExecSpace>::SpmmHandle(SpmmHandle &&) noexcept = default;
template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace> &SpmmHandle<Index, ExecSpace>::operator=(SpmmHandle &&) noexcept = default;

template <class Index, class ExecSpace>
void SpmmHandle<Index, ExecSpace>::apply(ExecSpace const &space, ConstMatrix<memory_space> const &x,
                                         Matrix<memory_space> const &y) {
  _state->apply(space, x, y);
}

template <class Index, class ExecSpace> SpmmAlgorithm SpmmHandle<Index, ExecSpace>::algorithm() const {
  return _state->options.algorithm;
}

template <class Index, class ExecSpace> Permutation const &SpmmHandle<Index, ExecSpace>::permutation() const {
  return _state->driver.partition().permutation;
}

template <class Index, class ExecSpace> Partition const &SpmmHandle<Index, ExecSpace>::partition() const {
  return _state->driver.partition();
}

template <class Index, class ExecSpace> bool SpmmHandle<Index, ExecSpace>::tuned(int features) const {
  return _state->driver.tuned(features);
}

template <class Index, class ExecSpace> SpmmPlan SpmmHandle<Index, ExecSpace>::plan(int features) const {
  return _state->width(features).sel.plan;
}

template <class Index, class ExecSpace> std::vector<SpmmPlan> SpmmHandle<Index, ExecSpace>::plans() const {
  return _state->driver.plans();
}

template <class Index, class ExecSpace> double SpmmHandle<Index, ExecSpace>::overhead_seconds() const {
  return _state->driver.overhead_seconds();
}

#define TESSEL_GNN_INSTANTIATE_SPMM(SPACE)                                                                             \
  template class SpmmHandle<std::int32_t, SPACE>;                                                                      \
  template class SpmmHandle<std::int64_t, SPACE>;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_SPMM)

} // namespace tessel::gnn

// The adaptive handle's plan files (HDF5, schema tessel.gnn.spmm_plan): save_plans, and the constructor that
// reloads them.
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "impl/HostSpmmState.hpp"

#include <algorithm>
#include <string>

namespace tessel::gnn {

namespace {
SpmmOptions adaptive(SpmmOptions options) {
  options.algorithm = SpmmAlgorithm::adaptive;
  return options;
}
} // namespace

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
                                         std::string const &plan_path)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>(space, graph, adaptive(options))) {
  auto &s = *_state;
  h5::File file(plan_path, h5::Mode::read);
  TESSEL_REQUIRE(file.has_attribute("/", "schema") &&
                     file.read_string_attribute("/", "schema") == "tessel.gnn.spmm_plan",
                 "plan file '", plan_path, "': root attribute schema is not 'tessel.gnn.spmm_plan'");
  auto const rows = file.read_attribute<std::int64_t>("/", "rows");
  auto const nnz = file.read_attribute<std::int64_t>("/", "nnz");
  TESSEL_REQUIRE(rows == static_cast<std::int64_t>(s.rows) && nnz == s.nnz, "plan file '", plan_path,
                 "' was saved for a graph with ", rows, " rows and ", nnz, " entries; graph '", s.name, "' has ",
                 s.rows, " rows and ", s.nnz, " entries");
  auto const bounds = file.read<double>("class_bounds").data;
  TESSEL_REQUIRE(bounds == options.class_bounds, "plan file '", plan_path,
                 "': its density class bounds differ from the handle's options");
  Partition partition;
  partition.method = parse_partition_method(file.read_string_attribute("/partition", "method"));
  partition.permutation =
      Permutation::from_order(file.read<std::int64_t>("partition/old_of_new", {static_cast<std::size_t>(rows)}).data);
  partition.part_offsets = file.read<std::int64_t>("partition/part_offsets").data;
  TESSEL_REQUIRE(partition.part_offsets.size() >= 2 && partition.part_offsets.front() == 0 &&
                     partition.part_offsets.back() == rows &&
                     std::is_sorted(partition.part_offsets.begin(), partition.part_offsets.end()),
                 "plan file '", plan_path, "': partition/part_offsets must rise from 0 to ", rows);
  partition.intra_fraction = file.read_attribute<double>("/partition", "intra_fraction");
  s.setup_adaptive(graph, &partition);
  auto const &d = s.driver.decomposition();
  auto const &selector = s.driver.selector();
  for (auto const &entry : file.list("plans")) {
    std::string const group = "plans/" + entry;
    int const f = file.read_attribute<int>(group, "features");
    auto const kernels = file.read<int>(group + "/class_kernel", {static_cast<std::size_t>(d.num_classes)}).data;
    auto &w = s.driver.widths[f];
    auto &sel = w.sel;
    sel.plan = selector.base_plan(f);
    sel.plan.timed = false;
    selector.predict(sel, f);
    for (int c = 0; c < d.num_classes; ++c) {
      int const k = kernels[static_cast<std::size_t>(c)];
      TESSEL_REQUIRE(k >= 0 && k < Impl::num_block_kernels, "plan file '", plan_path, "': ", group, "/class_kernel[", c,
                     "] = ", k, " is not a kernel id (0 csr, 1 tiles, 2 dense)");
      sel.choice[static_cast<std::size_t>(c)] = static_cast<BlockKernel>(k);
      sel.plan.classes[static_cast<std::size_t>(c)].kernel = static_cast<BlockKernel>(k);
      sel.plan.classes[static_cast<std::size_t>(c)].reason = "loaded from " + plan_path;
    }
    sel.plan.rest_kernel = parse_spmm_algorithm(file.read_string_attribute(group, "rest_kernel"));
    w.rest_feature_tiled = sel.plan.rest_kernel == SpmmAlgorithm::csr_feature_tiled;
    sel.plan.reason = "loaded from " + plan_path;
    sel.plan.frozen = true;
    sel.stage = 2;
    sel.winner = Impl::WholeVariant::plan;
  }
}

template <class Index, class ExecSpace> void SpmmHandle<Index, ExecSpace>::save_plans(std::string const &path) const {
  auto const &s = *_state;
  TESSEL_REQUIRE(s.options.algorithm == SpmmAlgorithm::adaptive, "save_plans: only adaptive handles have plans, this ",
                 "one runs ", name_of(s.options.algorithm));
  h5::File file(path, h5::Mode::truncate);
  file.write_attribute("/", "schema", "tessel.gnn.spmm_plan");
  file.write_attribute("/", "schema_version", 1);
  file.write_attribute("/", "graph", s.name);
  file.write_attribute("/", "rows", static_cast<std::int64_t>(s.rows));
  file.write_attribute("/", "nnz", static_cast<std::int64_t>(s.nnz));
  file.write("class_bounds", s.options.class_bounds);
  auto const &partition = s.driver.partition();
  file.write("partition/old_of_new", partition.permutation.old_of_new);
  file.write("partition/part_offsets", partition.part_offsets);
  file.write_attribute("/partition", "method", name_of(partition.method));
  file.write_attribute("/partition", "intra_fraction", partition.intra_fraction);
  file.create_group("plans");
  for (auto const &[f, w] : s.driver.widths) {
    if (w.sel.stage != 2)
      continue;
    std::string const group = "plans/F" + std::to_string(f);
    std::vector<int> kernels;
    for (auto k : w.sel.choice)
      kernels.push_back(static_cast<int>(k));
    file.write(group + "/class_kernel", kernels);
    file.write_attribute(group, "features", f);
    file.write_attribute(group, "rest_kernel", name_of(w.sel.plan.rest_kernel));
    file.write_attribute(group, "json", w.sel.plan.to_json());
  }
  file.close();
}

#define TESSEL_GNN_INSTANTIATE_PLAN_FILE(SPACE)                                                                        \
  template SpmmHandle<std::int32_t, SPACE>::SpmmHandle(SPACE const &, Graph<std::int32_t> const &,                     \
                                                       SpmmOptions const &, std::string const &);                      \
  template SpmmHandle<std::int64_t, SPACE>::SpmmHandle(SPACE const &, Graph<std::int64_t> const &,                     \
                                                       SpmmOptions const &, std::string const &);                      \
  template void SpmmHandle<std::int32_t, SPACE>::save_plans(std::string const &) const;                                \
  template void SpmmHandle<std::int64_t, SPACE>::save_plans(std::string const &) const;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_PLAN_FILE)
#undef TESSEL_GNN_INSTANTIATE_PLAN_FILE

} // namespace tessel::gnn

// GnnModel's checkpoints (HDF5, schema tessel.gnn.checkpoint): parameters, Adam state and history, written by rank 0
// of a distributed model after the ranks agree on the parameters, and read back with the checks that make a resume
// exact (same model, graph, rank count and partition).
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Model.hpp>

#include "impl/ModelState.hpp"

#include <string>
#include <vector>

namespace tessel::gnn {

template <class ExecSpace>
void GnnModel<ExecSpace>::save_checkpoint(std::string const &path, std::vector<EpochRecord> const &history) const {
  auto const &s = *_state;
  if (s.comm) {
    // Every rank holds the same parameters (the gradients are all-reduced): rank 0 writes them, and a failure there
    // ends every rank rather than leaving the others to train on believing the checkpoint was written.
    std::uint64_t h = fnv1a_basis;
    s.for_each_checkpoint_tensor(
        [&h](std::string const &, auto const &tensor) { h = fnv1a(h, tensor.data(), tensor.size() * sizeof(float)); });
    s.comm->require_same("checkpoint '" + path + "': the parameters (they must be the same on every rank)", h);
    s.comm->all_or_none(
        [&] {
          if (s.comm->rank() == 0)
            write_checkpoint(path, history);
        },
        "checkpoint '" + path + "': rank 0 could not write it (see its error)");
    return;
  }
  write_checkpoint(path, history);
}

template <class ExecSpace>
void GnnModel<ExecSpace>::write_checkpoint(std::string const &path, std::vector<EpochRecord> const &history) const {
  auto const &s = *_state;
  {
    // File writes beside the path, reads the file back and only then renames it into place (h5::File::close),
    // so that neither a full disk nor an interruption can leave a truncated checkpoint behind.
    h5::File file(path, h5::Mode::truncate);
    file.write_attribute("/", "schema", "tessel.gnn.checkpoint");
    file.write_attribute("/", "schema_version", 1);
    file.write_attribute("/", "dataset", s.data_name);
    file.write_attribute("/", "model", name_of(s.options.model));
    file.write_attribute("/", "seed", static_cast<std::int64_t>(s.options.seed));
    file.write_attribute("/", "adam_t", static_cast<std::int64_t>(s.adam_t));
    file.write_attribute("/", "ranks", static_cast<std::int64_t>(s.comm ? s.comm->size() : 1));
    file.write_attribute("/", "partition", static_cast<std::int64_t>(s.partition_digest()));
    std::vector<int> dims(s.dims.begin(), s.dims.end());
    file.write("dims", dims);
    s.for_each_checkpoint_tensor([&](std::string const &dataset, auto const &tensor) { file.write(dataset, tensor); });
    std::vector<double> rows;
    for (auto const &r : history)
      for (double v : {static_cast<double>(r.epoch), r.train_loss, r.train_acc, r.val_loss, r.val_acc, r.test_acc,
                       r.seconds, r.aggregation_seconds})
        rows.push_back(v);
    file.write("history", rows.data(), {history.size(), 8});
    file.close();
  }
  if (s.fwd && s.options.spmm.algorithm == SpmmAlgorithm::adaptive) {
    s.fwd->save_plans(path + ".plan.h5");
    if (s.bwd)
      s.bwd->save_plans(path + ".plan_t.h5");
  }
}

template <class ExecSpace> std::vector<EpochRecord> GnnModel<ExecSpace>::load_checkpoint(std::string const &path) {
  auto &s = *_state;
  if (!s.comm)
    return read_checkpoint(path);
  // Every rank reads the file; one that cannot ends them all.
  std::vector<EpochRecord> history;
  s.comm->all_or_none([&] { history = read_checkpoint(path); },
                      "checkpoint '" + path + "': another rank could not read it (see its error)");
  return history;
}

template <class ExecSpace> std::vector<EpochRecord> GnnModel<ExecSpace>::read_checkpoint(std::string const &path) {
  auto &s = *_state;
  h5::File file(path, h5::Mode::read);
  TESSEL_REQUIRE(file.has_attribute("/", "schema") &&
                     file.read_string_attribute("/", "schema") == "tessel.gnn.checkpoint",
                 "checkpoint '", path, "': root attribute schema is not 'tessel.gnn.checkpoint'");
  auto const dataset = file.read_string_attribute("/", "dataset");
  auto const model = file.read_string_attribute("/", "model");
  TESSEL_REQUIRE(dataset == s.data_name && model == name_of(s.options.model), "checkpoint '", path, "' is for ", model,
                 " on '", dataset, "', not ", name_of(s.options.model), " on '", s.data_name, "'");
  auto const dims = file.read<int>("dims").data;
  TESSEL_REQUIRE(dims == s.dims, "checkpoint '", path, "': layer widths differ from the model's");
  // Parameters are the same at every rank count, but the optimizer's path is not bit for bit (the gradients are
  // summed in another order), so a resume continues exactly only at the rank count and partition that wrote it.
  auto const ranks = file.has_attribute("/", "ranks") ? file.read_attribute<std::int64_t>("/", "ranks") : 1;
  auto const here = static_cast<std::int64_t>(s.comm ? s.comm->size() : 1);
  TESSEL_REQUIRE(ranks == here, "checkpoint '", path, "' was written by ", ranks, " rank(s); resume it with ", ranks,
                 " (this run has ", here, ")");
  TESSEL_REQUIRE(!file.has_attribute("/", "partition") || static_cast<std::uint64_t>(file.read_attribute<std::int64_t>(
                                                              "/", "partition")) == s.partition_digest(),
                 "checkpoint '", path, "': its rows were partitioned otherwise (another --dist-partition or seed); ",
                 "resume with the options that wrote it");
  s.adam_t = static_cast<long>(file.read_attribute<std::int64_t>("/", "adam_t"));
  // Views are handles: reading into a const one fills the model's tensor.
  s.for_each_checkpoint_tensor([&](std::string const &dataset, auto const &tensor) { file.read(dataset, tensor); });
  auto const rows = file.read<double>("history", {h5::any, 8});
  std::vector<EpochRecord> history;
  for (std::size_t r = 0; r < rows.rows(); ++r) {
    double const *v = rows.data.data() + r * 8;
    EpochRecord e;
    e.epoch = static_cast<int>(v[0]);
    e.train_loss = v[1];
    e.train_acc = v[2];
    e.val_loss = v[3];
    e.val_acc = v[4];
    e.test_acc = v[5];
    e.seconds = v[6];
    e.aggregation_seconds = v[7];
    history.push_back(e);
  }
  return history;
}

#define TESSEL_GNN_INSTANTIATE_CHECKPOINT(SPACE)                                                                       \
  template void GnnModel<SPACE>::save_checkpoint(std::string const &, std::vector<EpochRecord> const &) const;         \
  template std::vector<EpochRecord> GnnModel<SPACE>::load_checkpoint(std::string const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_CHECKPOINT)
#undef TESSEL_GNN_INSTANTIATE_CHECKPOINT

} // namespace tessel::gnn

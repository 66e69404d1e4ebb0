// GnnModel's checkpoints (HDF5, schema tessel.gnn.checkpoint): parameters, Adam state and history, written by rank 0
// of a distributed model after the ranks agree on the parameters, and read back with the checks that make a resume
// exact (same model, graph, rank count and partition).
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Model.hpp>

#include "impl/ModelState.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace tessel::gnn {

namespace {
/// Version 2 added the data set's content digest.
constexpr int checkpoint_version = 2;
/// A checkpoint's epochs (and optimizer steps): the tools' --epochs range.
constexpr std::int64_t max_checkpoint_epochs = 1000000;
} // namespace

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
    file.write_attribute("/", "schema_version", checkpoint_version);
    file.write_attribute("/", "dataset", s.data_name);
    // Kept within int64 for the HDF5 attribute.
    file.write_attribute("/", "data_digest", static_cast<std::int64_t>(s.data_digest >> 1));
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

namespace {

/// The history rows (epoch, losses, accuracies, seconds), checked: epochs 1, 2, ..., one row each, as many as the
/// optimizer's steps (a run writes one row and one Adam step per epoch).
std::vector<EpochRecord> read_history(h5::File const &file, std::string const &path, std::int64_t adam_t) {
  auto const rows = file.read<double>("history", {h5::any, 8});
  TESSEL_REQUIRE(static_cast<std::int64_t>(rows.rows()) == adam_t, "checkpoint '", path, "': history has ", rows.rows(),
                 " epochs but adam_t = ", adam_t, " optimizer steps (one per epoch expected)");
  std::vector<EpochRecord> history;
  for (std::size_t r = 0; r < rows.rows(); ++r) {
    double const *v = rows.data.data() + r * 8;
    TESSEL_REQUIRE(v[0] == static_cast<double>(r + 1), "checkpoint '", path, "': history row ", r, " is epoch ", v[0],
                   ", expected ", r + 1, " (epochs 1, 2, ... in order)");
    EpochRecord e;
    e.epoch = static_cast<int>(r + 1);
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

} // namespace

template <class ExecSpace> std::vector<EpochRecord> GnnModel<ExecSpace>::read_checkpoint(std::string const &path) {
  auto &s = *_state;
  h5::File file(path, h5::Mode::read);
  TESSEL_REQUIRE(file.has_attribute("/", "schema") &&
                     file.read_string_attribute("/", "schema") == "tessel.gnn.checkpoint",
                 "checkpoint '", path, "': root attribute schema is not 'tessel.gnn.checkpoint'");
  auto const version = file.read_attribute<int>("/", "schema_version");
  TESSEL_REQUIRE(version == checkpoint_version, "checkpoint '", path, "': schema_version = ", version,
                 ", this Tessel resumes version ", checkpoint_version,
                 " (version 1 files carry no digest of their data set, so nothing proves which graph they are for)");
  auto const dataset = file.read_string_attribute("/", "dataset");
  auto const model = file.read_string_attribute("/", "model");
  TESSEL_REQUIRE(model == name_of(s.options.model), "checkpoint '", path, "' is for ", model, " on '", dataset,
                 "', not ", name_of(s.options.model), " on '", s.data_name, "'");
  // The data set by its content, not its name: another graph saved under the same name must not resume.
  auto const digest = static_cast<std::uint64_t>(file.read_attribute<std::int64_t>("/", "data_digest"));
  TESSEL_REQUIRE(digest == s.data_digest >> 1, "checkpoint '", path, "' was written for data set '", dataset,
                 "' with other content than this run's '", s.data_name,
                 "' (another graph, other features or labels): it does not resume here");
  auto const dims = file.read<int>("dims").data;
  TESSEL_REQUIRE(dims == s.dims, "checkpoint '", path, "': layer widths differ from the model's");
  auto const seed = file.read_attribute<std::int64_t>("/", "seed");
  TESSEL_REQUIRE(seed == static_cast<std::int64_t>(s.options.seed), "checkpoint '", path, "' was written with seed ",
                 static_cast<std::uint64_t>(seed), "; this run has seed ", s.options.seed,
                 " (the dropout masks follow the seed: resume with the one that wrote it)");
  // Parameters are the same at every rank count, but the optimizer's path is not bit for bit (the gradients are
  // summed in another order), so a resume continues exactly only at the rank count and partition that wrote it.
  auto const ranks = file.read_attribute<std::int64_t>("/", "ranks");
  auto const here = static_cast<std::int64_t>(s.comm ? s.comm->size() : 1);
  TESSEL_REQUIRE(ranks == here, "checkpoint '", path, "' was written by ", ranks, " rank(s); resume it with ", ranks,
                 " (this run has ", here, ")");
  TESSEL_REQUIRE(static_cast<std::uint64_t>(file.read_attribute<std::int64_t>("/", "partition")) ==
                     s.partition_digest(),
                 "checkpoint '", path, "': its rows were partitioned otherwise (another --dist-partition or seed); ",
                 "resume with the options that wrote it");
  auto const adam_t = file.read_attribute<std::int64_t>("/", "adam_t");
  TESSEL_REQUIRE(adam_t >= 0 && adam_t <= max_checkpoint_epochs, "checkpoint '", path, "': adam_t = ", adam_t,
                 " is outside [0, ", max_checkpoint_epochs, "]");
  auto history = read_history(file, path, adam_t);
  // Every tensor read and checked before any of the model's changes: a damaged file leaves the model as it was.
  std::vector<std::pair<Matrix<memory_space>, Matrix<Kokkos::HostSpace>>> read;
  s.for_each_checkpoint_tensor([&](std::string const &name, auto const &tensor) {
    Matrix<Kokkos::HostSpace> h(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::checkpoint_tensor"),
                                tensor.extent(0), tensor.extent(1));
    file.read(name, h);
    std::size_t const bad = first_non_finite(h.data(), h.size());
    TESSEL_REQUIRE(bad == h.size(), "checkpoint '", path, "': ", name, "[", bad / std::max<std::size_t>(1, h.extent(1)),
                   ", ", bad % std::max<std::size_t>(1, h.extent(1)), "] = ", h.data()[bad],
                   " is not finite (the file is damaged, or was written by a run that diverged)");
    read.emplace_back(tensor, h);
  });
  for (auto const &[tensor, h] : read)
    Kokkos::deep_copy(s.space, tensor, h);
  s.space.fence();
  s.adam_t = static_cast<long>(adam_t);
  return history;
}

#define TESSEL_GNN_INSTANTIATE_CHECKPOINT(SPACE)                                                                       \
  template void GnnModel<SPACE>::save_checkpoint(std::string const &, std::vector<EpochRecord> const &) const;         \
  template std::vector<EpochRecord> GnnModel<SPACE>::load_checkpoint(std::string const &);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_CHECKPOINT)
#undef TESSEL_GNN_INSTANTIATE_CHECKPOINT

} // namespace tessel::gnn

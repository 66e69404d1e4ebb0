#include <tessel/core/Digest.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/H5File.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Memory.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/Model.hpp>

#include "impl/ModelState.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

namespace tessel::gnn {

char const *name_of(ModelKind kind) { return kind == ModelKind::gcn ? "gcn" : "gin"; }

ModelKind parse_model_kind(std::string const &text) {
  if (text == "gcn")
    return ModelKind::gcn;
  if (text == "gin")
    return ModelKind::gin;
  TESSEL_THROW("unknown model '", text, "' (expected gcn or gin)");
}

char const *name_of(FeatureFormat format) {
  return format == FeatureFormat::dense ? "dense" : format == FeatureFormat::sparse ? "sparse" : "auto";
}

FeatureFormat parse_feature_format(std::string const &text) {
  if (text == "auto")
    return FeatureFormat::automatic;
  if (text == "dense")
    return FeatureFormat::dense;
  if (text == "sparse")
    return FeatureFormat::sparse;
  TESSEL_THROW("unknown feature format '", text, "' (expected auto, dense or sparse)");
}

template <class ExecSpace>
GnnModel<ExecSpace>::GnnModel(ExecSpace const &space, Dataset const &data, TrainOptions const &options)
    : GnnModel(space, nullptr, data, options) {}

template <class ExecSpace>
GnnModel<ExecSpace>::GnnModel(ExecSpace const &space, Communicator const &comm, Dataset const &data,
                              TrainOptions const &options)
    : GnnModel(space, &comm, data, options) {}

namespace Impl {

/// GnnModel's construction, step by step: the options and the data checked (and compared across ranks), the
/// aggregation operator and its handles (or DistGraph and DistSpmm), this process's node data in the handle's order,
/// the parameters, the first layer's feature format, the activation buffers.
template <class ExecSpace> class ModelSetup {
public:
  using M = typename ExecSpace::memory_space;

  ModelSetup(ModelState<ExecSpace> &s, ExecSpace const &space, Communicator const *comm, Dataset const &data,
             TrainOptions const &options)
      : s(s), space(space), comm(comm), data(data), options(options) {}

  void run() {
    auto const t0 = std::chrono::steady_clock::now();
    s.space = space;
    s.options = options;
    s.data_name = data.name;
    check();
    s.data_digest = content_digest(data);
    if (comm)
      require_same_on_every_rank();
    // Aggregation operator: GCN's D^-1/2 (A + I) D^-1/2 or GIN's A + (1 + eps) I.
    op = options.model == ModelKind::gcn ? gcn_normalize(data.graph)
                                         : add_self_loops(data.graph, static_cast<float>(1.0 + options.gin_eps));
    if (comm)
      distribute();
    else
      build_handles();
    s.n = static_cast<std::int64_t>(rows.size());
    gather_features();
    gather_labels();
    init_parameters();
    choose_feature_format();
    allocate_activations();
    s.setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

private:
  void check() {
    validate(data);
    TESSEL_REQUIRE(data.num_nodes() > 0, "train: dataset '", data.name, "' has no nodes");
    TESSEL_REQUIRE(options.layers >= 1 && options.hidden >= 1 && options.epochs >= 0,
                   "train: layers = ", options.layers, ", hidden = ", options.hidden, ", epochs = ", options.epochs);
    TESSEL_REQUIRE(options.dropout >= 0 && options.dropout < 1, "train: dropout = ", options.dropout,
                   " must be in [0, 1)");
    TESSEL_REQUIRE(!data.labels.empty() && data.num_classes >= 1, "train: dataset '", data.name, "' has no labels");
    TESSEL_REQUIRE(!data.train_mask.empty() && !data.val_mask.empty() && !data.test_mask.empty(), "train: dataset '",
                   data.name, "' has no train/val/test masks");
    auto const count = [](std::vector<std::uint8_t> const &mask) { return std::count(mask.begin(), mask.end(), 1); };
    TESSEL_REQUIRE(count(data.train_mask) > 0, "train: dataset '", data.name,
                   "' has no training node (masks/train is all zeros): there is nothing to learn from");
    TESSEL_REQUIRE(options.patience == 0 || count(data.val_mask) > 0, "train: dataset '", data.name,
                   "' has no validation node (masks/val is all zeros), so early stopping (patience = ",
                   options.patience, ") could never act; train with patience 0");
    s.classes = data.num_classes;
    require_memory();
  }

  /// The parameters (with gradients and Adam moments) and the activations of every row, estimated before any of
  /// it is allocated.
  void require_memory() const {
    double const in0 = data.num_features() > 0 ? data.num_features() : options.random_features;
    double parameters = 0, widths = in0;
    double in = in0;
    for (int l = 0; l < options.layers; ++l) {
      double const out = l + 1 < options.layers ? options.hidden : data.num_classes;
      parameters += in * out;
      widths += out;
      in = out;
    }
    double const rows = static_cast<double>(data.num_nodes());
    // weight, gradient and two moments; per row: input, dropped input, aggregation and gradient of each layer.
    tessel::require_memory("train: the model (" + std::to_string(options.layers) + " layers of width " +
                               std::to_string(options.hidden) + " over " + std::to_string(data.num_nodes()) + " nodes)",
                           4.0 * (4 * parameters + 4 * rows * widths), tessel::SizeSource::input);
  }

  /// Every rank must train the same model on the same graph: one clear error on every rank otherwise.
  void require_same_on_every_rank() const {
    std::uint64_t h = fnv1a_basis;
    auto const mix = [&h](auto const &v) { h = fnv1a(h, &v, sizeof(v)); };
    mix(static_cast<int>(options.model));
    mix(options.hidden);
    mix(options.layers);
    mix(options.epochs);
    mix(options.learning_rate);
    mix(options.weight_decay);
    mix(options.dropout);
    mix(options.gin_eps);
    mix(options.random_features);
    mix(options.seed);
    mix(static_cast<int>(options.spmm.algorithm));
    mix(static_cast<int>(options.features));
    mix(options.normalize_features);
    mix(data.num_nodes());
    mix(data.graph.nnz());
    mix(data.num_classes);
    // The graph itself is compared by DistGraph.
    h = fnv1a(h, data.labels.data(), data.labels.size() * sizeof(data.labels[0]));
    for (auto const *mask : {&data.train_mask, &data.val_mask, &data.test_mask})
      h = fnv1a(h, mask->data(), mask->size());
    comm->require_same("distributed training on '" + data.name + "': the data set and the training options", h);
  }

  /// The aggregation options, with the reordering probe at the widths this model aggregates (the narrower side of
  /// each layer).
  SpmmOptions probed_spmm_options() const {
    SpmmOptions spmm = options.spmm;
    std::vector<int> widths;
    int in = data.num_features() > 0 ? data.num_features() : options.random_features;
    for (int l = 0; l < options.layers; ++l) {
      int const out = l + 1 < options.layers ? options.hidden : data.num_classes;
      widths.push_back(std::min(in, out));
      in = out;
    }
    std::sort(widths.begin(), widths.end());
    widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
    spmm.probe_features = widths;
    return spmm;
  }

  /// This rank's rows as a DistGraph of the operator (and of its transpose, with the same owners, when it is not
  /// symmetric), aggregated by DistSpmm.
  void distribute() {
    using Dist = DistGraph<std::int32_t>;
    s.comm = *comm;
    s.dist = std::make_unique<Dist>(*comm, op, options.distribution);
    s.dfwd = std::make_unique<DistSpmm<ExecSpace>>(space, *comm, *s.dist, probed_spmm_options());
    s.dfwd->set_schedule(options.schedule);
    if (!is_symmetric(op)) {
      DistGraphOptions given;
      given.method = DistPartitionMethod::given;
      given.owner = s.dist->owner();
      s.dist_t = std::make_unique<Dist>(*comm, transpose(op), given);
      s.dbwd = std::make_unique<DistSpmm<ExecSpace>>(space, *comm, *s.dist_t, options.spmm);
      s.dbwd->set_schedule(options.schedule);
    }
    rows = s.dist->owned_rows();
  }

  /// The forward handle (with the checkpoint's plans when resuming) and, for a non-symmetric operator, the A^T
  /// handle in the forward's vertex order.
  void build_handles() {
    using Handle = typename ModelState<ExecSpace>::Handle;
    std::string const plan_path = options.checkpoint + ".plan.h5";
    std::string const plan_t_path = options.checkpoint + ".plan_t.h5";
    bool const reuse_plans = options.resume && !options.checkpoint.empty() &&
                             options.spmm.algorithm == SpmmAlgorithm::adaptive && input_exists(plan_path);
    auto const spmm = probed_spmm_options();
    if (reuse_plans)
      s.fwd = std::make_unique<Handle>(space, op, spmm, plan_path);
    else
      s.fwd = std::make_unique<Handle>(space, op, spmm);
    if (!is_symmetric(op)) {
      auto const opt = transpose(op);
      if (options.spmm.algorithm == SpmmAlgorithm::adaptive) {
        if (reuse_plans && input_exists(plan_t_path))
          s.bwd = std::make_unique<Handle>(space, opt, options.spmm, plan_t_path);
        else
          s.bwd = std::make_unique<Handle>(space, opt, options.spmm, s.fwd->partition());
      } else {
        s.bwd = std::make_unique<Handle>(space, opt, options.spmm);
      }
    }
    rows = s.fwd->permutation().old_of_new;
  }

  /// The features (normalized, random when absent) of this process's rows, in their order, and each row's vertex.
  void gather_features() {
    auto const un = static_cast<std::size_t>(s.n);
    Matrix<Kokkos::HostSpace> features;
    if (data.num_features() > 0) {
      features = Matrix<Kokkos::HostSpace>(Kokkos::view_alloc(space, "Tessel::gnn::features"), data.features.extent(0),
                                           data.features.extent(1));
      Kokkos::deep_copy(space, features, data.features);
      space.fence();
    } else {
      TESSEL_REQUIRE(options.random_features > 0, "train: dataset '", data.name,
                     "' has no features; pass random_features (--random-features) to train on random ones");
      features = random_features(data.num_nodes(), options.random_features, options.seed);
    }
    if (options.normalize_features)
      normalize_rows(features);
    Matrix<Kokkos::HostSpace> mine(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::features_mine"), un,
                                   features.extent(1));
    auto const cols = features.extent(1);
    auto const *order = rows.data();
    Kokkos::parallel_for(
        "Tessel::gnn::gather_features", Kokkos::RangePolicy<ExecSpace>(space, 0, s.n), KOKKOS_LAMBDA(std::int64_t k) {
          for (std::size_t j = 0; j < cols; ++j)
            mine(k, j) = features(static_cast<std::size_t>(order[static_cast<std::size_t>(k)]), j);
        });
    space.fence();
    s.x = node_matrix("Tessel::gnn::x", un, cols);
    Kokkos::deep_copy(space, s.x, mine);
    s.vertex = Kokkos::View<std::int64_t *, M>(Kokkos::view_alloc(space, "Tessel::gnn::vertex"), un);
    Kokkos::deep_copy(space, s.vertex,
                      Kokkos::View<std::int64_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          rows.data(), un));
    space.fence();
  }

  /// The labels and masks of this process's rows, and the mask sizes over every rank.
  void gather_labels() {
    auto const gather = [this](auto const &v) {
      std::decay_t<decltype(v)> out(rows.size());
      for (std::size_t k = 0; k < rows.size(); ++k)
        out[k] = v[static_cast<std::size_t>(rows[k])];
      return out;
    };
    s.labels = gather(data.labels);
    s.masks[0] = gather(data.train_mask);
    s.masks[1] = gather(data.val_mask);
    s.masks[2] = gather(data.test_mask);
    for (int m = 0; m < 3; ++m)
      s.mask_count[m] = std::count(s.masks[m].begin(), s.masks[m].end(), 1);
    s.sum_over_ranks(s.mask_count, 3);
  }

  /// Every layer's weight (Glorot uniform, as Kipf), bias (GIN), their gradients and Adam moments, and the buffer of
  /// its aggregation (on the narrower side, as GNNAdvisor: GCN transforms first, GIN aggregates first).
  void init_parameters() {
    auto const un = static_cast<std::size_t>(s.n);
    s.dims.push_back(static_cast<int>(s.x.extent(1)));
    for (int l = 0; l + 1 < options.layers; ++l)
      s.dims.push_back(options.hidden);
    s.dims.push_back(s.classes);
    std::mt19937_64 rng(options.seed);
    for (int l = 0; l < s.layers(); ++l) {
      auto const in = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(l)]);
      auto const out = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(l) + 1]);
      Matrix<M> w(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "Tessel::gnn::weight"), in, out);
      auto hw = Kokkos::create_mirror_view(w);
      double const limit = std::sqrt(6.0 / static_cast<double>(in + out));
      std::uniform_real_distribution<double> u(-limit, limit);
      for (std::size_t k = 0; k < hw.size(); ++k)
        hw.data()[k] = static_cast<float>(u(rng));
      Kokkos::deep_copy(space, w, hw);
      s.w.push_back(w);
      s.dw.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::weight_grad"), in, out));
      s.mw.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::adam_m"), in, out));
      s.vw.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::adam_v"), in, out));
      std::size_t const brows = options.model == ModelKind::gin ? 1 : 0;
      s.b.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::bias"), brows, out));
      s.db.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::bias_grad"), brows, out));
      s.mb.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::bias_adam_m"), brows, out));
      s.vb.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::bias_adam_v"), brows, out));
      s.aggregate_first.push_back(in <= out);
      s.s.push_back(node_matrix("Tessel::gnn::aggregated", un, in <= out ? in : out));
    }
  }

  /// The first layer reads the features by their nonzeros when they are sparse and it transforms first (aggregating
  /// first would make them dense before the GEMM).
  void choose_feature_format() {
    if (options.features == FeatureFormat::dense || s.aggregate_first[0])
      return;
    auto const csr = nonzeros(ConstMatrix<M>(s.x));
    // One choice on every rank: the density of the whole feature matrix.
    double counts[2] = {static_cast<double>(csr.nnz()), static_cast<double>(s.x.size())};
    s.sum_over_ranks(counts, 2);
    if (options.features == FeatureFormat::sparse || counts[0] <= sparse_feature_density * counts[1])
      s.sparse = std::make_unique<SparseFeatures<ExecSpace>>(space, csr);
  }

  /// Each layer's input, dropped input and gradient buffers.
  void allocate_activations() {
    auto const un = static_cast<std::size_t>(s.n);
    s.h.push_back(s.x);
    s.hd.push_back(node_matrix("Tessel::gnn::dropped", s.sparse ? 0 : un, s.sparse ? 0 : s.x.extent(1)));
    s.grad.push_back(node_matrix("Tessel::gnn::grad", un, s.x.extent(1)));
    for (int l = 0; l < s.layers(); ++l) {
      auto const out = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(l) + 1]);
      s.h.push_back(node_matrix("Tessel::gnn::activation", un, out));
      s.hd.push_back(node_matrix("Tessel::gnn::dropped", un, out));
      s.grad.push_back(node_matrix("Tessel::gnn::grad", un, out));
    }
  }

  /// A matrix with one row per node (the aggregations read and write these), on huge pages as the options say.
  Matrix<M> node_matrix(char const *label, std::size_t rows, std::size_t cols) const {
    return make_matrix(space, label, rows, cols, options.spmm.huge_pages);
  }

  ModelState<ExecSpace> &s;
  ExecSpace space;
  Communicator const *comm;
  Dataset const &data;
  TrainOptions const &options;
  Graph<std::int32_t> op;
  /// rows[k]: the original vertex held at row k (the handle's order, or this rank's rows in increasing id).
  std::vector<std::int64_t> rows;
};

} // namespace Impl

template <class ExecSpace>
GnnModel<ExecSpace>::GnnModel(ExecSpace const &space, Communicator const *comm, Dataset const &data,
                              TrainOptions const &options)
    : _state(std::make_unique<Impl::ModelState<ExecSpace>>()) {
  Impl::ModelSetup<ExecSpace>(*_state, space, comm, data, options).run();
}

template <class ExecSpace> GnnModel<ExecSpace>::~GnnModel() = default;

template <class ExecSpace> double GnnModel<ExecSpace>::forward(bool training, int epoch) {
  auto &s = *_state;
  s.forward(training, epoch);
  return s.loss(0, nullptr).first + s.weight_decay_term();
}

template <class ExecSpace> void GnnModel<ExecSpace>::backward() { _state->backward(); }
template <class ExecSpace> void GnnModel<ExecSpace>::step() { _state->step(); }

template <class ExecSpace> typename GnnModel<ExecSpace>::Metrics GnnModel<ExecSpace>::evaluate() {
  auto &s = *_state;
  s.forward(false, 0);
  Metrics m;
  std::tie(m.train_loss, m.train_acc) = s.loss(0, nullptr);
  std::tie(m.val_loss, m.val_acc) = s.loss(1, nullptr);
  std::tie(m.test_loss, m.test_acc) = s.loss(2, nullptr);
  return m;
}

template <class ExecSpace> int GnnModel<ExecSpace>::num_layers() const { return _state->layers(); }
template <class ExecSpace> std::int64_t GnnModel<ExecSpace>::local_rows() const { return _state->n; }
template <class ExecSpace> Matrix<typename GnnModel<ExecSpace>::memory_space> GnnModel<ExecSpace>::weight(int l) const {
  return _state->w.at(static_cast<std::size_t>(l));
}
template <class ExecSpace>
Matrix<typename GnnModel<ExecSpace>::memory_space> GnnModel<ExecSpace>::weight_gradient(int l) const {
  return _state->dw.at(static_cast<std::size_t>(l));
}
template <class ExecSpace> Matrix<typename GnnModel<ExecSpace>::memory_space> GnnModel<ExecSpace>::bias(int l) const {
  return _state->b.at(static_cast<std::size_t>(l));
}
template <class ExecSpace>
Matrix<typename GnnModel<ExecSpace>::memory_space> GnnModel<ExecSpace>::bias_gradient(int l) const {
  return _state->db.at(static_cast<std::size_t>(l));
}

namespace {
/// Early stopping (Kipf): the last validation loss exceeds the mean of the \p patience before it (0: never).
bool stops_early(std::vector<EpochRecord> const &history, int patience) {
  if (patience <= 0 || static_cast<int>(history.size()) <= patience)
    return false;
  double mean = 0;
  for (std::size_t k = history.size() - 1 - static_cast<std::size_t>(patience); k + 1 < history.size(); ++k)
    mean += history[k].val_loss;
  mean /= patience;
  return history.back().val_loss > mean;
}
} // namespace

template <class ExecSpace> EpochRecord GnnModel<ExecSpace>::train_epoch(int epoch) {
  auto &s = *_state;
  ScopedRegion region("Tessel::gnn::epoch");
  double const agg0 = s.aggregation_seconds, comm0 = s.communication_seconds, wait0 = s.halo_wait_seconds;
  Timer<ExecSpace> timer(s.space, "Tessel::gnn::epoch");
  s.forward(true, epoch);
  auto const [train_loss, train_acc] = s.loss(0, nullptr);
  s.backward();
  s.step();
  auto const m = evaluate();
  EpochRecord r;
  r.epoch = epoch;
  r.train_loss = train_loss + s.weight_decay_term();
  r.train_acc = train_acc;
  r.val_loss = m.val_loss;
  r.val_acc = m.val_acc;
  r.test_acc = m.test_acc;
  r.seconds = timer.seconds();
  r.aggregation_seconds = s.aggregation_seconds - agg0;
  r.communication_seconds = s.communication_seconds - comm0;
  r.halo_wait_seconds = s.halo_wait_seconds - wait0;
  TESSEL_REQUIRE(!s.options.stop_on_divergence || (std::isfinite(r.train_loss) && std::isfinite(r.val_loss)),
                 "training diverged at epoch ", epoch, ": the ",
                 std::isfinite(r.train_loss) ? "validation" : "training", " loss is ",
                 std::isfinite(r.train_loss) ? r.val_loss : r.train_loss,
                 " (a lower learning rate may help; --allow-divergence trains on)");
  return r;
}

template <class ExecSpace> TrainResult GnnModel<ExecSpace>::train() {
  auto &s = *_state;
  auto const &o = s.options;
  TrainResult result;
  std::vector<EpochRecord> history;
  bool resume = o.resume && !o.checkpoint.empty() && input_exists(o.checkpoint);
  if (s.comm) // a file seen by some ranks only is an error on every rank (in load_checkpoint), not a split run
    resume = s.comm->allreduce_value(resume ? 1 : 0, ReduceOp::max) != 0;
  if (resume)
    history = load_checkpoint(o.checkpoint);
  int const start = history.empty() ? 1 : history.back().epoch + 1;
  // A checkpoint written by a run that had already stopped early resumes as stopped.
  bool stopped = !history.empty() && stops_early(history, o.patience);
  std::int64_t epochs_here = 0, halo_bytes_here = 0;
  for (int epoch = start; epoch <= o.epochs && !stopped; ++epoch) {
    auto const bytes0 = s.halo_bytes;
    history.push_back(train_epoch(epoch));
    ++epochs_here;
    halo_bytes_here += s.halo_bytes - bytes0;
    if (o.on_epoch)
      o.on_epoch(history.back());
    stopped = stops_early(history, o.patience);
    result.early_stopped = stopped;
    if (!o.checkpoint.empty() && o.checkpoint_every > 0 && epoch % o.checkpoint_every == 0)
      save_checkpoint(o.checkpoint, history);
  }
  if (!o.checkpoint.empty() && o.checkpoint_every == 0)
    save_checkpoint(o.checkpoint, history);
  result.history = std::move(history);
  fill_result(result, epochs_here, halo_bytes_here);
  return result;
}

template <class ExecSpace>
void GnnModel<ExecSpace>::fill_result(TrainResult &result, std::int64_t epochs_here, std::int64_t halo_bytes_here) {
  auto &s = *_state;
  result.setup_seconds = s.setup_seconds;
  result.sparse_features = s.sparse != nullptr;
  auto const m = evaluate();
  result.epochs_run = result.history.empty() ? 0 : result.history.back().epoch;
  result.train_acc = m.train_acc;
  result.val_acc = m.val_acc;
  result.test_acc = m.test_acc;
  for (auto const &r : result.history) {
    result.train_seconds += r.seconds;
    result.aggregation_seconds += r.aggregation_seconds;
    result.communication_seconds += r.communication_seconds;
    result.halo_wait_seconds += r.halo_wait_seconds;
  }
  if (s.fwd) {
    result.selection_seconds = s.fwd->overhead_seconds() + (s.bwd ? s.bwd->overhead_seconds() : 0.0);
    result.plans = s.fwd->plans();
    if (s.bwd)
      result.backward_plans = s.bwd->plans();
  } else {
    result.selection_seconds = s.dfwd->overhead_seconds() + (s.dbwd ? s.dbwd->overhead_seconds() : 0.0);
    result.plans = s.dfwd->local_plans();
    if (s.dbwd)
      result.backward_plans = s.dbwd->local_plans();
    result.ranks = s.comm->size();
    result.partition_seconds = s.dist->partition_seconds();
    result.halo_bytes_per_epoch = epochs_here ? halo_bytes_here / epochs_here : 0;
  }
  result.selection_net_seconds = result.selection_seconds;
  for (auto const *plans : {&result.plans, &result.backward_plans})
    for (auto const &p : *plans)
      result.selection_net_seconds -= p.tuning_applies * p.apply_seconds;
}

#define TESSEL_GNN_INSTANTIATE_MODEL(SPACE) template class GnnModel<SPACE>;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_MODEL)

} // namespace tessel::gnn

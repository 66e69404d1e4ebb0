#ifndef TESSEL_GNN_MODEL_HPP
#define TESSEL_GNN_MODEL_HPP

/// \file Model.hpp
/// \brief Full-graph GNN training on top of SpmmHandle: GCN (Kipf & Welling) and GIN (GNNAdvisor's setup),
/// forward and backward, softmax cross-entropy, dropout, Adam, early stopping and exact-resume HDF5 checkpoints.

#include <tessel/core/Communicator.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessel::gnn {

/// \brief The network trained.
enum class ModelKind {
  gcn, ///< Kipf & Welling's graph convolutional network
  gin  ///< Xu et al.'s graph isomorphism network
};
/// "gcn" or "gin".
char const *name_of(ModelKind kind);
/// Parses "gcn" or "gin"; throws naming the accepted values.
ModelKind parse_model_kind(std::string const &text);

/// \brief How the first layer reads the input features.
enum class FeatureFormat {
  automatic, ///< sparse when at most sparse_feature_density of them are nonzero and the first layer transforms first
  dense,     ///< as an n x F matrix (GEMM; dropout draws a mask per element)
  sparse     ///< by their nonzeros (transform, weight gradient and dropout per nonzero), when the first layer
             ///< transforms before it aggregates (otherwise dense)
};
/// "auto", "dense" or "sparse".
char const *name_of(FeatureFormat format);
/// Parses a name of name_of; throws naming the accepted values.
FeatureFormat parse_feature_format(std::string const &text);
/// The largest fraction of nonzero input features FeatureFormat::automatic reads as sparse.
constexpr double sparse_feature_density = 0.1;

/// \brief One epoch of training.
struct EpochRecord {
  int epoch = 0;                  ///< 1 for the first epoch
  double train_loss = 0;          ///< mean cross-entropy over the training nodes (plus weight decay)
  double train_acc = 0;           ///< accuracy on the training nodes
  double val_loss = 0;            ///< loss on the validation nodes
  double val_acc = 0;             ///< accuracy on the validation nodes
  double test_acc = 0;            ///< accuracy on the test nodes
  double seconds = 0;             ///< wall time of the epoch (train step + evaluation)
  double aggregation_seconds = 0; ///< part of it spent aggregating (SpmmHandle or DistSpmm, less its exposed waits)
  /// Distributed: communication the computation did not hide (the halo waits of DistSpmm, the all-reduces of the
  /// gradients and of the loss and accuracy sums).
  double communication_seconds = 0;
  double halo_wait_seconds = 0; ///< the part of communication_seconds spent waiting for halo rows
};

/// \brief Hyper-parameters and run control. Defaults are Kipf & Welling's GCN setup.
struct TrainOptions {
  ModelKind model = ModelKind::gcn; ///< GCN or GIN
  int hidden = 16;                  ///< hidden width (GIN in GNNAdvisor: 64)
  int layers = 2;                   ///< GCN: 2; GIN in GNNAdvisor: 5
  int epochs = 200;                 ///< epochs at most (early stopping may end sooner)
  double learning_rate = 0.01;      ///< Adam's step size
  double weight_decay = 5e-4;       ///< L2 on the first layer's weights (GCN, as Kipf) or on all weights (GIN)
  double dropout = 0.5;             ///< on the input of every layer
  int patience = 10;                ///< stop when the validation loss exceeds the mean of the last `patience` (0: off)
  bool normalize_features = true;   ///< row-normalize input features (Kipf)
  double gin_eps = 0.0;             ///< GIN aggregation A + (1 + eps) I
  int random_features = 0;          ///< width of uniform random features when the data set has none
  SpmmOptions spmm;                 ///< aggregation algorithm (adaptive by default)
  DistGraphOptions distribution;    ///< distributed training: how the rows are spread over the ranks
  DistSchedule schedule = DistSchedule::overlapped;  ///< distributed training: the halo exchange's schedule
  FeatureFormat features = FeatureFormat::automatic; ///< how the first layer reads the input features
  std::uint64_t seed = 42;                           ///< parameters' initialization and dropout masks
  std::string checkpoint;                            ///< HDF5 checkpoint path ("" = none)
  int checkpoint_every = 0; ///< epochs between checkpoints (0: only at the end when checkpoint is set)
  bool resume = false;      ///< continue from `checkpoint` when it exists
  /// A non-finite loss (divergence) ends training with an error naming the epoch; false: train on and report it.
  bool stop_on_divergence = true;
  std::function<void(EpochRecord const &)> on_epoch; ///< progress callback
};

/// \brief Outcome of train().
struct TrainResult {
  std::vector<EpochRecord> history; ///< every epoch of this run (and of the run it resumed)
  int epochs_run = 0;               ///< epochs trained by this run
  bool early_stopped = false;       ///< the validation loss stopped training before the last epoch
  double train_acc = 0;             ///< accuracy of the final parameters on the training nodes
  double val_acc = 0;               ///< on the validation nodes
  double test_acc = 0;              ///< on the test nodes
  double train_seconds = 0;         ///< sum of epoch times
  double aggregation_seconds = 0;   ///< sum of aggregation times
  double communication_seconds = 0; ///< sum of exposed communication times (distributed)
  double halo_wait_seconds = 0;     ///< the part of it spent waiting for halo rows
  double partition_seconds = 0;     ///< distributed: partitioning the rows over the ranks
  double setup_seconds = 0;         ///< model construction (normalization, partition, handles)
  bool sparse_features = false;     ///< the first layer read the features by their nonzeros
  double selection_seconds = 0;     ///< AdaptGear selection: partition/decomposition plus tuning applies
  /// selection_seconds less the work the tuning applies did for training (each returns the aggregation an epoch
  /// needs): their count times the frozen plan's time per apply (SpmmPlan::apply_seconds).
  double selection_net_seconds = 0;
  std::vector<SpmmPlan> plans;           ///< the forward handle's plans (one per aggregated width)
  std::vector<SpmmPlan> backward_plans;  ///< the A^T handle's plans (empty when A is symmetric)
  int ranks = 1;                         ///< ranks that trained (1: single-process)
  std::int64_t halo_bytes_per_epoch = 0; ///< distributed: feature bytes this rank received per epoch
};

namespace Impl {
template <class ExecSpace> struct ModelState;
}

/// \brief A GCN or GIN over one data set, with its parameters, optimizer state and aggregation handles.
///
/// Node data are kept in the aggregation handle's vertex order. Parameters: weight(l) is in_l x out_l;
/// GIN layers also have bias(l) (1 x out_l).
///
/// Distributed (the constructor with a Communicator): the rows are spread over the ranks as a DistGraph
/// (TrainOptions::distribution), each rank keeps its rows' node data, aggregates with DistSpmm (A^T through a
/// DistGraph of the transpose with the same owners when A is not symmetric), and the weight and bias gradients and
/// the loss and accuracy sums are all-reduced, so every rank holds the same parameters. Dropout masks are drawn per
/// (original vertex, feature), so one seed trains the same model at every rank count, up to the order of
/// floating-point sums. Checkpoints are written by rank 0 and resume at the same rank count and partition.
/// Instantiated for every enabled host execution space (tessel::is_host_execution_space_v).
template <class ExecSpace = Kokkos::DefaultHostExecutionSpace> class GnnModel {
  // The shared refusal of other spaces (its message names the enabled host spaces).
  static_assert(std::is_same_v<host_execution_space_t<ExecSpace>, ExecSpace>);

public:
  using memory_space = typename ExecSpace::memory_space; ///< where parameters and activations live
  /// A model for \p data in one process: normalizes the graph, builds the aggregation handles and initializes the
  /// parameters.
  GnnModel(ExecSpace const &space, Dataset const &data, TrainOptions const &options);
  /// Distributed over \p comm (collective): every rank passes the whole data set and the same options, and keeps
  /// only its own rows' node data and blocks.
  GnnModel(ExecSpace const &space, Communicator const &comm, Dataset const &data, TrainOptions const &options);
  ~GnnModel();
  GnnModel(GnnModel const &) = delete;
  GnnModel &operator=(GnnModel const &) = delete;

  /// Forward pass; returns the training loss (mean cross-entropy over training nodes plus weight decay).
  /// With \p training, dropout masks are drawn for \p epoch (counter-based, so they are reproducible).
  double forward(bool training, int epoch);
  /// Gradients of the last training forward pass.
  void backward();
  /// One Adam step with the current gradients.
  void step();
  /// Loss and accuracy of the current parameters (no dropout) on the train, validation and test masks.
  struct Metrics {
    double train_loss = 0; ///< on the training nodes
    double train_acc = 0;  ///< on the training nodes
    double val_loss = 0;   ///< on the validation nodes
    double val_acc = 0;    ///< on the validation nodes
    double test_loss = 0;  ///< on the test nodes
    double test_acc = 0;   ///< on the test nodes
  };
  /// The Metrics of the current parameters (collective when distributed).
  Metrics evaluate();
  /// Runs the training loop (resuming from options.checkpoint when asked).
  TrainResult train();

  /// Layers.
  int num_layers() const;
  /// Rows this process holds (all of them unless distributed).
  std::int64_t local_rows() const;
  /// The weights of \p layer (a view on the model's parameters).
  Matrix<memory_space> weight(int layer) const;
  /// Their gradient after backward().
  Matrix<memory_space> weight_gradient(int layer) const;
  /// The bias of \p layer; empty for GCN.
  Matrix<memory_space> bias(int layer) const;
  /// Its gradient after backward().
  Matrix<memory_space> bias_gradient(int layer) const;

  /// Writes parameters, optimizer state and \p history to \p path (HDF5, complete or absent; rank 0 when
  /// distributed, after checking that every rank holds the same parameters).
  void save_checkpoint(std::string const &path, std::vector<EpochRecord> const &history) const;
  /// Restores parameters, optimizer state and history; returns the history.
  std::vector<EpochRecord> load_checkpoint(std::string const &path);

private:
  GnnModel(ExecSpace const &space, Communicator const *comm, Dataset const &data, TrainOptions const &options);
  EpochRecord train_epoch(int epoch);
  void fill_result(TrainResult &result, std::int64_t epochs_here, std::int64_t halo_bytes_here);
  void write_checkpoint(std::string const &path, std::vector<EpochRecord> const &history) const;
  std::vector<EpochRecord> read_checkpoint(std::string const &path);
  std::unique_ptr<Impl::ModelState<ExecSpace>> _state;
};

/// \brief Builds a GnnModel and trains it.
template <class ExecSpace> TrainResult train(ExecSpace const &space, Dataset const &data, TrainOptions const &options) {
  GnnModel<ExecSpace> model(space, data, options);
  return model.train();
}

/// \brief Builds a distributed GnnModel over \p comm and trains it (collective).
template <class ExecSpace>
TrainResult train(ExecSpace const &space, Communicator const &comm, Dataset const &data, TrainOptions const &options) {
  GnnModel<ExecSpace> model(space, comm, data, options);
  return model.train();
}

} // namespace tessel::gnn

#endif

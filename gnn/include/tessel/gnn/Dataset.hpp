#ifndef TESSEL_GNN_DATASET_HPP
#define TESSEL_GNN_DATASET_HPP

/// \file Dataset.hpp
/// \brief Node-classification data sets (graph, features, labels, split masks) in Tessel's HDF5 schema
/// `tessel.gnn.graph` (datasets/gnn/README.md), validated on load, and generators of community graphs.

#include <tessel/gnn/Graph.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::gnn {

/// \brief A graph with node features, labels and a train/validation/test split, all in host memory.
struct Dataset {
  std::string name;                     ///< the data set's name (used in messages)
  std::string source;                   ///< where it came from (file, generator, application)
  Graph<std::int32_t> graph;            ///< row i aggregates from its entries (as stored)
  Matrix<Kokkos::HostSpace> features;   ///< num_nodes x num_features; 0 columns when the file has none
  bool features_random = false;         ///< features carry no signal (timing only)
  std::vector<std::int32_t> labels;     ///< class of each node, -1 = unlabelled; empty when the file has none
  int num_classes = 0;                  ///< classes (labels are in [0, num_classes))
  std::vector<std::uint8_t> train_mask; ///< one 0/1 byte per node: a training node; empty when absent
  std::vector<std::uint8_t> val_mask;   ///< one 0/1 byte per node: a validation node; empty when absent
  std::vector<std::uint8_t> test_mask;  ///< one 0/1 byte per node: a test node; empty when absent
  bool directed = false;                ///< the graph is not symmetric (A^T differs from A)

  /// Nodes (rows of the graph).
  std::int64_t num_nodes() const { return graph.num_rows(); }
  /// Feature columns (0: none).
  int num_features() const { return static_cast<int>(features.extent(1)); }
};

/// \brief A data set from an application's own arrays (copied in where given by value, checked by validate()):
/// the graph, one row of \p features per node (0 columns: none), a class per node (-1: unlabelled; empty: none).
/// \p num_classes 0 takes the largest label + 1. The split is drawn by make_split.
/// \code
/// auto data = tessel::gnn::make_dataset("mesh", graph, features, labels);
/// tessel::gnn::make_split(data, 20, 500, 1000, /*seed=*/1);   // 20 training nodes per class, 500 val, 1000 test
/// auto result = tessel::gnn::train(Kokkos::DefaultHostExecutionSpace(), data, tessel::gnn::TrainOptions{});
/// \endcode
Dataset make_dataset(std::string name, Graph<std::int32_t> graph, Matrix<Kokkos::HostSpace> features,
                     std::vector<std::int32_t> labels, int num_classes = 0);

/// \brief Reads a `tessel.gnn.graph` file and validates it; errors name the file, the data set, the dataset
/// path in the file and the first bad entry.
Dataset load_dataset(std::string const &path);
/// \brief Writes \p data in the `tessel.gnn.graph` schema (dense features), replacing \p path.
void save_dataset(std::string const &path, Dataset const &data);
/// \brief Checks graph, feature shape and finiteness, label range and masks; throws naming \p data.name and the
/// first bad entry.
void validate(Dataset const &data);

/// \brief A 64-bit digest of what a model learns from: the graph's structure and weights (offsets, columns, values),
/// the features and the labels. Two data sets with the same name but another graph, other features or other labels
/// differ in it (with overwhelming probability); the name and source do not enter it.
std::uint64_t content_digest(Dataset const &data);

/// \brief Row-normalizes features in place (each row sums to 1; zero rows stay zero), as Kipf & Welling.
void normalize_rows(Matrix<Kokkos::HostSpace> const &features);
/// \brief A num_nodes x width matrix of uniform [0, 1) values (seeded).
Matrix<Kokkos::HostSpace> random_features(std::int64_t num_nodes, int width, std::uint64_t seed);

/// \brief Planetoid-style split: \p per_class training nodes per class, then \p val and \p test nodes, drawn
/// without overlap from the labelled nodes in a seeded random order.
void make_split(Dataset &data, int per_class, std::int64_t val, std::int64_t test, std::uint64_t seed);

/// \brief Stochastic block model with planted communities.
struct SbmOptions {
  std::int64_t nodes = 10000;        ///< vertices
  std::int64_t community_size = 128; ///< mean size; sizes are uniform in [size/2, 3 size/2]
  double p_in = 0.1;                 ///< probability of each intra-community pair
  double inter_degree = 2.0;         ///< expected inter-community neighbours per node
  int classes = 8;                   ///< label = community mod classes
  int features = 32;                 ///< 0: no features stored
  double feature_signal = 1.0;       ///< class centroid scale against unit Gaussian noise
  bool shuffle = true;               ///< random vertex ids, so communities are not contiguous
  std::uint64_t seed = 1;            ///< the graph is deterministic in the seed
};
/// \brief A planted-community graph with labels and class-correlated features.
Dataset generate_sbm(SbmOptions const &options);

/// \brief R-MAT (Chakrabarti et al.) with 2^scale vertices, symmetrized, duplicates and self-loops removed;
/// random labels and features (timing only).
struct RmatOptions {
  int scale = 14;         ///< 2^scale vertices
  double edge_factor = 8; ///< edges per vertex before symmetrization
  double a = 0.57;        ///< R-MAT quadrant probability a
  double b = 0.19;        ///< R-MAT quadrant probability b
  double c = 0.19;        ///< R-MAT quadrant probability c (d = 1 - a - b - c)
  int classes = 4;        ///< random labels in [0, classes)
  int features = 0;       ///< random feature columns (0: none)
  std::uint64_t seed = 1; ///< the graph is deterministic in the seed
};
/// \brief An R-MAT graph (timing only: labels and features are random).
Dataset generate_rmat(RmatOptions const &options);

} // namespace tessel::gnn

#endif

#ifndef TESSEL_UNIT_TESTS_GNN_TEST_MODELS_HPP
#define TESSEL_UNIT_TESTS_GNN_TEST_MODELS_HPP

// What the training tests share: the planted-community graph they learn on, and the models they train there.
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Model.hpp>

namespace tessel::gnn::test {

/// 1200 vertices in communities of 60, 4 classes, 16 weak features (the graph has to help).
inline Dataset communities() {
  SbmOptions o;
  o.nodes = 1200;
  o.community_size = 60;
  o.p_in = 0.15;
  o.inter_degree = 1.0;
  o.classes = 4;
  o.features = 16;
  o.feature_signal = 0.5;
  return generate_sbm(o);
}

/// GCN as Kipf's, or a small GIN (3 layers, 32 hidden, dropout 0.2), for \p epochs without early stopping.
inline TrainOptions model_options(ModelKind kind, SpmmAlgorithm algorithm, int epochs) {
  TrainOptions o;
  o.model = kind;
  if (kind == ModelKind::gin) {
    o.layers = 3;
    o.hidden = 32;
    o.dropout = 0.2;
  }
  o.epochs = epochs;
  o.patience = 0;
  o.spmm.algorithm = algorithm;
  return o;
}

} // namespace tessel::gnn::test

#endif

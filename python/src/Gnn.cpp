// tessel._tessel.gnn: graphs built from the caller's CSR arrays, SpmmHandle (every algorithm) applied to the
// caller's feature arrays without copies, the data sets and the whole-model training of the C++ library.
#include "Arrays.hpp"
#include "Bindings.hpp"
#include "Runtime.hpp"

#include <tessel/core/Communicator.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Graph.hpp>
#include <tessel/gnn/Model.hpp>
#include <tessel/gnn/Reorder.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tessel::python {

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
using Index = std::int32_t;
using GraphType = gnn::Graph<Index>;
using HandleType = gnn::SpmmHandle<Index, Space>;
using HostMatrixF = gnn::Matrix<Kokkos::HostSpace>;
using ConstHostMatrixF = gnn::ConstMatrix<Kokkos::HostSpace>;

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

/// A host graph (CSR, int32 column indices, int64 offsets, float32 values), owned by Tessel.
class PyGraph : public Resource {
public:
  explicit PyGraph(GraphType graph) : _graph(std::move(graph)) {}
  void release() override { _graph = GraphType(); }
  GraphType const &graph() const {
    require_initialized("tessel.gnn.Graph");
    return _graph;
  }

private:
  GraphType _graph;
};

std::unique_ptr<PyGraph> graph_from_csr(InArray const &indptr, InArray const &indices,
                                        std::optional<InArray> const &values, std::optional<std::int64_t> num_cols,
                                        std::string const &name) {
  require_initialized("tessel.gnn.Graph.from_csr");
  auto const row_map = integer_vector(indptr, "Graph.from_csr: indptr");
  auto const cols64 = integer_vector(indices, "Graph.from_csr: indices");
  if (row_map.empty())
    throw nb::value_error("Graph.from_csr: indptr must hold num_rows + 1 offsets, got an empty array");
  auto const rows = static_cast<std::int64_t>(row_map.size()) - 1;
  std::int64_t cols = num_cols.value_or(rows);
  auto const max_index = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
  if (rows > max_index || cols > max_index)
    throw nb::value_error(("Graph.from_csr: " + std::to_string(rows) + " x " + std::to_string(cols) +
                           " is larger than Tessel's 32-bit vertex indices allow (" + std::to_string(max_index) + ")")
                              .c_str());
  if (cols < 0)
    throw nb::value_error("Graph.from_csr: num_cols must be >= 0");
  std::vector<Index> entries(cols64.size());
  for (std::size_t k = 0; k < cols64.size(); ++k) {
    if (cols64[k] < 0 || cols64[k] >= cols)
      throw nb::value_error(("Graph.from_csr: indices[" + std::to_string(k) + "] = " + std::to_string(cols64[k]) +
                             " is outside [0, " + std::to_string(cols) + ")")
                                .c_str());
    entries[k] = static_cast<Index>(cols64[k]);
  }
  std::vector<float> vals;
  if (values) {
    vals = float_vector(*values, "Graph.from_csr: values");
    if (vals.size() != entries.size())
      throw nb::value_error(("Graph.from_csr: values has " + std::to_string(vals.size()) + " entries, indices " +
                             std::to_string(entries.size()))
                                .c_str());
  }
  nb::gil_scoped_release unlocked;
  return std::make_unique<PyGraph>(
      gnn::make_graph<Index>(name, static_cast<Index>(rows), static_cast<Index>(cols), row_map, entries, vals));
}

nb::dict degree_stats(PyGraph const &g) {
  auto const s = gnn::degree_stats(g.graph());
  nb::dict d;
  d["num_rows"] = s.num_rows;
  d["num_cols"] = s.num_cols;
  d["nnz"] = s.nnz;
  d["min_degree"] = s.min_degree;
  d["max_degree"] = s.max_degree;
  d["mean_degree"] = s.mean_degree;
  d["stddev_degree"] = s.stddev_degree;
  d["empty_rows"] = s.empty_rows;
  d["self_loops"] = s.self_loops;
  d["duplicates"] = s.duplicates;
  d["symmetric"] = s.symmetric;
  return d;
}

nb::tuple csr_arrays(PyGraph const &g) {
  auto const &a = g.graph();
  std::vector<std::int64_t> indptr(sz(a.num_rows() + 1));
  std::vector<std::int32_t> indices(sz(a.nnz()));
  std::vector<float> values(sz(a.nnz()));
  for (std::size_t i = 0; i < indptr.size(); ++i)
    indptr[i] = a.row_map()(i);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    indices[k] = a.entries()(k);
    values[k] = a.values()(k);
  }
  auto const nnz = indices.size();
  return nb::make_tuple(numpy_array(std::move(indptr), {sz(a.num_rows() + 1)}), numpy_array(std::move(indices), {nnz}),
                        numpy_array(std::move(values), {nnz}));
}

gnn::SpmmOptions spmm_options(std::string const &algorithm, bool timing, int tuning_repeats,
                              std::string const &partition, std::int64_t part_size,
                              std::optional<std::vector<double>> const &class_bounds,
                              std::optional<std::vector<int>> const &probe_features, std::int64_t dense_max_bytes,
                              std::int64_t coo_chunk, std::uint64_t seed) {
  gnn::SpmmOptions o;
  o.algorithm = gnn::parse_spmm_algorithm(algorithm);
  o.timing = timing;
  o.tuning_repeats = tuning_repeats;
  o.partition = gnn::parse_partition_method(partition);
  o.part_size = part_size;
  if (class_bounds)
    o.class_bounds = *class_bounds;
  if (probe_features)
    o.probe_features = *probe_features;
  o.dense_max_bytes = dense_max_bytes;
  o.coo_chunk = coo_chunk;
  o.seed = seed;
  return o;
}

/// SpmmHandle over a graph, with the handle of A^T built on first use (sharing the vertex order), and applies in
/// the caller's vertex order (rows permuted in and out only when the handle reordered the graph).
class PySpmmHandle : public Resource {
public:
  PySpmmHandle(PyGraph const &graph, gnn::SpmmOptions const &options) : _options(options) {
    auto const &a = graph.graph();
    _rows = a.num_rows();
    _cols = a.num_cols();
    _graph = a;
    nb::gil_scoped_release unlocked;
    _handle = std::make_unique<HandleType>(_space, a, options);
  }

  void release() override {
    std::lock_guard<std::mutex> lock(_mutex);
    _handle.reset();
    _transpose.reset();
    _graph = GraphType();
    _scratch.clear();
  }

  std::int64_t rows() const { return _rows; }
  std::int64_t cols() const { return _cols; }

  /// Y = A X (or A^T X) in the caller's vertex order; \p ordered: X and Y already in the handle's order.
  void apply(InArray const &x, OutArray const &y, bool transpose, bool ordered) {
    char const *name = transpose ? "SpmmHandle.apply_transpose" : "SpmmHandle.apply";
    std::int64_t const in_rows = transpose ? _rows : _cols, out_rows = transpose ? _cols : _rows;
    auto const *xp =
        static_cast<float const *>(require_array(x, std::string(name) + ": X", Dtype::float32, {in_rows, -1}));
    auto const f = extent(x, 1);
    auto *yp = static_cast<float *>(
        const_cast<void *>(require_array(y, std::string(name) + ": the output", Dtype::float32, {out_rows, f})));
    if (f > 0 && xp == yp)
      throw nb::value_error((std::string(name) + ": X and the output must not be the same array").c_str());
    nb::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(_mutex);
    require_live(name);
    HandleType &h = transpose ? transposed() : *_handle;
    ConstHostMatrixF xv(xp, sz(in_rows), sz(f));
    HostMatrixF yv(yp, sz(out_rows), sz(f));
    auto const &perm = _handle->permutation();
    if (ordered || perm.is_identity()) {
      h.apply(_space, xv, yv);
      return;
    }
    auto &s = scratch(f);
    gnn::permute_rows(_space, perm, xv, s.x);
    h.apply(_space, ConstHostMatrixF(s.x), s.y);
    gnn::unpermute_rows(_space, perm, ConstHostMatrixF(s.y), yv);
    _space.fence();
  }

  std::string algorithm() const {
    require_live("SpmmHandle.algorithm");
    return gnn::name_of(_handle->algorithm());
  }
  nb::object permutation() const {
    require_live("SpmmHandle.permutation");
    auto const &p = _handle->permutation();
    std::vector<std::int64_t> order = p.old_of_new;
    if (order.empty())
      for (std::int64_t i = 0; i < _rows; ++i)
        order.push_back(i);
    auto const n = order.size();
    return numpy_array(std::move(order), {n});
  }
  bool tuned(int features) const {
    require_live("SpmmHandle.tuned");
    return _handle->tuned(features);
  }
  std::string plan(int features) const {
    require_live("SpmmHandle.plan");
    return _handle->plan(features).to_json();
  }
  std::vector<std::string> plans() const {
    require_live("SpmmHandle.plans");
    std::vector<std::string> out;
    for (auto const &p : _handle->plans())
      out.push_back(p.to_json());
    return out;
  }
  void save_plans(std::string const &path) const {
    require_live("SpmmHandle.save_plans");
    nb::gil_scoped_release unlocked;
    _handle->save_plans(path);
  }
  double overhead_seconds() const {
    require_live("SpmmHandle.overhead_seconds");
    return _handle->overhead_seconds() + (_transpose && _transpose_owned ? _transpose->overhead_seconds() : 0.0);
  }

private:
  struct Scratch {
    HostMatrixF x, y;
  };

  void require_live(char const *where) const {
    require_initialized(where);
    if (!_handle)
      throw std::runtime_error(std::string(where) + ": the handle was released");
  }

  HandleType &transposed() {
    if (!_transpose) {
      if (gnn::is_symmetric(_graph)) {
        _transpose_owned = false;
      } else {
        auto const t = gnn::transpose(_graph);
        _transpose = _options.algorithm == gnn::SpmmAlgorithm::adaptive && _rows == _cols
                         ? std::make_unique<HandleType>(_space, t, _options, _handle->partition())
                         : std::make_unique<HandleType>(_space, t, _options);
        _transpose_owned = true;
      }
    }
    return _transpose_owned ? *_transpose : *_handle;
  }

  Scratch &scratch(std::int64_t f) {
    auto &s = _scratch[f];
    if (s.x.extent(0) != sz(_rows) || s.x.extent(1) != sz(f)) {
      s.x = HostMatrixF(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::python::spmm_x"), sz(_rows), sz(f));
      s.y = HostMatrixF(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::python::spmm_y"), sz(_rows), sz(f));
    }
    return s;
  }

  Space _space;
  gnn::SpmmOptions _options;
  GraphType _graph;
  std::int64_t _rows = 0, _cols = 0;
  std::unique_ptr<HandleType> _handle, _transpose;
  bool _transpose_owned = false;
  std::map<std::int64_t, Scratch> _scratch;
  mutable std::mutex _mutex;
};

/// A node-classification data set in host memory.
class PyDataset : public Resource {
public:
  explicit PyDataset(gnn::Dataset data) : _data(std::move(data)) {}
  void release() override { _data = gnn::Dataset(); }
  gnn::Dataset const &data() const {
    require_initialized("tessel.gnn.Dataset");
    return _data;
  }

private:
  gnn::Dataset _data;
};

std::vector<std::uint8_t> mask_vector(std::optional<InArray> const &a, std::int64_t n, char const *what) {
  if (!a)
    return {};
  require_array(*a, std::string("Dataset: ") + what, has_dtype(*a, Dtype::boolean) ? Dtype::boolean : Dtype::uint8,
                {n});
  auto const *p = static_cast<std::uint8_t const *>(a->data());
  return std::vector<std::uint8_t>(p, p + n);
}

std::unique_ptr<PyDataset>
dataset_from_arrays(PyGraph const &graph, std::optional<InArray> const &features, std::optional<InArray> const &labels,
                    int num_classes, std::optional<InArray> const &train_mask, std::optional<InArray> const &val_mask,
                    std::optional<InArray> const &test_mask, std::string const &name, bool directed) {
  gnn::Dataset d;
  d.name = name;
  d.source = "python";
  d.graph = graph.graph();
  d.directed = directed;
  auto const n = static_cast<std::int64_t>(d.graph.num_rows());
  if (features) {
    auto const *p = static_cast<float const *>(require_array(*features, "Dataset: features", Dtype::float32, {n, -1}));
    auto const f = extent(*features, 1);
    d.features = HostMatrixF("Tessel::python::features", sz(n), sz(f));
    std::copy(p, p + n * f, d.features.data());
  } else {
    d.features = HostMatrixF("Tessel::python::features", sz(n), 0);
  }
  if (labels) {
    auto const v = integer_vector(*labels, "Dataset: labels");
    if (static_cast<std::int64_t>(v.size()) != n)
      throw nb::value_error(
          ("Dataset: labels has " + std::to_string(v.size()) + " entries for " + std::to_string(n) + " nodes").c_str());
    d.labels.assign(v.begin(), v.end());
  }
  d.num_classes = num_classes;
  d.train_mask = mask_vector(train_mask, n, "train_mask");
  d.val_mask = mask_vector(val_mask, n, "val_mask");
  d.test_mask = mask_vector(test_mask, n, "test_mask");
  gnn::validate(d);
  return std::make_unique<PyDataset>(std::move(d));
}

nb::dict epoch_dict(gnn::EpochRecord const &e) {
  nb::dict d;
  d["epoch"] = e.epoch;
  d["train_loss"] = e.train_loss;
  d["train_acc"] = e.train_acc;
  d["val_loss"] = e.val_loss;
  d["val_acc"] = e.val_acc;
  d["test_acc"] = e.test_acc;
  d["seconds"] = e.seconds;
  d["aggregation_seconds"] = e.aggregation_seconds;
  d["communication_seconds"] = e.communication_seconds;
  return d;
}

nb::dict train(PyDataset const &data, std::string const &model, int hidden, int layers, int epochs,
               double learning_rate, double weight_decay, double dropout, int patience, bool normalize_features,
               double gin_eps, int random_features, std::string const &algorithm, bool timing,
               std::string const &features, std::uint64_t seed, std::string const &checkpoint, int checkpoint_every,
               bool resume, std::optional<bool> distributed, std::string const &dist_partition,
               std::string const &dist_schedule, nb::object on_epoch) {
  gnn::TrainOptions o;
  o.model = gnn::parse_model_kind(model);
  o.hidden = hidden;
  o.layers = layers;
  o.epochs = epochs;
  o.learning_rate = learning_rate;
  o.weight_decay = weight_decay;
  o.dropout = dropout;
  o.patience = patience;
  o.normalize_features = normalize_features;
  o.gin_eps = gin_eps;
  o.random_features = random_features;
  o.spmm.algorithm = gnn::parse_spmm_algorithm(algorithm);
  o.spmm.timing = timing;
  o.features = gnn::parse_feature_format(features);
  o.seed = seed;
  o.checkpoint = checkpoint;
  o.checkpoint_every = checkpoint_every;
  o.resume = resume;
  o.distribution.method = gnn::parse_dist_partition_method(dist_partition);
  o.schedule = gnn::parse_dist_schedule(dist_schedule);
  // Every epoch: Ctrl-C ends training with KeyboardInterrupt, then the caller's callback.
  // The callback is borrowed (the caller holds it for the call): the options are copied without the GIL.
  PyObject *const callback = on_epoch.is_none() ? nullptr : on_epoch.ptr();
  o.on_epoch = [callback](gnn::EpochRecord const &e) {
    check_signals();
    if (callback != nullptr) {
      nb::gil_scoped_acquire gil;
      nb::object record = epoch_dict(e);
      PyObject *result = PyObject_CallOneArg(callback, record.ptr());
      if (result == nullptr)
        throw nb::python_error();
      Py_DECREF(result);
    }
  };
  auto const &d = data.data();
  auto const world = Communicator::world();
  bool const dist = distributed.value_or(world.size() > 1);
  gnn::TrainResult r;
  {
    nb::gil_scoped_release unlocked;
    Space space;
    r = dist ? gnn::train(space, world, d, o) : gnn::train(space, d, o);
  }
  nb::dict out;
  nb::list history;
  for (auto const &e : r.history)
    history.append(epoch_dict(e));
  out["history"] = history;
  out["epochs_run"] = r.epochs_run;
  out["early_stopped"] = r.early_stopped;
  out["train_acc"] = r.train_acc;
  out["val_acc"] = r.val_acc;
  out["test_acc"] = r.test_acc;
  out["train_seconds"] = r.train_seconds;
  out["aggregation_seconds"] = r.aggregation_seconds;
  out["communication_seconds"] = r.communication_seconds;
  out["setup_seconds"] = r.setup_seconds;
  out["selection_seconds"] = r.selection_seconds;
  out["sparse_features"] = r.sparse_features;
  out["ranks"] = r.ranks;
  nb::list plans;
  for (auto const &p : r.plans)
    plans.append(p.to_json());
  out["plans"] = plans;
  return out;
}

} // namespace

void bind_gnn(nb::module_ &m) {
  nb::class_<PyGraph>(m, "Graph", "A sparse adjacency in CSR form (row i aggregates from its columns), owned by Tessel")
      .def_static("from_csr", &graph_from_csr, nb::arg("indptr"), nb::arg("indices"), nb::arg("values") = nb::none(),
                  nb::arg("num_cols") = nb::none(), nb::arg("name") = "graph",
                  "Copies CSR arrays (int32/int64 offsets and columns, float32/float64 values; no values: all "
                  "ones) into a validated graph")
      .def_prop_ro("num_rows", [](PyGraph const &g) { return static_cast<std::int64_t>(g.graph().num_rows()); })
      .def_prop_ro("num_cols", [](PyGraph const &g) { return static_cast<std::int64_t>(g.graph().num_cols()); })
      .def_prop_ro("nnz", [](PyGraph const &g) { return g.graph().nnz(); })
      .def_prop_ro("name", [](PyGraph const &g) { return g.graph().name(); })
      .def("degree_stats", &degree_stats, "Degree statistics (dict)")
      .def("csr", &csr_arrays, "(indptr int64, indices int32, values float32) as NumPy copies")
      .def(
          "gcn_normalize", [](PyGraph const &g) { return std::make_unique<PyGraph>(gnn::gcn_normalize(g.graph())); },
          "D^-1/2 (A + I) D^-1/2 (I added to any diagonal, duplicates merged)")
      .def(
          "add_self_loops",
          [](PyGraph const &g, float w) { return std::make_unique<PyGraph>(gnn::add_self_loops(g.graph(), w)); },
          nb::arg("weight"), "A + weight I (duplicates merged)")
      .def(
          "transpose", [](PyGraph const &g) { return std::make_unique<PyGraph>(gnn::transpose(g.graph())); },
          "The transpose")
      .def("is_symmetric", [](PyGraph const &g) { return gnn::is_symmetric(g.graph()); })
      .def("validate", [](PyGraph const &g) { gnn::validate(g.graph()); });

  nb::class_<PySpmmHandle>(m, "SpmmHandle", "Y = A X for a fixed A with one algorithm (adaptive: AdaptGear)")
      .def(nb::init<PyGraph const &, gnn::SpmmOptions const &>(), nb::arg("graph"), nb::arg("options"))
      .def("apply", &PySpmmHandle::apply, nb::arg("x").noconvert(), nb::arg("out").noconvert(),
           nb::arg("transpose") = false, nb::arg("ordered") = false,
           "out = A X (A^T X with transpose); X, out: C-contiguous float32 on the CPU, in the graph's vertex order "
           "(ordered=True: already in the handle's order, see permutation)")
      .def_prop_ro("rows", &PySpmmHandle::rows)
      .def_prop_ro("cols", &PySpmmHandle::cols)
      .def_prop_ro("algorithm", &PySpmmHandle::algorithm)
      .def_prop_ro("permutation", &PySpmmHandle::permutation,
                   "old_of_new: the original vertex at each row of the handle's order")
      .def("tuned", &PySpmmHandle::tuned, nb::arg("features"))
      .def("plan", &PySpmmHandle::plan, nb::arg("features"), "The plan for a width, as JSON text")
      .def("plans", &PySpmmHandle::plans)
      .def("save_plans", &PySpmmHandle::save_plans, nb::arg("path"))
      .def_prop_ro("overhead_seconds", &PySpmmHandle::overhead_seconds);

  nb::class_<gnn::SpmmOptions>(m, "SpmmOptions")
      .def(
          "__init__",
          [](gnn::SpmmOptions *self, std::string const &algorithm, bool timing, int tuning_repeats,
             std::string const &partition, std::int64_t part_size, std::optional<std::vector<double>> class_bounds,
             std::optional<std::vector<int>> probe_features, std::int64_t dense_max_bytes, std::int64_t coo_chunk,
             std::uint64_t seed) {
            new (self) gnn::SpmmOptions(spmm_options(algorithm, timing, tuning_repeats, partition, part_size,
                                                     class_bounds, probe_features, dense_max_bytes, coo_chunk, seed));
          },
          nb::arg("algorithm") = "adaptive", nb::arg("timing") = true, nb::arg("tuning_repeats") = 2,
          nb::arg("partition") = "auto", nb::arg("part_size") = 0, nb::arg("class_bounds") = nb::none(),
          nb::arg("probe_features") = nb::none(), nb::arg("dense_max_bytes") = std::int64_t{1} << 30,
          nb::arg("coo_chunk") = 4096, nb::arg("seed") = 1)
      .def_prop_ro("algorithm", [](gnn::SpmmOptions const &o) { return std::string(gnn::name_of(o.algorithm)); })
      .def_prop_ro("timing", [](gnn::SpmmOptions const &o) { return o.timing; });

  m.def(
      "algorithms",
      []() {
        std::vector<std::string> names;
        for (auto a : {gnn::SpmmAlgorithm::csr, gnn::SpmmAlgorithm::csr_feature_tiled, gnn::SpmmAlgorithm::coo,
                       gnn::SpmmAlgorithm::coo_atomic, gnn::SpmmAlgorithm::tiles, gnn::SpmmAlgorithm::dense,
                       gnn::SpmmAlgorithm::kk, gnn::SpmmAlgorithm::adaptive})
          names.emplace_back(gnn::name_of(a));
        return names;
      },
      "The host algorithms of SpmmHandle");
  m.def("metis_available", &gnn::metis_available);

  nb::class_<PyDataset>(m, "Dataset", "Graph, features, labels and split of a node-classification data set")
      .def_static("from_arrays", &dataset_from_arrays, nb::arg("graph"), nb::arg("features") = nb::none(),
                  nb::arg("labels") = nb::none(), nb::arg("num_classes") = 0, nb::arg("train_mask") = nb::none(),
                  nb::arg("val_mask") = nb::none(), nb::arg("test_mask") = nb::none(), nb::arg("name") = "data",
                  nb::arg("directed") = false)
      .def_static(
          "load",
          [](std::string const &path) {
            require_initialized("tessel.gnn.Dataset.load");
            nb::gil_scoped_release unlocked;
            return std::make_unique<PyDataset>(gnn::load_dataset(path));
          },
          nb::arg("path"), "Reads and validates a tessel.gnn.graph HDF5 file")
      .def(
          "save", [](PyDataset const &d, std::string const &path) { gnn::save_dataset(path, d.data()); },
          nb::arg("path"))
      .def_prop_ro("name", [](PyDataset const &d) { return d.data().name; })
      .def_prop_ro("num_nodes", [](PyDataset const &d) { return d.data().num_nodes(); })
      .def_prop_ro("num_features", [](PyDataset const &d) { return d.data().num_features(); })
      .def_prop_ro("num_classes", [](PyDataset const &d) { return d.data().num_classes; })
      .def_prop_ro("features_random", [](PyDataset const &d) { return d.data().features_random; })
      .def_prop_ro("graph", [](PyDataset const &d) { return std::make_unique<PyGraph>(d.data().graph); })
      .def_prop_ro("features",
                   [](PyDataset const &d) {
                     auto const &f = d.data().features;
                     std::vector<float> v(f.data(), f.data() + f.size());
                     return numpy_array(std::move(v), {f.extent(0), f.extent(1)});
                   })
      .def_prop_ro("labels",
                   [](PyDataset const &d) {
                     auto v = d.data().labels;
                     auto const n = v.size();
                     return numpy_array(std::move(v), {n});
                   })
      .def(
          "mask",
          [](PyDataset const &d, std::string const &which) {
            auto const &data = d.data();
            std::vector<std::uint8_t> const *m = nullptr;
            if (which == "train")
              m = &data.train_mask;
            else if (which == "val")
              m = &data.val_mask;
            else if (which == "test")
              m = &data.test_mask;
            else
              throw nb::value_error(("Dataset.mask: expected train, val or test, got '" + which + "'").c_str());
            std::vector<std::int32_t> v(m->begin(), m->end());
            auto const n = v.size();
            return numpy_array(std::move(v), {n});
          },
          nb::arg("which"));

  m.def("train", &train, nb::arg("data"), nb::arg("model") = "gcn", nb::arg("hidden") = 16, nb::arg("layers") = 2,
        nb::arg("epochs") = 200, nb::arg("learning_rate") = 0.01, nb::arg("weight_decay") = 5e-4,
        nb::arg("dropout") = 0.5, nb::arg("patience") = 10, nb::arg("normalize_features") = true,
        nb::arg("gin_eps") = 0.0, nb::arg("random_features") = 0, nb::arg("algorithm") = "adaptive",
        nb::arg("timing") = true, nb::arg("features") = "auto", nb::arg("seed") = 42, nb::arg("checkpoint") = "",
        nb::arg("checkpoint_every") = 0, nb::arg("resume") = false, nb::arg("distributed") = nb::none(),
        nb::arg("dist_partition") = "auto", nb::arg("dist_schedule") = "overlapped", nb::arg("on_epoch") = nb::none(),
        "Trains GCN or GIN with the C++ training loop (distributed over the MPI world when launched on several "
        "ranks, unless distributed=False); returns the history and final accuracies");
}

} // namespace tessel::python

#include <tessel/core/Digest.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/Model.hpp>

#include "impl/MatrixRef.hpp"
#include "impl/SparseFeatures.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
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

namespace Impl {

template <class ExecSpace> struct ModelState {
  using M = typename ExecSpace::memory_space;
  using Handle = SpmmHandle<std::int32_t, ExecSpace>;

  ExecSpace space;
  TrainOptions options;
  std::string data_name;
  std::int64_t n = 0;
  int classes = 0;
  std::vector<int> dims; // dims[l] -> dims[l+1]
  std::unique_ptr<Handle> fwd, bwd;
  // Distributed: this rank's rows as a DistGraph of the operator (and of its transpose when not symmetric).
  std::optional<Communicator> comm;
  std::unique_ptr<DistGraph<std::int32_t>> dist, dist_t;
  std::unique_ptr<DistSpmm<ExecSpace>> dfwd, dbwd;
  Matrix<M> x;                            // input features, handle order
  Kokkos::View<std::int64_t *, M> vertex; // original id of each row (dropout masks are drawn per vertex)
  std::vector<std::int32_t> labels;       // handle order
  std::vector<std::uint8_t> masks[3];     // train, val, test in handle order
  std::int64_t mask_count[3] = {0, 0, 0}; // over every rank

  std::vector<Matrix<M>> w, b, dw, db, mw, vw, mb, vb;
  std::vector<Matrix<M>> h;    // h[l]: input of layer l (h[0] = x), h[L]: logits
  std::vector<Matrix<M>> hd;   // dropped input of layer l (aliases h[l] without dropout)
  std::vector<Matrix<M>> s;    // aggregated input (aggregate-first layers) or transformed input
  std::vector<Matrix<M>> grad; // scratch
  std::vector<bool> aggregate_first;
  std::unique_ptr<SparseFeatures<ExecSpace>> sparse; // the first layer's input by its nonzeros (when chosen)
  int last_epoch = 0;
  bool last_training = false;
  long adam_t = 0;
  double aggregation_seconds = 0;
  double communication_seconds = 0, halo_wait_seconds = 0;
  std::int64_t halo_bytes = 0;
  double setup_seconds = 0;

  int layers() const { return static_cast<int>(dims.size()) - 1; }
  /// The rows' owners (0 when single-process), recorded in checkpoints.
  std::uint64_t partition_digest() const {
    if (!dist)
      return 0;
    auto const &owner = dist->owner();
    // Kept within int64 for the HDF5 attribute.
    return fnv1a(fnv1a_basis, owner.data(), owner.size() * sizeof(int)) >> 1;
  }
  /// Calls visit(dataset, tensor) for each tensor a checkpoint holds: every layer's weight with its Adam moments,
  /// and its bias with its moments where the layer has one.
  template <class Visit> void for_each_checkpoint_tensor(Visit &&visit) const {
    for (int l = 0; l < layers(); ++l) {
      auto const ul = static_cast<std::size_t>(l);
      std::string const g = "layer" + std::to_string(l) + "/";
      visit(g + "weight", w[ul]);
      visit(g + "adam_m", mw[ul]);
      visit(g + "adam_v", vw[ul]);
      if (b[ul].extent(0) > 0) {
        visit(g + "bias", b[ul]);
        visit(g + "bias_adam_m", mb[ul]);
        visit(g + "bias_adam_v", vb[ul]);
      }
    }
  }

  /// out = A in, or A^T in when \p transposed.
  void aggregate(bool transposed, ConstMatrix<M> const &in, Matrix<M> const &out) {
    Timer<ExecSpace> timer(space, "Tessel::gnn::aggregate");
    if (dfwd) {
      auto &d = transposed && dbwd ? *dbwd : *dfwd;
      d.apply(space, in, out);
      account(timer.seconds(), d.last());
      return;
    }
    (transposed && bwd ? *bwd : *fwd).apply(space, in, out);
    aggregation_seconds += timer.seconds();
  }

  /// out = A (in op(w)) (or A^T when \p transposed), with t = in op(w) kept: distributed, the product's rows the
  /// peers need go out first and the rest of it hides their exchange (DistSpmm::apply_product).
  void transform_aggregate(bool transposed, ConstMatrix<M> const &in, ConstMatrix<M> const &w, Op op_w,
                           Matrix<M> const &t, Matrix<M> const &out) {
    if (!dfwd) {
      tessel::gemm(space, Op::none, op_w, 1.0f, Impl::matrix_ref(in), Impl::matrix_ref(w), 0.0f, Impl::matrix_ref(t));
      aggregate(transposed, t, out);
      return;
    }
    Timer<ExecSpace> timer(space, "Tessel::gnn::aggregate");
    auto &d = transposed && dbwd ? *dbwd : *dfwd;
    d.apply_product(space, in, w, op_w, t, out);
    account(timer.seconds(), d.last());
  }

  /// out = A^T in and g = z^T out (a weight gradient after the aggregation): distributed, z^T times the local
  /// block's result hides the exchange, and the rows with halo entries are added when they land
  /// (DistSpmm::apply_reduce).
  void aggregate_reduce(ConstMatrix<M> const &in, Matrix<M> const &out, ConstMatrix<M> const &z, Matrix<M> const &g) {
    if (!dfwd) {
      aggregate(true, in, out);
      tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(z), Impl::matrix_ref(ConstMatrix<M>(out)),
                   0.0f, Impl::matrix_ref(g));
      return;
    }
    Timer<ExecSpace> timer(space, "Tessel::gnn::aggregate");
    auto &d = dbwd ? *dbwd : *dfwd;
    d.apply_reduce(space, in, out, z, g);
    account(timer.seconds(), d.last());
  }

  /// Books a DistSpmm call of \p total seconds: its waits as communication, its dense products as the layer's,
  /// the rest as aggregation.
  void account(double total, DistSpmmTimings const &last) {
    communication_seconds += last.wait_seconds;
    halo_wait_seconds += last.wait_seconds;
    aggregation_seconds += total - last.wait_seconds - last.product_seconds;
    halo_bytes += last.bytes_received;
  }

  /// Sums \p values over the ranks in place (nothing when single-process).
  template <class T> void sum_over_ranks(T *values, std::size_t count) {
    if (!comm || count == 0)
      return;
    auto const t0 = std::chrono::steady_clock::now();
    std::vector<T> sum(count);
    comm->allreduce(values, sum.data(), count, ReduceOp::sum);
    std::copy(sum.begin(), sum.end(), values);
    communication_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  /// A gradient summed over the ranks (each holds its rows' share).
  void sum_over_ranks(Matrix<M> const &g) {
    if (!comm)
      return;
    compat::fence(space, "Tessel::gnn::gradient_allreduce");
    sum_over_ranks(g.data(), g.size());
  }

  static Matrix<M> matrix(char const *label, std::size_t rows, std::size_t cols) {
    return Matrix<M>(label, rows, cols);
  }

  /// hd[layer]: the dropout of h[layer] for \p epoch.
  Matrix<M> const &dropped(int layer, int epoch) const {
    dropout(layer, epoch, h[static_cast<std::size_t>(layer)], hd[static_cast<std::size_t>(layer)]);
    return hd[static_cast<std::size_t>(layer)];
  }

  void dropout(int layer, int epoch, ConstMatrix<M> const &in, Matrix<M> const &out) const {
    double const p = options.dropout;
    float const scale = static_cast<float>(1.0 / (1.0 - p));
    std::uint64_t const seed = options.seed;
    auto const cols = static_cast<std::int64_t>(in.extent(1));
    auto const id = vertex;
    Kokkos::parallel_for(
        "Tessel::gnn::dropout", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(in.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::int64_t j = 0; j < cols; ++j) {
            bool const keep =
                counter_uniform(seed, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(layer),
                                static_cast<std::uint64_t>(id(i) * cols + j)) >= p;
            out(i, j) = keep ? in(i, j) * scale : 0.0f;
          }
        });
  }

  void relu(Matrix<M> const &z) const {
    Kokkos::parallel_for(
        "Tessel::gnn::relu", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(z.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::size_t j = 0; j < z.extent(1); ++j)
            z(i, j) = z(i, j) > 0.0f ? z(i, j) : 0.0f;
        });
  }

  void add_bias(Matrix<M> const &z, Matrix<M> const &bias) const {
    Kokkos::parallel_for(
        "Tessel::gnn::add_bias", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(z.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::size_t j = 0; j < z.extent(1); ++j)
            z(i, j) += bias(0, j);
        });
  }

  bool use_dropout(bool training) const { return training && options.dropout > 0; }

  void forward(bool training, int epoch) {
    last_epoch = epoch;
    last_training = training;
    for (int l = 0; l < layers(); ++l) {
      auto const ul = static_cast<std::size_t>(l);
      auto &out = h[ul + 1];
      if (l == 0 && sparse) {
        if (use_dropout(training))
          sparse->dropout(space, options.dropout, options.seed, epoch, vertex);
        sparse->transform(space, use_dropout(training), ConstMatrix<M>(w[ul]), s[ul]);
        aggregate(false, s[ul], out);
      } else if (ConstMatrix<M> input = use_dropout(training) ? dropped(l, epoch) : h[ul]; aggregate_first[ul]) {
        aggregate(false, input, s[ul]);
        tessel::gemm(space, Op::none, Op::none, 1.0f, Impl::matrix_ref(ConstMatrix<M>(s[ul])),
                     Impl::matrix_ref(ConstMatrix<M>(w[ul])), 0.0f, Impl::matrix_ref(out));
      } else {
        transform_aggregate(false, input, w[ul], Op::none, s[ul], out);
      }
      if (b[ul].extent(0) > 0)
        add_bias(out, b[ul]);
      if (l + 1 < layers())
        relu(out);
    }
  }

  /// Softmax cross-entropy over the nodes of \p mask: (mean loss, accuracy); fills grad with dL/dlogits when
  /// \p gradient (mean over the mask).
  std::pair<double, double> loss(int mask, Matrix<M> const *gradient) {
    compat::fence(space, "Tessel::gnn::loss");
    auto logits = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), h.back());
    typename Matrix<M>::HostMirror g;
    if (gradient) {
      g = Kokkos::create_mirror_view(*gradient);
      Kokkos::deep_copy(space, g, 0.0f);
      space.fence();
    }
    double total = 0;
    std::int64_t count = 0, correct = 0;
    auto const &m = masks[mask];
    std::int64_t const denom = std::max<std::int64_t>(1, mask_count[mask]);
    std::vector<double> p(static_cast<std::size_t>(classes));
    for (std::int64_t i = 0; i < n; ++i) {
      if (!m[static_cast<std::size_t>(i)])
        continue;
      double mx = -std::numeric_limits<double>::infinity();
      int arg = 0;
      for (int c = 0; c < classes; ++c)
        if (logits(i, c) > mx) {
          mx = logits(i, c);
          arg = c;
        }
      double sum = 0;
      for (int c = 0; c < classes; ++c) {
        p[static_cast<std::size_t>(c)] = std::exp(logits(i, c) - mx);
        sum += p[static_cast<std::size_t>(c)];
      }
      int const y = labels[static_cast<std::size_t>(i)];
      total += -(logits(i, y) - mx - std::log(sum));
      correct += arg == y;
      ++count;
      if (gradient)
        for (int c = 0; c < classes; ++c)
          g(i, c) = static_cast<float>((p[static_cast<std::size_t>(c)] / sum - (c == y ? 1.0 : 0.0)) /
                                       static_cast<double>(denom));
    }
    if (gradient)
      Kokkos::deep_copy(space, *gradient, g);
    double sums[3] = {total, static_cast<double>(count), static_cast<double>(correct)};
    sum_over_ranks(sums, 3);
    total = sums[0];
    count = static_cast<std::int64_t>(sums[1]);
    correct = static_cast<std::int64_t>(sums[2]);
    return {count ? total / static_cast<double>(count) : 0.0,
            count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0};
  }

  bool decayed(int l) const { return options.model == ModelKind::gin || l == 0; }

  double weight_decay_term() const {
    double sum = 0;
    for (int l = 0; l < layers(); ++l) {
      if (!decayed(l))
        continue;
      auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w[static_cast<std::size_t>(l)]);
      for (std::size_t k = 0; k < hw.size(); ++k)
        sum += static_cast<double>(hw.data()[k]) * hw.data()[k];
    }
    return 0.5 * options.weight_decay * sum;
  }

  void backward() {
    // grad[L] = dL/dlogits
    loss(0, &grad.back());
    for (int l = layers() - 1; l >= 0; --l) {
      auto const ul = static_cast<std::size_t>(l);
      auto &dz = grad[ul + 1];
      if (l + 1 < layers()) {
        // ReLU: h[l+1] = relu(z), so dz = dh * (h > 0).
        auto hl = h[ul + 1];
        Kokkos::parallel_for(
            "Tessel::gnn::relu_backward",
            Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(dz.extent(0))),
            KOKKOS_LAMBDA(std::int64_t i) {
              for (std::size_t j = 0; j < dz.extent(1); ++j)
                if (!(hl(i, j) > 0.0f))
                  dz(i, j) = 0.0f;
            });
      }
      if (b[ul].extent(0) > 0) {
        auto dbl = db[ul];
        auto const rows = static_cast<std::int64_t>(dz.extent(0));
        Kokkos::parallel_for(
            "Tessel::gnn::bias_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, 1), KOKKOS_LAMBDA(int) {
              for (std::size_t j = 0; j < dbl.extent(1); ++j) {
                float sum = 0;
                for (std::int64_t i = 0; i < rows; ++i)
                  sum += dz(i, j);
                dbl(0, j) = sum;
              }
            });
        sum_over_ranks(db[ul]);
      }
      ConstMatrix<M> input = use_dropout(last_training) ? hd[ul] : h[ul];
      bool const need_input_grad = l > 0;
      if (l == 0 && sparse) {
        // out = A (X W): dt = A^T dz, dW = X^T dt (the input needs no gradient).
        aggregate(true, dz, s[ul]);
        sparse->weight_gradient(space, use_dropout(last_training), ConstMatrix<M>(s[ul]), dw[ul]);
        sum_over_ranks(dw[ul]);
      } else if (aggregate_first[ul]) {
        // out = (A in) W: dW = s^T dz, ds = dz W^T, din = A^T ds.
        tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(ConstMatrix<M>(s[ul])),
                     Impl::matrix_ref(ConstMatrix<M>(dz)), 0.0f, Impl::matrix_ref(dw[ul]));
        sum_over_ranks(dw[ul]);
        if (need_input_grad)
          transform_aggregate(true, dz, w[ul], Op::transpose, s[ul], grad[ul]);
      } else {
        // out = A (in W): dt = A^T dz, dW = in^T dt, din = dt W^T.
        aggregate_reduce(dz, s[ul], input, dw[ul]);
        sum_over_ranks(dw[ul]);
        if (need_input_grad)
          tessel::gemm(space, Op::none, Op::transpose, 1.0f, Impl::matrix_ref(ConstMatrix<M>(s[ul])),
                       Impl::matrix_ref(ConstMatrix<M>(w[ul])), 0.0f, Impl::matrix_ref(grad[ul]));
      }
      if (decayed(l) && options.weight_decay > 0) {
        auto dwl = dw[ul], wl = w[ul];
        float const wd = static_cast<float>(options.weight_decay);
        Kokkos::parallel_for(
            "Tessel::gnn::weight_decay",
            Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(wl.extent(0))),
            KOKKOS_LAMBDA(std::int64_t i) {
              for (std::size_t j = 0; j < wl.extent(1); ++j)
                dwl(i, j) += wd * wl(i, j);
            });
      }
      if (need_input_grad && use_dropout(last_training)) {
        // Through the dropout of this layer's input.
        auto g = grad[ul];
        double const p = options.dropout;
        float const scale = static_cast<float>(1.0 / (1.0 - p));
        std::uint64_t const seed = options.seed;
        int const epoch = last_epoch;
        auto const cols = static_cast<std::int64_t>(g.extent(1));
        auto const id = vertex;
        Kokkos::parallel_for(
            "Tessel::gnn::dropout_backward",
            Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(g.extent(0))),
            KOKKOS_LAMBDA(std::int64_t i) {
              for (std::int64_t j = 0; j < cols; ++j) {
                bool const keep =
                    counter_uniform(seed, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(l),
                                    static_cast<std::uint64_t>(id(i) * cols + j)) >= p;
                g(i, j) = keep ? g(i, j) * scale : 0.0f;
              }
            });
      }
    }
  }

  void adam(Matrix<M> const &p, Matrix<M> const &g, Matrix<M> const &m, Matrix<M> const &v) const {
    float const lr = static_cast<float>(options.learning_rate);
    float const b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    // Bias correction folded into the step size, as TensorFlow's Adam (Kipf's implementation).
    float const lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(0.999, static_cast<double>(adam_t))) /
                                          (1.0 - std::pow(0.9, static_cast<double>(adam_t))));
    Kokkos::parallel_for(
        "Tessel::gnn::adam", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(p.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::size_t j = 0; j < p.extent(1); ++j) {
            m(i, j) = b1 * m(i, j) + (1 - b1) * g(i, j);
            v(i, j) = b2 * v(i, j) + (1 - b2) * g(i, j) * g(i, j);
            p(i, j) -= lr_t * m(i, j) / (std::sqrt(v(i, j)) + eps);
          }
        });
  }

  void step() {
    ++adam_t;
    for (int l = 0; l < layers(); ++l) {
      auto const ul = static_cast<std::size_t>(l);
      adam(w[ul], dw[ul], mw[ul], vw[ul]);
      if (b[ul].extent(0) > 0)
        adam(b[ul], db[ul], mb[ul], vb[ul]);
    }
  }
};

} // namespace Impl

template <class ExecSpace>
GnnModel<ExecSpace>::GnnModel(ExecSpace const &space, Dataset const &data, TrainOptions const &options)
    : GnnModel(space, nullptr, data, options) {}

template <class ExecSpace>
GnnModel<ExecSpace>::GnnModel(ExecSpace const &space, Communicator const &comm, Dataset const &data,
                              TrainOptions const &options)
    : GnnModel(space, &comm, data, options) {}

template <class ExecSpace>
GnnModel<ExecSpace>::GnnModel(ExecSpace const &space, Communicator const *comm, Dataset const &data,
                              TrainOptions const &options)
    : _state(std::make_unique<Impl::ModelState<ExecSpace>>()) {
  auto const t0 = std::chrono::steady_clock::now();
  auto &s = *_state;
  using M = memory_space;
  s.space = space;
  s.options = options;
  s.data_name = data.name;
  validate(data);
  TESSEL_REQUIRE(options.layers >= 1 && options.hidden >= 1 && options.epochs >= 0, "train: layers = ", options.layers,
                 ", hidden = ", options.hidden, ", epochs = ", options.epochs);
  TESSEL_REQUIRE(options.dropout >= 0 && options.dropout < 1, "train: dropout = ", options.dropout,
                 " must be in [0, 1)");
  TESSEL_REQUIRE(!data.labels.empty() && data.num_classes >= 1, "train: dataset '", data.name, "' has no labels");
  TESSEL_REQUIRE(!data.train_mask.empty() && !data.val_mask.empty() && !data.test_mask.empty(), "train: dataset '",
                 data.name, "' has no train/val/test masks");
  s.classes = data.num_classes;
  if (comm) {
    // Every rank must train the same model on the same graph: one clear error on every rank otherwise.
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

  // Aggregation operator: GCN's D^-1/2 (A + I) D^-1/2 or GIN's A + (1 + eps) I.
  auto const op = options.model == ModelKind::gcn
                      ? gcn_normalize(data.graph)
                      : add_self_loops(data.graph, static_cast<float>(1.0 + options.gin_eps));
  bool const symmetric = is_symmetric(op);
  // The reordering probe runs at the widths this model aggregates (the narrower side of each layer).
  SpmmOptions spmm = options.spmm;
  {
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
  }
  // rows[k]: the original vertex held at row k (the handle's order, or this rank's rows in increasing id).
  std::vector<std::int64_t> rows;
  if (comm) {
    using Dist = DistGraph<std::int32_t>;
    s.comm = *comm;
    s.dist = std::make_unique<Dist>(*comm, op, options.distribution);
    s.dfwd = std::make_unique<DistSpmm<ExecSpace>>(space, *comm, *s.dist, spmm);
    s.dfwd->set_schedule(options.schedule);
    if (!symmetric) {
      // A^T with the forward's owners, so that both act on the same rows of each rank.
      DistGraphOptions given;
      given.method = DistPartitionMethod::given;
      given.owner = s.dist->owner();
      s.dist_t = std::make_unique<Dist>(*comm, transpose(op), given);
      s.dbwd = std::make_unique<DistSpmm<ExecSpace>>(space, *comm, *s.dist_t, options.spmm);
      s.dbwd->set_schedule(options.schedule);
    }
    rows = s.dist->owned_rows();
  } else {
    std::string const plan_path = options.checkpoint + ".plan.h5";
    std::string const plan_t_path = options.checkpoint + ".plan_t.h5";
    bool const reuse_plans = options.resume && !options.checkpoint.empty() &&
                             options.spmm.algorithm == SpmmAlgorithm::adaptive && std::ifstream(plan_path).good();
    using Handle = typename Impl::ModelState<ExecSpace>::Handle;
    if (reuse_plans)
      s.fwd = std::make_unique<Handle>(space, op, spmm, plan_path);
    else
      s.fwd = std::make_unique<Handle>(space, op, spmm);
    if (!symmetric) {
      auto const opt = transpose(op);
      if (options.spmm.algorithm == SpmmAlgorithm::adaptive) {
        if (reuse_plans && std::ifstream(plan_t_path).good())
          s.bwd = std::make_unique<Handle>(space, opt, options.spmm, plan_t_path);
        else
          s.bwd = std::make_unique<Handle>(space, opt, options.spmm, s.fwd->partition());
      } else {
        s.bwd = std::make_unique<Handle>(space, opt, options.spmm);
      }
    }
    rows = s.fwd->permutation().old_of_new;
  }
  s.n = static_cast<std::int64_t>(rows.size());
  auto const un = static_cast<std::size_t>(s.n);

  // Features (normalized, random when absent), labels and masks of this process's rows, in their order.
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
  {
    Matrix<Kokkos::HostSpace> mine(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::features_mine"), un,
                                   features.extent(1));
    auto const cols = features.extent(1);
    Kokkos::parallel_for(
        "Tessel::gnn::gather_features", Kokkos::RangePolicy<ExecSpace>(space, 0, s.n), KOKKOS_LAMBDA(std::int64_t k) {
          for (std::size_t j = 0; j < cols; ++j)
            mine(k, j) = features(static_cast<std::size_t>(rows[static_cast<std::size_t>(k)]), j);
        });
    space.fence();
    s.x = Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::x"), un, cols);
    Kokkos::deep_copy(space, s.x, mine);
  }
  s.vertex = Kokkos::View<std::int64_t *, M>(Kokkos::view_alloc(space, "Tessel::gnn::vertex"), un);
  Kokkos::deep_copy(
      space, s.vertex,
      Kokkos::View<std::int64_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(rows.data(), un));
  space.fence();
  auto const gather = [&rows](auto const &v) {
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

  s.dims.push_back(static_cast<int>(s.x.extent(1)));
  for (int l = 0; l + 1 < options.layers; ++l)
    s.dims.push_back(options.hidden);
  s.dims.push_back(s.classes);
  std::mt19937_64 rng(options.seed);
  for (int l = 0; l < s.layers(); ++l) {
    auto const in = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(l)]);
    auto const out = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(l) + 1]);
    // Glorot uniform, as Kipf.
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
    s.mb.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::adam_m"), brows, out));
    s.vb.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::adam_v"), brows, out));
    // Aggregate on the narrower side (GNNAdvisor: GCN transforms first, GIN aggregates first).
    s.aggregate_first.push_back(in <= out);
    s.s.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::aggregated"), un, in <= out ? in : out));
  }
  // The first layer reads the features by their nonzeros when they are sparse and it transforms first (aggregating
  // first would make them dense before the GEMM).
  if (options.features != FeatureFormat::dense && !s.aggregate_first[0]) {
    auto const csr = Impl::nonzeros(ConstMatrix<M>(s.x));
    // One choice on every rank: the density of the whole feature matrix.
    double counts[2] = {static_cast<double>(csr.nnz()), static_cast<double>(s.x.size())};
    s.sum_over_ranks(counts, 2);
    if (options.features == FeatureFormat::sparse || counts[0] <= sparse_feature_density * counts[1])
      s.sparse = std::make_unique<Impl::SparseFeatures<ExecSpace>>(space, csr);
  }
  s.h.push_back(s.x);
  s.hd.push_back(
      Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::dropped"), s.sparse ? 0 : un, s.sparse ? 0 : s.x.extent(1)));
  s.grad.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::grad"), un, s.x.extent(1)));
  for (int l = 0; l < s.layers(); ++l) {
    auto const out = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(l) + 1]);
    s.h.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::activation"), un, out));
    s.hd.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::dropped"), un, out));
    s.grad.push_back(Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::grad"), un, out));
  }
  s.setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

template <class ExecSpace> TrainResult GnnModel<ExecSpace>::train() {
  auto &s = *_state;
  auto const &o = s.options;
  TrainResult result;
  result.setup_seconds = s.setup_seconds;
  result.sparse_features = s.sparse != nullptr;
  std::vector<EpochRecord> history;
  bool resume = o.resume && !o.checkpoint.empty() && std::ifstream(o.checkpoint).good();
  if (s.comm) // a file seen by some ranks only is an error on every rank (in load_checkpoint), not a split run
    resume = s.comm->allreduce_value(resume ? 1 : 0, ReduceOp::max) != 0;
  if (resume)
    history = load_checkpoint(o.checkpoint);
  int const start = history.empty() ? 1 : history.back().epoch + 1;
  bool stopped = false;
  // A checkpoint written by a run that had already stopped early resumes as stopped.
  auto should_stop = [&]() {
    if (o.patience <= 0 || static_cast<int>(history.size()) <= o.patience)
      return false;
    double mean = 0;
    for (std::size_t k = history.size() - 1 - static_cast<std::size_t>(o.patience); k + 1 < history.size(); ++k)
      mean += history[k].val_loss;
    mean /= o.patience;
    return history.back().val_loss > mean;
  };
  if (!history.empty())
    stopped = should_stop();
  std::int64_t epochs_here = 0, halo_bytes_here = 0;
  for (int epoch = start; epoch <= o.epochs && !stopped; ++epoch) {
    ScopedRegion region("Tessel::gnn::epoch");
    double const agg0 = s.aggregation_seconds, comm0 = s.communication_seconds, wait0 = s.halo_wait_seconds;
    auto const bytes0 = s.halo_bytes;
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
    ++epochs_here;
    halo_bytes_here += s.halo_bytes - bytes0;
    TESSEL_REQUIRE(!o.stop_on_divergence || (std::isfinite(r.train_loss) && std::isfinite(r.val_loss)),
                   "training diverged at epoch ", epoch, ": the ",
                   std::isfinite(r.train_loss) ? "validation" : "training", " loss is ",
                   std::isfinite(r.train_loss) ? r.val_loss : r.train_loss,
                   " (a lower learning rate may help; --allow-divergence trains on)");
    history.push_back(r);
    if (o.on_epoch)
      o.on_epoch(r);
    stopped = should_stop();
    result.early_stopped = stopped;
    if (!o.checkpoint.empty() && o.checkpoint_every > 0 && epoch % o.checkpoint_every == 0)
      save_checkpoint(o.checkpoint, history);
  }
  if (!o.checkpoint.empty() && o.checkpoint_every == 0)
    save_checkpoint(o.checkpoint, history);
  auto const m = evaluate();
  result.history = history;
  result.epochs_run = history.empty() ? 0 : history.back().epoch;
  result.train_acc = m.train_acc;
  result.val_acc = m.val_acc;
  result.test_acc = m.test_acc;
  for (auto const &r : history) {
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
  return result;
}

#define TESSEL_GNN_INSTANTIATE_MODEL(SPACE) template class GnnModel<SPACE>;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_MODEL)

} // namespace tessel::gnn

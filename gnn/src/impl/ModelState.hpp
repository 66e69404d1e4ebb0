#ifndef TESSEL_GNN_IMPL_MODELSTATE_HPP
#define TESSEL_GNN_IMPL_MODELSTATE_HPP

// GnnModel's state: the node data of this process's rows, the parameters and Adam moments, the aggregation handles
// (SpmmHandle, or DistSpmm across ranks), and the forward and backward passes and the optimizer step. Built by
// ModelSetup (Model.cpp); checkpoints are in Checkpoint.cpp.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Digest.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/gnn/DistSpmm.hpp>
#include <tessel/gnn/Model.hpp>

#include "MatrixRef.hpp"
#include "SparseFeatures.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::gnn::Impl {

template <class ExecSpace> struct ModelState {
  using M = typename ExecSpace::memory_space;
  using Handle = SpmmHandle<std::int32_t, ExecSpace>;

  ExecSpace space;
  TrainOptions options;
  std::string data_name;
  std::uint64_t data_digest = 0; // content_digest of the data set (checkpoints are for this one only)
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

  /// ReLU: h[l+1] = relu(z), so dz = dh * (h > 0).
  void relu_backward(Matrix<M> const &dz, Matrix<M> const &h_out) const {
    Kokkos::parallel_for(
        "Tessel::gnn::relu_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(dz.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::size_t j = 0; j < dz.extent(1); ++j)
            if (!(h_out(i, j) > 0.0f))
              dz(i, j) = 0.0f;
        });
  }

  /// db = the column sums of dz (this rank's rows, then over the ranks).
  void bias_backward(Matrix<M> const &dz, Matrix<M> const &dbl) {
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
    sum_over_ranks(dbl);
  }

  /// dW += weight_decay W.
  void weight_decay_backward(Matrix<M> const &dwl, Matrix<M> const &wl) const {
    float const wd = static_cast<float>(options.weight_decay);
    Kokkos::parallel_for(
        "Tessel::gnn::weight_decay", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<std::int64_t>(wl.extent(0))),
        KOKKOS_LAMBDA(std::int64_t i) {
          for (std::size_t j = 0; j < wl.extent(1); ++j)
            dwl(i, j) += wd * wl(i, j);
        });
  }

  /// Through the dropout of layer \p l's input (the masks of the last training forward pass).
  void dropout_backward(int l, Matrix<M> const &g) const {
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
            bool const keep = counter_uniform(seed, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(l),
                                              static_cast<std::uint64_t>(id(i) * cols + j)) >= p;
            g(i, j) = keep ? g(i, j) * scale : 0.0f;
          }
        });
  }

  /// The weight gradient of layer \p l from dz = grad[l + 1], and (l > 0) the gradient of its input into grad[l].
  void layer_backward(int l) {
    auto const ul = static_cast<std::size_t>(l);
    auto &dz = grad[ul + 1];
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
  }

  void backward() {
    // grad[L] = dL/dlogits
    loss(0, &grad.back());
    for (int l = layers() - 1; l >= 0; --l) {
      auto const ul = static_cast<std::size_t>(l);
      if (l + 1 < layers())
        relu_backward(grad[ul + 1], h[ul + 1]);
      if (b[ul].extent(0) > 0)
        bias_backward(grad[ul + 1], db[ul]);
      layer_backward(l);
      if (decayed(l) && options.weight_decay > 0)
        weight_decay_backward(dw[ul], w[ul]);
      if (l > 0 && use_dropout(last_training))
        dropout_backward(l, grad[ul]);
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

} // namespace tessel::gnn::Impl

#endif

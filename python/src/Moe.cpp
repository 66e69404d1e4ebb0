// tessel._tessel.moe: the MoE layer over the MPI world on the caller's weight arrays (read and written in place,
// never copied), forward and backward into the caller's arrays, and the dense double-precision reference.
#include "Arrays.hpp"
#include "Bindings.hpp"
#include "Runtime.hpp"

#include <tessel/core/Communicator.hpp>
#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Synthetic.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessel::python {

namespace {

using namespace tessel::moe;
using Space = Kokkos::DefaultHostExecutionSpace;

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

MoeConfig make_config(std::int64_t tokens, std::int64_t hidden, std::int64_t ffn, int experts, int topk, int ep, int tp,
                      std::string const &activation, bool gated, bool normalize_topk) {
  MoeConfig c;
  c.tokens = tokens;
  c.hidden = hidden;
  c.ffn = ffn;
  c.experts = experts;
  c.topk = topk;
  c.ep = ep;
  c.tp = tp;
  c.activation = parse_activation(activation);
  c.gated = gated;
  c.normalize_topk = normalize_topk;
  return c;
}

ConstHostMatrix const_matrix(InArray const &a, std::string const &what, std::int64_t rows, std::int64_t cols) {
  auto const *p = static_cast<float const *>(require_array(a, what, Dtype::float32, {rows, cols}));
  return ConstHostMatrix(p, sz(extent(a, 0)), sz(extent(a, 1)));
}

template <class Array>
HostMatrix matrix(Array const &a, std::string const &what, std::int64_t rows, std::int64_t cols) {
  auto *p = static_cast<float *>(const_cast<void *>(require_array(a, what, Dtype::float32, {rows, cols})));
  return HostMatrix(p, sz(extent(a, 0)), sz(extent(a, 1)));
}

template <class Array>
HostTensor tensor(Array const &a, std::string const &what, std::int64_t d0, std::int64_t d1, std::int64_t d2) {
  auto *p = static_cast<float *>(const_cast<void *>(require_array(a, what, Dtype::float32, {d0, d1, d2})));
  return HostTensor(p, sz(d0), sz(d1), sz(d2));
}

GateInput gate_input(MoeConfig const &c, InArray const &weight, std::optional<InArray> const &bias,
                     std::string const &where) {
  auto const w = const_matrix(weight, where + ": gate_weight", c.hidden, c.experts);
  ConstHostVector b;
  if (bias) {
    auto const *p =
        static_cast<float const *>(require_array(*bias, where + ": gate_bias", Dtype::float32, {c.experts}));
    b = ConstHostVector(p, sz(c.experts));
  }
  return GateInput::from_weight(w, b);
}

Schedule schedule_of(std::string const &name) { return parse_schedule(name); }

nb::object to_numpy(HostMatrix64 const &m) {
  std::vector<double> v(m.data(), m.data() + m.size());
  return numpy_array(std::move(v), {m.extent(0), m.extent(1)});
}

/// One layer on the MPI world whose expert shards are the caller's arrays (kept alive by this object).
class PyMoeLayer : public Resource {
public:
  PyMoeLayer(MoeConfig const &config, OutArray w0, OutArray w1, int pipeline_chunks, int pipeline_comm_workers,
             bool check_finite, bool tune_on_first_use, std::string const &tuning_cache)
      : _config(config), _w0(std::move(w0)), _w1(std::move(w1)) {
    require_initialized("tessel.moe.MoeLayer");
    auto const world = Communicator::world();
    config.validate(world.size());
    ExpertWeights weights;
    weights.w0 = tensor(_w0, "MoeLayer: w0", config.experts_per_group(), config.hidden, config.gemm0_cols());
    weights.w1 = tensor(_w1, "MoeLayer: w1", config.experts_per_group(), config.ffn_per_rank(), config.hidden);
    LayerOptions options;
    options.pipeline_chunks = pipeline_chunks;
    options.pipeline_comm_workers = pipeline_comm_workers;
    options.check_finite = check_finite;
    options.tune_on_first_use = tune_on_first_use;
    options.tuning_cache = tuning_cache;
    nb::gil_scoped_release unlocked;
    _layer = std::make_unique<MoeLayer>(config, world, weights, options);
  }

  void release() override {
    _layer.reset();
    _grads = MoeGradients();
  }

  double forward(InArray const &tokens, InArray const &gate_weight, std::optional<InArray> const &gate_bias,
                 OutArray const &out, std::string const &schedule) {
    require_live("MoeLayer.forward");
    auto const x = const_matrix(tokens, "MoeLayer.forward: tokens", _config.tokens, _config.hidden);
    auto const gate = gate_input(_config, gate_weight, gate_bias, "MoeLayer.forward");
    auto const y = matrix(out, "MoeLayer.forward: out", _config.tokens, _config.hidden);
    auto const s = schedule_of(schedule);
    nb::gil_scoped_release unlocked;
    Space space;
    _layer->forward(space, x, gate, y, s);
    return _layer->routing().aux_loss(_layer->communicator());
  }

  void backward(InArray const &d_out, OutArray const &d_tokens, OutArray const &d_w0, OutArray const &d_w1,
                std::optional<OutArray> const &d_gate_weight, std::optional<OutArray> const &d_gate_bias,
                std::string const &schedule, double aux_loss_coef) {
    require_live("MoeLayer.backward");
    auto const &c = _config;
    auto const dy = const_matrix(d_out, "MoeLayer.backward: d_out", c.tokens, c.hidden);
    // The gradients land in the caller's arrays (their shapes are the ones backward would allocate, so it keeps
    // them); the logits' gradient stays Tessel's.
    _grads.tokens = matrix(d_tokens, "MoeLayer.backward: d_tokens", c.tokens, c.hidden);
    _grads.experts.w0 = tensor(d_w0, "MoeLayer.backward: d_w0", c.experts_per_group(), c.hidden, c.gemm0_cols());
    _grads.experts.w1 = tensor(d_w1, "MoeLayer.backward: d_w1", c.experts_per_group(), c.ffn_per_rank(), c.hidden);
    _grads.gate_weight =
        d_gate_weight ? matrix(*d_gate_weight, "MoeLayer.backward: d_gate_weight", c.hidden, c.experts) : HostMatrix();
    if (d_gate_bias) {
      auto *p = static_cast<float *>(const_cast<void *>(
          require_array(*d_gate_bias, "MoeLayer.backward: d_gate_bias", Dtype::float32, {c.experts})));
      _grads.gate_bias = HostVector(p, sz(c.experts));
    } else {
      _grads.gate_bias = HostVector();
    }
    auto const s = schedule_of(schedule);
    {
      nb::gil_scoped_release unlocked;
      Space space;
      try {
        _layer->backward(space, dy, _grads, s, aux_loss_coef);
      } catch (...) {
        forget_caller_arrays();
        throw;
      }
    }
    forget_caller_arrays();
  }

  nb::object chosen_experts() const {
    require_live("MoeLayer.chosen_experts");
    auto const &e = _layer->routing().experts;
    std::vector<std::int32_t> v(e.data(), e.data() + e.size());
    return numpy_array(std::move(v), {e.extent(0), e.extent(1)});
  }

  nb::dict stats(bool backward) const {
    require_live("MoeLayer.stats");
    auto const &s = backward ? _layer->backward_stats() : _layer->stats();
    nb::dict d;
    d["schedule"] = name_of(s.schedule);
    d["total"] = s.total;
    d["route"] = s.route;
    d["dispatch"] = s.dispatch;
    d["experts"] = s.experts;
    d["combine"] = s.combine;
    d["reduce"] = s.reduce;
    d["compute_busy"] = s.compute_busy;
    d["compute_wait"] = s.compute_wait;
    d["rows"] = s.rows;
    return d;
  }

  std::string comet_params_source() const {
    require_live("MoeLayer.comet_params_source");
    return _layer->comet_params_source();
  }
  std::string describe() const { return _config.describe(); }
  nb::tuple rank_size() const {
    require_live("MoeLayer.communicator");
    return nb::make_tuple(_layer->communicator().rank(), _layer->communicator().size());
  }

private:
  void require_live(char const *where) const {
    require_initialized(where);
    if (!_layer)
      throw std::runtime_error(std::string(where) + ": the layer was released");
  }
  void forget_caller_arrays() {
    _grads.tokens = HostMatrix();
    _grads.experts = ExpertWeights();
    _grads.gate_weight = HostMatrix();
    _grads.gate_bias = HostVector();
  }

  MoeConfig _config;
  OutArray _w0, _w1; // the caller's expert shards: the layer's weights are views of them
  std::unique_ptr<MoeLayer> _layer;
  MoeGradients _grads;
};

DenseWeights dense_weights(MoeConfig const &c, InArray const &w0, InArray const &w1, std::string const &where) {
  DenseWeights d;
  d.w0 = tensor(w0, where + ": w0", c.experts, c.hidden, (c.gated ? 2 : 1) * c.ffn);
  d.w1 = tensor(w1, where + ": w1", c.experts, c.ffn, c.hidden);
  return d;
}

HostIndexMatrix index_matrix(InArray const &a, std::string const &what, std::int64_t rows, std::int64_t cols) {
  auto *p = static_cast<std::int32_t *>(const_cast<void *>(require_array(a, what, Dtype::int32, {rows, cols})));
  return HostIndexMatrix(p, sz(rows), sz(cols));
}

nb::object reference_forward_py(MoeConfig const &c, InArray const &tokens, InArray const &gate_weight,
                                std::optional<InArray> const &gate_bias, InArray const &chosen, InArray const &w0,
                                InArray const &w1) {
  require_initialized("tessel.moe.reference_forward");
  auto const x = const_matrix(tokens, "reference_forward: tokens", -1, c.hidden);
  auto const t = extent(tokens, 0);
  auto const gate = gate_input(c, gate_weight, gate_bias, "reference_forward");
  auto const experts = index_matrix(chosen, "reference_forward: chosen", t, c.topk);
  auto const weights = dense_weights(c, w0, w1, "reference_forward");
  ReferenceResult r;
  {
    nb::gil_scoped_release unlocked;
    r = reference_forward(c, x, gate, experts, weights);
  }
  return to_numpy(r.out);
}

nb::dict reference_backward_py(MoeConfig const &c, InArray const &tokens, InArray const &gate_weight,
                               std::optional<InArray> const &gate_bias, InArray const &chosen, InArray const &w0,
                               InArray const &w1, InArray const &d_out, double aux_loss_coef) {
  require_initialized("tessel.moe.reference_backward");
  auto const x = const_matrix(tokens, "reference_backward: tokens", -1, c.hidden);
  auto const t = extent(tokens, 0);
  auto const gate = gate_input(c, gate_weight, gate_bias, "reference_backward");
  auto const experts = index_matrix(chosen, "reference_backward: chosen", t, c.topk);
  auto const weights = dense_weights(c, w0, w1, "reference_backward");
  auto const dy = const_matrix(d_out, "reference_backward: d_out", t, c.hidden);
  ReferenceGradients g;
  {
    nb::gil_scoped_release unlocked;
    g = reference_backward(c, x, gate, experts, weights, dy, aux_loss_coef);
  }
  auto const e = sz(c.experts), n = sz(c.hidden), k = sz(c.ffn), cols = sz((c.gated ? 2 : 1) * c.ffn);
  nb::dict d;
  d["tokens"] = to_numpy(g.tokens);
  d["logits"] = to_numpy(g.logits);
  d["w0"] = numpy_array(g.w0, {e, n, cols});
  d["w1"] = numpy_array(g.w1, {e, k, n});
  d["gate_weight"] = numpy_array(g.gate_weight, {n, e});
  if (gate_bias)
    d["gate_bias"] = numpy_array(g.bias, {e});
  return d;
}

nb::object matrix_copy(HostMatrix const &m) {
  std::vector<float> v(m.data(), m.data() + m.size());
  return numpy_array(std::move(v), {m.extent(0), m.extent(1)});
}

nb::object tensor_copy(HostTensor const &m) {
  std::vector<float> v(m.data(), m.data() + m.size());
  return numpy_array(std::move(v), {m.extent(0), m.extent(1), m.extent(2)});
}

} // namespace

void bind_moe(nb::module_ &m) {
  nb::class_<MoeConfig>(m, "MoeConfig", "Shape and layout of a layer (M tokens per rank, N, K, E, topk, EP x TP)")
      .def(
          "__init__",
          [](MoeConfig *self, std::int64_t tokens, std::int64_t hidden, std::int64_t ffn, int experts, int topk, int ep,
             int tp, std::string const &activation, bool gated, bool normalize_topk) {
            new (self)
                MoeConfig(make_config(tokens, hidden, ffn, experts, topk, ep, tp, activation, gated, normalize_topk));
          },
          nb::arg("tokens"), nb::arg("hidden"), nb::arg("ffn"), nb::arg("experts"), nb::arg("topk"), nb::arg("ep") = 1,
          nb::arg("tp") = 1, nb::arg("activation") = "silu", nb::arg("gated") = true, nb::arg("normalize_topk") = true)
      .def_rw("tokens", &MoeConfig::tokens)
      .def_ro("hidden", &MoeConfig::hidden)
      .def_ro("ffn", &MoeConfig::ffn)
      .def_ro("experts", &MoeConfig::experts)
      .def_ro("topk", &MoeConfig::topk)
      .def_ro("ep", &MoeConfig::ep)
      .def_ro("tp", &MoeConfig::tp)
      .def_ro("gated", &MoeConfig::gated)
      .def_ro("normalize_topk", &MoeConfig::normalize_topk)
      .def_prop_ro("activation", [](MoeConfig const &c) { return std::string(name_of(c.activation)); })
      .def_prop_ro("experts_per_group", &MoeConfig::experts_per_group)
      .def_prop_ro("ffn_per_rank", &MoeConfig::ffn_per_rank)
      .def_prop_ro("gemm0_cols", &MoeConfig::gemm0_cols)
      .def("group_of_rank", &MoeConfig::group_of_rank)
      .def("tp_rank", &MoeConfig::tp_rank)
      .def(
          "validate", [](MoeConfig const &c, int world) { c.validate(world); }, nb::arg("world_size"))
      .def("describe", &MoeConfig::describe);

  nb::class_<PyMoeLayer>(m, "MoeLayer", "One MoE layer on the MPI world (collective construction)")
      .def(nb::init<MoeConfig const &, OutArray, OutArray, int, int, bool, bool, std::string const &>(),
           nb::arg("config"), nb::arg("w0").noconvert(), nb::arg("w1").noconvert(), nb::arg("pipeline_chunks") = 4,
           nb::arg("pipeline_comm_workers") = 0, nb::arg("check_finite") = true, nb::arg("tune_on_first_use") = false,
           nb::arg("tuning_cache") = "",
           "w0 [E/EP, N, gemm0_cols] and w1 [E/EP, K/TP, N]: this rank's shards, float32, C-contiguous; the "
           "layer reads them in place at every forward (an optimizer updates them in place)")
      .def("forward", &PyMoeLayer::forward, nb::arg("tokens").noconvert(), nb::arg("gate_weight").noconvert(),
           nb::arg("gate_bias").noconvert().none(), nb::arg("out").noconvert(), nb::arg("schedule") = "comet",
           "out = the layer of tokens [M, N]; returns the load-balancing loss (over all ranks). Collective.")
      .def("backward", &PyMoeLayer::backward, nb::arg("d_out").noconvert(), nb::arg("d_tokens").noconvert(),
           nb::arg("d_w0").noconvert(), nb::arg("d_w1").noconvert(), nb::arg("d_gate_weight").noconvert().none(),
           nb::arg("d_gate_bias").noconvert().none(), nb::arg("schedule") = "comet", nb::arg("aux_loss_coef") = 0.0,
           "Gradients of the last forward into the given arrays (gate gradients summed over ranks). Collective.")
      .def("chosen_experts", &PyMoeLayer::chosen_experts, "[M, topk] experts of the last forward's tokens")
      .def("stats", &PyMoeLayer::stats, nb::arg("backward") = false)
      .def_prop_ro("comet_params_source", &PyMoeLayer::comet_params_source)
      .def_prop_ro("rank_size", &PyMoeLayer::rank_size)
      .def("describe", &PyMoeLayer::describe);

  m.def("reference_forward", &reference_forward_py, nb::arg("config"), nb::arg("tokens"), nb::arg("gate_weight"),
        nb::arg("gate_bias").none(), nb::arg("chosen"), nb::arg("w0"), nb::arg("w1"),
        "Dense double-precision reference output [T, N] (full weights w0 [E, N, cols], w1 [E, K, N])");
  m.def("reference_backward", &reference_backward_py, nb::arg("config"), nb::arg("tokens"), nb::arg("gate_weight"),
        nb::arg("gate_bias").none(), nb::arg("chosen"), nb::arg("w0"), nb::arg("w1"), nb::arg("d_out"),
        nb::arg("aux_loss_coef") = 0.0, "The reference's gradients (float64 arrays)");
  m.def(
      "make_weights",
      [](MoeConfig const &c, std::uint64_t seed) {
        require_initialized("tessel.moe.make_weights");
        auto const d = make_weights(c, seed);
        return nb::make_tuple(tensor_copy(d.w0), tensor_copy(d.w1));
      },
      nb::arg("config"), nb::arg("seed"), "Random dense weights (w0, w1) of all experts (normal, variance 1 / fan-in)");
  m.def(
      "make_tokens",
      [](MoeConfig const &c, std::int64_t rows, std::uint64_t seed) {
        require_initialized("tessel.moe.make_tokens");
        return matrix_copy(make_tokens(c, rows, seed));
      },
      nb::arg("config"), nb::arg("rows"), nb::arg("seed"));
  m.def(
      "make_gate",
      [](MoeConfig const &c, double alpha, std::uint64_t seed) {
        require_initialized("tessel.moe.make_gate");
        auto const g = make_gate(c, alpha, seed);
        std::vector<float> b(g.bias.data(), g.bias.data() + g.bias.size());
        auto const e = b.size();
        return nb::make_tuple(matrix_copy(g.weight), numpy_array(std::move(b), {e}));
      },
      nb::arg("config"), nb::arg("alpha"), nb::arg("seed"), "Gate weight [N, E] and a Zipf bias [E]");
  m.def(
      "shard_weights",
      [](MoeConfig const &c, int rank, InArray const &w0, InArray const &w1) {
        require_initialized("tessel.moe.shard_weights");
        auto const s = shard_weights(c, rank, dense_weights(c, w0, w1, "shard_weights"));
        return nb::make_tuple(tensor_copy(s.w0), tensor_copy(s.w1));
      },
      nb::arg("config"), nb::arg("rank"), nb::arg("w0"), nb::arg("w1"), "The shards (w0, w1) rank `rank` holds");
}

} // namespace tessel::python

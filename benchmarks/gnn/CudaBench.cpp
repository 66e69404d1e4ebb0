// `tessel-gnn-bench --backend cuda`: Y = A X on the GPU with every device kernel (the adaptive handle, cuSPARSE
// SpMM CSR_ALG2, Tessel's CSR and the other fixed kernels) side by side, timed with CUDA events in interleaved
// rounds, each result checked against a double-precision host reference.
#include "CudaBench.hpp"
#include "Report.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/cuda/Spmm.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>

namespace tessel::gnn::bench {

namespace {

namespace gc = tessel::gnn::cuda;
using tessel::cuda::DeviceBuffer;
using tessel::cuda::Event;
using tessel::cuda::Stream;
using namespace std::chrono_literals;

constexpr double u32 = 5.9604644775390625e-08; // 2^-24

/// The error bound of unit_tests/gnn/tstCudaSpmm.cpp, relative to (|A| |X|)_ij (see there for the derivation).
double tolerance(bool tf32, std::int64_t degree) {
  double const d = static_cast<double>(degree);
  return tf32 ? 1.0 / 256 + 4 * d * u32 : std::max(1e-5, 2 * d * u32);
}

struct Entry {
  std::string label;
  SpmmAlgorithm algorithm = SpmmAlgorithm::csr;
  std::unique_ptr<gc::SpmmHandle<std::int32_t>> handle;
  bool permuted = false, tf32 = false;
  double setup = 0;
  DeviceBuffer<float> y;
  int tuning = 0, inner = 1;
  std::vector<double> t;
};

gc::DenseEngine parse_engine(std::string const &s) {
  for (auto e : {gc::DenseEngine::automatic, gc::DenseEngine::wmma, gc::DenseEngine::cublas})
    if (s == gc::name_of(e))
      return e;
  TESSEL_REQUIRE_USAGE(false, "--dense-engine must be automatic, wmma or cublas, got '", s, "'");
  return gc::DenseEngine::automatic;
}

/// What the runs of every width share: the operator, its row degrees (for the error bound), one handle per kernel
/// and the vertex order of the adaptive handle (permuted entries read X and write Y in that order).
struct Bench {
  Bench(CudaBenchConfig const &config, Graph<std::int32_t> const &graph)
      : c(config), op(graph), n(static_cast<std::size_t>(graph.num_rows())), degree(n) {
    for (std::size_t i = 0; i < n; ++i)
      degree[i] = op.row_map()(i + 1) - op.row_map()(i);
  }

  CudaBenchConfig const &c;
  Graph<std::int32_t> const &op;
  std::size_t n;
  std::vector<std::int64_t> degree;
  Stream stream;
  std::vector<Entry> entries;
  std::map<std::string, std::string> skipped;
  Permutation adaptive_perm;
  bool have_perm = false;
};

/// One handle per kernel, built once for every width (preprocessing and uploads are its setup time); a kernel that
/// cannot serve the graph is listed in b.skipped. With a reordering adaptive handle, also Tessel's CSR on its
/// vertex order ("csr(reordered)": the reordering alone).
void make_entries(Bench &b, std::vector<std::string> const &kernels, gc::SpmmOptions const &base) {
  auto const &c = b.c;
  for (auto const &k : kernels) {
    auto const algorithm = parse_spmm_algorithm(k);
    try {
      auto o = base;
      o.algorithm = algorithm;
      auto const t0 = std::chrono::steady_clock::now();
      Entry e;
      e.label = k;
      e.algorithm = algorithm;
      e.handle = std::make_unique<gc::SpmmHandle<std::int32_t>>(b.stream, b.op, o);
      e.setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      e.tf32 = c.allow_tf32 && (algorithm == SpmmAlgorithm::tiles || algorithm == SpmmAlgorithm::dense ||
                                algorithm == SpmmAlgorithm::adaptive);
      if (algorithm == SpmmAlgorithm::adaptive) {
        b.adaptive_perm = e.handle->permutation();
        b.have_perm = !b.adaptive_perm.is_identity();
        e.permuted = b.have_perm;
      }
      b.entries.push_back(std::move(e));
    } catch (tessel::Exception const &ex) {
      std::printf("  %-22s skipped: %s\n", k.c_str(), ex.what());
      b.skipped[k] = std::string("skipped: ") + ex.what();
    }
  }
  if (b.have_perm) {
    auto o = base;
    o.algorithm = SpmmAlgorithm::csr;
    Entry e;
    e.label = "csr(reordered)";
    e.handle = std::make_unique<gc::SpmmHandle<std::int32_t>>(b.stream, permute(b.op, b.adaptive_perm), o);
    e.permuted = true;
    b.entries.push_back(std::move(e));
  }
}

/// The input of one width (uniform in [-1, 1), seed 7) and, in double precision, A X and |A| |X|.
struct Reference {
  std::vector<float> x;
  std::vector<double> y, scale;
};

Reference make_reference(Bench const &b, std::size_t fs) {
  auto const n = b.n;
  auto const &op = b.op;
  Reference r;
  r.x.resize(n * fs);
  {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto &v : r.x)
      v = u(rng);
  }
  r.y.assign(n * fs, 0.0);
  r.scale.assign(n * fs, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (offset_type k = op.row_map()(i); k < op.row_map()(i + 1); ++k) {
      double const a = op.values()(k);
      auto const col = static_cast<std::size_t>(op.entries()(k));
      for (std::size_t j = 0; j < fs; ++j) {
        r.y[i * fs + j] += a * r.x[col * fs + j];
        r.scale[i * fs + j] += std::abs(a * r.x[col * fs + j]);
      }
    }
  return r;
}

/// Prepares every kernel (tunes, warms up, sizes its batches), then times all of them in rounds whose order rotates;
/// \p apply(e) runs entry e once on the stream.
template <class Apply> void time_entries(Bench &b, int f, Apply const &apply) {
  auto const &c = b.c;
  auto &stream = b.stream;
  Event start(true), stop(true);
  for (auto &e : b.entries) {
    e.y = DeviceBuffer<float>(b.n * static_cast<std::size_t>(f), "Tessel::gnn::bench::y");
    e.tuning = 0;
    e.t.clear();
    while (!e.handle->tuned(f) && e.tuning < 1000) {
      apply(e);
      ++e.tuning;
    }
    for (int r = 0; r < c.warmup; ++r)
      apply(e);
    start.record(stream.get());
    apply(e);
    stop.record(stream.get());
    stop.synchronize(60s);
    double const one = 1e-3 * Event::elapsed_ms(start, stop);
    // Batches of >= 1 ms: event resolution and launch jitter stay small against them.
    e.inner = static_cast<int>(std::min(1000.0, std::max(1.0, std::ceil(1e-3 / std::max(one, 1e-7)))));
  }
  auto &entries = b.entries;
  for (int r = 0; r < c.reps; ++r)
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto &e = entries[(i + static_cast<std::size_t>(r)) % entries.size()];
      apply(e); // untimed: the previous kernel left other data in L2
      start.record(stream.get());
      for (int k = 0; k < e.inner; ++k)
        apply(e);
      stop.record(stream.get());
      stop.synchronize(60s);
      e.t.push_back(1e-3 * Event::elapsed_ms(start, stop) / e.inner);
    }
}

/// The largest error of entry e's Y relative to |A| |X| (over the nonzero bounds); \p bad is set when an element
/// exceeds the tolerance.
double check_entry(Bench &b, Entry &e, Reference const &ref, std::size_t fs, bool &bad) {
  std::vector<float> y(b.n * fs);
  e.y.copy_to_host(y.data(), y.size(), b.stream.get());
  b.stream.synchronize(60s);
  double worst = 0;
  bad = false;
  for (std::size_t k = 0; k < b.n; ++k) {
    std::size_t const i = e.permuted ? static_cast<std::size_t>(b.adaptive_perm.old_of_new[k]) : k;
    double const tol = tolerance(e.tf32, b.degree[i]);
    for (std::size_t j = 0; j < fs; ++j) {
      double const d = std::abs(static_cast<double>(y[k * fs + j]) - ref.y[i * fs + j]), s = ref.scale[i * fs + j];
      if (!(d <= tol * s + 1e-30))
        bad = true;
      if (s > 0)
        worst = std::max(worst, d / s);
    }
  }
  return worst;
}

/// Times and checks every kernel at width \p f, prints its table and returns its report; \p wrong is set when a
/// kernel's result is wrong.
Json bench_width(Bench &b, int f, bool &wrong) {
  auto const n = b.n;
  auto const fs = static_cast<std::size_t>(f);
  auto &stream = b.stream;
  Reference const ref = make_reference(b, fs);
  DeviceBuffer<float> xd(n * fs, "Tessel::gnn::bench::x"), xpd(b.have_perm ? n * fs : 0, "Tessel::gnn::bench::xp");
  xd.copy_from_host(ref.x.data(), ref.x.size(), stream.get());
  if (b.have_perm) {
    std::vector<float> xp(n * fs);
    for (std::size_t k = 0; k < n; ++k)
      std::memcpy(&xp[k * fs], &ref.x[static_cast<std::size_t>(b.adaptive_perm.old_of_new[k]) * fs],
                  fs * sizeof(float));
    xpd.copy_from_host(xp.data(), xp.size(), stream.get());
  }
  auto const rows = static_cast<std::int64_t>(n);
  double const flops = 2.0 * static_cast<double>(b.op.nnz()) * f;
  std::printf("\nF = %d\n  %-22s %10s %9s %9s %14s  %s\n", f, "kernel", "median ms", "GFLOP/s", "setup s",
              "err/(|A||X|)", "note");
  time_entries(b, f, [&](Entry &e) {
    e.handle->apply(stream, tessel::MatrixRef<float const>(e.permuted ? xpd.data() : xd.data(), rows, f),
                    tessel::MatrixRef<float>(e.y.data(), rows, f));
  });
  std::map<std::string, double> ms, err;
  std::map<std::string, std::string> notes = b.skipped;
  Json plan_json = nullptr;
  for (auto &e : b.entries) {
    bool bad = false;
    double const worst = check_entry(b, e, ref, fs, bad);
    double const med = median(e.t);
    ms[e.label] = 1e3 * med;
    err[e.label] = worst;
    std::string note = e.tuning ? std::to_string(e.tuning) + " tuning applies" : "";
    if (e.tf32)
      note += std::string(note.empty() ? "" : ", ") + "TF32";
    if (bad) {
      note += " WRONG RESULT";
      wrong = true;
    }
    notes[e.label] = note;
    std::printf("  %-22s %10.4f %9.1f %9.3f %14.2e  %s\n", e.label.c_str(), 1e3 * med, flops / med * 1e-9, e.setup,
                worst, note.c_str());
    if (e.algorithm == SpmmAlgorithm::adaptive && e.label == "adaptive") {
      auto const plan = e.handle->plan(f);
      plan_json = plan.json();
      std::printf("%s", plan.summary().c_str());
    }
  }
  // The named baselines first: cuSPARSE, then Tessel's CSR.
  return report_width(f, flops, ms, &err, notes, {"cusparse", "csr"}, std::move(plan_json));
}

} // namespace

int bench_cuda(CudaBenchConfig const &c) {
  if (tessel::cuda::device_count() == 0) {
    std::printf("tessel-gnn-bench --backend cuda: skipped: no CUDA device visible\n");
    if (!c.json.empty())
      tessel::write_json(c.json, {{"command", "bench"}, {"device", "cuda"}, {"skipped", "no CUDA device visible"}});
    return 0;
  }
  auto const data = load_dataset(c.data);
  require_nodes(data, c.data);
  TESSEL_REQUIRE(c.op_name == "gcn" || c.op_name == "raw", "--operator must be gcn or raw, got '", c.op_name, "'");
  auto const op = c.op_name == "gcn" ? gcn_normalize(data.graph) : data.graph;
  int device = 0;
  TESSEL_CUDA_CHECK(cudaGetDevice(&device));
  std::string const gpu = tessel::cuda::device_name(device);
  Bench b(c, op);
  std::vector<std::string> kernels = c.kernels;
  if (kernels.empty())
    kernels = {"csr", "csr_feature_tiled", "coo_atomic", "tiles", "dense", "cusparse", "adaptive"};
  gc::SpmmOptions base;
  base.timing = c.options.timing;
  base.partition = c.options.partition;
  base.part_size = c.options.part_size;
  base.probe_features = c.widths; // the handles serve every benched width
  base.allow_tf32 = c.allow_tf32;
  base.dense_engine = parse_engine(c.dense_engine);
  std::printf("tessel-gnn-bench --backend cuda: '%s' (%zu nodes, %lld entries, operator %s) on %s, reps %d, TF32 %s\n",
              data.name.c_str(), b.n, static_cast<long long>(op.nnz()), c.op_name.c_str(), gpu.c_str(), c.reps,
              c.allow_tf32 ? "on" : "off");
  make_entries(b, kernels, base);

  bool wrong = false;
  auto results = Json::array();
  for (int f : c.widths)
    results.push_back(bench_width(b, f, wrong));
  if (!c.json.empty()) {
    Json doc = {{"command", "bench"}, {"device", "cuda"}, {"gpu", gpu}};
    add_run_fields(doc, c.data, data.name, op, c.op_name, c.reps);
    doc["tf32"] = c.allow_tf32;
    doc["build"] = tessel::build_summary();
    doc["results"] = std::move(results);
    write_json(c.json, doc);
  }
  if (wrong)
    std::fprintf(stderr, "tessel-gnn-bench --backend cuda: some kernel returned a wrong result (see WRONG RESULT)\n");
  return wrong ? 3 : 0;
}

} // namespace tessel::gnn::bench

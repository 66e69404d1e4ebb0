// tessel-gnn-bench: Y = A X with every aggregation kernel side by side on one graph, on the host (every kernel of
// tessel::gnn::SpmmHandle) or on a GPU (--backend cuda, CudaBench.cpp), each result checked against the CSR
// reference.
//
//   tessel-gnn-bench --data cora.h5 --features 16,64,256 --json bench.json
#include <tessel/core/Config.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Version.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Memory.hpp>
#include <tessel/gnn/Spmm.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>
#include <tessel/tools/gnn/Options.hpp>

#include "CudaBench.hpp"
#include "DistBench.hpp"
#include "Report.hpp"
#include "Roofline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace tessel::gnn;
using namespace tessel::gnn::bench;
using Exec = Kokkos::DefaultHostExecutionSpace;
using Mem = Exec::memory_space;
using Handle = SpmmHandle<std::int32_t, Exec>;

char const *usage_text =
    "usage: tessel-gnn-bench --data FILE [options]\n"
    "Times Y = A X for every aggregation kernel side by side; exit status 0 success, 1 runtime error or wrong\n"
    "result, 2 invalid option or argument.\n"
    "\n"
    "  --data FILE --features 16,64,256 --kernels csr,coo,...,adaptive (default: all but coo_atomic)\n"
    "  --reps N (timed rounds, all kernels in turn, median reported; default 15) --warmup N (default 3)\n"
    "  --operator gcn|raw     D^-1/2 (A+I) D^-1/2 (default) or A as stored\n"
    "  --timing on|off --partition P --part-size N --json FILE\n"
    "  --huge-pages on|off    X, Y and the handles' graph arrays on transparent huge pages (default on)\n"
    "  --backend host|cuda    cuda: the device kernels (csr, csr_feature_tiled, coo_atomic, tiles, dense,\n"
    "                         cusparse, adaptive) on the first GPU, CUDA events, default --reps 20; skipped\n"
    "                         with a message (exit 0) where no GPU is visible\n"
    "  --tf32 on|off --dense-engine automatic|wmma|cublas   (--backend cuda)\n"
    "  --backend dist         under mpiexec: distributed Y = A X (DistGraph, DistSpmm), the sequential and the\n"
    "                         overlapped schedule side by side, each rank's result checked (exit 3 if wrong)\n"
    "  --kernel K --dist-partition auto|metis|contiguous --bandwidth MB/s --latency US   (--backend dist; a\n"
    "                         bandwidth or latency emulates that link per rank, PacedCommunicator)\n"
    "  --version, --help      --debug (or TESSEL_DEBUG=1): add source locations to error messages\n";

SpmmOptions fixed(SpmmAlgorithm algorithm) {
  SpmmOptions o;
  o.algorithm = algorithm;
  return o;
}

struct HostBenchConfig {
  std::string data, op_name, json;
  std::vector<int> widths;
  std::vector<std::string> kernels;
  int reps = 15, warmup = 3;
  SpmmOptions options;
};

/// One kernel of one width: its handle, the X it reads and the Y it writes (in its vertex order), its samples.
struct Entry {
  std::string label;
  std::unique_ptr<Handle> handle;
  Permutation const *perm = nullptr;
  Matrix<Mem> xin, y;
  double setup = 0, err = 0;
  int tuning = 0, inner = 1;
  std::vector<double> t;
};

/// The kernels of one width side by side. Every kernel is prepared (built, tuned, warmed up) first; then the timed
/// rounds run all kernels in turn, so that drifting machine load affects them alike. Each timed sample is a batch
/// of applies of >= 2 ms, after one untimed apply of the same kernel. All kernels of one vertex order read the
/// same X and write the same Y: with a Y per kernel, the placement of the buffers alone made identical loops
/// differ by up to 30% here (csr and csr_feature_tiled at F <= 32), which would be credited to the kernels. Each
/// result is checked right after the kernel's own applies (before the rounds and after them).
class WidthBench {
public:
  WidthBench(Exec const &space, Graph<std::int32_t> const &op, HostBenchConfig const &c, HostLimits const &limits,
             int f)
      : _space(space), _op(op), _c(c), _limits(limits), _f(f), _n(static_cast<std::size_t>(op.num_rows())),
        _x(matrix("Tessel::gnn::bench::x")), _ref("Tessel::gnn::bench::ref", _n, fs()) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (std::size_t k = 0; k < _x.size(); ++k)
      _x.data()[k] = u(rng);
    {
      Handle h(space, op, fixed(SpmmAlgorithm::csr));
      h.apply(space, _x, _ref);
    }
    _y_shared = matrix("Tessel::gnn::bench::y");
  }

  /// Builds and prepares every kernel, times them, prints the table; returns the width's record.
  tessel::Json run(bool &wrong) {
    double const flops = 2.0 * static_cast<double>(_op.nnz()) * _f;
    double const bytes = compulsory_bytes(_op, _f);
    _roofline = roofline_seconds(_limits, bytes, flops);
    double const no_reuse = no_reuse_seconds(_limits, _op, _f);
    std::printf("\nF = %d (roofline %.4f ms: %.1f MB at the triad bandwidth; no-reuse time %.4f ms; X %.1f MB, %.1f MB "
                "of it on huge pages)\n  %-22s %10s %9s %9s %10s %12s  %s\n",
                _f, 1e3 * _roofline, bytes * 1e-6, 1e3 * no_reuse,
                1e-6 * static_cast<double>(_x.size() * sizeof(float)),
                1e-6 * static_cast<double>(std::max<std::int64_t>(0, huge_page_bytes(_x.data(), _x.size() * 4))),
                "kernel", "median ms", "GFLOP/s", "roofline", "setup s", "max rel err", "note");
    add_kernels();
    time_rounds();
    std::map<std::string, double> ms;
    tessel::Json plan = results(ms, flops, wrong);
    time_permutation(ms);
    std::fflush(stdout);
    auto record = report_width(_f, flops, ms, nullptr, _notes, {}, std::move(plan));
    record["roofline_ms"] = 1e3 * _roofline;
    record["compulsory_bytes"] = bytes;
    record["no_reuse_ms"] = 1e3 * no_reuse;
    tessel::Json fraction = tessel::Json::object();
    for (auto const &[k, v] : ms)
      if (k != "permute_in_out")
        fraction[k] = 1e3 * _roofline / v;
    record["roofline_fraction"] = std::move(fraction);
    record["x_huge_page_bytes"] = huge_page_bytes(_x.data(), _x.size() * sizeof(float));
    record["x_bytes"] = _x.size() * sizeof(float);
    return record;
  }

private:
  std::size_t fs() const { return static_cast<std::size_t>(_f); }
  /// The kernels' X and Y: on huge pages as the handles' arrays (--huge-pages).
  Matrix<Mem> matrix(char const *label) const { return make_matrix(_space, label, _n, fs(), _c.options.huge_pages); }

  // Relative error of the entry's Y (in its vertex order) against the reference; the largest seen counts.
  void check(Entry &e) {
    Matrix<Mem> yout = e.y;
    if (e.perm) {
      yout = Matrix<Mem>("Tessel::gnn::bench::yo", _n, fs());
      unpermute_rows(_space, *e.perm, ConstMatrix<Mem>(e.y), yout);
    }
    double err = 0, scale = 0;
    for (std::size_t k = 0; k < _ref.size(); ++k) {
      err = std::max(err, static_cast<double>(std::abs(yout.data()[k] - _ref.data()[k])));
      scale = std::max(scale, static_cast<double>(std::abs(_ref.data()[k])));
    }
    e.err = std::max(e.err, err / std::max(scale, 1e-30));
  }

  void add(std::string const &label, std::unique_ptr<Handle> h, Permutation const *perm, double setup) {
    Entry e;
    e.label = label;
    e.handle = std::move(h);
    e.perm = perm;
    e.setup = setup;
    e.xin = _x;
    e.y = _y_shared;
    if (perm) {
      if (_x_perm.extent(0) == 0) { // adaptive and csr(reordered) share the permutation and its buffers
        _x_perm = matrix("Tessel::gnn::bench::xp");
        _y_perm = matrix("Tessel::gnn::bench::yp");
        permute_rows(_space, *perm, ConstMatrix<Mem>(_x), _x_perm);
      }
      e.xin = _x_perm;
      e.y = _y_perm;
    }
    while (!e.handle->tuned(_f) && e.tuning < 1000) {
      e.handle->apply(_space, e.xin, e.y);
      ++e.tuning;
    }
    for (int r = 0; r < _c.warmup; ++r)
      e.handle->apply(_space, e.xin, e.y);
    Kokkos::deep_copy(e.y, 1e30f); // the buffer is shared: nothing left over may pass for a result
    tessel::Timer<Exec> timer(_space);
    e.handle->apply(_space, e.xin, e.y);
    e.inner = static_cast<int>(std::min(1000.0, std::max(1.0, std::ceil(2e-3 / std::max(timer.seconds(), 1e-9)))));
    check(e);
    _entries.push_back(std::move(e));
  }

  void add_kernels() {
    for (auto const &k : _c.kernels) {
      auto const algorithm = parse_spmm_algorithm(k);
      try {
        auto const t0 = std::chrono::steady_clock::now();
        auto options = _c.options;
        options.algorithm = algorithm;
        options.probe_features = {_f}; // this handle serves width f only
        auto h = std::make_unique<Handle>(_space, _op, options);
        double const setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        // A handle that kept the original order reads X and writes Y in place, like the single kernels.
        bool const permuted = algorithm == SpmmAlgorithm::adaptive && !h->permutation().is_identity();
        if (algorithm == SpmmAlgorithm::adaptive) {
          _adaptive_perm = h->permutation();
          _have_perm = true;
        }
        add(k, std::move(h), permuted ? &_adaptive_perm : nullptr, setup);
      } catch (tessel::Exception const &e) {
        std::printf("  %-22s skipped: %s\n", k.c_str(), e.what());
        _notes[k] = std::string("skipped: ") + e.what();
      }
    }
    if (_have_perm) // the reordering alone: plain CSR on the adaptive handle's vertex order
      add("csr(reordered)", std::make_unique<Handle>(_space, permute(_op, _adaptive_perm), fixed(SpmmAlgorithm::csr)),
          _adaptive_perm.is_identity() ? nullptr : &_adaptive_perm, 0.0);
  }

  // The kernel order changes from round to round (a fixed-seed shuffle): the first kernel of a round runs
  // measurably slower here, and so does a kernel that follows the dense GEMM or Kokkos Kernels (their memory sweeps
  // and wide vector code), whatever its own cost; with a plain rotation every kernel kept the same predecessor,
  // which biased identical loops by up to 7%. Shuffling spreads both effects over all kernels.
  void time_rounds() {
    std::vector<std::size_t> order(_entries.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::mt19937 shuffle_rng(12345);
    for (int r = 0; r < _c.reps; ++r) {
      std::shuffle(order.begin(), order.end(), shuffle_rng);
      for (std::size_t i : order) {
        auto &e = _entries[i];
        // One untimed apply first: the previous kernel (the dense one sweeps a huge matrix) left the caches cold,
        // and training repeats the same aggregation back to back.
        e.handle->apply(_space, e.xin, e.y);
        tessel::Timer<Exec> timer(_space);
        for (int k = 0; k < e.inner; ++k)
          e.handle->apply(_space, e.xin, e.y);
        e.t.push_back(timer.seconds() / e.inner);
      }
    }
  }

  /// Checks every result once more, prints the table; returns the adaptive plan (null without one).
  tessel::Json results(std::map<std::string, double> &ms, double flops, bool &wrong) {
    TESSEL_REQUIRE(!_entries.empty(), "F = ", _f, ": none of the kernels asked for (--kernels) could run on graph '",
                   _op.name(), "' (each was skipped, see above): nothing was timed");
    tessel::Json plan = nullptr;
    for (auto &e : _entries) {
      Kokkos::deep_copy(e.y, 1e30f); // nothing left over from the kernel before
      e.handle->apply(_space, e.xin, e.y);
      check(e);
      double const rel = e.err;
      double const med = median(e.t);
      ms[e.label] = 1e3 * med;
      std::string note = e.tuning ? std::to_string(e.tuning) + " tuning applies" : "";
      if (rel > 1e-4) {
        note += " WRONG RESULT";
        wrong = true;
      }
      _notes[e.label] = note;
      std::printf("  %-22s %10.4f %9.2f %8.1f%% %10.3f %12.2e  %s\n", e.label.c_str(), 1e3 * med, flops / med * 1e-9,
                  100 * _roofline / med, e.setup, rel, note.c_str());
      if (e.label == "adaptive") {
        plan = e.handle->plan(_f).json();
        std::printf("%s", e.handle->plan(_f).summary().c_str());
      }
    }
    return plan;
  }

  /// Moving X into the handle's order and Y back, once per apply (not needed in training).
  void time_permutation(std::map<std::string, double> &ms) {
    if (!_have_perm || _adaptive_perm.is_identity())
      return;
    Matrix<Mem> xp("Tessel::gnn::bench::xp", _n, fs()), yo("Tessel::gnn::bench::yo", _n, fs());
    std::vector<double> t;
    for (int r = 0; r < _c.reps; ++r) {
      tessel::Timer<Exec> timer(_space);
      permute_rows(_space, _adaptive_perm, ConstMatrix<Mem>(_x), xp);
      unpermute_rows(_space, _adaptive_perm, ConstMatrix<Mem>(xp), yo);
      t.push_back(timer.seconds());
    }
    ms["permute_in_out"] = 1e3 * median(t);
    std::printf("  %-22s %10.4f  (permuting X in and Y out; training keeps data in the handle's order)\n",
                "permute in+out", 1e3 * median(t));
  }

  Exec _space;
  Graph<std::int32_t> const &_op;
  HostBenchConfig const &_c;
  HostLimits const &_limits;
  int _f;
  double _roofline = 0; // seconds
  std::size_t _n;
  Matrix<Mem> _x, _ref, _y_shared, _x_perm, _y_perm;
  std::vector<Entry> _entries;
  std::map<std::string, std::string> _notes;
  Permutation _adaptive_perm;
  bool _have_perm = false;
};

int bench_host(HostBenchConfig const &c) {
  tessel::require_writable(c.json);
  tessel::require_same_file(tessel::Communicator::world(), "data set", c.data);
  auto const data = load_dataset(c.data);
  require_nodes(data, c.data);
  auto const op = c.op_name == "gcn" ? gcn_normalize(data.graph) : data.graph;
  Exec space;
  auto const n = static_cast<std::size_t>(op.num_rows());
  char const *blas_env = std::getenv("OPENBLAS_NUM_THREADS");
  std::string const blas_threads = blas_env ? blas_env : "unset";
  std::printf("tessel-gnn-bench: '%s' (%zu nodes, %lld entries, operator %s), OPENBLAS_NUM_THREADS=%s, reps %d\n",
              data.name.c_str(), n, static_cast<long long>(op.nnz()), c.op_name.c_str(), blas_threads.c_str(), c.reps);
  auto const limits = measure_host_limits(space, c.widths);
  std::printf("machine: triad %.1f GB/s, fp32 FMA %.1f GFLOP/s (%d threads); roofline = max(bytes of A, X and Y once "
              "/ triad, flops / FMA peak)\n",
              limits.triad_gbs, limits.fma_gflops, limits.threads);
  std::printf("machine: random row gather");
  for (auto const &[f, g] : limits.gather_gbs)
    std::printf(" %.1f GB/s (F = %d)", g, f);
  std::printf("; no-reuse time = every entry's row of X gathered from memory at that rate\n");
  bool wrong = false;
  auto results = tessel::Json::array();
  for (int f : c.widths)
    results.push_back(WidthBench(space, op, c, limits, f).run(wrong));
  std::printf("%s", huge_pages_line(c.options.huge_pages).c_str());
  if (!c.json.empty()) {
    tessel::Json doc = {{"command", "bench"}};
    add_run_fields(doc, c.data, data.name, op, c.op_name, c.reps);
    doc["openblas_num_threads"] = blas_threads;
    doc["build"] = tessel::build_summary();
    doc["machine"] = limits.json();
    doc["huge_pages"] = huge_pages_json(c.options.huge_pages);
    doc["results"] = std::move(results);
    tessel::write_json(c.json, doc);
    std::printf("results written to %s\n", c.json.c_str());
  }
  if (wrong)
    std::fprintf(stderr, "tessel-gnn-bench: some kernel returned a wrong result (see WRONG RESULT above)\n");
  return wrong ? tessel::exit_failure : tessel::exit_success;
}

int run_host(tessel::CommandLine &a) {
  TESSEL_REQUIRE_USAGE(!a.has("tf32") && !a.has("dense-engine"), "--tf32 and --dense-engine need --backend cuda");
  HostBenchConfig c;
  c.data = a.get("data", "");
  c.op_name = a.get("operator", "gcn");
  TESSEL_REQUIRE_USAGE(c.op_name == "gcn" || c.op_name == "raw", "--operator must be gcn or raw, got '", c.op_name,
                       "'");
  c.widths = a.get_int_list("features", {16, 64, 256}, 1, 1 << 16);
  c.kernels = a.get_list("kernels", {"csr", "csr_feature_tiled", "coo", "tiles", "dense", "kk", "adaptive"});
  for (auto const &k : c.kernels)
    TESSEL_REQUIRE_USAGE(tessel::CommandLine::parse_value("--kernels", k, parse_spmm_algorithm) !=
                             SpmmAlgorithm::cusparse,
                         "--kernels cusparse: cuSPARSE is a device kernel (--backend cuda)");
  require_distinct("--kernels", c.kernels);
  require_distinct("--features", c.widths);
  c.reps = a.get_int("reps", 15, 1, 1000000);
  c.warmup = a.get_int("warmup", 3, 0, 1000000);
  c.options = spmm_options(a, SpmmAlgorithm::adaptive);
  c.json = a.get("json", "");
  a.finish();
  tessel::require_distinct_files({{"--data", c.data}}, {{"--json", c.json}});
  return bench_host(c);
}

int run_dist(tessel::CommandLine &a) {
  DistBenchConfig c;
  c.data = a.get("data", "");
  c.op_name = a.get("operator", "gcn");
  TESSEL_REQUIRE_USAGE(c.op_name == "gcn" || c.op_name == "raw", "--operator must be gcn or raw, got '", c.op_name,
                       "'");
  c.widths = a.get_int_list("features", {16, 64, 256}, 1, 1 << 16);
  require_distinct("--features", c.widths);
  c.reps = a.get_int("reps", 15, 1, 1000000);
  c.warmup = a.get_int("warmup", 3, 0, 1000000);
  c.options = spmm_options(a, a.get_parsed("kernel", "adaptive", parse_spmm_algorithm));
  c.partition = a.get_parsed("dist-partition", "auto", parse_dist_partition_method);
  c.bandwidth_mbps = a.get_double("bandwidth", 0.0, tessel::Range::closed(0, 1e9));
  c.latency_us = a.get_double("latency", 0.0, tessel::Range::closed(0, 1e7));
  c.json = a.get("json", "");
  a.finish();
  tessel::require_distinct_files({{"--data", c.data}}, {{"--json", c.json}});
  return bench_dist(c);
}

int run_cuda(tessel::CommandLine &a) {
  CudaBenchConfig c;
  c.data = a.get("data", "");
  c.op_name = a.get("operator", "gcn");
  c.json = a.get("json", "");
  c.widths = a.get_int_list("features", {16, 64, 256}, 1, 1 << 16);
  c.kernels = a.get_list("kernels", {});
  for (auto const &k : c.kernels)
    tessel::CommandLine::parse_value("--kernels", k, parse_spmm_algorithm);
  require_distinct("--features", c.widths);
  require_distinct("--kernels", c.kernels);
  c.reps = a.get_int("reps", 20, 1, 1000000);
  c.warmup = a.get_int("warmup", 3, 0, 1000000);
  c.options = spmm_options(a, SpmmAlgorithm::adaptive);
  c.allow_tf32 = get_on_off(a, "tf32", c.allow_tf32);
  c.dense_engine = a.get("dense-engine", "automatic");
  a.finish();
  tessel::require_distinct_files({{"--data", c.data}}, {{"--json", c.json}});
#ifdef TESSEL_ENABLE_CUDA
  return bench_cuda(c);
#else
  std::printf("tessel-gnn-bench --backend cuda: skipped: this tessel-gnn-bench was built without CUDA "
              "(Tessel_ENABLE_CUDA=OFF)\n");
  if (!c.json.empty())
    tessel::write_json(c.json, {{"command", "bench"}, {"device", "cuda"}, {"skipped", "built without CUDA"}});
  return 0;
#endif
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-gnn-bench", argc, argv, [](tessel::CommandLine &a) {
    if (a.flag({"help", 'h'})) {
      std::printf("%s", usage_text);
      return 0;
    }
    if (a.flag("version")) {
      std::printf("tessel-gnn-bench %s (%s)\n", tessel::version().c_str(), tessel::git_hash().c_str());
      return 0;
    }
    TESSEL_REQUIRE_USAGE(a.has("data"), "tessel-gnn-bench needs --data FILE");
    // --backend, not --device: Kokkos 3.4 takes --device (a device id) from the command line before we see it.
    std::string const backend = a.get("backend", "host");
    TESSEL_REQUIRE_USAGE(backend == "host" || backend == "cuda" || backend == "dist",
                         "--backend must be host, cuda or dist, got '", backend, "'");
    return backend == "cuda" ? run_cuda(a) : backend == "dist" ? run_dist(a) : run_host(a);
  });
}

// tessel-gnn: full-graph GNN training with AdaptGear-style adaptive aggregation, and the aggregation benchmark.
//
//   tessel-gnn train --data cora.h5 --model gcn --kernel adaptive --epochs 200 --json out.json
//   tessel-gnn bench --data cora.h5 --features 16,64,256 --json bench.json
//   tessel-gnn info --data cora.h5
//   tessel-gnn config | --version | --help
#include <tessel/core/CommandLine.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Tool.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Model.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "BenchCuda.hpp"
#include "Common.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace tessel::gnn;
using namespace tessel::gnn::app;
using Exec = Kokkos::DefaultHostExecutionSpace;
using Mem = Exec::memory_space;

constexpr std::int64_t max_part_size = std::int64_t{1} << 30;

char const *usage_text =
    "usage: tessel-gnn <command> [options]\n"
    "\n"
    "commands:\n"
    "  train   train a GCN or GIN on a tessel.gnn.graph HDF5 file\n"
    "  bench   time Y = A X for every aggregation kernel side by side\n"
    "  info    print the data set's statistics (--part-size N: compare the reorderings)\n"
    "  config  print the build configuration\n"
    "  --version, --help      --debug (or TESSEL_DEBUG=1): add source locations to error messages\n"
    "exit status: 0 success, 1 runtime error or wrong result, 2 invalid option or argument\n"
    "\n"
    "train options:\n"
    "  --data FILE            data set (datasets/gnn/README.md)\n"
    "  --model gcn|gin        GCN (2 layers, 16 hidden) or GIN (5 layers, 64 hidden) by default\n"
    "  --kernel K             adaptive (default), csr, csr_feature_tiled, coo, coo_atomic, tiles, dense, kk\n"
    "  --epochs N             default 200\n"
    "  --hidden H --layers L --lr X --weight-decay X --dropout X --patience N (0: no early stopping)\n"
    "  --seed S               parameters, dropout and random features\n"
    "  --random-features D    train on D uniform random features when the file has none (timing only)\n"
    "  --no-normalize         keep input features as stored (default: row-normalized)\n"
    "  --timing on|off        adaptive: time candidates (on) or use the cost model (off)\n"
    "  --partition auto|metis|lp|rcm|none --part-size N\n"
    "  --checkpoint FILE --checkpoint-every N (0, default: at the end only) --resume\n"
    "  --allow-divergence     train on when the loss becomes NaN or infinite (default: stop with an error)\n"
    "  --json FILE --quiet\n"
    "\n"
    "bench options:\n"
    "  --data FILE --features 16,64,256 --kernels csr,coo,...,adaptive (default: all but coo_atomic)\n"
    "  --reps N (timed rounds, all kernels in turn, median reported; default 15) --warmup N (default 3)\n"
    "  --operator gcn|raw     D^-1/2 (A+I) D^-1/2 (default) or A as stored\n"
    "  --timing on|off --partition P --part-size N --json FILE\n"
    "  --backend host|cuda    cuda: the device kernels (csr, csr_feature_tiled, coo_atomic, tiles, dense,\n"
    "                         cusparse, adaptive) on the first GPU, CUDA events, default --reps 20; skipped\n"
    "                         with a message (exit 0) where no GPU is visible\n"
    "  --tf32 on|off --dense-engine automatic|wmma|cublas   (--backend cuda)\n";

/// on/off options (--timing, --tf32), absent: \p fallback.
bool get_on_off(tessel::CommandLine &a, char const *name, bool fallback) {
  std::string const v = a.get(name, fallback ? "on" : "off");
  if (v == "on" || v == "1" || v == "true")
    return true;
  if (v == "off" || v == "0" || v == "false")
    return false;
  TESSEL_REQUIRE_USAGE(false, "option --", name, " expects on or off, got '", v, "'");
  return fallback;
}

SpmmOptions spmm_options(tessel::CommandLine &a, SpmmAlgorithm algorithm) {
  SpmmOptions o;
  o.algorithm = algorithm;
  o.timing = get_on_off(a, "timing", o.timing);
  if (a.has("partition"))
    o.partition = a.get_parsed("partition", "auto", parse_partition_method);
  TESSEL_REQUIRE_USAGE(o.partition != PartitionMethod::metis || metis_available(),
                       "option --partition metis: this tessel-gnn was built without METIS; use lp or rcm");
  o.part_size = a.get_int<std::int64_t>("part-size", o.part_size, 2, max_part_size);
  return o;
}

int cmd_info(tessel::CommandLine &a) {
  std::string const data_path = a.require("data");
  bool const compare_partitions = a.has("part-size");
  auto const part_size = a.get_int<std::int64_t>("part-size", 64, 2, max_part_size);
  a.finish();
  auto const d = load_dataset(data_path);
  auto const st = degree_stats(d.graph);
  std::printf("%s: %lld nodes, %lld entries, degree mean %.2f sd %.2f min %lld max %lld, %lld empty rows, %lld "
              "self-loops, %lld duplicates, %s\n",
              d.name.c_str(), static_cast<long long>(st.num_rows), static_cast<long long>(st.nnz), st.mean_degree,
              st.stddev_degree, static_cast<long long>(st.min_degree), static_cast<long long>(st.max_degree),
              static_cast<long long>(st.empty_rows), static_cast<long long>(st.self_loops),
              static_cast<long long>(st.duplicates), st.symmetric ? "symmetric" : "directed");
  std::printf("features %d%s, classes %d, train %lld, val %lld, test %lld\nsource: %s\n", d.num_features(),
              d.features_random ? " (random)" : "", d.num_classes,
              static_cast<long long>(std::count(d.train_mask.begin(), d.train_mask.end(), 1)),
              static_cast<long long>(std::count(d.val_mask.begin(), d.val_mask.end(), 1)),
              static_cast<long long>(std::count(d.test_mask.begin(), d.test_mask.end(), 1)), d.source.c_str());
  if (compare_partitions) {
    // How well each reordering makes communities contiguous, and what it costs.
    for (auto method :
         {PartitionMethod::metis, PartitionMethod::label_propagation, PartitionMethod::rcm, PartitionMethod::none}) {
      if (method == PartitionMethod::metis && !metis_available())
        continue;
      auto const p = partition(d.graph, part_size, method);
      std::printf("partition %-5s: %zu parts of <= %lld, %.1f%% of entries inside a part, %.3f s\n", name_of(method),
                  p.part_offsets.size() - 1, static_cast<long long>(2 * part_size), 100 * p.intra_fraction, p.seconds);
    }
  }
  return 0;
}

int cmd_train(tessel::CommandLine &a) {
  TESSEL_REQUIRE_USAGE(a.has("data"), "train needs --data FILE");
  std::string const data_path = a.get("data", "");
  TrainOptions o;
  o.model = a.get_parsed("model", "gcn", parse_model_kind);
  if (o.model == ModelKind::gin) {
    // GNNAdvisor's GIN: 5 layers, 64 hidden.
    o.layers = 5;
    o.hidden = 64;
  }
  o.spmm = spmm_options(a, a.get_parsed("kernel", "adaptive", parse_spmm_algorithm));
  o.epochs = a.get_int("epochs", 200, 1, 1000000);
  o.hidden = a.get_int("hidden", o.hidden, 1, 1 << 16);
  o.layers = a.get_int("layers", o.layers, 1, 64);
  o.learning_rate = a.get_double("lr", 0.01, tessel::Range::positive(10));
  o.weight_decay = a.get_double("weight-decay", 5e-4, tessel::Range::closed(0, 1));
  o.dropout = a.get_double("dropout", 0.5, tessel::Range{0, 1, false, true});
  o.patience = a.get_int("patience", 10, 0, 1000000);
  o.seed = a.get_int<std::uint64_t>("seed", 42, 0, UINT64_MAX);
  o.random_features = a.get_int("random-features", 0, 0, 1 << 16);
  o.normalize_features = !a.flag("no-normalize");
  o.checkpoint = a.get("checkpoint", "");
  o.checkpoint_every = a.get_int("checkpoint-every", 0, 0, 1000000);
  o.resume = a.flag("resume");
  o.stop_on_divergence = !a.flag("allow-divergence");
  TESSEL_REQUIRE_USAGE(!o.checkpoint.empty() || (!o.resume && !a.has("checkpoint-every")),
                       "--resume and --checkpoint-every need --checkpoint FILE");
  bool const quiet = a.flag("quiet");
  std::string const json_path = a.get("json", "");
  a.finish();
  tessel::require_writable(json_path);
  tessel::require_writable(o.checkpoint);
  tessel::require_same_file(tessel::Communicator::world(), "data set", data_path);
  auto const data = load_dataset(data_path);
  bool const random = data.features_random || data.num_features() == 0;
  std::printf("tessel-gnn train: %s on '%s' (%lld nodes, %lld entries), kernel %s, %d epochs\n", name_of(o.model),
              data.name.c_str(), static_cast<long long>(data.num_nodes()), static_cast<long long>(data.graph.nnz()),
              name_of(o.spmm.algorithm), o.epochs);
  if (random)
    std::printf("note: the features are random, so accuracies are meaningless (timing only)\n");
  o.on_epoch = [quiet](EpochRecord const &r) {
    if (!quiet)
      std::printf("epoch %4d  loss %.4f  train %.4f  val %.4f (loss %.4f)  test %.4f  %.2f ms (aggregation %.2f ms)\n",
                  r.epoch, r.train_loss, r.train_acc, r.val_acc, r.val_loss, r.test_acc, 1e3 * r.seconds,
                  1e3 * r.aggregation_seconds);
  };
  Exec space;
  auto const result = train(space, data, o);
  int const n = std::max(1, static_cast<int>(result.history.size()));
  double const ms = 1e3 * result.train_seconds / n, agg = 1e3 * result.aggregation_seconds / n;
  std::printf("finished after %d epochs%s: val accuracy %.4f, test accuracy %.4f\n", result.epochs_run,
              result.early_stopped ? " (early stop)" : "", result.val_acc, result.test_acc);
  double const train_s = std::max(1e-12, result.train_seconds);
  std::printf("time per epoch %.3f ms: aggregation %.3f ms, rest %.3f ms; setup %.3f s; selection overhead %.3f s "
              "(%.2f%% of training; %.3f s = %.2f%% net of the tuning applies' share of the aggregation)\n",
              ms, agg, ms - agg, result.setup_seconds, result.selection_seconds,
              100 * result.selection_seconds / train_s, result.selection_net_seconds,
              100 * result.selection_net_seconds / train_s);
  for (auto const &p : result.plans)
    print_plan(p);
  if (!json_path.empty()) {
    tessel::OutputFile file(json_path);
    auto &out = file.stream();
    out << "{\n  \"command\": \"train\", \"data\": " << json_str(data_path) << ", \"dataset\": " << json_str(data.name)
        << ", \"model\": " << json_str(name_of(o.model)) << ", \"kernel\": " << json_str(name_of(o.spmm.algorithm))
        << ", \"features_random\": " << (random ? "true" : "false") << ",\n  \"epochs_run\": " << result.epochs_run
        << ", \"early_stopped\": " << (result.early_stopped ? "true" : "false")
        << ", \"train_accuracy\": " << num(result.train_acc) << ", \"val_accuracy\": " << num(result.val_acc)
        << ", \"test_accuracy\": " << num(result.test_acc) << ",\n  \"ms_per_epoch\": " << num(ms)
        << ", \"aggregation_ms_per_epoch\": " << num(agg) << ", \"rest_ms_per_epoch\": " << num(ms - agg)
        << ", \"setup_seconds\": " << num(result.setup_seconds)
        << ", \"selection_seconds\": " << num(result.selection_seconds)
        << ", \"selection_net_seconds\": " << num(result.selection_net_seconds)
        << ", \"train_seconds\": " << num(result.train_seconds) << ",\n  \"plans\": [";
    for (std::size_t i = 0; i < result.plans.size(); ++i)
      out << (i ? ",\n    " : "\n    ") << result.plans[i].to_json();
    out << "],\n  \"backward_plans\": [";
    for (std::size_t i = 0; i < result.backward_plans.size(); ++i)
      out << (i ? ",\n    " : "\n    ") << result.backward_plans[i].to_json();
    out << "],\n  \"history\": [";
    for (std::size_t i = 0; i < result.history.size(); ++i) {
      auto const &r = result.history[i];
      out << (i ? ",\n    " : "\n    ") << "{\"epoch\": " << r.epoch << ", \"loss\": " << num(r.train_loss)
          << ", \"train_acc\": " << num(r.train_acc) << ", \"val_loss\": " << num(r.val_loss)
          << ", \"val_acc\": " << num(r.val_acc) << ", \"test_acc\": " << num(r.test_acc)
          << ", \"ms\": " << num(1e3 * r.seconds) << ", \"aggregation_ms\": " << num(1e3 * r.aggregation_seconds)
          << "}";
    }
    out << "],\n  \"build\": " << json_str(tessel::build_summary()) << "\n}\n";
    file.commit();
    std::printf("results written to %s\n", json_path.c_str());
  }
  return 0;
}

SpmmOptions fixed(SpmmAlgorithm algorithm) {
  SpmmOptions o;
  o.algorithm = algorithm;
  return o;
}

int cmd_bench_cuda(tessel::CommandLine &a) {
  CudaBenchConfig c;
  c.data = a.get("data", "");
  c.op_name = a.get("operator", "gcn");
  c.json = a.get("json", "");
  c.widths = a.get_int_list("features", {16, 64, 256}, 1, 1 << 16);
  c.kernels = a.get_list("kernels", {});
  for (auto const &k : c.kernels)
    tessel::CommandLine::parse_value("--kernels", k, parse_spmm_algorithm);
  c.reps = a.get_int("reps", 20, 1, 1000000);
  c.warmup = a.get_int("warmup", 3, 0, 1000000);
  c.options = spmm_options(a, SpmmAlgorithm::adaptive);
  c.allow_tf32 = get_on_off(a, "tf32", c.allow_tf32);
  c.dense_engine = a.get("dense-engine", "automatic");
  a.finish();
#ifdef TESSEL_ENABLE_CUDA
  return bench_cuda(c);
#else
  std::printf("tessel-gnn bench --backend cuda: skipped: this tessel-gnn was built without CUDA "
              "(Tessel_ENABLE_CUDA=OFF)\n");
  if (!c.json.empty())
    tessel::write_file(c.json, "{\"command\": \"bench\", \"device\": \"cuda\", \"skipped\": \"built without CUDA\"}\n");
  return 0;
#endif
}

int cmd_bench(tessel::CommandLine &a) {
  TESSEL_REQUIRE_USAGE(a.has("data"), "bench needs --data FILE");
  // --backend, not --device: Kokkos 3.4 takes --device (a device id) from the command line before we see it.
  std::string const backend = a.get("backend", "host");
  TESSEL_REQUIRE_USAGE(backend == "host" || backend == "cuda", "--backend must be host or cuda, got '", backend, "'");
  if (backend == "cuda")
    return cmd_bench_cuda(a);
  TESSEL_REQUIRE_USAGE(!a.has("tf32") && !a.has("dense-engine"), "--tf32 and --dense-engine need --backend cuda");
  std::string const data_path = a.get("data", "");
  std::string const op_name = a.get("operator", "gcn");
  TESSEL_REQUIRE_USAGE(op_name == "gcn" || op_name == "raw", "--operator must be gcn or raw, got '", op_name, "'");
  std::vector<int> const widths = a.get_int_list("features", {16, 64, 256}, 1, 1 << 16);
  std::vector<std::string> const kernels =
      a.get_list("kernels", {"csr", "csr_feature_tiled", "coo", "tiles", "dense", "kk", "adaptive"});
  for (auto const &k : kernels)
    tessel::CommandLine::parse_value("--kernels", k, parse_spmm_algorithm);
  int const reps = a.get_int("reps", 15, 1, 1000000), warmup = a.get_int("warmup", 3, 0, 1000000);
  SpmmOptions const base_options = spmm_options(a, SpmmAlgorithm::adaptive);
  std::string const json_path = a.get("json", "");
  a.finish();
  tessel::require_writable(json_path);
  tessel::require_same_file(tessel::Communicator::world(), "data set", data_path);
  auto const data = load_dataset(data_path);
  auto const op = op_name == "gcn" ? gcn_normalize(data.graph) : data.graph;
  Exec space;
  bool wrong = false;
  auto const n = static_cast<std::size_t>(op.num_rows());
  std::printf("tessel-gnn bench: '%s' (%zu nodes, %lld entries, operator %s), OPENBLAS_NUM_THREADS=%s, reps %d\n",
              data.name.c_str(), n, static_cast<long long>(op.nnz()), op_name.c_str(),
              env_or("OPENBLAS_NUM_THREADS", "unset").c_str(), reps);
  std::ostringstream js;
  js << "{\n  \"command\": \"bench\", \"data\": " << json_str(data_path) << ", \"dataset\": " << json_str(data.name)
     << ", \"nodes\": " << n << ", \"nnz\": " << op.nnz() << ", \"operator\": " << json_str(op_name)
     << ", \"reps\": " << reps << ", \"openblas_num_threads\": " << json_str(env_or("OPENBLAS_NUM_THREADS", "unset"))
     << ", \"build\": " << json_str(tessel::build_summary()) << ",\n  \"results\": [";
  for (std::size_t wi = 0; wi < widths.size(); ++wi) {
    int const f = widths[wi];
    Matrix<Mem> x("Tessel::gnn::bench::x", n, static_cast<std::size_t>(f));
    {
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> u(-1, 1);
      for (std::size_t k = 0; k < x.size(); ++k)
        x.data()[k] = u(rng);
    }
    Matrix<Mem> ref("Tessel::gnn::bench::ref", n, static_cast<std::size_t>(f));
    {
      SpmmHandle<std::int32_t, Exec> h(space, op, fixed(SpmmAlgorithm::csr));
      h.apply(space, x, ref);
    }
    double const flops = 2.0 * static_cast<double>(op.nnz()) * f;
    std::map<std::string, double> ms;
    std::map<std::string, std::string> notes;
    std::string plan_json = "null";
    std::printf("\nF = %d\n  %-22s %10s %9s %10s %12s  %s\n", f, "kernel", "median ms", "GFLOP/s", "setup s",
                "max rel err", "note");
    // Every kernel is prepared (built, tuned, warmed up) first; then the timed rounds run all kernels in turn, so
    // that drifting machine load affects them alike. Each timed sample is a batch of applies of >= 2 ms, after one
    // untimed apply of the same kernel. All kernels of one vertex order read the same X and write the same Y: with
    // a Y per kernel, the placement of the buffers alone made identical loops differ by up to 30% here (csr and
    // csr_feature_tiled at F <= 32), which would be credited to the kernels. Each result is checked right after
    // the kernel's own applies (before the rounds and after them).
    struct Entry {
      std::string label;
      std::unique_ptr<SpmmHandle<std::int32_t, Exec>> handle;
      Permutation const *perm = nullptr;
      Matrix<Mem> xin, y;
      double setup = 0, err = 0;
      int tuning = 0, inner = 1;
      std::vector<double> t;
    };
    std::vector<Entry> entries;
    Permutation adaptive_perm;
    bool have_perm = false;
    Matrix<Mem> y_shared("Tessel::gnn::bench::y", n, static_cast<std::size_t>(f)), x_perm, y_perm;
    // Relative error of the entry's Y (in its vertex order) against the reference; the largest seen counts.
    auto check = [&](Entry &e) {
      Matrix<Mem> yout = e.y;
      if (e.perm) {
        yout = Matrix<Mem>("Tessel::gnn::bench::yo", n, static_cast<std::size_t>(f));
        unpermute_rows(space, *e.perm, ConstMatrix<Mem>(e.y), yout);
      }
      double err = 0, scale = 0;
      for (std::size_t k = 0; k < ref.size(); ++k) {
        err = std::max(err, static_cast<double>(std::abs(yout.data()[k] - ref.data()[k])));
        scale = std::max(scale, static_cast<double>(std::abs(ref.data()[k])));
      }
      e.err = std::max(e.err, err / std::max(scale, 1e-30));
    };
    auto add = [&](std::string const &label, std::unique_ptr<SpmmHandle<std::int32_t, Exec>> h, Permutation const *perm,
                   double setup) {
      Entry e;
      e.label = label;
      e.handle = std::move(h);
      e.perm = perm;
      e.setup = setup;
      e.xin = x;
      e.y = y_shared;
      if (perm) {
        if (x_perm.extent(0) == 0) { // adaptive and csr(reordered) share the permutation and its buffers
          x_perm = Matrix<Mem>("Tessel::gnn::bench::xp", n, static_cast<std::size_t>(f));
          y_perm = Matrix<Mem>("Tessel::gnn::bench::yp", n, static_cast<std::size_t>(f));
          permute_rows(space, *perm, ConstMatrix<Mem>(x), x_perm);
        }
        e.xin = x_perm;
        e.y = y_perm;
      }
      while (!e.handle->tuned(f) && e.tuning < 1000) {
        e.handle->apply(space, e.xin, e.y);
        ++e.tuning;
      }
      for (int r = 0; r < warmup; ++r)
        e.handle->apply(space, e.xin, e.y);
      Kokkos::deep_copy(e.y, 1e30f); // the buffer is shared: nothing left over may pass for a result
      tessel::Timer<Exec> timer(space);
      e.handle->apply(space, e.xin, e.y);
      e.inner = static_cast<int>(std::min(1000.0, std::max(1.0, std::ceil(2e-3 / std::max(timer.seconds(), 1e-9)))));
      check(e);
      entries.push_back(std::move(e));
    };
    for (auto const &k : kernels) {
      auto const algorithm = parse_spmm_algorithm(k);
      try {
        auto const t0 = std::chrono::steady_clock::now();
        auto options = base_options;
        options.algorithm = algorithm;
        options.probe_features = {f}; // this handle serves width f only
        auto h = std::make_unique<SpmmHandle<std::int32_t, Exec>>(space, op, options);
        double const setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        // A handle that kept the original order reads X and writes Y in place, like the single kernels.
        bool const permuted = algorithm == SpmmAlgorithm::adaptive && !h->permutation().is_identity();
        if (algorithm == SpmmAlgorithm::adaptive) {
          adaptive_perm = h->permutation();
          have_perm = true;
        }
        add(k, std::move(h), permuted ? &adaptive_perm : nullptr, setup);
      } catch (tessel::Exception const &e) {
        std::printf("  %-22s skipped: %s\n", k.c_str(), e.what());
        notes[k] = std::string("skipped: ") + e.what();
      }
    }
    if (have_perm) // the reordering alone: plain CSR on the adaptive handle's vertex order
      add("csr(reordered)",
          std::make_unique<SpmmHandle<std::int32_t, Exec>>(space, permute(op, adaptive_perm),
                                                           fixed(SpmmAlgorithm::csr)),
          adaptive_perm.is_identity() ? nullptr : &adaptive_perm, 0.0);
    // The kernel order changes from round to round (a fixed-seed shuffle): the first kernel of a round runs
    // measurably slower here, and so does a kernel that follows the dense GEMM or Kokkos Kernels (their memory sweeps
    // and wide vector code), whatever its own cost; with a plain rotation every kernel kept the same predecessor,
    // which biased identical loops by up to 7%. Shuffling spreads both effects over all kernels.
    std::vector<std::size_t> order(entries.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::mt19937 shuffle_rng(12345);
    for (int r = 0; r < reps; ++r) {
      std::shuffle(order.begin(), order.end(), shuffle_rng);
      for (std::size_t i : order) {
        auto &e = entries[i];
        // One untimed apply first: the previous kernel (the dense one sweeps a huge matrix) left the caches cold,
        // and training repeats the same aggregation back to back.
        e.handle->apply(space, e.xin, e.y);
        tessel::Timer<Exec> timer(space);
        for (int k = 0; k < e.inner; ++k)
          e.handle->apply(space, e.xin, e.y);
        e.t.push_back(timer.seconds() / e.inner);
      }
    }
    for (auto &e : entries) {
      Kokkos::deep_copy(e.y, 1e30f); // nothing left over from the kernel before
      e.handle->apply(space, e.xin, e.y);
      check(e);
      double const rel = e.err;
      double const med = median(e.t);
      ms[e.label] = 1e3 * med;
      std::string note = e.tuning ? std::to_string(e.tuning) + " tuning applies" : "";
      if (rel > 1e-4) {
        note += " WRONG RESULT";
        wrong = true;
      }
      notes[e.label] = note;
      std::printf("  %-22s %10.4f %9.2f %10.3f %12.2e  %s\n", e.label.c_str(), 1e3 * med, flops / med * 1e-9, e.setup,
                  rel, note.c_str());
      if (e.label == "adaptive") {
        plan_json = e.handle->plan(f).to_json();
        print_plan(e.handle->plan(f));
      }
    }
    if (have_perm && !adaptive_perm.is_identity()) {
      // Moving X into the handle's order and Y back, once per apply (not needed in training).
      Matrix<Mem> xp("Tessel::gnn::bench::xp", n, static_cast<std::size_t>(f)),
          yo("Tessel::gnn::bench::yo", n, static_cast<std::size_t>(f));
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        tessel::Timer<Exec> timer(space);
        permute_rows(space, adaptive_perm, ConstMatrix<Mem>(x), xp);
        unpermute_rows(space, adaptive_perm, ConstMatrix<Mem>(xp), yo);
        t.push_back(timer.seconds());
      }
      ms["permute_in_out"] = 1e3 * median(t);
      std::printf("  %-22s %10.4f  (permuting X in and Y out; training keeps data in the handle's order)\n",
                  "permute in+out", 1e3 * median(t));
    }
    std::fflush(stdout);
    report_width(js, wi == 0, f, flops, ms, nullptr, notes, {}, plan_json);
  }
  js << "\n  ]\n}\n";
  if (!json_path.empty()) {
    tessel::write_file(json_path, js.str());
    std::printf("results written to %s\n", json_path.c_str());
  }
  if (wrong)
    std::fprintf(stderr, "tessel-gnn bench: some kernel returned a wrong result (see WRONG RESULT above)\n");
  return wrong ? tessel::exit_failure : tessel::exit_success;
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-gnn", argc, argv, [](tessel::CommandLine &args) {
    std::string const command = args.subcommand();
    if (command.empty() || command == "help" || args.flag({"help", 'h'})) {
      std::printf("%s", usage_text);
      TESSEL_REQUIRE_USAGE(!command.empty() || args.has("help") || args.has("h"), "no command given");
      return 0;
    }
    if (args.flag("version") || command == "version") {
      std::printf("tessel-gnn %s (%s)\n", TESSEL_VERSION_STRING, TESSEL_GIT_HASH);
      return 0;
    }
    if (command == "config") {
      args.finish();
      std::printf("%s\nmetis: %s\nOPENBLAS_NUM_THREADS=%s\n", tessel::build_summary().c_str(),
                  metis_available() ? "yes" : "no (label propagation fallback)",
                  env_or("OPENBLAS_NUM_THREADS", "unset").c_str());
      return 0;
    }
    if (command == "train")
      return cmd_train(args);
    if (command == "bench")
      return cmd_bench(args);
    if (command == "info")
      return cmd_info(args);
    TESSEL_REQUIRE_USAGE(false, "unknown command '", command, "' (expected train, bench, info or config; see --help)");
    return 0;
  });
}

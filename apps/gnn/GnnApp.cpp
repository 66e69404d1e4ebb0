// tessel-gnn: full-graph GNN training with AdaptGear-style adaptive aggregation (the aggregation benchmark is
// tessel-gnn-bench, benchmarks/gnn).
//
//   tessel-gnn train --data cora.h5 --model gcn --kernel adaptive --epochs 200 --json out.json
//   mpiexec -n 4 tessel-gnn train --data reddit.h5 --dist-partition metis   (distributed over the ranks)
//   tessel-gnn info --data cora.h5
//   tessel-gnn config | --version | --help
#include <tessel/core/Execution.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/PacedCommunicator.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Version.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Model.hpp>
#include <tessel/gnn/Spmm.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>
#include <tessel/tools/gnn/Options.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace tessel::gnn;
using Exec = Kokkos::DefaultHostExecutionSpace;

char const *usage_text =
    "usage: tessel-gnn <command> [options]\n"
    "\n"
    "commands:\n"
    "  train   train a GCN or GIN on a tessel.gnn.graph HDF5 file\n"
    "  info    print the data set's statistics (--part-size N: compare the reorderings)\n"
    "  config  print the build configuration\n"
    "  --version, --help      --debug (or TESSEL_DEBUG=1): add source locations to error messages\n"
    "The aggregation kernels side by side: tessel-gnn-bench (see its --help).\n"
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
    "  --feature-format auto|dense|sparse   how the first layer reads the input features: sparse = per\n"
    "                         nonzero, when it transforms first; auto (default): sparse when <= 10% are nonzero\n"
    "  --timing on|off        adaptive: time candidates (on) or use the cost model (off)\n"
    "  --partition auto|metis|lp|rcm|none --part-size N\n"
    "  --huge-pages on|off    node features and the handles' graph arrays on transparent huge pages (default on)\n"
    "  --checkpoint FILE --checkpoint-every N (0, default: at the end only) --resume\n"
    "  --dist-partition auto|metis|contiguous   under mpiexec -n W (W > 1): how the rows are spread over the\n"
    "                         ranks (auto: metis where built in); a checkpoint resumes at the same W\n"
    "  --dist-schedule overlapped|sequential   the halo exchange during the local block (default) or before it\n"
    "  --bandwidth MB/s --latency US   under mpiexec: emulate that link per rank (PacedCommunicator)\n"
    "  --allow-divergence     train on when the loss becomes NaN or infinite (default: stop with an error)\n"
    "  --json FILE --quiet\n";

std::string env_or(char const *name, char const *fallback) {
  char const *v = std::getenv(name);
  return v ? v : fallback;
}

int cmd_info(tessel::CommandLine &a) {
  std::string const data_path = a.require("data");
  bool const compare_partitions = a.has("part-size");
  auto const part_size = a.get_int<std::int64_t>("part-size", 64, 2, max_tool_part_size);
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

/// True when the model's first layer aggregates before it transforms (its input is narrower than its output).
bool first_layer_aggregates_first(Dataset const &data, TrainOptions const &o) {
  int const in = data.num_features() > 0 ? data.num_features() : o.random_features;
  int const out = o.layers > 1 ? o.hidden : data.num_classes;
  return in <= out;
}

TrainOptions parse_train_options(tessel::CommandLine &a) {
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
  o.features = a.get_parsed("feature-format", "auto", parse_feature_format);
  o.checkpoint = a.get("checkpoint", "");
  o.checkpoint_every = a.get_int("checkpoint-every", 0, 0, 1000000);
  o.resume = a.flag("resume");
  o.stop_on_divergence = !a.flag("allow-divergence");
  o.distribution.method = a.get_parsed("dist-partition", "auto", parse_dist_partition_method);
  o.schedule = a.get_parsed("dist-schedule", "overlapped", parse_dist_schedule);
  TESSEL_REQUIRE_USAGE(!o.checkpoint.empty() || (!o.resume && !a.has("checkpoint-every")),
                       "--resume and --checkpoint-every need --checkpoint FILE");
  return o;
}

void print_train_result(TrainResult const &result, HugePages huge_pages) {
  int const n = std::max(1, static_cast<int>(result.history.size()));
  double const ms = 1e3 * result.train_seconds / n, agg = 1e3 * result.aggregation_seconds / n;
  if (result.ranks > 1)
    std::printf("distributed over %d ranks (rank 0's times): per epoch %.3f ms, of which aggregation %.3f ms, exposed "
                "communication %.3f ms (halo waits %.3f ms), dense layers and the rest %.3f ms; halo rows received "
                "%.3f MB per epoch; partition %.3f s\n",
                result.ranks, ms, agg, 1e3 * result.communication_seconds / n, 1e3 * result.halo_wait_seconds / n,
                ms - agg - 1e3 * result.communication_seconds / n,
                static_cast<double>(result.halo_bytes_per_epoch) / 1e6, result.partition_seconds);
  std::printf("finished after %d epochs%s: val accuracy %.4f, test accuracy %.4f\n", result.epochs_run,
              result.early_stopped ? " (early stop)" : "", result.val_acc, result.test_acc);
  double const train_s = std::max(1e-12, result.train_seconds);
  std::printf("time per epoch %.3f ms: aggregation %.3f ms, rest %.3f ms (input features %s); setup %.3f s; "
              "selection overhead %.3f s (%.2f%% of training; %.3f s = %.2f%% net of the tuning applies' share of the "
              "aggregation)\n",
              ms, agg, ms - agg, result.sparse_features ? "sparse" : "dense", result.setup_seconds,
              result.selection_seconds, 100 * result.selection_seconds / train_s, result.selection_net_seconds,
              100 * result.selection_net_seconds / train_s);
  std::printf("%s", huge_pages_line(huge_pages).c_str());
  if (result.ranks > 1) // one plan per row tile of the local block and width: the JSON has them
    std::printf("rank 0's local block: %zu plans (row tiles x widths; --json lists them)\n", result.plans.size());
  else
    for (auto const &p : result.plans)
      std::printf("%s", p.summary().c_str());
}

tessel::Json plans_json(std::vector<SpmmPlan> const &plans) {
  auto out = tessel::Json::array();
  for (auto const &p : plans)
    out.push_back(p.json());
  return out;
}

void write_train_json(std::string const &path, std::string const &data_path, Dataset const &data, TrainOptions const &o,
                      bool random, TrainResult const &result) {
  int const n = std::max(1, static_cast<int>(result.history.size()));
  double const ms = 1e3 * result.train_seconds / n, agg = 1e3 * result.aggregation_seconds / n;
  auto history = tessel::Json::array();
  for (auto const &r : result.history)
    history.push_back({{"epoch", r.epoch},
                       {"loss", r.train_loss},
                       {"train_acc", r.train_acc},
                       {"val_loss", r.val_loss},
                       {"val_acc", r.val_acc},
                       {"test_acc", r.test_acc},
                       {"ms", 1e3 * r.seconds},
                       {"aggregation_ms", 1e3 * r.aggregation_seconds},
                       {"communication_ms", 1e3 * r.communication_seconds}});
  tessel::write_json(path, {{"command", "train"},
                            {"data", data_path},
                            {"dataset", data.name},
                            {"model", name_of(o.model)},
                            {"kernel", name_of(o.spmm.algorithm)},
                            {"features_random", random},
                            {"features_sparse", result.sparse_features},
                            {"epochs_run", result.epochs_run},
                            {"early_stopped", result.early_stopped},
                            {"train_accuracy", result.train_acc},
                            {"val_accuracy", result.val_acc},
                            {"test_accuracy", result.test_acc},
                            {"ranks", result.ranks},
                            {"partition", result.ranks > 1 ? name_of(o.distribution.method) : "none"},
                            {"halo_bytes_per_epoch", result.halo_bytes_per_epoch},
                            {"communication_ms_per_epoch", 1e3 * result.communication_seconds / n},
                            {"halo_wait_ms_per_epoch", 1e3 * result.halo_wait_seconds / n},
                            {"partition_seconds", result.partition_seconds},
                            {"schedule", result.ranks > 1 ? name_of(o.schedule) : "none"},
                            {"ms_per_epoch", ms},
                            {"aggregation_ms_per_epoch", agg},
                            {"rest_ms_per_epoch", ms - agg},
                            {"setup_seconds", result.setup_seconds},
                            {"selection_seconds", result.selection_seconds},
                            {"selection_net_seconds", result.selection_net_seconds},
                            {"train_seconds", result.train_seconds},
                            {"huge_pages", huge_pages_json(o.spmm.huge_pages)},
                            {"plans", plans_json(result.plans)},
                            {"backward_plans", plans_json(result.backward_plans)},
                            {"history", history},
                            {"build", tessel::build_summary()}});
  std::printf("results written to %s\n", path.c_str());
}

int cmd_train(tessel::CommandLine &a) {
  TESSEL_REQUIRE_USAGE(a.has("data"), "train needs --data FILE");
  std::string const data_path = a.get("data", "");
  // Options that act only in some runs: refused where they would be ignored without a word.
  bool const distribution_options = a.has("dist-partition") || a.has("dist-schedule");
  bool const random_features_given = a.has("random-features");
  TrainOptions o = parse_train_options(a);
  bool quiet = a.flag("quiet");
  double const bandwidth_mbps = a.get_double("bandwidth", 0.0, tessel::Range::closed(0, 1e9));
  double const latency_us = a.get_double("latency", 0.0, tessel::Range::closed(0, 1e7));
  std::string const json_path = a.get("json", "");
  a.finish();
  // The checkpoint is read back on --resume, and its plans are written beside it.
  std::string const plans = o.checkpoint.empty() ? "" : o.checkpoint + ".plan.h5";
  std::string const plans_t = o.checkpoint.empty() ? "" : o.checkpoint + ".plan_t.h5";
  tessel::require_distinct_files({{"--data", data_path}}, {{"--json", json_path},
                                                           {"--checkpoint", o.checkpoint},
                                                           {"--checkpoint's plans", plans},
                                                           {"--checkpoint's plans", plans_t}});
  tessel::require_writable(json_path);
  tessel::require_writable(o.checkpoint);
  tessel::require_same_file(tessel::Communicator::world(), "data set", data_path);
  auto const data = load_dataset(data_path);
  bool const random = data.features_random || data.num_features() == 0;
  auto const world = tessel::Communicator::world();
  bool const root = world.rank() == 0;
  bool const emulated = bandwidth_mbps > 0 || latency_us > 0;
  TESSEL_REQUIRE_USAGE(!emulated || world.size() > 1, "--bandwidth and --latency emulate the link between ranks: run "
                                                      "under mpiexec -n W with W > 1");
  TESSEL_REQUIRE_USAGE(!distribution_options || world.size() > 1, "--dist-partition and --dist-schedule spread the "
                                                                  "rows over ranks: run under mpiexec -n W with W > 1");
  TESSEL_REQUIRE_USAGE(!random_features_given || data.num_features() == 0, "--random-features: data set '", data.name,
                       "' in '", data_path, "' has ", data.num_features(),
                       " features of its own; random features replace none (drop the option)");
  auto const comm =
      emulated ? tessel::make_paced_communicator(world, tessel::LinkModel{bandwidth_mbps * 1e6, latency_us * 1e-6})
               : world;
  if (!root) // every rank trains; rank 0 reports
    quiet = true;
  if (root)
    std::printf("tessel-gnn train: %s on '%s' (%lld nodes, %lld entries), kernel %s, %d epochs\n", name_of(o.model),
                data.name.c_str(), static_cast<long long>(data.num_nodes()), static_cast<long long>(data.graph.nnz()),
                name_of(o.spmm.algorithm), o.epochs);
  if (root && world.size() > 1)
    std::printf("distributed over %d ranks (--dist-partition %s, --dist-schedule %s), link %s\n", world.size(),
                name_of(o.distribution.method), name_of(o.schedule), emulated ? "emulated" : "as is (MPI)");
  if (root && random)
    std::printf("note: the features are random, so accuracies are meaningless (timing only)\n");
  if (root && o.features == FeatureFormat::sparse && first_layer_aggregates_first(data, o))
    std::printf("note: --feature-format sparse: the first layer aggregates before it transforms (it widens), so it "
                "reads the features dense\n");
  if (root && o.resume && !tessel::input_exists(o.checkpoint))
    std::printf("note: --resume: no checkpoint at '%s' yet; training starts at epoch 1\n", o.checkpoint.c_str());
  o.on_epoch = [quiet](EpochRecord const &r) {
    if (!quiet)
      std::printf("epoch %4d  loss %.4f  train %.4f  val %.4f (loss %.4f)  test %.4f  %.2f ms (aggregation %.2f ms)\n",
                  r.epoch, r.train_loss, r.train_acc, r.val_acc, r.val_loss, r.test_acc, 1e3 * r.seconds,
                  1e3 * r.aggregation_seconds);
  };
  Exec space;
  auto const result = world.size() > 1 ? train(space, comm, data, o) : train(space, data, o);
  if (!root)
    return 0;
  print_train_result(result, o.spmm.huge_pages);
  if (!json_path.empty())
    write_train_json(json_path, data_path, data, o, random, result);
  return 0;
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
      std::printf("tessel-gnn %s (%s)\n", tessel::version().c_str(), tessel::git_hash().c_str());
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
    if (command == "info")
      return cmd_info(args);
    TESSEL_REQUIRE_USAGE(command != "bench", "the aggregation benchmark is the tool tessel-gnn-bench (see its --help)");
    TESSEL_REQUIRE_USAGE(false, "unknown command '", command, "' (expected train, info or config; see --help)");
    return 0;
  });
}

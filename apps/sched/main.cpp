// tessel-sched: trace-driven simulation of Crius and its baselines on heterogeneous GPU clusters, the estimator's
// error report against profile tables, and the Cells of a job.
//
//   tessel-sched simulate --trace F [--cluster F|crius] [--profile F|DIR] --policy crius|fcfs|gavel|sia|elasticflow|all
//                         [--rounds N] [--arena-compat] [--json F] ...
//   tessel-sched estimate --profile F|DIR [--cluster F|crius] [--json F]
//   tessel-sched cells --model M --batch B --gpu TYPE --gpus N [--cluster F|crius] [--profile F|DIR]

#include "Commands.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

void usage(std::FILE *out) {
  std::fprintf(out, "usage: tessel-sched <command> [options]\n"
                    "commands:\n"
                    "  simulate   run policies on a trace and compare them (tessel-sched simulate --help)\n"
                    "  estimate   error of the analytic estimator against profile tables\n"
                    "  cells      Cells and parallel plans of one job on one allocation\n");
}

} // namespace

int main(int argc, char **argv) {
  tessel::ScopeGuard guard(argc, argv);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string const command = argv[1];
  try {
    tessel::CommandLine args(argc - 2, argv + 2);
    if (command == "simulate")
      return tessel::sched::app::simulate_command(args);
    if (command == "estimate")
      return tessel::sched::app::estimate_command(args);
    if (command == "cells")
      return tessel::sched::app::cells_command(args);
    std::fprintf(stderr, "tessel-sched: unknown command '%s'\n", command.c_str());
    usage(stderr);
    return 2;
  } catch (tessel::Exception const &e) {
    std::fprintf(stderr, "tessel-sched %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (std::exception const &e) {
    std::fprintf(stderr, "tessel-sched %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}

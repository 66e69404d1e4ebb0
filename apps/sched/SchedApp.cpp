// tessel-sched: trace-driven simulation of Crius and its baselines on heterogeneous GPU clusters, the estimator's
// error report against profile tables, and the Cells of a job.
//
//   tessel-sched simulate --trace F [--cluster F|crius] [--profile F|DIR] --policy crius|fcfs|gavel|sia|elasticflow|all
//                         [--rounds N] [--arena-compat] [--json F] ...
//   tessel-sched estimate --profile F|DIR [--cluster F|crius] [--json F]
//   tessel-sched cells --model M --batch B --gpu TYPE --gpus N [--cluster F|crius] [--profile F|DIR]
//   tessel-sched serve --backend slurm --state DIR [--partition P] [--policy P] [--round S] [--time-scale F] ...
//   tessel-sched submit --state DIR JOBSPEC.json
//   tessel-sched status --state DIR [--json]

#include "Commands.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/tools/Tool.hpp>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

void usage(std::FILE *out) {
  std::fprintf(out, "usage: tessel-sched <command> [options]\n"
                    "commands:\n"
                    "  simulate   run policies on a trace and compare them (tessel-sched simulate --help)\n"
                    "  estimate   error of the analytic estimator against profile tables\n"
                    "  cells      Cells and parallel plans of one job on one allocation\n"
                    "  serve      schedule a live Slurm partition with a policy (tessel-sched serve --help)\n"
                    "  submit     hand a job to a running controller (durable: returns once journaled)\n"
                    "  status     queue, Cells, progress and predicted completion of a controller\n"
                    "options of every command: --debug (or TESSEL_DEBUG=1) adds source locations to errors\n"
                    "exit status: 0 success, 1 runtime error, 2 invalid option or argument\n");
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-sched", argc, argv, [](tessel::CommandLine &args) {
    std::string const command = args.subcommand();
    if (command.empty()) {
      bool const help = args.flag({"help", 'h'});
      usage(help ? stdout : stderr);
      TESSEL_REQUIRE_USAGE(help, "no command given");
      return 0;
    }
    if (command == "simulate")
      return tessel::sched::app::simulate_command(args);
    if (command == "estimate")
      return tessel::sched::app::estimate_command(args);
    if (command == "cells")
      return tessel::sched::app::cells_command(args);
    if (command == "serve")
      return tessel::sched::app::serve_command(args);
    if (command == "submit")
      return tessel::sched::app::submit_command(args);
    if (command == "status")
      return tessel::sched::app::status_command(args);
    TESSEL_REQUIRE_USAGE(false, "unknown command '", command,
                         "' (expected simulate, estimate, cells, serve, submit or status; see --help)");
    return 0;
  });
}

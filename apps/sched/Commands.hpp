#ifndef TESSEL_APPS_SCHED_COMMANDS_HPP
#define TESSEL_APPS_SCHED_COMMANDS_HPP

// Sub-commands of tessel-sched; each reads its options from a tessel::CommandLine and calls finish().

#include <tessel/sched/Throughput.hpp>
#include <tessel/tools/CommandLine.hpp>

#include <string>

namespace tessel::sched::app {

/// The value of --source (table, estimator, table+estimator); a usage error names the option.
ThroughputSource source_option(std::string const &name);

int simulate_command(tessel::CommandLine &args);
int estimate_command(tessel::CommandLine &args);
int cells_command(tessel::CommandLine &args);
int serve_command(tessel::CommandLine &args);
int submit_command(tessel::CommandLine &args);
int status_command(tessel::CommandLine &args);

} // namespace tessel::sched::app

#endif

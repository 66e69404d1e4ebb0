#ifndef TESSEL_APPS_SCHED_COMMANDS_HPP
#define TESSEL_APPS_SCHED_COMMANDS_HPP

// Sub-commands of tessel-sched; each reads its options from a tessel::CommandLine and calls finish().

#include <tessel/core/CommandLine.hpp>

namespace tessel::sched::app {

int simulate_command(tessel::CommandLine &args);
int estimate_command(tessel::CommandLine &args);
int cells_command(tessel::CommandLine &args);
int serve_command(tessel::CommandLine &args);
int submit_command(tessel::CommandLine &args);
int status_command(tessel::CommandLine &args);

} // namespace tessel::sched::app

#endif

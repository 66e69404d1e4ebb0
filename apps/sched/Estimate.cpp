#include "Commands.hpp"

#include <tessel/core/Error.hpp>

namespace tessel::sched::app {

int estimate_command(Args &) { TESSEL_THROW("estimate: not implemented yet"); }
int cells_command(Args &) { TESSEL_THROW("cells: not implemented yet"); }

} // namespace tessel::sched::app

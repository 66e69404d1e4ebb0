#include <tessel/sched/Package.hpp>

namespace tessel::sched {
char const *package_name() { return "sched"; }
} // namespace tessel::sched

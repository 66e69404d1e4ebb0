#include <tessel/moe/Package.hpp>

namespace tessel::moe {
char const *package_name() { return "moe"; }
} // namespace tessel::moe

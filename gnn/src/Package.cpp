#include <tessel/gnn/Package.hpp>

namespace tessel::gnn {
char const *package_name() { return "gnn"; }
} // namespace tessel::gnn

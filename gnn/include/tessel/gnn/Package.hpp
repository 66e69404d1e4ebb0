#ifndef TESSEL_GNN_PACKAGE_HPP
#define TESSEL_GNN_PACKAGE_HPP

/// \file Package.hpp
/// \brief Placeholder of the gnn package.

namespace tessel::gnn {
/// Name of the package.
char const *package_name();
} // namespace tessel::gnn

#endif

#ifndef TESSEL_MOE_PACKAGE_HPP
#define TESSEL_MOE_PACKAGE_HPP

/// \file Package.hpp
/// \brief Placeholder of the moe package.

namespace tessel::moe {
/// Name of the package.
char const *package_name();
} // namespace tessel::moe

#endif

#ifndef TESSEL_SCHED_PACKAGE_HPP
#define TESSEL_SCHED_PACKAGE_HPP

/// \file Package.hpp
/// \brief Placeholder of the sched package.

namespace tessel::sched {
/// Name of the package.
char const *package_name();
} // namespace tessel::sched

#endif

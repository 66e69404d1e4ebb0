#include <tessel/core/Version.hpp>

// TESSEL_IMPL_GIT_HASH is defined for this file alone, so that a new commit rebuilds this file and nothing else.
#ifndef TESSEL_IMPL_GIT_HASH
#define TESSEL_IMPL_GIT_HASH "unknown"
#endif

namespace tessel {

std::string version() { return TESSEL_VERSION_STRING; }

int version_number() { return TESSEL_VERSION; }

std::string git_hash() { return TESSEL_IMPL_GIT_HASH; }

} // namespace tessel

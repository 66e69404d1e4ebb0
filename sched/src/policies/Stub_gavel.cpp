#include "Policies.hpp"
#include <tessel/core/Error.hpp>
namespace tessel::sched::Impl {
std::unique_ptr<Policy> make_gavel(PolicyOptions const &) { TESSEL_THROW("gavel not implemented yet"); }
}

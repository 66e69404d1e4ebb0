#include "Policies.hpp"
#include <tessel/core/Error.hpp>
namespace tessel::sched::Impl {
std::unique_ptr<Policy> make_sia(PolicyOptions const &) { TESSEL_THROW("sia not implemented yet"); }
}

#include "Policies.hpp"
#include <tessel/core/Error.hpp>
namespace tessel::sched::Impl {
std::unique_ptr<Policy> make_crius(PolicyOptions const &) { TESSEL_THROW("crius not implemented yet"); }
}

#include "Policies.hpp"
#include <tessel/core/Error.hpp>
namespace tessel::sched::Impl {
std::unique_ptr<Policy> make_elasticflow(PolicyOptions const &) { TESSEL_THROW("elasticflow not implemented yet"); }
}

#ifndef TESSEL_SCHED_IMPL_POLICIES_HPP
#define TESSEL_SCHED_IMPL_POLICIES_HPP

// Constructors of the built-in policies (one translation unit each).

#include <tessel/sched/SchedContext.hpp>

#include <memory>

namespace tessel::sched::Impl {

std::unique_ptr<Policy> make_fcfs(PolicyOptions const &options);
std::unique_ptr<Policy> make_gavel(PolicyOptions const &options);
std::unique_ptr<Policy> make_elasticflow(PolicyOptions const &options);
std::unique_ptr<Policy> make_sia(PolicyOptions const &options);
std::unique_ptr<Policy> make_crius(PolicyOptions const &options);

} // namespace tessel::sched::Impl

#endif

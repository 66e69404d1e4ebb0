#ifndef TESSEL_CORE_IMPL_PROGRESS_HPP
#define TESSEL_CORE_IMPL_PROGRESS_HPP

#include <tessel/core/Error.hpp>

#include <chrono>
#include <thread>

namespace tessel::Impl {

using Clock = std::chrono::steady_clock;

inline Clock::time_point deadline_after(Timeout timeout) { return Clock::now() + timeout; }

/// Calls \p done() until it returns true or \p deadline passes; returns whether it completed.
/// Polls hot for a few microseconds (the latency of a tile-sized message), then yields the core between polls
/// (ranks may outnumber cores), and after a couple of milliseconds sleeps with growing pauses (capped at 1 ms)
/// so that a long wait leaves the cores to computation.
template <class Done> bool progress_until(Clock::time_point deadline, Done &&done) {
  auto const start = Clock::now();
  for (int spin = 0; spin < 64; ++spin)
    if (done())
      return true;
  while (Clock::now() - start < std::chrono::milliseconds(2)) {
    if (done())
      return true;
    if (Clock::now() >= deadline)
      return done();
    std::this_thread::yield();
  }
  auto pause = std::chrono::microseconds(20);
  while (true) {
    if (done())
      return true;
    if (Clock::now() >= deadline)
      return done();
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(1000))
      pause *= 2;
  }
}

} // namespace tessel::Impl

#endif

#ifndef TESSEL_CORE_IMPL_PROGRESS_HPP
#define TESSEL_CORE_IMPL_PROGRESS_HPP

#include <tessel/core/Backoff.hpp>
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Error.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace tessel::Impl {

using Clock = std::chrono::steady_clock;

inline Clock::time_point deadline_after(Timeout timeout) { return Clock::now() + timeout; }

/// Records that this process just completed an exchange with other ranks (a message or a collective).
void note_exchange();

/// Calls \p done() until it returns true or \p deadline passes; returns whether it completed.
/// \p not_before() says what the pending work is waiting for (see Request::Impl::not_before): a time (a paced
/// message whose emulated arrival is known) is slept through; not_before_moving means bytes are moving now,
/// which needs brisk polling (MPI progresses a transfer only inside its calls); not_before_unknown is unknown. Unknown
/// waits poll hot for a few microseconds (the latency of a tile-sized message), then yield the core between polls
/// (ranks may outnumber cores) for \p yield_phase, then sleep with the pauses of tessel::Backoff so that a long
/// wait leaves the cores to computation.
template <class Done, class NotBefore>
bool progress_until(Clock::time_point deadline, Done &&done, NotBefore &&not_before,
                    Clock::duration yield_phase = std::chrono::milliseconds(2)) {
  // Returns true when the hint decided how to wait (and waited).
  auto const wait_by_hint = [&] {
    auto const hint = not_before();
    if (hint == not_before_unknown)
      return false;
    if (hint != not_before_moving && hint > Clock::now() + Backoff::brisk)
      std::this_thread::sleep_until(std::min(hint, deadline));
    else
      std::this_thread::sleep_for(Backoff::brisk);
    return true;
  };
  auto const start = Clock::now();
  for (int spin = 0; spin < 64; ++spin) {
    if (done())
      return true;
    if (wait_by_hint())
      break;
  }
  while (Clock::now() - start < yield_phase) {
    if (done())
      return true;
    if (Clock::now() >= deadline)
      return done();
    if (!wait_by_hint())
      std::this_thread::yield();
  }
  Backoff backoff;
  while (true) {
    if (done())
      return true;
    if (Clock::now() >= deadline)
      return done();
    if (wait_by_hint())
      continue;
    backoff.sleep();
  }
}

template <class Done> bool progress_until(Clock::time_point deadline, Done &&done) {
  return progress_until(deadline, std::forward<Done>(done), [] { return not_before_unknown; });
}

} // namespace tessel::Impl

#endif

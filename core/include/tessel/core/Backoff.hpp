#ifndef TESSEL_CORE_BACKOFF_HPP
#define TESSEL_CORE_BACKOFF_HPP

/// \file Backoff.hpp
/// \brief The pauses of a thread that polls for communication: brisk while bytes are moving, growing while nothing
/// is known, so that a long wait leaves the cores to computation (ranks may outnumber cores).

#include <algorithm>
#include <chrono>
#include <thread>

namespace tessel {

/// \brief Exponential back-off between polls: the first pause, then each one twice the previous, at most a limit.
///
/// The default (20 us doubling to 1.28 ms) is the one every poller of the library uses for waits whose completion
/// time is unknown: 20 us is about the latency of a tile-sized message, 1.28 ms keeps a waiting thread's wake-ups
/// under 1% of a core.
class Backoff {
public:
  /// Unit of the pauses.
  using Duration = std::chrono::microseconds;

  /// Poll interval while bytes are moving: MPI progresses a transfer only inside its calls.
  static constexpr Duration brisk{20};
  /// The default first pause.
  static constexpr Duration default_first{20};
  /// The default longest pause.
  static constexpr Duration default_limit{1280};

  /// \p first: the first pause; \p limit: the longest one.
  explicit constexpr Backoff(Duration first = default_first, Duration limit = default_limit)
      : _first(first), _limit(limit), _pause(first) {}

  /// The pause to take now.
  constexpr Duration pause() const { return _pause; }
  /// Returns the pause to take now; the next one is twice as long (at most the limit).
  Duration next() {
    auto const now = _pause;
    _pause = std::min(2 * _pause, _limit);
    return now;
  }
  /// Starts again from the first pause (after progress).
  void reset() { _pause = _first; }
  /// Sleeps for next().
  void sleep() { std::this_thread::sleep_for(next()); }

private:
  Duration _first, _limit, _pause;
};

} // namespace tessel

#endif

#include "CommEngine.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <sstream>

namespace tessel::moe::Impl {

using Clock = std::chrono::steady_clock;

CommEngine::CommEngine(Communicator const &comm, int workers, int in_flight, std::string context)
    : _comm(comm), _in_flight(in_flight), _context(std::move(context)) {
  TESSEL_REQUIRE(workers >= 1, "need at least one communication worker, got ", workers);
  for (int i = 0; i < workers; ++i)
    _workers.push_back(std::make_unique<Worker>());
  for (auto &w : _workers) {
    Worker *worker = w.get();
    worker->thread = std::thread([this, worker] {
      try {
        run(*worker);
      } catch (...) {
        fail(std::current_exception());
      }
#ifdef RUSAGE_THREAD
      rusage usage{};
      if (getrusage(RUSAGE_THREAD, &usage) == 0) {
        double const cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                           1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
        double expected = _cpu_seconds.load();
        while (!_cpu_seconds.compare_exchange_weak(expected, expected + cpu)) {
        }
      }
#endif
    });
  }
}

CommEngine::~CommEngine() {
  if (!_joined)
    abort();
}

void CommEngine::post(Op op) {
  int const w = static_cast<int>(_workers.size());
  int const distance = (op.peer - _comm.rank() + _comm.size()) % _comm.size();
  auto &worker = *_workers[static_cast<std::size_t>(distance % w)];
  {
    std::lock_guard<std::mutex> lock(worker.mutex);
    TESSEL_REQUIRE(!worker.closed, _context, ": message posted after close()");
    worker.inbox.push_back(std::move(op));
  }
  worker.wake.notify_one();
}

void CommEngine::send(int peer, int tag, void const *buffer, std::size_t count, DataType type, std::string what,
                      Callback done, bool urgent) {
  post(Op{true, urgent, peer, tag, const_cast<void *>(buffer), count, type, std::move(what), std::move(done)});
}

void CommEngine::recv(int peer, int tag, void *buffer, std::size_t count, DataType type, std::string what,
                      Callback done) {
  post(Op{false, false, peer, tag, buffer, count, type, std::move(what), std::move(done)});
}

void CommEngine::close() {
  for (auto &w : _workers) {
    {
      std::lock_guard<std::mutex> lock(w->mutex);
      w->closed = true;
    }
    w->wake.notify_one();
  }
}

void CommEngine::join() {
  close();
  for (auto &w : _workers)
    if (w->thread.joinable())
      w->thread.join();
  _joined = true;
  rethrow_if_failed();
}

void CommEngine::abort() {
  _stop = true;
  close();
  for (auto &w : _workers)
    if (w->thread.joinable())
      w->thread.join();
  _joined = true;
}

void CommEngine::notify() {
  { std::lock_guard<std::mutex> lock(_notify_mutex); }
  _notify.notify_all();
}

void CommEngine::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(_error_mutex);
    if (!_error)
      _error = error;
  }
  _failed = true;
  _stop = true;
  for (auto &w : _workers)
    w->wake.notify_one();
  notify();
}

void CommEngine::rethrow_if_failed() {
  if (!_failed.load())
    return;
  std::lock_guard<std::mutex> lock(_error_mutex);
  if (_error)
    std::rethrow_exception(_error);
}

void CommEngine::run(Worker &worker) {
  struct Active {
    Request request;
    Op op;
  };
  std::vector<Active> active;
  std::deque<Op> pending_sends, urgent_sends;
  int sends_active = 0;
  auto last_progress = Clock::now();
  auto backoff = std::chrono::microseconds(20);
  Timeout const timeout = _comm.timeout();

  while (true) {
    if (_stop.load())
      return; // requests are cancelled by their destructors
    bool closed = false;
    {
      std::lock_guard<std::mutex> lock(worker.mutex);
      while (!worker.inbox.empty()) {
        Op op = std::move(worker.inbox.front());
        worker.inbox.pop_front();
        if (op.is_send) {
          (op.urgent ? urgent_sends : pending_sends).push_back(std::move(op));
        } else {
          auto request = _comm.irecv(op.buffer, op.count, op.type, op.peer, op.tag);
          active.push_back({std::move(request), std::move(op)});
        }
      }
      closed = worker.closed;
    }
    while ((!urgent_sends.empty() || !pending_sends.empty()) && (_in_flight == 0 || sends_active < _in_flight)) {
      auto &queue = urgent_sends.empty() ? pending_sends : urgent_sends;
      Op op = std::move(queue.front());
      queue.pop_front();
      auto request = _comm.isend(op.buffer, op.count, op.type, op.peer, op.tag);
      active.push_back({std::move(request), std::move(op)});
      ++sends_active;
    }

    // Test what may have completed; requests whose emulated completion is known and still ahead are skipped
    // without touching MPI.
    bool progressed = false, unknown = false, moving = false;
    auto earliest = Clock::time_point::max();
    for (std::size_t i = 0; i < active.size();) {
      // A known completion still ahead: skip without touching MPI.
      auto const hint = active[i].request.not_before();
      if (hint != not_before_moving && hint != not_before_unknown &&
          hint > Clock::now() + std::chrono::microseconds(20)) {
        earliest = std::min(earliest, hint);
        ++i;
        continue;
      }
      if (!active[i].request.test()) {
        auto const after = active[i].request.not_before();
        if (after == not_before_unknown)
          unknown = true;
        else if (after == not_before_moving)
          moving = true;
        else
          earliest = std::min(earliest, after);
        ++i;
        continue;
      }
      Op op = std::move(active[i].op);
      active[i] = std::move(active.back());
      active.pop_back();
      if (op.is_send)
        --sends_active;
      if (op.done)
        op.done();
      progressed = true;
    }
    if (closed && active.empty() && pending_sends.empty() && urgent_sends.empty()) {
      std::lock_guard<std::mutex> lock(worker.mutex);
      if (worker.inbox.empty())
        return;
      continue;
    }
    if (progressed) {
      last_progress = Clock::now();
      backoff = std::chrono::microseconds(20);
      continue;
    }
    if (!active.empty() && Clock::now() - last_progress > timeout) {
      std::ostringstream os;
      os << _context << ": no message completed within " << timeout.count() << " ms; still waiting for";
      int first_peer = -1;
      std::vector<int> peers;
      for (std::size_t i = 0; i < active.size(); ++i) {
        if (i < 4)
          os << (i ? "; " : ": ") << active[i].op.what << (active[i].op.is_send ? " to rank " : " from rank ")
             << active[i].op.peer << " [" << active[i].request.describe() << "]";
        if (std::find(peers.begin(), peers.end(), active[i].op.peer) == peers.end())
          peers.push_back(active[i].op.peer);
      }
      if (active.size() > 4)
        os << "; and " << active.size() - 4 << " more";
      std::sort(peers.begin(), peers.end());
      os << " (peers that never answered: ";
      for (std::size_t i = 0; i < peers.size(); ++i)
        os << (i ? ", " : "") << "rank " << peers[i];
      os << ")";
      first_peer = peers.empty() ? -1 : peers.front();
      throw TimeoutError(os.str(), first_peer);
    }
    // Sleep: briefly while bytes are moving (MPI progresses them only inside its calls); until the earliest
    // known completion when every pending request has one; otherwise with a growing backoff.
    auto wake_at = Clock::now() + backoff;
    if (moving) {
      wake_at = Clock::now() + std::chrono::microseconds(20);
    } else if (!unknown && earliest != Clock::time_point::max()) {
      wake_at = std::min(earliest, Clock::now() + std::chrono::milliseconds(20));
    } else {
      if (earliest != Clock::time_point::max())
        wake_at = std::min(wake_at, earliest);
      if (backoff < std::chrono::microseconds(1000))
        backoff *= 2;
    }
    std::unique_lock<std::mutex> lock(worker.mutex);
    worker.wake.wait_until(lock, wake_at,
                           [&] { return !worker.inbox.empty() || _stop.load() || (worker.closed && !closed); });
  }
}

} // namespace tessel::moe::Impl

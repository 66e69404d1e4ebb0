#include "impl/CommEngine.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace tessel::moe::Impl {

using Clock = std::chrono::steady_clock;

namespace {

// Asks the scheduler to run the calling thread promptly when it wakes: on Linux >= 6.12 (EEVDF) a fair thread
// may request a short time slice, which needs no privilege and gives it an earlier deadline. Communication
// threads wake for a few microseconds per landed message; without this, ranks that oversubscribe the cores
// keep them waiting behind compute threads for whole slices and messages are noticed late. Best effort:
// older kernels ignore the request or refuse it, and nothing else changes.
void request_short_slice() {
#if defined(__linux__) && defined(SYS_sched_setattr)
  struct SchedAttr {
    std::uint32_t size;
    std::uint32_t sched_policy;
    std::uint64_t sched_flags;
    std::int32_t sched_nice;
    std::uint32_t sched_priority;
    std::uint64_t sched_runtime, sched_deadline, sched_period;
  } attr{};
  attr.size = sizeof(attr);
  attr.sched_policy = 0;       // SCHED_NORMAL
  attr.sched_runtime = 100000; // 100 us, the shortest slice the kernel accepts
  (void)syscall(SYS_sched_setattr, 0, &attr, 0);
#endif
}

} // namespace

CommEngine::CommEngine(Communicator const &comm, int workers, int in_flight, std::string context)
    : _comm(comm), _in_flight(in_flight), _context(std::move(context)) {
  TESSEL_REQUIRE(workers >= 0, "the number of communication workers must not be negative, got ", workers);
  _threaded = workers > 0;
  for (int i = 0; i < std::max(workers, 1); ++i)
    _workers.push_back(std::make_unique<Worker>());
  for (auto &w : _workers) {
    if (!_threaded)
      break;
    Worker *worker = w.get();
    worker->thread = std::thread([this, worker] {
      request_short_slice();
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
                      Callback done, SendClass kind) {
  post(Op{true, kind, peer, tag, const_cast<void *>(buffer), count, type, std::move(what), std::move(done)});
}

void CommEngine::recv(int peer, int tag, void *buffer, std::size_t count, DataType type, std::string what,
                      Callback done) {
  post(Op{false, SendClass::bulk, peer, tag, buffer, count, type, std::move(what), std::move(done)});
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
  if (!_threaded && !_joined && !_failed.load()) {
    _joined = true; // even when drive() throws: nothing is left to stop
    drive([] { return false; });
  }
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

CommEngine::PassResult CommEngine::pass(Worker &worker) {
  // One thread in MPI at a time: the workers and the compute thread take turns (MPI_THREAD_SERIALIZED is
  // enough, and no MPI library's thread-multiple path is relied upon).
  std::lock_guard<std::mutex> mpi_lock(_mpi);
  PassResult r;
  {
    std::lock_guard<std::mutex> lock(worker.mutex);
    while (!worker.inbox.empty()) {
      Op op = std::move(worker.inbox.front());
      worker.inbox.pop_front();
      if (op.is_send) {
        if (op.kind == SendClass::control) {
          auto request = _comm.isend(op.buffer, op.count, op.type, op.peer, op.tag);
          worker.active.push_back({std::move(request), std::move(op)});
        } else {
          (op.kind == SendClass::urgent ? worker.urgent_sends : worker.pending_sends).push_back(std::move(op));
        }
      } else {
        auto request = _comm.irecv(op.buffer, op.count, op.type, op.peer, op.tag);
        worker.active.push_back({std::move(request), std::move(op)});
      }
    }
    r.closed = worker.closed;
  }
  while ((!worker.urgent_sends.empty() || !worker.pending_sends.empty()) &&
         (_in_flight == 0 || worker.sends_active < _in_flight)) {
    auto &queue = worker.urgent_sends.empty() ? worker.pending_sends : worker.urgent_sends;
    Op op = std::move(queue.front());
    queue.pop_front();
    auto request = _comm.isend(op.buffer, op.count, op.type, op.peer, op.tag);
    worker.active.push_back({std::move(request), std::move(op)});
    ++worker.sends_active;
  }
  auto &active = worker.active;
  for (std::size_t i = 0; i < active.size();) {
    // A known completion still ahead: skip without touching MPI.
    auto const hint = active[i].request.not_before();
    if (hint != not_before_moving && hint != not_before_unknown && hint > Clock::now() + Backoff::brisk) {
      r.earliest = std::min(r.earliest, hint);
      ++i;
      continue;
    }
    if (!active[i].request.test()) {
      auto const after = active[i].request.not_before();
      if (after == not_before_unknown)
        r.unknown = true;
      else if (after == not_before_moving)
        r.moving = true;
      else
        r.earliest = std::min(r.earliest, after);
      ++i;
      continue;
    }
    Op op = std::move(active[i].op);
    active[i] = std::move(active.back());
    active.pop_back();
    if (op.is_send && op.kind != SendClass::control)
      --worker.sends_active;
    if (op.done)
      op.done();
    r.progressed = true;
  }
  if (r.progressed)
    worker.last_progress = Clock::now();
  _moving.store(r.moving, std::memory_order_relaxed);
  if (r.closed && active.empty() && worker.pending_sends.empty() && worker.urgent_sends.empty()) {
    std::lock_guard<std::mutex> lock(worker.mutex);
    r.done = worker.inbox.empty();
  }
  return r;
}

void CommEngine::progress() {
  if (_failed.load() || _stop.load())
    return;
  for (auto &w : _workers) {
    std::unique_lock<std::mutex> lock(w->state, std::try_to_lock);
    if (lock.owns_lock())
      pass(*w);
  }
}

Clock::time_point CommEngine::wake_time(PassResult const &r, Backoff &backoff) {
  // Briefly while bytes are moving (MPI progresses them only inside its calls); until the earliest known
  // completion when every pending request has one; otherwise with a growing backoff.
  auto const now = Clock::now();
  if (r.moving)
    return now + Backoff::brisk;
  if (!r.unknown && r.earliest != Clock::time_point::max())
    return std::min(r.earliest, now + std::chrono::milliseconds(20));
  return std::min(now + backoff.next(), r.earliest);
}

void CommEngine::run(Worker &worker) {
  Backoff backoff;
  Timeout const timeout = _comm.timeout();
  while (true) {
    if (_stop.load())
      return; // requests are cancelled by their destructors
    PassResult r;
    {
      std::lock_guard<std::mutex> lock(worker.state);
      r = pass(worker);
      if (r.done)
        return;
      if (!r.progressed && !worker.active.empty() && Clock::now() - worker.last_progress > timeout)
        throw_timeout(worker, timeout);
    }
    if (r.progressed) {
      backoff.reset();
      continue;
    }
    auto const wake_at = wake_time(r, backoff);
    std::unique_lock<std::mutex> lock(worker.mutex);
    worker.wake.wait_until(lock, wake_at,
                           [&] { return !worker.inbox.empty() || _stop.load() || (worker.closed && !r.closed); });
  }
}

void CommEngine::drive(std::function<bool()> const &done) {
  auto &worker = *_workers.front();
  Backoff backoff;
  Timeout const timeout = _comm.timeout();
  while (!done()) {
    std::unique_lock<std::mutex> lock(worker.state);
    auto const r = pass(worker);
    if (r.done)
      return;
    if (r.progressed) {
      backoff.reset();
      continue;
    }
    if (!worker.active.empty() && Clock::now() - worker.last_progress > timeout)
      throw_timeout(worker, timeout);
    lock.unlock();
    if (done())
      return;
    std::this_thread::sleep_until(wake_time(r, backoff));
  }
}

void CommEngine::throw_timeout(Worker &worker, Timeout timeout) {
  auto const &active = worker.active;
  std::ostringstream os;
  os << _context << ": no message completed within " << timeout.count() << " ms; still waiting for";
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
  throw TimeoutError(os.str(), peers.empty() ? -1 : peers.front());
}

} // namespace tessel::moe::Impl

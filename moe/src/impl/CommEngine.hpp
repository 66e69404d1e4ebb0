#ifndef TESSEL_MOE_SRC_IMPL_COMMENGINE_HPP
#define TESSEL_MOE_SRC_IMPL_COMMENGINE_HPP

// Communication workers of the overlapped schedules (host path). The compute thread posts messages
// (send/recv) and waits on conditions; each worker owns the peers p with ring distance (p - rank) % workers ==
// its index, posts their messages in order (sends limited to `in_flight` outstanding), progresses them, and
// runs a completion callback per message. Workers sleep between polls: until the earliest known completion
// (link emulation) or with a short backoff, and wake at once when new messages are posted.
//
// With zero workers no thread is started: the compute thread progresses the messages itself, between tiles
// (progress()) and while it waits (wait(), join()). That is the split to pick when every core already runs a
// compute thread: a communication thread would only take time slices from one.

#include <tessel/core/Backoff.hpp>
#include <tessel/core/Communicator.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessel::moe::Impl {

class CommEngine {
public:
  using Callback = std::function<void()>;

  /// \p context names the operation in error messages ("tessel::moe::MoeLayer::forward (comet)").
  CommEngine(Communicator const &comm, int workers, int in_flight, std::string context);
  ~CommEngine();
  CommEngine(CommEngine const &) = delete;
  CommEngine &operator=(CommEngine const &) = delete;

  /// \brief How a send is queued. Bulk sends wait in a FIFO while `in_flight` sends are outstanding; urgent ones
  /// pass the bulk ones still waiting (the combine, which finishes the layer, overtakes dispatch tiles not yet
  /// posted); control messages (routing metadata) are posted at once and not counted: receivers post their
  /// receives only once they have them, so holding one back behind a send the receiver cannot match yet would
  /// deadlock.
  enum class SendClass { bulk, urgent, control };
  void send(int peer, int tag, void const *buffer, std::size_t count, DataType type, std::string what,
            Callback done = {}, SendClass kind = SendClass::bulk);
  void recv(int peer, int tag, void *buffer, std::size_t count, DataType type, std::string what, Callback done = {});
  /// No more messages will be posted; workers finish once all posted messages completed.
  void close();
  /// Waits for the workers to finish; rethrows the first worker error.
  void join();
  /// Asks the workers to stop at once (their pending requests are cancelled) and waits for them.
  void abort();

  /// Blocks the calling (compute) thread until \p ready() is true; throws the workers' error if one failed.
  /// \p ready is evaluated under the engine's notification lock, after every completion callback.
  /// While waiting it drives progress() itself, since a waking communication thread may be scheduled late.
  template <class Ready> void wait(Ready &&ready) {
    if (!threaded()) {
      drive([&] {
        std::lock_guard<std::mutex> lock(_notify_mutex);
        return ready() || _failed.load();
      });
      rethrow_if_failed();
      return;
    }
    // Notifications wake it early; the growing pauses only bound how late a missed one is noticed.
    Backoff backoff(std::chrono::microseconds(50), std::chrono::microseconds(1000));
    while (true) {
      {
        std::unique_lock<std::mutex> lock(_notify_mutex);
        if (ready() || _failed.load())
          break;
        _notify.wait_for(lock, backoff.next());
        if (ready() || _failed.load())
          break;
      }
      progress();
    }
    rethrow_if_failed();
  }
  /// \brief One pass over the workers' messages (post, test, callbacks) from the calling thread, for the workers
  /// that are not in a pass themselves. The compute thread calls it between tiles: when ranks oversubscribe the
  /// cores, a waking communication thread may wait for the scheduler's next tick (milliseconds) before it runs,
  /// while the compute thread is running anyway.
  void progress();
  /// Wakes wait(): callbacks call it after publishing their result.
  void notify();
  void rethrow_if_failed();
  std::mutex &notify_mutex() { return _notify_mutex; }
  /// CPU seconds the worker threads used (valid after join(); 0 without threads).
  double cpu_seconds() const { return _cpu_seconds.load(); }
  /// False with zero workers: the calling thread progresses the messages.
  bool threaded() const { return _threaded; }
  /// Whether the last pass found bytes still moving: MPI moves them only inside its calls, so without worker
  /// threads a long computation should stop to call progress() now and then.
  bool moving() const { return _moving.load(std::memory_order_relaxed); }

private:
  struct Op {
    bool is_send = false;
    SendClass kind = SendClass::bulk;
    int peer = 0, tag = 0;
    void *buffer = nullptr;
    std::size_t count = 0;
    DataType type = DataType::float32;
    std::string what;
    Callback done;
  };
  struct Active {
    Request request;
    Op op;
  };
  // What one pass learned about the pending messages, to decide how long to sleep.
  struct PassResult {
    bool progressed = false, unknown = false, moving = false, closed = false, done = false;
    std::chrono::steady_clock::time_point earliest = std::chrono::steady_clock::time_point::max();
  };
  struct Worker {
    std::mutex mutex; // inbox and closed
    std::condition_variable wake;
    std::deque<Op> inbox;
    bool closed = false;
    std::thread thread;
    std::mutex state; // the fields below: held during a pass, by the worker or by progress()
    std::vector<Active> active;
    std::deque<Op> pending_sends, urgent_sends;
    int sends_active = 0;
    std::chrono::steady_clock::time_point last_progress = std::chrono::steady_clock::now();
  };
  void post(Op op);
  void run(Worker &worker);
  // Without worker threads: passes over the messages from the calling thread until done() is true, sleeping
  // like a worker in between.
  void drive(std::function<bool()> const &done);
  PassResult pass(Worker &worker); // caller holds worker.state
  // When a worker that made no progress sleeps until (\p backoff grows while nothing is known).
  static std::chrono::steady_clock::time_point wake_time(PassResult const &r, Backoff &backoff);
  [[noreturn]] void throw_timeout(Worker &worker, Timeout timeout);
  void fail(std::exception_ptr error);

  Communicator _comm;
  int _in_flight;
  std::string _context;
  bool _threaded = true;
  std::vector<std::unique_ptr<Worker>> _workers;
  std::atomic<bool> _failed{false};
  std::atomic<bool> _moving{false};
  std::atomic<double> _cpu_seconds{0.0};
  std::atomic<bool> _stop{false};
  std::mutex _error_mutex;
  std::exception_ptr _error;
  std::mutex _mpi;
  std::mutex _notify_mutex;
  std::condition_variable _notify;
  bool _joined = false;
};

} // namespace tessel::moe::Impl

#endif

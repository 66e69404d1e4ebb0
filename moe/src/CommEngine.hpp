#ifndef TESSEL_MOE_SRC_COMMENGINE_HPP
#define TESSEL_MOE_SRC_COMMENGINE_HPP

// Dedicated communication threads of the overlapped schedules (host path). The compute thread posts messages
// (send/recv) and waits on conditions; each worker owns the peers p with ring distance (p - rank) % workers ==
// its index, posts their messages in order (sends limited to `in_flight` outstanding), progresses them, and
// runs a completion callback per message. Workers sleep between polls: until the earliest known completion
// (link emulation) or with a short backoff, and wake at once when new messages are posted.

#include <tessel/core/Communicator.hpp>

#include <atomic>
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

  /// Sends wait in a FIFO while `in_flight` are outstanding; \p urgent ones pass the non-urgent ones still waiting
  /// (the combine, which finishes the layer, overtakes dispatch tiles not yet posted).
  void send(int peer, int tag, void const *buffer, std::size_t count, DataType type, std::string what,
            Callback done = {}, bool urgent = false);
  void recv(int peer, int tag, void *buffer, std::size_t count, DataType type, std::string what, Callback done = {});
  /// No more messages will be posted; workers finish once all posted messages completed.
  void close();
  /// Waits for the workers to finish; rethrows the first worker error.
  void join();
  /// Asks the workers to stop at once (their pending requests are cancelled) and waits for them.
  void abort();

  /// Blocks the calling (compute) thread until \p ready() is true; throws the workers' error if one failed.
  /// \p ready is evaluated under the engine's notification lock, after every completion callback.
  template <class Ready> void wait(Ready &&ready) {
    std::unique_lock<std::mutex> lock(_notify_mutex);
    while (!ready()) {
      if (_failed.load())
        break;
      _notify.wait_for(lock, std::chrono::milliseconds(50));
    }
    lock.unlock();
    rethrow_if_failed();
  }
  /// Wakes wait(): callbacks call it after publishing their result.
  void notify();
  void rethrow_if_failed();
  std::mutex &notify_mutex() { return _notify_mutex; }
  /// CPU seconds the workers used (valid after join()).
  double cpu_seconds() const { return _cpu_seconds.load(); }

private:
  struct Op {
    bool is_send = false;
    bool urgent = false;
    int peer = 0, tag = 0;
    void *buffer = nullptr;
    std::size_t count = 0;
    DataType type = DataType::float32;
    std::string what;
    Callback done;
  };
  struct Worker {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Op> inbox;
    bool closed = false;
    std::thread thread;
  };
  void post(Op op);
  void run(Worker &worker);
  void fail(std::exception_ptr error);

  Communicator _comm;
  int _in_flight;
  std::string _context;
  std::vector<std::unique_ptr<Worker>> _workers;
  std::atomic<bool> _failed{false};
  std::atomic<double> _cpu_seconds{0.0};
  std::atomic<bool> _stop{false};
  std::mutex _error_mutex;
  std::exception_ptr _error;
  std::mutex _notify_mutex;
  std::condition_variable _notify;
  bool _joined = false;
};

} // namespace tessel::moe::Impl

#endif

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Numbers.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include "impl/Progress.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#ifdef TESSEL_ENABLE_MPI
#include <tessel/core/MpiCommunicator.hpp>
#endif

namespace tessel {

char const *name_of(ReduceOp op) {
  static char const *names[] = {"sum", "prod", "min", "max"};
  auto const i = static_cast<int>(op);
  return i >= 0 && i < 4 ? names[i] : "invalid";
}

char const *name_of(CommBackend backend) {
  static char const *names[] = {"self", "mpi", "nccl"};
  auto const i = static_cast<int>(backend);
  return i >= 0 && i < 3 ? names[i] : "invalid";
}

Timeout default_timeout() {
  if (char const *env = std::getenv("TESSEL_COMM_TIMEOUT")) {
    // A value that means nothing is an error, not the default: a job meant to fail fast must not wait 120 s.
    // Decimal seconds (tessel::parse_decimal): "0x10" is not 16 s.
    auto const seconds = parse_decimal(env);
    TESSEL_REQUIRE_USAGE(seconds && *seconds >= 0.001 && *seconds <= 1e6,
                         "environment variable TESSEL_COMM_TIMEOUT expects decimal seconds in [0.001, 1e6], got '", env,
                         "'");
    return Timeout(static_cast<std::int64_t>(std::ceil(*seconds * 1000.0)));
  }
  return std::chrono::seconds(120);
}

namespace Impl {

namespace {
std::atomic<Clock::rep> last_exchange_ticks{Clock::now().time_since_epoch().count()};
} // namespace

void note_exchange() { last_exchange_ticks.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }

} // namespace Impl

std::chrono::steady_clock::time_point last_exchange() {
  return Impl::Clock::time_point(Impl::Clock::duration(Impl::last_exchange_ticks.load(std::memory_order_relaxed)));
}

// ---------------------------------------------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------------------------------------------

Request::~Request() {
  if (_impl && !_impl->test())
    _impl->cancel();
}

bool Request::test() {
  if (!_impl)
    return true;
  if (_impl->test()) {
    _impl.reset();
    tessel::Impl::note_exchange();
    return true;
  }
  return false;
}

void Request::wait() { wait(_default_timeout); }

void Request::wait(Timeout timeout) {
  if (!_impl)
    return;
  if (!tessel::Impl::progress_until(
          tessel::Impl::deadline_after(timeout), [this] { return _impl->test(); },
          [this] { return _impl->not_before(); })) {
    std::string const what = _impl->describe();
    int const peer = _impl->peer();
    _impl->cancel();
    _impl.reset();
    throw TimeoutError(tessel::Impl::concat("communication: ", what, " did not complete within ", timeout.count(),
                                            " ms: rank ", peer, " never answered"),
                       peer);
  }
  _impl.reset();
  tessel::Impl::note_exchange();
}

namespace {

/// When waiting for \p requests is worth polling again: bytes moving anywhere need brisk polling, an unknown one
/// needs the backoff; otherwise the earliest known completion (any one completes the wait) or, with \p all, the
/// latest (all must complete).
std::chrono::steady_clock::time_point combined_not_before(std::vector<Request> const &requests, bool all) {
  bool known = false, unknown = false;
  auto when = all ? std::chrono::steady_clock::time_point::min() : std::chrono::steady_clock::time_point::max();
  for (auto const &r : requests) {
    if (r.is_null())
      continue;
    auto const t = r.not_before();
    if (t == not_before_moving)
      return not_before_moving;
    if (t == not_before_unknown) {
      unknown = true;
    } else {
      known = true;
      when = all ? std::max(when, t) : std::min(when, t);
    }
  }
  return unknown || !known ? not_before_unknown : when;
}

/// Appends " [what]" for each pending request of \p requests to \p os; returns the first pending peer (-1: none).
int describe_pending(std::vector<Request> const &requests, std::ostream &os) {
  int first_peer = -1;
  for (auto const &r : requests)
    if (!r.is_null()) {
      os << " [" << r.describe() << "]";
      first_peer = first_peer < 0 ? r.peer() : first_peer;
    }
  return first_peer;
}

} // namespace

std::size_t Request::wait_any(std::vector<Request> &requests, Timeout timeout) {
  bool any = std::any_of(requests.begin(), requests.end(), [](Request const &r) { return !r.is_null(); });
  TESSEL_REQUIRE(any, "all ", requests.size(), " requests are null");
  std::size_t found = requests.size();
  auto const done = [&] {
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (!requests[i].is_null() && requests[i]._impl->test()) {
        requests[i]._impl.reset();
        found = i;
        return true;
      }
    return false;
  };
  auto const not_before = [&] { return combined_not_before(requests, false); };
  if (!tessel::Impl::progress_until(tessel::Impl::deadline_after(timeout), done, not_before)) {
    std::ostringstream os;
    os << "communication: none of the pending requests completed within " << timeout.count() << " ms; pending:";
    int const first_peer = describe_pending(requests, os);
    throw TimeoutError(os.str(), first_peer);
  }
  tessel::Impl::note_exchange();
  return found;
}

void Request::wait_all(std::vector<Request> &requests, Timeout timeout) {
  auto const done = [&] {
    bool all = true;
    for (auto &r : requests)
      all = r.test() && all;
    return all;
  };
  auto const not_before = [&] { return combined_not_before(requests, true); };
  if (!tessel::Impl::progress_until(tessel::Impl::deadline_after(timeout), done, not_before)) {
    std::ostringstream os;
    os << "communication: requests still pending after " << timeout.count() << " ms:";
    int const first_peer = describe_pending(requests, os);
    for (auto &r : requests)
      if (!r.is_null()) {
        r._impl->cancel();
        r._impl.reset();
      }
    throw TimeoutError(os.str(), first_peer);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Self backend: one rank; point-to-point messages to itself are matched by tag in posting order.
// ---------------------------------------------------------------------------------------------------------------

namespace {

class SelfBackend final : public CommunicatorBackend {
  struct Message {
    void const *send = nullptr;
    void *recv = nullptr;
    std::size_t bytes = 0;
    int tag = 0;
    std::shared_ptr<bool> complete = std::make_shared<bool>(false);
  };
  struct Mailbox {
    std::mutex mutex;
    std::deque<Message> sends, recvs;
  };

  class SelfRequest final : public Request::Impl {
  public:
    SelfRequest(std::shared_ptr<bool> complete, std::string what)
        : _complete(std::move(complete)), _what(std::move(what)) {}
    bool test() override { return *_complete; }
    std::string describe() const override { return _what; }
    int peer() const override { return 0; }

  private:
    std::shared_ptr<bool> _complete;
    std::string _what;
  };

public:
  CommBackend kind() const override { return CommBackend::self; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier(Timeout) override {}
  void broadcast(void *, std::size_t, DataType, int root, Timeout, void *) override {
    TESSEL_REQUIRE(root == 0, "root ", root, " is not a rank of a one-rank communicator");
  }
  void allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp, Timeout, void *) override {
    copy(send, recv, count * size_of(type));
  }
  void allgather(void const *send, void *recv, std::size_t count, DataType type, Timeout, void *) override {
    copy(send, recv, count * size_of(type));
  }
  void reduce_scatter(void const *send, void *recv, std::size_t count, DataType type, ReduceOp, Timeout,
                      void *) override {
    copy(send, recv, count * size_of(type));
  }
  void alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs, void *recv,
                 std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type, Timeout,
                 void *) override {
    TESSEL_REQUIRE(send_counts[0] == recv_counts[0], "sends ", send_counts[0], " elements to itself but expects ",
                   recv_counts[0]);
    auto const elem = size_of(type);
    copy(static_cast<char const *>(send) + send_displs[0] * elem, static_cast<char *>(recv) + recv_displs[0] * elem,
         send_counts[0] * elem);
  }
  Request isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                void *) override {
    return post_request(buffer, nullptr, peer, count * size_of(type), tag, timeout, /*is_send=*/true);
  }
  Request irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout, void *) override {
    return post_request(nullptr, buffer, peer, count * size_of(type), tag, timeout, /*is_send=*/false);
  }
  void host_allgather(void const *send, void *recv, std::size_t bytes, Timeout) override { copy(send, recv, bytes); }
  std::shared_ptr<CommunicatorBackend> split(int, int) override { return std::make_shared<SelfBackend>(); }

private:
  static void copy(void const *from, void *to, std::size_t bytes) {
    if (from != to && bytes > 0)
      std::memmove(to, from, bytes);
  }
  static void check_peer(int peer) {
    TESSEL_REQUIRE(peer == 0, "peer ", peer, " is not a rank of a one-rank communicator");
  }

  // Posts a message to (\p send) or from (\p recv) rank 0 and returns the request that completes when the matching
  // message is posted.
  Request post_request(void const *send, void *recv, int peer, std::size_t bytes, int tag, Timeout timeout,
                       bool is_send) {
    check_peer(peer);
    Message m;
    m.send = send;
    m.recv = recv;
    m.bytes = bytes;
    m.tag = tag;
    auto what = is_send ? Impl::concat("isend of ", bytes, " bytes to rank 0 (tag ", tag, ")")
                        : Impl::concat("irecv of ", bytes, " bytes from rank 0 (tag ", tag, ")");
    auto complete = m.complete;
    post(std::move(m), is_send);
    return Request(std::make_unique<SelfRequest>(std::move(complete), std::move(what)), timeout);
  }
  void post(Message m, bool is_send) {
    std::lock_guard<std::mutex> lock(_mailbox->mutex);
    auto &others = is_send ? _mailbox->recvs : _mailbox->sends;
    auto it = std::find_if(others.begin(), others.end(), [&](Message const &o) { return o.tag == m.tag; });
    if (it == others.end()) {
      (is_send ? _mailbox->sends : _mailbox->recvs).push_back(std::move(m));
      return;
    }
    Message const &send = is_send ? m : *it;
    Message const &recv = is_send ? *it : m;
    TESSEL_REQUIRE(send.bytes <= recv.bytes, "message of ", send.bytes, " bytes (tag ", m.tag,
                   ") does not fit the receive buffer of ", recv.bytes, " bytes");
    copy(send.send, recv.recv, send.bytes);
    *send.complete = true;
    *recv.complete = true;
    others.erase(it);
  }

  std::shared_ptr<Mailbox> _mailbox = std::make_shared<Mailbox>();
};

} // namespace

std::shared_ptr<CommunicatorBackend> make_self_backend() { return std::make_shared<SelfBackend>(); }

// ---------------------------------------------------------------------------------------------------------------
// Communicator handle: argument validation across ranks, then the backend.
// ---------------------------------------------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<CommunicatorBackend> backend)
    : _backend(std::move(backend)), _timeout(default_timeout()) {
  TESSEL_REQUIRE(_backend != nullptr, "null backend");
}

Communicator Communicator::self() { return Communicator(make_self_backend()); }

Communicator Communicator::world() {
#ifdef TESSEL_ENABLE_MPI
  if (ScopeGuard::mpi_active())
    return Communicator(Impl::mpi_world_backend());
#endif
  return self();
}

namespace {
// One rank's view of a collective's arguments, gathered from all ranks when validation is on.
struct CallSignature {
  std::int64_t operation, count, type, root, op;
};
} // namespace

void Communicator::validate_uniform(char const *operation, std::int64_t count, DataType type, int root, int op) const {
  if (!_validate || size() == 1)
    return;
  std::int64_t const op_code = static_cast<std::int64_t>(std::hash<std::string>{}(operation)&0x7fffffff);
  CallSignature const mine{op_code, count, static_cast<std::int64_t>(type), root, op};
  std::vector<CallSignature> all(static_cast<std::size_t>(size()));
  _backend->host_allgather(&mine, all.data(), sizeof(CallSignature), _timeout);
  auto const describe = [&](int r) {
    auto const &s = all[static_cast<std::size_t>(r)];
    std::ostringstream os;
    os << "rank " << r;
    if (s.operation != op_code) {
      os << " called a different collective";
      return os.str();
    }
    os << " has count=" << s.count << " type=" << name_of(static_cast<DataType>(s.type));
    if (root >= 0)
      os << " root=" << s.root;
    if (op >= 0)
      os << " op=" << name_of(static_cast<ReduceOp>(s.op));
    return os.str();
  };
  for (int r = 1; r < size(); ++r) {
    auto const &a = all[0];
    auto const &b = all[static_cast<std::size_t>(r)];
    if (a.operation != b.operation || a.count != b.count || a.type != b.type || a.root != b.root || a.op != b.op)
      TESSEL_THROW(operation, ": arguments differ across ranks: ", describe(0), ", ", describe(r));
  }
}

void Communicator::broadcast(void *buffer, std::size_t count, DataType type, int root, void *stream) const {
  TESSEL_REQUIRE(root >= 0 && root < size(), "broadcast root ", root, " is not a rank of a ", size(),
                 "-rank communicator");
  validate_uniform("broadcast", static_cast<std::int64_t>(count), type, root, -1);
  _backend->broadcast(buffer, count, type, root, _timeout, stream);
}

void Communicator::allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op,
                             void *stream) const {
  validate_uniform("allreduce", static_cast<std::int64_t>(count), type, -1, static_cast<int>(op));
  _backend->allreduce(send, recv, count, type, op, _timeout, stream);
}

void Communicator::allgather(void const *send, void *recv, std::size_t count_per_rank, DataType type,
                             void *stream) const {
  validate_uniform("allgather", static_cast<std::int64_t>(count_per_rank), type, -1, -1);
  _backend->allgather(send, recv, count_per_rank, type, _timeout, stream);
}

void Communicator::reduce_scatter(void const *send, void *recv, std::size_t recv_count, DataType type, ReduceOp op,
                                  void *stream) const {
  validate_uniform("reduce_scatter", static_cast<std::int64_t>(recv_count), type, -1, static_cast<int>(op));
  _backend->reduce_scatter(send, recv, recv_count, type, op, _timeout, stream);
}

void Communicator::alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs,
                             void *recv, std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type,
                             void *stream) const {
  auto const n = static_cast<std::size_t>(size());
  TESSEL_REQUIRE(send_counts && send_displs && recv_counts && recv_displs, "null count or displacement array");
  if (_validate && n > 1) {
    // Row r of the gathered table: rank r's type, then its send counts, then its receive counts.
    std::vector<std::int64_t> mine(1 + 2 * n);
    mine[0] = static_cast<std::int64_t>(type);
    for (std::size_t p = 0; p < n; ++p) {
      mine[1 + p] = static_cast<std::int64_t>(send_counts[p]);
      mine[1 + n + p] = static_cast<std::int64_t>(recv_counts[p]);
    }
    std::vector<std::int64_t> all(mine.size() * n);
    _backend->host_allgather(mine.data(), all.data(), mine.size() * sizeof(std::int64_t), _timeout);
    auto const row = [&](std::size_t r) { return all.data() + r * mine.size(); };
    for (std::size_t s = 0; s < n; ++s) {
      TESSEL_REQUIRE(row(s)[0] == row(0)[0], "alltoallv: rank 0 uses type ", name_of(static_cast<DataType>(row(0)[0])),
                     " but rank ", s, " uses ", name_of(static_cast<DataType>(row(s)[0])));
      for (std::size_t d = 0; d < n; ++d)
        TESSEL_REQUIRE(row(s)[1 + d] == row(d)[1 + n + s], "alltoallv: counts do not add up: rank ", s, " sends ",
                       row(s)[1 + d], " elements to rank ", d, ", which expects ", row(d)[1 + n + s], " from rank ", s);
    }
  }
  _backend->alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type, _timeout, stream);
}

Request Communicator::isend(void const *buffer, std::size_t count, DataType type, int peer, int tag,
                            void *stream) const {
  TESSEL_REQUIRE(peer >= 0 && peer < size(), "isend to rank ", peer, " of a ", size(), "-rank communicator");
  TESSEL_REQUIRE(tag >= 0, "negative tag ", tag);
  return _backend->isend(buffer, count, type, peer, tag, _timeout, stream);
}

Request Communicator::irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, void *stream) const {
  TESSEL_REQUIRE(peer >= 0 && peer < size(), "irecv from rank ", peer, " of a ", size(), "-rank communicator");
  TESSEL_REQUIRE(tag >= 0, "negative tag ", tag);
  return _backend->irecv(buffer, count, type, peer, tag, _timeout, stream);
}

void Communicator::host_allgather(void const *send, void *recv, std::size_t bytes) const {
  _backend->host_allgather(send, recv, bytes, _timeout);
}

Communicator Communicator::split(int color, int key) const {
  Communicator result(_backend->split(color, key));
  result._timeout = _timeout;
  result._validate = _validate;
  return result;
}

void Communicator::raise_if_any(std::string const &problem, std::string const &elsewhere) const {
  int const failed = size() == 1 ? !problem.empty() : allreduce_value(problem.empty() ? 0 : 1, ReduceOp::max);
  TESSEL_REQUIRE(!failed, problem.empty() ? elsewhere : problem);
}

void Communicator::require_same(std::string const &what, std::uint64_t value) const {
  if (size() == 1)
    return;
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size()));
  _backend->host_allgather(&value, all.data(), sizeof(value), _timeout);
  std::ostringstream differ;
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      differ << (differ.tellp() > 0 ? ", " : "") << r;
  TESSEL_REQUIRE(differ.tellp() == 0, what, " differs across ranks: ranks ", differ.str(), " disagree with rank 0");
}

} // namespace tessel

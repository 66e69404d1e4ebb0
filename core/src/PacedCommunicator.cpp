#include <tessel/core/PacedCommunicator.hpp>

#include "impl/Progress.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace tessel {

using Clock = std::chrono::steady_clock;

namespace {

// Longest time the emulated link may take for one message or collective: past every communication timeout (at
// most 1e6 s), and far inside what a steady_clock duration holds (about 292 years of nanoseconds).
constexpr double max_link_seconds = 1e8;

// Durations saturate at max_link_seconds: a double past the clock's range would wrap when converted.
Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(std::max(seconds, 0.0), max_link_seconds)));
}

// The time a transfer of \p bytes takes on \p link, checked: one the emulated link cannot represent is an error
// naming the link and the size, not a wrapped duration that switches the pacing off.
double checked_link_seconds(LinkModel const &link, double bytes, int latencies, char const *what) {
  double const seconds = (link.bandwidth > 0.0 ? bytes / link.bandwidth : 0.0) + latencies * link.latency;
  TESSEL_REQUIRE(std::isfinite(seconds) && seconds <= max_link_seconds, "the emulated link (", link.bandwidth,
                 " bytes/s, ", link.latency, " s latency) would take ", seconds, " s for ", what, " of ", bytes,
                 " bytes, more than the ", max_link_seconds, " s it can represent");
  return seconds;
}

// What travels next to each paced message: when it started to leave the sender, and its size.
struct Header {
  std::int64_t start_ns = 0;
  std::uint64_t bytes = 0;
};

std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
Clock::time_point from_ns(std::int64_t ns) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

int ceil_log2(int n) {
  int steps = 0;
  while ((1 << steps) < n)
    ++steps;
  return steps;
}

} // namespace

namespace {
class PacedRecv;
}

struct PacedBackend::State {
  mutable std::mutex mutex;
  LinkModel link;
  Clock::time_point egress_free{};
  Clock::time_point ingress_free{};
  PacedStats stats;
  // Receives whose header has not arrived yet. Arrived headers are taken in batches sorted by the time their
  // message started to leave its sender, so that the ingress serves messages in (nearly) the order they left,
  // whatever order this rank happens to test them in.
  std::vector<PacedRecv *> unlearned;
  Clock::time_point last_drain{};
  void drain_locked(Clock::time_point now);
};

namespace {

class PacedSend final : public Request::Impl {
public:
  PacedSend(int peer, std::size_t bytes) : _peer(peer), _bytes(bytes) {}
  Header header;
  Request payload, header_request;
  Clock::time_point done_at{};

  bool test() override {
    bool const sent = payload.test() & header_request.test();
    return sent && Clock::now() >= done_at;
  }
  Clock::time_point not_before() const override {
    // Until the real bytes have moved, MPI needs brisk polling to progress them.
    return payload.is_null() && header_request.is_null() ? done_at : not_before_moving;
  }
  void cancel() override {
    payload = Request();
    header_request = Request();
  }
  std::string describe() const override {
    auto const due = std::chrono::duration<double, std::milli>(done_at - Clock::now()).count();
    return tessel::Impl::concat(
        "paced isend of ", _bytes, " bytes to rank ", _peer, " (", payload.is_null() ? "" : "not ",
        "delivered to MPI, ", header_request.is_null() ? "" : "header pending, ",
        due > 0 ? tessel::Impl::concat("leaves the link in ", due, " ms") : "left the link", ")");
  }
  int peer() const override { return _peer; }

private:
  int _peer;
  std::size_t _bytes;
};

class PacedRecv final : public Request::Impl {
public:
  PacedRecv(std::shared_ptr<PacedBackend::State> state, int peer, std::string what)
      : _state(std::move(state)), _peer(peer), _what(std::move(what)) {}
  ~PacedRecv() override { forget(); }
  Header header;
  Request payload, header_request;
  Clock::time_point arrival{};
  std::atomic<bool> arrival_known{false};

  void enlist() {
    std::lock_guard<std::mutex> lock(_state->mutex);
    _state->unlearned.push_back(this);
  }
  bool test() override {
    payload.test();
    auto const now = Clock::now();
    if (!arrival_known.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(_state->mutex);
      // One drain tests every pending header: a poll over many receives costs one pass, not one per receive.
      if (!arrival_known.load(std::memory_order_relaxed) && now - _state->last_drain >= std::chrono::microseconds(20))
        _state->drain_locked(now);
    }
    return payload.is_null() && arrival_known.load(std::memory_order_acquire) && Clock::now() >= arrival;
  }
  Clock::time_point not_before() const override {
    if (!arrival_known.load(std::memory_order_acquire))
      return not_before_unknown; // the sender may not have posted yet
    return payload.is_null() ? arrival : not_before_moving;
  }
  void cancel() override {
    forget();
    payload = Request();
    header_request = Request();
  }
  std::string describe() const override {
    if (!arrival_known.load())
      return _what + (header_request.is_null() ? " (header received but not processed)" : " (header not received)");
    auto const due = std::chrono::duration<double, std::milli>(arrival - Clock::now()).count();
    return tessel::Impl::concat(_what, " (", payload.is_null() ? "bytes received" : "bytes pending", ", ",
                                due > 0 ? tessel::Impl::concat("arrives in ", due, " ms") : "arrival time passed", ")");
  }
  int peer() const override { return _peer; }

private:
  void forget() {
    std::lock_guard<std::mutex> lock(_state->mutex);
    auto &list = _state->unlearned;
    list.erase(std::remove(list.begin(), list.end(), this), list.end());
  }

  std::shared_ptr<PacedBackend::State> _state;
  int _peer;
  std::string _what;
};

} // namespace

void PacedBackend::State::drain_locked(Clock::time_point now) {
  std::vector<PacedRecv *> batch;
  for (auto it = unlearned.begin(); it != unlearned.end();) {
    if ((*it)->header_request.test()) {
      batch.push_back(*it);
      it = unlearned.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(batch.begin(), batch.end(),
            [](PacedRecv const *a, PacedRecv const *b) { return a->header.start_ns < b->header.start_ns; });
  for (auto *r : batch) {
    auto const transfer = to_duration(link.transfer_seconds(r->header.bytes));
    auto const start = std::max(from_ns(r->header.start_ns), ingress_free);
    ingress_free = start + transfer;
    r->arrival = start + transfer + to_duration(link.latency);
    r->arrival_known.store(true, std::memory_order_release);
    stats.messages_received += 1;
    stats.bytes_received += r->header.bytes;
  }
  last_drain = now;
}

PacedBackend::PacedBackend(std::shared_ptr<CommunicatorBackend> inner, LinkModel link)
    : PacedBackend(std::move(inner), std::make_shared<State>()) {
  set_link(link);
}

PacedBackend::PacedBackend(std::shared_ptr<CommunicatorBackend> inner, std::shared_ptr<State> state)
    : _inner(std::move(inner)), _state(std::move(state)) {
  TESSEL_REQUIRE(_inner != nullptr, "null backend to pace");
  TESSEL_REQUIRE(!_inner->device_memory(), "link emulation paces host backends; ", name_of(_inner->kind()),
                 " is stream-ordered");
  int const me = _inner->rank();
  _headers = _inner->split(0, me);
  _coll_data = _inner->split(0, me);
  _coll_headers = _inner->split(0, me);
}

PacedBackend::~PacedBackend() = default;

LinkModel PacedBackend::link() const {
  std::lock_guard<std::mutex> lock(_state->mutex);
  return _state->link;
}

void PacedBackend::set_link(LinkModel link) {
  TESSEL_REQUIRE(std::isfinite(link.bandwidth) && link.bandwidth >= 0.0, "link bandwidth must be >= 0 bytes/s, got ",
                 link.bandwidth);
  TESSEL_REQUIRE(std::isfinite(link.latency) && link.latency >= 0.0 && link.latency <= max_link_seconds,
                 "link latency must be in [0, ", max_link_seconds, "] s, got ", link.latency);
  std::lock_guard<std::mutex> lock(_state->mutex);
  _state->link = link;
}

PacedStats PacedBackend::stats() const {
  std::lock_guard<std::mutex> lock(_state->mutex);
  return _state->stats;
}

Request PacedBackend::post_send(CommunicatorBackend &data, CommunicatorBackend &headers, void const *buffer,
                                std::size_t count, DataType type, int peer, int tag, Timeout timeout) {
  if (peer == data.rank())
    return data.isend(buffer, count, type, peer, tag, timeout, nullptr);
  std::size_t const bytes = count * size_of(type);
  auto impl = std::make_unique<PacedSend>(peer, bytes);
  {
    std::lock_guard<std::mutex> lock(_state->mutex);
    auto const start = std::max(Clock::now(), _state->egress_free);
    _state->egress_free =
        start + to_duration(checked_link_seconds(_state->link, static_cast<double>(bytes), 1, "a message"));
    impl->done_at = _state->egress_free;
    impl->header.start_ns = to_ns(start);
    impl->header.bytes = bytes;
    _state->stats.messages_sent += 1;
    _state->stats.bytes_sent += bytes;
  }
  impl->payload = data.isend(buffer, count, type, peer, tag, timeout, nullptr);
  impl->header_request = headers.isend(&impl->header, sizeof(Header), DataType::uint8, peer, tag, timeout, nullptr);
  return Request(std::move(impl), timeout);
}

Request PacedBackend::post_recv(CommunicatorBackend &data, CommunicatorBackend &headers, void *buffer,
                                std::size_t count, DataType type, int peer, int tag, Timeout timeout) {
  if (peer == data.rank())
    return data.irecv(buffer, count, type, peer, tag, timeout, nullptr);
  auto impl =
      std::make_unique<PacedRecv>(_state, peer,
                                  Impl::concat("paced irecv of up to ", count * size_of(type), " bytes on rank ",
                                               data.rank(), " from rank ", peer, " (tag ", tag, ")"));
  impl->payload = data.irecv(buffer, count, type, peer, tag, timeout, nullptr);
  impl->header_request = headers.irecv(&impl->header, sizeof(Header), DataType::uint8, peer, tag, timeout, nullptr);
  impl->enlist();
  return Request(std::move(impl), timeout);
}

Request PacedBackend::isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                            void *) {
  return post_send(*_inner, *_headers, buffer, count, type, peer, tag, timeout);
}

Request PacedBackend::irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                            void *) {
  return post_recv(*_inner, *_headers, buffer, count, type, peer, tag, timeout);
}

void PacedBackend::pace_collective(char const *operation, double port_bytes, int steps, Timeout timeout) {
  if (size() == 1)
    return;
  Clock::time_point end;
  auto const now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(_state->mutex);
    auto const start = std::max({now, _state->egress_free, _state->ingress_free});
    end = start + to_duration(checked_link_seconds(_state->link, port_bytes, steps, operation));
    _state->egress_free = _state->ingress_free = end;
  }
  // The emulated link honours the timeout as a real one would: a transfer it cannot finish in time fails then.
  if (end - now > timeout) {
    std::this_thread::sleep_until(now + timeout);
    throw TimeoutError(tessel::Impl::concat("communication: ", operation, " on rank ", rank(), " of ", size(),
                                            " (emulated link) needs ", std::chrono::duration<double>(end - now).count(),
                                            " s for ", port_bytes, " bytes, more than the timeout of ", timeout.count(),
                                            " ms"),
                       -1);
  }
  std::this_thread::sleep_until(end);
}

void PacedBackend::barrier(Timeout timeout) {
  _inner->barrier(timeout);
  pace_collective("barrier", 0.0, 2 * ceil_log2(size()), timeout);
}

void PacedBackend::broadcast(void *buffer, std::size_t count, DataType type, int root, Timeout timeout, void *stream) {
  _inner->broadcast(buffer, count, type, root, timeout, stream);
  pace_collective("broadcast", static_cast<double>(count * size_of(type)), ceil_log2(size()), timeout);
}

void PacedBackend::allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op,
                             Timeout timeout, void *stream) {
  _inner->allreduce(send, recv, count, type, op, timeout, stream);
  double const n = size();
  pace_collective("allreduce", 2.0 * (n - 1.0) / n * static_cast<double>(count * size_of(type)), 2 * (size() - 1),
                  timeout);
}

void PacedBackend::allgather(void const *send, void *recv, std::size_t count_per_rank, DataType type, Timeout timeout,
                             void *stream) {
  _inner->allgather(send, recv, count_per_rank, type, timeout, stream);
  pace_collective("allgather", static_cast<double>(size() - 1) * static_cast<double>(count_per_rank * size_of(type)),
                  size() - 1, timeout);
}

void PacedBackend::reduce_scatter(void const *send, void *recv, std::size_t recv_count, DataType type, ReduceOp op,
                                  Timeout timeout, void *stream) {
  _inner->reduce_scatter(send, recv, recv_count, type, op, timeout, stream);
  pace_collective("reduce_scatter", static_cast<double>(size() - 1) * static_cast<double>(recv_count * size_of(type)),
                  size() - 1, timeout);
}

void PacedBackend::host_allgather(void const *send, void *recv, std::size_t bytes, Timeout timeout) {
  _inner->host_allgather(send, recv, bytes, timeout);
  pace_collective("host_allgather", static_cast<double>(size() - 1) * static_cast<double>(bytes), size() - 1, timeout);
}

void PacedBackend::alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs,
                             void *recv, std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type,
                             Timeout timeout, void *) {
  int const n = size(), me = rank();
  auto const elem = size_of(type);
  std::vector<Request> requests;
  requests.reserve(2 * static_cast<std::size_t>(n));
  for (int k = 1; k < n; ++k) {
    auto const p = static_cast<std::size_t>((me - k + n) % n);
    if (recv_counts[p] > 0)
      requests.push_back(post_recv(*_coll_data, *_coll_headers, static_cast<char *>(recv) + recv_displs[p] * elem,
                                   recv_counts[p], type, static_cast<int>(p), 0, timeout));
  }
  // Ring order: every rank starts with a different destination, so no receiver is hit by all at once.
  for (int k = 1; k < n; ++k) {
    auto const p = static_cast<std::size_t>((me + k) % n);
    if (send_counts[p] > 0)
      requests.push_back(post_send(*_coll_data, *_coll_headers, static_cast<char const *>(send) + send_displs[p] * elem,
                                   send_counts[p], type, static_cast<int>(p), 0, timeout));
  }
  auto const self = static_cast<std::size_t>(me);
  TESSEL_REQUIRE(send_counts[self] == recv_counts[self], "alltoallv: rank ", me, " sends ", send_counts[self],
                 " elements to itself but expects ", recv_counts[self]);
  if (send_counts[self] > 0)
    std::memmove(static_cast<char *>(recv) + recv_displs[self] * elem,
                 static_cast<char const *>(send) + send_displs[self] * elem, send_counts[self] * elem);
  Request::wait_all(requests, timeout);
}

std::shared_ptr<CommunicatorBackend> PacedBackend::split(int color, int key) {
  return std::shared_ptr<PacedBackend>(new PacedBackend(_inner->split(color, key), _state));
}

Communicator make_paced_communicator(Communicator const &comm, LinkModel link) {
  Communicator paced(std::make_shared<PacedBackend>(comm.backend_ptr(), link));
  paced.set_timeout(comm.timeout());
  paced.set_validation(comm.validation());
  return paced;
}

PacedBackend *paced_backend_of(Communicator const &comm) { return dynamic_cast<PacedBackend *>(&comm.backend()); }

} // namespace tessel

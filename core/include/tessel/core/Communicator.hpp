#ifndef TESSEL_CORE_COMMUNICATOR_HPP
#define TESSEL_CORE_COMMUNICATOR_HPP

/// \file Communicator.hpp
/// \brief Communicators over one rank (Self), MPI (host memory) and NCCL (device memory, stream-ordered), with
/// collectives and tile-granular non-blocking point-to-point messages whose every wait has a timeout.
/// This header does not include Kokkos (CUDA translation units use it); the Kokkos-style overloads on Views
/// are in Collectives.hpp.

#include <tessel/core/DataType.hpp>
#include <tessel/core/Error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessel {

/// \brief Reduction operators of allreduce and reduce_scatter.
enum class ReduceOp : int { sum, prod, min, max };
/// \brief "sum", "prod", "min" or "max".
char const *name_of(ReduceOp op);

/// \brief Which engine moves the bytes.
enum class CommBackend : int { self, mpi, nccl };
/// \brief "self", "mpi" or "nccl".
char const *name_of(CommBackend backend);

/// \brief Value of Request::Impl::not_before() when the completion time is unknown (waits poll with a growing
/// backoff). It lies before any real time point.
inline constexpr std::chrono::steady_clock::time_point not_before_unknown{};
/// \brief Value of Request::Impl::not_before() while bytes are moving (waits poll briskly). It lies before any real
/// time point.
inline constexpr std::chrono::steady_clock::time_point not_before_moving{std::chrono::steady_clock::duration(1)};

/// \brief Handle of one non-blocking message. Move-only; a default-constructed (null) request is complete.
class Request {
public:
  /// \brief What a backend implements for its requests.
  class Impl {
  public:
    virtual ~Impl() = default;
    /// Progresses and returns true once the operation is complete (then it is never called again).
    virtual bool test() = 0;
    /// Best-effort cancellation after a timeout, so that the buffer may be reused.
    virtual void cancel() {}
    /// "isend of 4096 bytes to rank 3 (tag 7)" for error messages.
    virtual std::string describe() const = 0;
    /// The peer rank of the message.
    virtual int peer() const = 0;
    /// What completion waits for, when the backend knows it (link emulation does): a time is the earliest at
    /// which test() can succeed (waits sleep until then); not_before_moving means bytes are moving now (waits
    /// poll briskly, since MPI progresses a transfer only inside its calls); the default, not_before_unknown,
    /// means unknown (waits poll with a growing backoff).
    virtual std::chrono::steady_clock::time_point not_before() const { return not_before_unknown; }
  };

  /// A null request (complete).
  Request() = default;
  /// The request of a backend's operation; wait() without an argument waits at most \p default_timeout.
  Request(std::unique_ptr<Impl> impl, Timeout default_timeout)
      : _impl(std::move(impl)), _default_timeout(default_timeout) {}
  /// \name Move-only; the moved-from request is null
  //@{
  /// Move-only; the moved-from request is null.
  Request(Request &&) noexcept = default;
  Request &operator=(Request &&) noexcept = default;
  //@}
  /// Cancels an operation still pending (best effort), so that no message lands in a buffer after its owner left.
  ~Request();

  /// True when the request is null or its operation has completed (progresses the operation).
  bool test();
  /// Waits until completion; throws TimeoutError naming the peer after the communicator's timeout.
  void wait();
  /// Waits until completion; throws TimeoutError naming the peer after \p timeout.
  void wait(Timeout timeout);
  /// True for a null (complete) request.
  bool is_null() const noexcept { return _impl == nullptr; }
  /// The peer rank, or -1 for a null request.
  int peer() const { return _impl ? _impl->peer() : -1; }
  /// What the request waits for ("irecv of 4096 bytes from rank 3 (tag 7)"), for error messages.
  std::string describe() const { return _impl ? _impl->describe() : std::string("completed request"); }
  /// Earliest time the request can complete if the backend knows it, else the clock's epoch (see Impl).
  std::chrono::steady_clock::time_point not_before() const { return _impl ? _impl->not_before() : not_before_unknown; }

  /// \brief Waits until one request completes, makes it null and returns its index.
  /// Null requests are skipped; throws if all are null, and TimeoutError naming the pending peers on timeout.
  static std::size_t wait_any(std::vector<Request> &requests, Timeout timeout);
  /// \brief Waits for all requests; on timeout throws TimeoutError naming every peer still pending.
  static void wait_all(std::vector<Request> &requests, Timeout timeout);

private:
  std::unique_ptr<Impl> _impl;
  Timeout _default_timeout{0};
};

/// \brief What a communication engine implements. Users normally hold a Communicator (the handle below);
/// decorators (for example link emulation) derive from this class and wrap another backend.
///
/// Buffers are host memory for Self and Mpi, device memory for Nccl (device_memory()). \p stream is an opaque
/// cudaStream_t for device backends (nullptr: the communicator's own stream) and ignored by host backends.
/// Host backends return when the operation is complete; device backends return once it is enqueued on \p stream.
/// Counts are in elements.
class CommunicatorBackend {
public:
  virtual ~CommunicatorBackend() = default;
  /// The engine that moves the bytes.
  virtual CommBackend kind() const = 0;
  /// This process's rank, in [0, size()).
  virtual int rank() const = 0;
  /// The number of ranks.
  virtual int size() const = 0;
  /// True when buffers must be device memory.
  virtual bool device_memory() const { return false; }

  /// \name Operations
  //@{
  /// The operations behind Communicator's (which validates the arguments first); each gives up after \p timeout
  /// with TimeoutError. Counts are in elements of \p type.
  virtual void barrier(Timeout timeout) = 0;
  virtual void broadcast(void *buffer, std::size_t count, DataType type, int root, Timeout timeout, void *stream) = 0;
  virtual void allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op, Timeout timeout,
                         void *stream) = 0;
  virtual void allgather(void const *send, void *recv, std::size_t count_per_rank, DataType type, Timeout timeout,
                         void *stream) = 0;
  virtual void reduce_scatter(void const *send, void *recv, std::size_t recv_count, DataType type, ReduceOp op,
                              Timeout timeout, void *stream) = 0;
  virtual void alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs, void *recv,
                         std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type, Timeout timeout,
                         void *stream) = 0;
  virtual Request isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                        void *stream) = 0;
  virtual Request irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                        void *stream) = 0;
  //@}
  /// Gathers \p bytes of host memory from every rank (for argument checks; device backends use their bootstrap).
  virtual void host_allgather(void const *send, void *recv, std::size_t bytes, Timeout timeout) = 0;
  /// Ranks with the same \p color form a new communicator, ordered by \p key.
  virtual std::shared_ptr<CommunicatorBackend> split(int color, int key) = 0;
};

/// \brief A communicator: a cheap, shared handle on a CommunicatorBackend.
///
/// Every blocking call and every wait has a timeout (default: 120 s, or TESSEL_COMM_TIMEOUT seconds from the
/// environment, or set_timeout()) and raises TimeoutError instead of hanging. With validation on (the default),
/// each collective first checks on all ranks that the arguments agree (same operation, count, type, root; for
/// alltoallv, every rank's send count to a peer equals the peer's receive count) and raises the same error on
/// every rank naming the first disagreement; set_validation(false) removes that extra exchange from hot loops.
class Communicator {
public:
  /// A handle on \p backend (for example a PacedBackend around another communicator's backend).
  explicit Communicator(std::shared_ptr<CommunicatorBackend> backend);

  /// MPI_COMM_WORLD when MPI is initialized (see ScopeGuard), otherwise a one-rank Self communicator.
  static Communicator world();
  /// A one-rank communicator that needs no MPI.
  static Communicator self();

  /// This process's rank, in [0, size()).
  int rank() const { return _backend->rank(); }
  /// The number of ranks.
  int size() const { return _backend->size(); }
  /// The engine that moves the bytes.
  CommBackend kind() const { return _backend->kind(); }
  /// True when buffers must be device memory (NCCL).
  bool device_memory() const { return _backend->device_memory(); }
  /// \name The backend this handle shares
  //@{
  /// The backend this handle shares.
  CommunicatorBackend &backend() const { return *_backend; }
  std::shared_ptr<CommunicatorBackend> const &backend_ptr() const { return _backend; }
  //@}

  /// The longest any call or wait of this handle waits before it throws TimeoutError.
  Timeout timeout() const { return _timeout; }
  /// Sets timeout() for this handle (copies made before keep theirs).
  void set_timeout(Timeout timeout) { _timeout = timeout; }
  /// Whether collectives first check on every rank that the arguments agree.
  bool validation() const { return _validate; }
  /// Sets validation().
  void set_validation(bool on) { _validate = on; }

  /// \name Collectives and messages
  //@{
  /// Every rank of the communicator calls a collective with arguments that agree (checked when validation() is
  /// on). Counts are in elements of \p type. \p stream is the cudaStream_t of a device backend (nullptr: the
  /// communicator's own stream), ignored by host backends, which return when the operation is complete; device
  /// backends return once it is enqueued. isend/irecv return a Request to wait on; \p tag tells messages between
  /// the same ranks apart.
  void barrier() const { _backend->barrier(_timeout); }
  void broadcast(void *buffer, std::size_t count, DataType type, int root, void *stream = nullptr) const;
  void allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op,
                 void *stream = nullptr) const;
  void allgather(void const *send, void *recv, std::size_t count_per_rank, DataType type, void *stream = nullptr) const;
  void reduce_scatter(void const *send, void *recv, std::size_t recv_count, DataType type, ReduceOp op,
                      void *stream = nullptr) const;
  void alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs, void *recv,
                 std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type,
                 void *stream = nullptr) const;
  Request isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, void *stream = nullptr) const;
  Request irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, void *stream = nullptr) const;
  void host_allgather(void const *send, void *recv, std::size_t bytes) const;
  //@}
  /// Ranks with the same \p color form a new communicator, ordered by \p key (collective).
  Communicator split(int color, int key) const;

  /// \brief Checks that \p value is the same on every rank; otherwise throws on every rank an error naming
  /// \p what and the ranks that differ from rank 0.
  void require_same(std::string const &what, std::uint64_t value) const;

  /// \brief Runs \p work on this rank; when it throws on any rank, throws on every rank: the failing rank's own
  /// error, the others \p elsewhere (what another rank could not do). Every rank must call it.
  template <class Work> void all_or_none(Work &&work, std::string const &elsewhere) const {
    std::string problem;
    try {
      work();
    } catch (Exception const &e) {
      problem = e.what();
    }
    raise_if_any(problem, elsewhere);
  }
  /// \brief Throws on every rank when \p problem is not empty on some rank (see all_or_none).
  void raise_if_any(std::string const &problem, std::string const &elsewhere) const;

  /// \name Typed conveniences (the element type deduced from the pointers)
  //@{
  /// Typed conveniences (the element type deduced from the pointers).
  template <class T> void allreduce(T const *send, T *recv, std::size_t count, ReduceOp op) const {
    allreduce(send, recv, count, data_type_of<T>, op);
  }
  template <class T> void allgather(T const *send, T *recv, std::size_t count_per_rank) const {
    allgather(send, recv, count_per_rank, data_type_of<T>);
  }
  template <class T> Request isend(T const *buffer, std::size_t count, int peer, int tag) const {
    return isend(buffer, count, data_type_of<T>, peer, tag);
  }
  template <class T> Request irecv(T *buffer, std::size_t count, int peer, int tag) const {
    return irecv(buffer, count, data_type_of<T>, peer, tag);
  }
  //@}
  /// Sum (or another op) of one scalar over all ranks.
  template <class T> T allreduce_value(T value, ReduceOp op) const {
    T result{};
    allreduce(&value, &result, 1, data_type_of<T>, op);
    return result;
  }

private:
  void validate_uniform(char const *operation, std::int64_t count, DataType type, int root, int op) const;
  std::shared_ptr<CommunicatorBackend> _backend;
  Timeout _timeout;
  bool _validate = true;
};

/// \brief Default timeout: TESSEL_COMM_TIMEOUT (seconds) from the environment, or 120 s.
Timeout default_timeout();

/// \brief When this process last completed an exchange with other ranks (a message or a collective), or process
/// start if it never did: a rank that finished waits for the others from here (tessel::run_main).
std::chrono::steady_clock::time_point last_exchange();

/// \brief Builds a Self backend (one rank).
std::shared_ptr<CommunicatorBackend> make_self_backend();

} // namespace tessel

#endif

#ifndef TESSEL_CORE_PACEDCOMMUNICATOR_HPP
#define TESSEL_CORE_PACEDCOMMUNICATOR_HPP

/// \file PacedCommunicator.hpp
/// \brief Link emulation: a communicator decorator that delivers every message as if it crossed a link of a
/// given bandwidth and latency, while the real bytes still move through the wrapped backend (MPI).
///
/// On one machine MPI over shared memory moves a layer's dispatch in about 1% of its compute time, so no
/// schedule can show overlap; on GPU clusters communication is a large share of an MoE layer (47% in COMET's
/// measurements). The decorator restores that share without spending CPU: completion times are computed from
/// a per-rank port model and waited with sleeps.
///
/// Port model: every rank has one full-duplex port of bandwidth B. A message of b bytes occupies the sender's
/// egress for b/B, starting when the egress is free (messages leave in posting order), and the receiver's
/// ingress for b/B, starting no earlier than it left the sender; it is delivered L seconds after its last byte
/// entered the receiver. A send completes when its last byte has left. Messages a rank sends to itself are not
/// paced. Collectives other than alltoallv are paced analytically (ring cost, nccl-tests' bus-bandwidth factors);
/// alltoallv is built from paced point-to-point messages so that it shares the ports with them.
///
/// The emulated arrival time travels in a 16-byte header next to each message, stamped with
/// std::chrono::steady_clock: ranks must share that clock (ranks on one host).

#include <tessel/core/Communicator.hpp>

#include <cstdint>
#include <memory>

namespace tessel {

/// \brief Parameters of an emulated link.
struct LinkModel {
  /// Bytes per second of each direction of a rank's port; 0 means infinite (no bandwidth delay).
  double bandwidth = 0.0;
  /// Seconds from the last byte entering the receiver to delivery, per message.
  double latency = 0.0;
  /// Seconds a message of \p bytes occupies a port.
  double transfer_seconds(std::size_t bytes) const {
    return bandwidth > 0.0 ? static_cast<double>(bytes) / bandwidth : 0.0;
  }
};

/// \brief Counters of the traffic a paced backend has carried (this rank only).
struct PacedStats {
  std::uint64_t messages_sent = 0;     ///< point-to-point messages sent
  std::uint64_t bytes_sent = 0;        ///< their bytes
  std::uint64_t messages_received = 0; ///< point-to-point messages received
  std::uint64_t bytes_received = 0;    ///< their bytes
};

/// \brief A CommunicatorBackend that wraps another and paces every message (see the file comment).
///
/// Construction and split() are collective over the wrapped backend (the decorator duplicates it for its
/// headers and for its own collectives). The link model may be changed between operations with set_link(),
/// which calibration uses; it must be changed identically on every rank.
class PacedBackend final : public CommunicatorBackend {
public:
  /// Paces the messages of \p inner over the link \p link (collective over \p inner).
  PacedBackend(std::shared_ptr<CommunicatorBackend> inner, LinkModel link);
  ~PacedBackend() override;

  /// The link messages are paced over.
  LinkModel link() const;
  /// Changes the link (identically on every rank, between operations).
  void set_link(LinkModel link);
  /// The traffic carried so far.
  PacedStats stats() const;
  /// The wrapped backend.
  CommunicatorBackend &inner() const { return *_inner; }

  CommBackend kind() const override { return _inner->kind(); }
  int rank() const override { return _inner->rank(); }
  int size() const override { return _inner->size(); }
  bool device_memory() const override { return _inner->device_memory(); }

  void barrier(Timeout timeout) override;
  void broadcast(void *buffer, std::size_t count, DataType type, int root, Timeout timeout, void *stream) override;
  void allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op, Timeout timeout,
                 void *stream) override;
  void allgather(void const *send, void *recv, std::size_t count_per_rank, DataType type, Timeout timeout,
                 void *stream) override;
  void reduce_scatter(void const *send, void *recv, std::size_t recv_count, DataType type, ReduceOp op, Timeout timeout,
                      void *stream) override;
  void alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs, void *recv,
                 std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type, Timeout timeout,
                 void *stream) override;
  Request isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                void *stream) override;
  Request irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                void *stream) override;
  void host_allgather(void const *send, void *recv, std::size_t bytes, Timeout timeout) override;
  std::shared_ptr<CommunicatorBackend> split(int color, int key) override;

  /// Shared between a backend and the backends split from it: the ports belong to the process.
  struct State;

private:
  PacedBackend(std::shared_ptr<CommunicatorBackend> inner, std::shared_ptr<State> state);
  Request post_send(CommunicatorBackend &data, CommunicatorBackend &headers, void const *buffer, std::size_t count,
                    DataType type, int peer, int tag, Timeout timeout);
  Request post_recv(CommunicatorBackend &data, CommunicatorBackend &headers, void *buffer, std::size_t count,
                    DataType type, int peer, int tag, Timeout timeout);
  // Sleeps until the analytic completion of a collective moving \p port_bytes through each port in \p steps
  // latency-bound steps.
  void pace_collective(char const *operation, double port_bytes, int steps, Timeout timeout);

  std::shared_ptr<CommunicatorBackend> _inner;
  std::shared_ptr<CommunicatorBackend> _headers;      // headers of the user's point-to-point messages
  std::shared_ptr<CommunicatorBackend> _coll_data;    // alltoallv payloads (never match the user's tags)
  std::shared_ptr<CommunicatorBackend> _coll_headers; // alltoallv headers
  std::shared_ptr<State> _state;
};

/// \brief Wraps \p comm's backend in a PacedBackend (collective over \p comm). Timeout and validation settings
/// are copied from \p comm.
Communicator make_paced_communicator(Communicator const &comm, LinkModel link);

/// \brief The PacedBackend a communicator uses, or nullptr when it is not paced.
PacedBackend *paced_backend_of(Communicator const &comm);

} // namespace tessel

#endif

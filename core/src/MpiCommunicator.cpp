#include <tessel/core/MpiCommunicator.hpp>

#include "impl/Progress.hpp"

#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

namespace tessel {

namespace {

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
  case DataType::int8:
    return MPI_INT8_T;
  case DataType::uint8:
    return MPI_UINT8_T;
  case DataType::int32:
    return MPI_INT32_T;
  case DataType::uint32:
    return MPI_UINT32_T;
  case DataType::int64:
    return MPI_INT64_T;
  case DataType::uint64:
    return MPI_UINT64_T;
  case DataType::float16:
  case DataType::bfloat16:
    return MPI_UINT16_T; // moved as raw 16-bit words; reductions are refused in mpi_op_for
  case DataType::float32:
    return MPI_FLOAT;
  case DataType::float64:
    return MPI_DOUBLE;
  }
  TESSEL_THROW("unknown DataType ", static_cast<int>(type));
}

MPI_Op mpi_op_for(ReduceOp op, DataType type) {
  TESSEL_REQUIRE(type != DataType::float16 && type != DataType::bfloat16, "MPI cannot reduce ", name_of(type),
                 " (no native MPI type); reduce in float32");
  switch (op) {
  case ReduceOp::sum:
    return MPI_SUM;
  case ReduceOp::prod:
    return MPI_PROD;
  case ReduceOp::min:
    return MPI_MIN;
  case ReduceOp::max:
    return MPI_MAX;
  }
  TESSEL_THROW("unknown ReduceOp ", static_cast<int>(op));
}

int to_int(std::size_t count, char const *what) {
  TESSEL_REQUIRE(count <= static_cast<std::size_t>(INT_MAX), what, " of ", count,
                 " elements exceeds MPI's int count limit");
  return static_cast<int>(count);
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// How long a large collective's wait polls before backing off (see MpiBackend::complete), and from which size
// (bytes this rank sends or receives) a collective counts as large.
constexpr auto large_collective_yield_phase = std::chrono::milliseconds(200);
constexpr std::size_t large_collective_bytes = 64 * 1024;

class MpiRequest final : public Request::Impl {
public:
  MpiRequest(MPI_Request request, std::string what, int peer)
      : _request(request), _what(std::move(what)), _peer(peer) {}
  ~MpiRequest() override {
    if (_request != MPI_REQUEST_NULL && !mpi_finalized())
      MPI_Request_free(&_request);
  }
  bool test() override {
    if (_request == MPI_REQUEST_NULL)
      return true;
    int done = 0;
    TESSEL_MPI_CHECK(MPI_Test(&_request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  void cancel() override {
    if (_request == MPI_REQUEST_NULL || mpi_finalized())
      return;
    MPI_Cancel(&_request);
    // A cancelled receive completes at once; a send MPI cannot cancel is released and finishes on its own.
    int done = 0;
    MPI_Test(&_request, &done, MPI_STATUS_IGNORE);
    if (!done)
      MPI_Request_free(&_request);
    _request = MPI_REQUEST_NULL;
  }
  std::string describe() const override { return _what; }
  int peer() const override { return _peer; }

private:
  MPI_Request _request;
  std::string _what;
  int _peer;
};

class MpiBackend final : public CommunicatorBackend {
public:
  // Takes ownership of \p comm (already duplicated or split for Tessel).
  explicit MpiBackend(MPI_Comm comm) : _comm(comm) {
    TESSEL_MPI_CHECK(MPI_Comm_set_errhandler(_comm, MPI_ERRORS_RETURN));
    TESSEL_MPI_CHECK(MPI_Comm_rank(_comm, &_rank));
    TESSEL_MPI_CHECK(MPI_Comm_size(_comm, &_size));
    int flag = 0;
    void *value = nullptr;
    TESSEL_MPI_CHECK(MPI_Comm_get_attr(_comm, MPI_TAG_UB, &value, &flag));
    _tag_ub = flag ? *static_cast<int *>(value) : 32767;
  }
  ~MpiBackend() override {
    if (mpi_finalized())
      return;
    // A collective abandoned after a timeout may still be progressing inside MPI: freeing its communicator
    // would let MPI's progress engine touch freed state, so such a communicator is deliberately leaked.
    if (progress_abandoned())
      MPI_Comm_free(&_comm);
  }
  MPI_Comm comm() const { return _comm; }

  CommBackend kind() const override { return CommBackend::mpi; }
  int rank() const override { return _rank; }
  int size() const override { return _size; }

  void barrier(Timeout timeout) override {
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Ibarrier(_comm, &request));
    complete("barrier", request, timeout);
  }
  void broadcast(void *buffer, std::size_t count, DataType type, int root, Timeout timeout, void *) override {
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Ibcast(buffer, to_int(count, "broadcast"), mpi_type(type), root, _comm, &request));
    complete("broadcast", request, timeout, count * size_of(type));
  }
  void allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op, Timeout timeout,
                 void *) override {
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, to_int(count, "allreduce"),
                                    mpi_type(type), mpi_op_for(op, type), _comm, &request));
    complete("allreduce", request, timeout, count * size_of(type));
  }
  void allgather(void const *send, void *recv, std::size_t count, DataType type, Timeout timeout, void *) override {
    auto const *own_slot = static_cast<char const *>(recv) + static_cast<std::size_t>(_rank) * count * size_of(type);
    MPI_Request request;
    int const n = to_int(count, "allgather");
    TESSEL_MPI_CHECK(MPI_Iallgather(send == own_slot ? MPI_IN_PLACE : send, n, mpi_type(type), recv, n, mpi_type(type),
                                    _comm, &request));
    complete("allgather", request, timeout, count * size_of(type) * static_cast<std::size_t>(_size));
  }
  void reduce_scatter(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op, Timeout timeout,
                      void *) override {
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv,
                                               to_int(count, "reduce_scatter"), mpi_type(type), mpi_op_for(op, type),
                                               _comm, &request));
    complete("reduce_scatter", request, timeout, count * size_of(type) * static_cast<std::size_t>(_size));
  }
  void alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs, void *recv,
                 std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type, Timeout timeout,
                 void *) override {
    auto const n = static_cast<std::size_t>(_size);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (std::size_t p = 0; p < n; ++p) {
      sc[p] = to_int(send_counts[p], "alltoallv send count");
      sd[p] = to_int(send_displs[p], "alltoallv send displacement");
      rc[p] = to_int(recv_counts[p], "alltoallv receive count");
      rd[p] = to_int(recv_displs[p], "alltoallv receive displacement");
    }
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Ialltoallv(send, sc.data(), sd.data(), mpi_type(type), recv, rc.data(), rd.data(),
                                    mpi_type(type), _comm, &request));
    std::size_t sent = 0, received = 0;
    for (std::size_t p = 0; p < n; ++p) {
      sent += send_counts[p];
      received += recv_counts[p];
    }
    complete("alltoallv", request, timeout, std::max(sent, received) * size_of(type));
  }
  Request isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                void *) override {
    check_tag(tag);
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Isend(buffer, to_int(count, "isend"), mpi_type(type), peer, tag, _comm, &request));
    return Request(std::make_unique<MpiRequest>(request,
                                                Impl::concat("isend of ", count, " ", name_of(type), " from rank ",
                                                             _rank, " to rank ", peer, " (tag ", tag, ")"),
                                                peer),
                   timeout);
  }
  Request irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout, void *) override {
    check_tag(tag);
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Irecv(buffer, to_int(count, "irecv"), mpi_type(type), peer, tag, _comm, &request));
    return Request(std::make_unique<MpiRequest>(request,
                                                Impl::concat("irecv of ", count, " ", name_of(type), " on rank ", _rank,
                                                             " from rank ", peer, " (tag ", tag, ")"),
                                                peer),
                   timeout);
  }
  void host_allgather(void const *send, void *recv, std::size_t bytes, Timeout timeout) override {
    MPI_Request request;
    int const n = to_int(bytes, "host_allgather");
    TESSEL_MPI_CHECK(MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, _comm, &request));
    complete("argument check (allgather)", request, timeout);
  }
  std::shared_ptr<CommunicatorBackend> split(int color, int key) override {
    // MPI_Comm_split has no non-blocking form and no timeout: a stopped rank would hang the others in it. Every
    // rank first shows, within the timeout, that it has arrived; the split then waits only on ranks that just
    // answered.
    int const mine[2] = {color, key};
    std::vector<int> all(2 * static_cast<std::size_t>(_size));
    MPI_Request request;
    TESSEL_MPI_CHECK(MPI_Iallgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, _comm, &request));
    complete("split (every rank's arrival)", request, default_timeout());
    MPI_Comm sub;
    TESSEL_MPI_CHECK(MPI_Comm_split(_comm, color, key, &sub));
    return std::make_shared<MpiBackend>(sub);
  }

private:
  void check_tag(int tag) const {
    TESSEL_REQUIRE(tag >= 0 && tag <= _tag_ub, "tag ", tag, " outside MPI's range [0, ", _tag_ub, "]");
  }
  // Tests the collectives abandoned after timeouts; true when none is pending any more.
  bool progress_abandoned() {
    for (auto it = _abandoned.begin(); it != _abandoned.end();) {
      int done = 0;
      MPI_Test(&*it, &done, MPI_STATUS_IGNORE);
      it = done ? _abandoned.erase(it) : it + 1;
    }
    return _abandoned.empty();
  }
  // Waits for a collective. MPI cannot say which rank is missing, so the error names the operation and
  // this rank. A collective cannot be cancelled: its request is kept and progressed with later calls.
  // A non-blocking collective advances its schedule only inside MPI calls, so the wait for a large one keeps
  // polling (yielding the core) for as long as it takes before backing off to sleeps: with the default 2 ms a
  // 16 MiB allreduce on 2 ranks took 0.5 s, one MPI_Test per millisecond sleep. Small ones (\p bytes, what this
  // rank moves) keep the short phase, so that ranks waiting for a late peer leave the cores to it.
  void complete(char const *operation, MPI_Request &request, Timeout timeout, std::size_t bytes = 0) {
    if (!_abandoned.empty())
      progress_abandoned();
    auto const done = [&] {
      int flag = 0;
      TESSEL_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
      return flag != 0;
    };
    if (!Impl::progress_until(
            Impl::deadline_after(timeout), done, [] { return not_before_unknown; },
            bytes >= large_collective_bytes ? Impl::Clock::duration(large_collective_yield_phase)
                                            : Impl::Clock::duration(std::chrono::milliseconds(2)))) {
      _abandoned.push_back(request);
      throw TimeoutError(Impl::concat("communication: ", operation, " on rank ", _rank, " of ", _size,
                                      " (mpi) did not complete within ", timeout.count(),
                                      " ms: at least one rank never entered it"),
                         -1);
    }
    Impl::note_exchange();
  }

  MPI_Comm _comm;
  int _rank = 0;
  int _size = 1;
  int _tag_ub = 32767;
  std::vector<MPI_Request> _abandoned;
};

std::mutex world_mutex;
std::shared_ptr<CommunicatorBackend> world_backend;

} // namespace

Communicator make_mpi_communicator(MPI_Comm comm) {
  TESSEL_REQUIRE(comm != MPI_COMM_NULL, "MPI_COMM_NULL");
  return Communicator(std::make_shared<MpiBackend>(Impl::duplicate_mpi_comm(comm, default_timeout())));
}

MPI_Comm mpi_comm_of(Communicator const &comm) {
  auto const *mpi = dynamic_cast<MpiBackend const *>(&comm.backend());
  return mpi ? mpi->comm() : MPI_COMM_NULL;
}

namespace Impl {
std::shared_ptr<CommunicatorBackend> mpi_world_backend() {
  std::lock_guard<std::mutex> lock(world_mutex);
  if (!world_backend)
    world_backend = std::make_shared<MpiBackend>(duplicate_mpi_comm(MPI_COMM_WORLD, default_timeout()));
  return world_backend;
}

MPI_Comm duplicate_mpi_comm(MPI_Comm comm, Timeout timeout) {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request;
  TESSEL_MPI_CHECK(MPI_Comm_idup(comm, &dup, &request));
  auto const done = [&] {
    int flag = 0;
    TESSEL_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  };
  if (!progress_until(deadline_after(timeout), done)) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    // The pending duplication stays with MPI (it cannot be cancelled); the job is ending.
    throw TimeoutError(concat("communication: creating a communicator (MPI_Comm_idup) on rank ", rank, " of ", size,
                              " did not complete within ", timeout.count(), " ms: at least one rank never joined"),
                       -1);
  }
  TESSEL_MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  return dup;
}

void release_mpi_world_backend() {
  std::lock_guard<std::mutex> lock(world_mutex);
  world_backend.reset();
}
} // namespace Impl

} // namespace tessel

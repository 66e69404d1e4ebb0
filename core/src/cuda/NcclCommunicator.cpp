// Host-side NCCL calls only: compiled by the C++ compiler against the CUDA runtime and NCCL headers.
#include <tessel/core/cuda/NcclCommunicator.hpp>

#include "../impl/Progress.hpp"

#include <atomic>
#include <cstring>

namespace tessel::cuda {

namespace Impl {
void throw_nccl_error(char const *file, int line, char const *call, ncclResult_t code, ncclComm_t comm) {
  char const *last = ncclGetLastError(comm);
  throw CommunicationError(tessel::Impl::concat("NCCL failed: ", ncclGetErrorString(code),
                                                (last && *last) ? std::string(" (") + last + ")" : std::string()),
                           tessel::Impl::concat(call, " (", tessel::Impl::source_location(file, line, "nccl"), ")"));
}
} // namespace Impl

namespace {

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
  case DataType::int8:
    return ncclInt8;
  case DataType::uint8:
    return ncclUint8;
  case DataType::int32:
    return ncclInt32;
  case DataType::uint32:
    return ncclUint32;
  case DataType::int64:
    return ncclInt64;
  case DataType::uint64:
    return ncclUint64;
  case DataType::float16:
    return ncclFloat16;
  case DataType::bfloat16:
    return ncclBfloat16;
  case DataType::float32:
    return ncclFloat32;
  case DataType::float64:
    return ncclFloat64;
  }
  TESSEL_THROW("unknown DataType ", static_cast<int>(type));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
    return ncclSum;
  case ReduceOp::prod:
    return ncclProd;
  case ReduceOp::min:
    return ncclMin;
  case ReduceOp::max:
    return ncclMax;
  }
  TESSEL_THROW("unknown ReduceOp ", static_cast<int>(op));
}

class NcclBackend;

class NcclRequest final : public Request::Impl {
public:
  NcclRequest(std::shared_ptr<NcclBackend> owner, cudaStream_t stream, std::string what, int peer);
  bool test() override;
  void cancel() override;
  std::string describe() const override { return _what; }
  int peer() const override { return _peer; }

private:
  std::shared_ptr<NcclBackend> _owner;
  Event _done;
  std::string _what;
  int _peer;
};

class NcclBackend final : public CommunicatorBackend, public std::enable_shared_from_this<NcclBackend> {
public:
  NcclBackend(Communicator bootstrap, ncclComm_t comm, int device)
      : _bootstrap(std::move(bootstrap)), _comm(comm), _device(device) {
    int n = 0, r = 0;
    check(ncclCommCount(_comm, &n), "ncclCommCount");
    check(ncclCommUserRank(_comm, &r), "ncclCommUserRank");
    _size = n;
    _rank = r;
  }
  // NCCL's examples: destroy the communicator before the CUDA resources it used (our stream is a member and
  // is destroyed after this body).
  ~NcclBackend() override {
    if (_aborted.load())
      return;
    ncclResult_t state = ncclCommFinalize(_comm);
    auto const deadline = tessel::Impl::deadline_after(_bootstrap.timeout());
    while (state == ncclInProgress && tessel::Impl::Clock::now() < deadline)
      ncclCommGetAsyncError(_comm, &state);
    if (state == ncclSuccess)
      ncclCommDestroy(_comm);
    else
      ncclCommAbort(_comm);
  }

  ncclComm_t comm() const { return _comm; }
  cudaStream_t stream_or_own(void *stream) const { return stream ? static_cast<cudaStream_t>(stream) : _stream.get(); }

  CommBackend kind() const override { return CommBackend::nccl; }
  int rank() const override { return _rank; }
  int size() const override { return _size; }
  bool device_memory() const override { return true; }

  void barrier(Timeout timeout) override {
    ensure_alive();
    if (_barrier_word.data() == nullptr)
      _barrier_word = DeviceBuffer<int>(1, "Tessel::nccl::barrier");
    check(ncclAllReduce(_barrier_word.data(), _barrier_word.data(), 1, ncclInt32, ncclSum, _comm, _stream.get()),
          "ncclAllReduce (barrier)");
    wait(_stream.get(), timeout, "barrier");
  }
  void broadcast(void *buffer, std::size_t count, DataType type, int root, Timeout, void *stream) override {
    ensure_alive();
    check(ncclBroadcast(buffer, buffer, count, nccl_type(type), root, _comm, stream_or_own(stream)), "ncclBroadcast");
  }
  void allreduce(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op, Timeout,
                 void *stream) override {
    ensure_alive();
    check(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), _comm, stream_or_own(stream)),
          "ncclAllReduce");
  }
  void allgather(void const *send, void *recv, std::size_t count, DataType type, Timeout, void *stream) override {
    ensure_alive();
    check(ncclAllGather(send, recv, count, nccl_type(type), _comm, stream_or_own(stream)), "ncclAllGather");
  }
  void reduce_scatter(void const *send, void *recv, std::size_t count, DataType type, ReduceOp op, Timeout,
                      void *stream) override {
    ensure_alive();
    check(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), _comm, stream_or_own(stream)),
          "ncclReduceScatter");
  }
  void alltoallv(void const *send, std::size_t const *send_counts, std::size_t const *send_displs, void *recv,
                 std::size_t const *recv_counts, std::size_t const *recv_displs, DataType type, Timeout,
                 void *stream) override {
    ensure_alive();
    auto const elem = size_of(type);
    auto const s = stream_or_own(stream);
    check(ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < _size; ++p) {
      auto const up = static_cast<std::size_t>(p);
      if (send_counts[up] > 0)
        check(ncclSend(static_cast<char const *>(send) + send_displs[up] * elem, send_counts[up], nccl_type(type), p,
                       _comm, s),
              "ncclSend");
      if (recv_counts[up] > 0)
        check(
            ncclRecv(static_cast<char *>(recv) + recv_displs[up] * elem, recv_counts[up], nccl_type(type), p, _comm, s),
            "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }
  // NCCL point-to-point has no tags: messages between a pair of ranks match in the order they are issued.
  Request isend(void const *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                void *stream) override {
    return point_to_point(ncclSend, "ncclSend", buffer, count, type, peer, tag, timeout, stream, " from rank ",
                          " to rank ");
  }
  Request irecv(void *buffer, std::size_t count, DataType type, int peer, int tag, Timeout timeout,
                void *stream) override {
    return point_to_point(ncclRecv, "ncclRecv", buffer, count, type, peer, tag, timeout, stream, " on rank ",
                          " from rank ");
  }
  // Issues call (ncclSend or ncclRecv) with \p peer; the request describes it as "<name> of <count> <type><here>
  // <rank><there><peer> (tag <tag>)".
  template <class Call, class Buffer>
  Request point_to_point(Call call, char const *name, Buffer buffer, std::size_t count, DataType type, int peer,
                         int tag, Timeout timeout, void *stream, char const *here, char const *there) {
    ensure_alive();
    auto const s = stream_or_own(stream);
    check(call(buffer, count, nccl_type(type), peer, _comm, s), name);
    return pending(
        s, tessel::Impl::concat(name, " of ", count, " ", name_of(type), here, _rank, there, peer, " (tag ", tag, ")"),
        peer, timeout);
  }
  // The request for a message issued on \p stream.
  Request pending(cudaStream_t stream, std::string what, int peer, Timeout timeout) {
    return Request(std::make_unique<NcclRequest>(shared_from_this(), stream, std::move(what), peer), timeout);
  }
  void host_allgather(void const *send, void *recv, std::size_t bytes, Timeout) override {
    _bootstrap.host_allgather(send, recv, bytes);
  }
  std::shared_ptr<CommunicatorBackend> split(int color, int key) override {
    ensure_alive();
    Communicator sub_bootstrap = _bootstrap.split(color, key);
    ncclComm_t sub = nullptr;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommSplit(_comm, color, key, &sub, &config), "ncclCommSplit");
    wait_ready(sub, _bootstrap.timeout(), "ncclCommSplit");
    return std::make_shared<NcclBackend>(std::move(sub_bootstrap), sub, _device);
  }

  // Polls the stream and NCCL's asynchronous error; aborts after the deadline.
  void wait(cudaStream_t stream, Timeout timeout, char const *what) {
    auto const done = [&] {
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(_comm, &async), "ncclCommGetAsyncError");
      check(async, "asynchronous NCCL operation");
      cudaError_t const rc = cudaStreamQuery(stream);
      if (rc == cudaErrorNotReady)
        return false;
      TESSEL_CUDA_CHECK(rc);
      return true;
    };
    if (!tessel::Impl::progress_until(tessel::Impl::deadline_after(timeout), done)) {
      abort();
      throw TimeoutError(tessel::Impl::concat("communication: ", what, " on rank ", _rank, " of ", _size,
                                              " (nccl) did not complete within ", timeout.count(),
                                              " ms: at least one rank never joined; the NCCL communicator was aborted"),
                         -1);
    }
    tessel::Impl::note_exchange();
  }
  void abort() {
    if (!_aborted.exchange(true))
      ncclCommAbort(_comm);
  }
  bool aborted() const { return _aborted.load(); }

  static void wait_ready(ncclComm_t comm, Timeout timeout, char const *what) {
    ncclResult_t state = ncclInProgress;
    auto const done = [&] {
      ncclCommGetAsyncError(comm, &state);
      return state != ncclInProgress;
    };
    if (!tessel::Impl::progress_until(tessel::Impl::deadline_after(timeout), done)) {
      ncclCommAbort(comm);
      throw TimeoutError(tessel::Impl::concat("tessel::cuda::", what, ": NCCL communicator not ready within ",
                                              timeout.count(), " ms; a rank never joined"),
                         -1);
    }
    if (state != ncclSuccess)
      Impl::throw_nccl_error(__FILE__, __LINE__, what, state, comm);
  }

private:
  void ensure_alive() const {
    TESSEL_REQUIRE(!_aborted.load(), "the NCCL communicator was aborted after an earlier timeout");
  }
  // The communicator is non-blocking (so that waits can time out): a call may return ncclInProgress, and NCCL
  // requires its completion before the next call on the communicator.
  void check(ncclResult_t rc, char const *call) const {
    if (rc == ncclInProgress)
      wait_ready(_comm, _bootstrap.timeout(), call);
    else if (rc != ncclSuccess)
      Impl::throw_nccl_error(__FILE__, __LINE__, call, rc, _comm);
  }

  Communicator _bootstrap;
  ncclComm_t _comm;
  int _device;
  int _rank = 0;
  int _size = 1;
  Stream _stream;
  DeviceBuffer<int> _barrier_word;
  std::atomic<bool> _aborted{false};
};

NcclRequest::NcclRequest(std::shared_ptr<NcclBackend> owner, cudaStream_t stream, std::string what, int peer)
    : _owner(std::move(owner)), _what(std::move(what)), _peer(peer) {
  _done.record(stream);
}

bool NcclRequest::test() {
  TESSEL_REQUIRE(!_owner->aborted(), _what, ": the NCCL communicator was aborted");
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(_owner->comm(), &async);
  if (async != ncclSuccess && async != ncclInProgress)
    cuda::Impl::throw_nccl_error(__FILE__, __LINE__, _what.c_str(), async, _owner->comm());
  return _done.query();
}

// A device-side message cannot be withdrawn: the only way to release its kernel is to abort the communicator.
void NcclRequest::cancel() { _owner->abort(); }

} // namespace

Communicator make_nccl_communicator(Communicator const &bootstrap, int device) {
  TESSEL_REQUIRE(!bootstrap.device_memory(), "the bootstrap must be a host communicator (Self or Mpi)");
  int const devices = device_count();
  TESSEL_REQUIRE(devices > 0, "no CUDA device is visible on rank ", bootstrap.rank());
  int const chosen = device >= 0 ? device : bootstrap.rank() % devices;
  TESSEL_REQUIRE(chosen < devices, "device ", chosen, " requested, but rank ", bootstrap.rank(), " sees ", devices);
  TESSEL_CUDA_CHECK(cudaSetDevice(chosen));

  ncclUniqueId id;
  if (bootstrap.rank() == 0)
    TESSEL_NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, sizeof(id), DataType::uint8, 0);

  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; // lets the wait below time out instead of hanging on a missing rank
  TESSEL_NCCL_CHECK(ncclCommInitRankConfig(&comm, bootstrap.size(), id, bootstrap.rank(), &config));
  NcclBackend::wait_ready(comm, bootstrap.timeout(), "ncclCommInitRankConfig");
  Communicator result(std::make_shared<NcclBackend>(bootstrap, comm, chosen));
  result.set_timeout(bootstrap.timeout());
  return result;
}

ncclComm_t nccl_comm_of(Communicator const &comm) {
  auto const *nccl = dynamic_cast<NcclBackend const *>(&comm.backend());
  TESSEL_REQUIRE(nccl != nullptr, "communicator backend is ", name_of(comm.kind()), ", not nccl");
  return nccl->comm();
}

void synchronize(Communicator const &comm, cudaStream_t stream) {
  auto *nccl = dynamic_cast<NcclBackend *>(&comm.backend());
  TESSEL_REQUIRE(nccl != nullptr, "communicator backend is ", name_of(comm.kind()), ", not nccl");
  nccl->wait(nccl->stream_or_own(stream), comm.timeout(), "synchronize");
}

} // namespace tessel::cuda

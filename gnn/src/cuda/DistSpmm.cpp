// The device DistSpmm: the host DistGraph's blocks as device SpmmHandles, the halo exchange as one grouped NCCL
// all-to-all on the communicator's own stream, ordered with the compute stream by two events (packed rows before
// the exchange, landed rows before the halo blocks). Compiled by the host compiler; the kernels are in Halo.cu.
#include <tessel/core/Error.hpp>
#include <tessel/gnn/cuda/DistSpmm.hpp>

#include "KernelApi.hpp"

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tessel::gnn::cuda {

namespace Impl {

using tessel::cuda::DeviceBuffer;
using tessel::cuda::Event;
using tessel::cuda::Stream;

struct DeviceDistSpmmState {
  Communicator comm;
  DistGraph<std::int32_t> const &graph;
  Stream comm_stream;
  Event packed, landed;
  std::optional<SpmmHandle<std::int32_t>> local;
  std::vector<std::optional<SpmmHandle<std::int32_t>>> halo; // per DistGraph::halos() entry
  std::vector<DeviceBuffer<std::int32_t>> send_rows;         // per halo: local rows the peer needs
  // Element counts and offsets of the all-to-all per rank (rows x width), for the current width.
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  DeviceBuffer<float> send_buf, recv_buf, halo_y;
  int width = -1;
  DistSchedule schedule = DistSchedule::overlapped;
  std::set<int> checked;
  DistSpmmTimings last;

  DeviceDistSpmmState(Stream const &stream, Communicator c, DistGraph<std::int32_t> const &g,
                      SpmmOptions const &options)
      : comm(std::move(c)), graph(g) {
    TESSEL_REQUIRE(comm.device_memory(), "cuda::DistSpmm on '", g.name(),
                   "': the communicator must hold device buffers (make_nccl_communicator)");
    TESSEL_REQUIRE(comm.rank() == g.rank() && comm.size() == g.size(), "cuda::DistSpmm: the communicator (rank ",
                   comm.rank(), " of ", comm.size(), ") is not the one graph '", g.name(), "' was built on (rank ",
                   g.rank(), " of ", g.size(), ")");
    if (g.local_rows() > 0) {
      auto o = options;
      if (o.algorithm == SpmmAlgorithm::adaptive) // X and Y keep DistGraph's local numbering
        o.partition = PartitionMethod::none;
      local.emplace(stream, g.local_block(), o);
    }
    SpmmOptions csr = options;
    csr.algorithm = SpmmAlgorithm::csr;
    for (auto const &h : g.halos()) {
      halo.emplace_back();
      if (g.local_rows() > 0 && !h.recv_rows.empty())
        halo.back().emplace(stream, h.block, csr);
      send_rows.emplace_back(h.send_rows.size(), "Tessel::gnn::cuda::DistSpmm::send_rows");
      send_rows.back().copy_from_host(h.send_rows.data(), h.send_rows.size(), stream.get());
    }
    stream.synchronize(comm.timeout());
    // The exchange plan is consistent by construction (DistGraph built it collectively); widths are checked once
    // each in apply. Per-call validation would add a host exchange to every apply.
    comm.set_validation(false);
  }

  void resize(int f) {
    if (f == width)
      return;
    auto const uf = static_cast<std::size_t>(f);
    auto const ranks = static_cast<std::size_t>(graph.size());
    send_counts.assign(ranks, 0);
    recv_counts.assign(ranks, 0);
    send_displs.assign(ranks, 0);
    recv_displs.assign(ranks, 0);
    std::size_t sends = 0, recvs = 0;
    for (auto const &h : graph.halos()) {
      auto const p = static_cast<std::size_t>(h.peer);
      send_counts[p] = h.send_rows.size() * uf;
      recv_counts[p] = h.recv_rows.size() * uf;
    }
    for (std::size_t p = 0; p < ranks; ++p) {
      send_displs[p] = sends;
      recv_displs[p] = recvs;
      sends += send_counts[p];
      recvs += recv_counts[p];
    }
    send_buf = DeviceBuffer<float>(std::max<std::size_t>(sends, 1), "Tessel::gnn::cuda::DistSpmm::send");
    recv_buf = DeviceBuffer<float>(std::max<std::size_t>(recvs, 1), "Tessel::gnn::cuda::DistSpmm::recv");
    halo_y = DeviceBuffer<float>(std::max<std::size_t>(static_cast<std::size_t>(graph.local_rows()) * uf, 1),
                                 "Tessel::gnn::cuda::DistSpmm::halo_y");
    width = f;
  }
};

} // namespace Impl

DistSpmm::DistSpmm(tessel::cuda::Stream const &stream, Communicator comm, DistGraph<std::int32_t> const &graph,
                   SpmmOptions const &options)
    : _s(std::make_unique<Impl::DeviceDistSpmmState>(stream, std::move(comm), graph, options)) {}

DistSpmm::~DistSpmm() = default;
DistSpmm::DistSpmm(DistSpmm &&) noexcept = default;
DistSpmm &DistSpmm::operator=(DistSpmm &&) noexcept = default;

void DistSpmm::apply(tessel::cuda::Stream const &stream, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
  auto &s = *_s;
  auto const &g = s.graph;
  auto const rows = g.local_rows();
  TESSEL_REQUIRE(x.rows == rows && y.rows == rows && x.cols == y.cols, "cuda::DistSpmm on '", g.name(), "', rank ",
                 g.rank(), ": x is ", x.rows, " x ", x.cols, " and y ", y.rows, " x ", y.cols, ", expected ", rows,
                 " rows (this rank's) and equal widths");
  int const f = static_cast<int>(x.cols);
  if (s.checked.insert(f).second) // once per width, as the host DistSpmm
    s.comm.require_same("cuda::DistSpmm on '" + g.name() + "': the feature width", static_cast<std::uint64_t>(f));
  s.resize(f);
  auto const &halos = g.halos();
  cudaStream_t const cs = stream.get();
  DistSpmmTimings t;
  // Pack every peer's rows on the compute stream.
  for (std::size_t k = 0; k < halos.size(); ++k) {
    auto const p = static_cast<std::size_t>(halos[k].peer);
    TESSEL_CUDA_CHECK(Impl::gather_rows(cs, static_cast<std::int64_t>(halos[k].send_rows.size()), s.send_rows[k].data(),
                                        x.data, x.ld, s.send_buf.data() + s.send_displs[p], f, f));
    t.bytes_sent += static_cast<std::int64_t>(s.send_counts[p] * sizeof(float));
    t.bytes_received += static_cast<std::int64_t>(s.recv_counts[p] * sizeof(float));
  }
  // The exchange on the communicator's stream, after the packing.
  s.packed.record(cs);
  s.packed.wait_on(s.comm_stream.get());
  s.comm.alltoallv(s.send_buf.data(), s.send_counts.data(), s.send_displs.data(), s.recv_buf.data(),
                   s.recv_counts.data(), s.recv_displs.data(), DataType::float32, s.comm_stream.get());
  s.landed.record(s.comm_stream.get());
  if (s.schedule == DistSchedule::sequential)
    s.landed.wait_on(cs);
  // The local block while the rows move (overlapped), then each peer's block, added in increasing peer order.
  if (s.local)
    s.local->apply(stream, x, y);
  s.landed.wait_on(cs);
  for (std::size_t k = 0; k < halos.size(); ++k) {
    if (!s.halo[k])
      continue;
    auto const p = static_cast<std::size_t>(halos[k].peer);
    auto const r = static_cast<std::int64_t>(halos[k].recv_rows.size());
    MatrixRef<float const> const hx(s.recv_buf.data() + s.recv_displs[p], r, f, f);
    MatrixRef<float> const hy(s.halo_y.data(), rows, f, f);
    s.halo[k]->apply(stream, hx, hy);
    TESSEL_CUDA_CHECK(Impl::add_rows(cs, rows, s.halo_y.data(), f, y.data, y.ld, f));
  }
  s.last = t;
}

void DistSpmm::set_schedule(DistSchedule schedule) { _s->schedule = schedule; }
DistSchedule DistSpmm::schedule() const { return _s->schedule; }
DistSpmmTimings const &DistSpmm::last() const { return _s->last; }

} // namespace tessel::gnn::cuda

// The device DistSpmm over NCCL (one GPU per rank) against the host single-process result on the whole graph: csr
// and adaptive local blocks (full fp32), several widths, a directed graph with empty rows and a symmetric one, both
// schedules bitwise alike. Skipped unless every rank has its own device.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/core/cuda/NcclCommunicator.hpp>
#include <tessel/gnn/DistGraph.hpp>
#include <tessel/gnn/Spmm.hpp>
#include <tessel/gnn/cuda/DistSpmm.hpp>

#include <gtest/gtest.h>

#include <GnnTestGraphs.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

using namespace tessel::gnn;
using tessel::Communicator;
using tessel::ReduceOp;
using Exec = Kokkos::DefaultHostExecutionSpace;

TEST(CudaDistSpmm, equals_the_single_process_result) {
  auto const world = Communicator::world();
  int const devices = tessel::cuda::device_count();
  int const have = world.allreduce_value(devices >= world.size() ? 1 : 0, ReduceOp::min);
  if (!have)
    GTEST_SKIP() << "needs one CUDA device per rank on the node (" << devices << " visible, " << world.size()
                 << " ranks)";
  TESSEL_CUDA_CHECK(cudaSetDevice(world.rank() % devices));
  auto const nccl = tessel::cuda::make_nccl_communicator(world);
  tessel::cuda::Stream stream;
  for (bool directed : {true, false}) {
    auto g = test::awkward_graph<std::int32_t>(700, 5);
    if (!directed)
      g = gcn_normalize(g);
    DistGraph<std::int32_t> const dg(world, g);
    for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::adaptive}) {
      cuda::SpmmOptions o;
      o.algorithm = algorithm;
      o.allow_tf32 = false;
      cuda::DistSpmm dist(stream, nccl, dg, o);
      for (int f : {1, 16, 33}) {
        auto const n = static_cast<std::size_t>(g.num_rows()), uf = static_cast<std::size_t>(f);
        Matrix<Kokkos::HostSpace> x("x", n, uf), ref("ref", n, uf);
        std::mt19937_64 rng(11 + static_cast<std::uint64_t>(f));
        std::uniform_real_distribution<float> u(-1, 1);
        for (std::size_t k = 0; k < x.size(); ++k)
          x.data()[k] = u(rng);
        SpmmOptions csr;
        csr.algorithm = SpmmAlgorithm::csr;
        SpmmHandle<std::int32_t, Exec>(Exec(), g, csr).apply(Exec(), x, ref);
        auto const rows = static_cast<std::size_t>(dg.local_rows());
        std::vector<float> xl(rows * uf), yl[2];
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < uf; ++c)
            xl[r * uf + c] = x(static_cast<std::size_t>(dg.owned_rows()[r]), c);
        tessel::cuda::DeviceBuffer<float> dx(std::max<std::size_t>(xl.size(), 1)),
            dy(std::max<std::size_t>(xl.size(), 1));
        dx.copy_from_host(xl.data(), xl.size(), stream.get());
        for (auto schedule : {DistSchedule::overlapped, DistSchedule::sequential}) {
          dist.set_schedule(schedule);
          // A few applies in a row: the buffers of one apply must not be overwritten by the next.
          for (int rep = 0; rep < 3; ++rep)
            dist.apply(stream, tessel::MatrixRef<float const>(dx.data(), static_cast<std::int64_t>(rows), f),
                       tessel::MatrixRef<float>(dy.data(), static_cast<std::int64_t>(rows), f));
          auto &out = yl[schedule == DistSchedule::overlapped ? 0 : 1];
          out.resize(xl.size());
          dy.copy_to_host(out.data(), out.size(), stream.get());
          stream.synchronize(world.timeout());
        }
        EXPECT_EQ(yl[0], yl[1]) << "the schedules differ, F = " << f;
        double diff = 0, scale = 0;
        for (std::size_t k = 0; k < ref.size(); ++k)
          scale = std::max(scale, static_cast<double>(std::abs(ref.data()[k])));
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < uf; ++c) {
            double const d =
                std::abs(static_cast<double>(yl[0][r * uf + c]) - ref(static_cast<std::size_t>(dg.owned_rows()[r]), c));
            diff = std::isnan(d) ? INFINITY : std::max(diff, d);
          }
        double const worst = world.allreduce_value(diff, ReduceOp::max);
        EXPECT_LT(worst / scale, 1e-6) << name_of(algorithm) << (directed ? " directed" : " symmetric") << " F = " << f;
      }
    }
  }
}

} // namespace

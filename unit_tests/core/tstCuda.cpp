// CUDA layer tests: RAII streams, events and device buffers, and (with NCCL) a one-rank NCCL communicator.
// Every test is skipped, and reported as skipped, where no CUDA device is visible.
#include <tessel/core/Config.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#ifdef TESSEL_ENABLE_NCCL
#include <tessel/core/cuda/NcclCommunicator.hpp>
#endif

#include <gtest/gtest.h>

#include <numeric>

namespace {

using namespace std::chrono_literals;

#define TESSEL_REQUIRE_DEVICE()                                                                                        \
  if (tessel::cuda::device_count() == 0)                                                                               \
  GTEST_SKIP() << "no CUDA device visible"

TEST(Cuda, device_query_never_throws) {
  int const n = tessel::cuda::device_count();
  EXPECT_GE(n, 0);
  TESSEL_REQUIRE_DEVICE();
  EXPECT_FALSE(tessel::cuda::device_name(0).empty());
}

TEST(Cuda, buffer_round_trip_on_prioritized_stream) {
  TESSEL_REQUIRE_DEVICE();
  auto const [least, greatest] = tessel::cuda::Stream::priority_range();
  tessel::cuda::Stream urgent(greatest), background(least + 100); // the second is clamped into range
  EXPECT_EQ(urgent.priority(), greatest);
  EXPECT_EQ(background.priority(), least);
  std::vector<double> host(1000), back(1000, 0.0);
  std::iota(host.begin(), host.end(), 0.5);
  tessel::cuda::DeviceBuffer<double> buffer(host.size(), "Tessel::test::buffer");
  EXPECT_EQ(buffer.bytes(), host.size() * sizeof(double));
  buffer.copy_from_host(host.data(), host.size(), urgent.get());
  tessel::cuda::Event written;
  written.record(urgent.get());
  written.wait_on(background.get()); // the read on the other stream is ordered after the write
  buffer.copy_to_host(back.data(), back.size(), background.get());
  background.synchronize(10s);
  EXPECT_EQ(back, host);
  EXPECT_THROW(buffer.copy_from_host(host.data(), host.size() + 1, urgent.get()), tessel::Exception);
}

TEST(Cuda, timing_events_measure_elapsed_time) {
  TESSEL_REQUIRE_DEVICE();
  tessel::cuda::Stream stream;
  tessel::cuda::Event start(true), stop(true);
  tessel::cuda::DeviceBuffer<char> buffer(std::size_t{64} << 20, "Tessel::test::timing");
  std::vector<char> host(buffer.size(), 1);
  start.record(stream.get());
  buffer.copy_from_host(host.data(), host.size(), stream.get());
  stop.record(stream.get());
  stop.synchronize(10s);
  EXPECT_GT(tessel::cuda::Event::elapsed_ms(start, stop), 0.f);
}

#ifdef TESSEL_ENABLE_NCCL
TEST(Cuda, nccl_one_rank_allreduce) {
  TESSEL_REQUIRE_DEVICE();
  auto comm = tessel::cuda::make_nccl_communicator(tessel::Communicator::self(), 0);
  EXPECT_EQ(comm.kind(), tessel::CommBackend::nccl);
  EXPECT_TRUE(comm.device_memory());
  std::vector<float> host{1.f, 2.f, 3.f}, back(3);
  tessel::cuda::DeviceBuffer<float> buffer(3, "Tessel::test::nccl");
  tessel::cuda::Stream stream;
  buffer.copy_from_host(host.data(), 3, stream.get());
  comm.allreduce(buffer.data(), buffer.data(), 3, tessel::DataType::float32, tessel::ReduceOp::sum, stream.get());
  buffer.copy_to_host(back.data(), 3, stream.get());
  tessel::cuda::synchronize(comm, stream.get());
  EXPECT_EQ(back, host);
  comm.barrier();
}
#endif

} // namespace

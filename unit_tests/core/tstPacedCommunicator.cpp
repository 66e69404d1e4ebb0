// Link emulation (PacedBackend), run under mpiexec at 1, 2 and 4 ranks. Lower bounds on completion times are
// exact consequences of the port model and are asserted strictly; upper bounds only guard against a stuck
// pacer and are generous, since the machine is shared.
#include <tessel/core/PacedCommunicator.hpp>

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using tessel::Communicator;
using tessel::LinkModel;
using tessel::ReduceOp;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

Communicator paced(LinkModel link) {
  auto world = Communicator::world();
  return tessel::make_paced_communicator(world.split(0, world.rank()), link);
}

TEST(PacedCommunicator, message_arrives_no_earlier_than_the_link_allows) {
  LinkModel const link{20e6, 2e-3}; // 20 MB/s, 2 ms
  auto c = paced(link);
  ASSERT_NE(tessel::paced_backend_of(c), nullptr);
  if (c.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  std::size_t const n = 250000; // 1 MB: 50 ms on the link
  double const expected = link.transfer_seconds(n * sizeof(float)) + link.latency;
  c.barrier();
  if (c.rank() == 0) {
    std::vector<float> data(n);
    std::iota(data.begin(), data.end(), 0.f);
    auto const t0 = Clock::now();
    auto r = c.isend(data.data(), n, 1, 5);
    r.wait();
    double const sent = seconds_since(t0);
    EXPECT_GE(sent, link.transfer_seconds(n * sizeof(float)) * 0.999);
    EXPECT_LT(sent, expected + 0.5);
  } else if (c.rank() == 1) {
    std::vector<float> data(n, -1.f);
    auto const t0 = Clock::now();
    auto r = c.irecv(data.data(), n, 0, 5);
    double const cpu0 = cpu_seconds();
    r.wait();
    double const got = seconds_since(t0);
    double const cpu = cpu_seconds() - cpu0;
    // The receive was posted before the send (barrier), so it cannot complete before the link allows.
    EXPECT_GE(got, expected * 0.999 - 0.005);
    EXPECT_LT(got, expected + 0.5);
    // Waiting sleeps: it must not burn a core for the length of the transfer.
    EXPECT_LT(cpu, 0.5 * got) << "cpu " << cpu << " s over " << got << " s of waiting";
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(data[i], static_cast<float>(i));
  }
  c.barrier();
  auto const stats = tessel::paced_backend_of(c)->stats();
  if (c.rank() == 0) {
    EXPECT_EQ(stats.bytes_sent, n * sizeof(float));
  } else if (c.rank() == 1) {
    EXPECT_EQ(stats.bytes_received, n * sizeof(float));
  }
}

TEST(PacedCommunicator, messages_share_the_senders_egress_in_posting_order) {
  LinkModel const link{40e6, 0.0};
  auto c = paced(link);
  if (c.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  int const messages = 4;
  std::size_t const n = 100000; // 400 KB: 10 ms each
  double const each = link.transfer_seconds(n * sizeof(float));
  std::vector<std::vector<std::int32_t>> buffers(messages, std::vector<std::int32_t>(n));
  c.barrier();
  auto const t0 = Clock::now();
  if (c.rank() == 0) {
    std::vector<tessel::Request> requests;
    for (int m = 0; m < messages; ++m) {
      std::fill(buffers[static_cast<std::size_t>(m)].begin(), buffers[static_cast<std::size_t>(m)].end(), m);
      requests.push_back(c.isend(buffers[static_cast<std::size_t>(m)].data(), n, 1, m));
    }
    tessel::Request::wait_all(requests, c.timeout());
    EXPECT_GE(seconds_since(t0), messages * each * 0.999);
  } else if (c.rank() == 1) {
    std::vector<tessel::Request> requests;
    for (int m = 0; m < messages; ++m)
      requests.push_back(c.irecv(buffers[static_cast<std::size_t>(m)].data(), n, 0, m));
    // The m-th message leaves after the m before it: it completes no earlier than m + 1 transfers. (The order
    // of completions follows when the real transfers keep up with the link, which a loaded machine may delay.)
    for (int k = 0; k < messages; ++k) {
      auto const index = tessel::Request::wait_any(requests, c.timeout());
      EXPECT_GE(seconds_since(t0), (static_cast<double>(index) + 1) * each * 0.999 - 0.002) << "message " << index;
      EXPECT_GE(seconds_since(t0), (k + 1) * each * 0.999 - 0.002);
    }
    for (int m = 0; m < messages; ++m)
      EXPECT_EQ(buffers[static_cast<std::size_t>(m)][n - 1], m);
  }
  c.barrier();
}

TEST(PacedCommunicator, alltoallv_is_paced_by_the_busiest_port) {
  LinkModel const link{50e6, 1e-3};
  auto c = paced(link);
  int const w = c.size(), me = c.rank();
  std::size_t const per_peer = 50000; // 200 KB per peer
  std::vector<std::size_t> counts(static_cast<std::size_t>(w), per_peer), displs(static_cast<std::size_t>(w));
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), std::size_t{0});
  std::vector<float> send(per_peer * static_cast<std::size_t>(w)), recv(send.size(), -1.f);
  for (int d = 0; d < w; ++d)
    for (std::size_t i = 0; i < per_peer; ++i)
      send[static_cast<std::size_t>(d) * per_peer + i] = static_cast<float>(me * 1000 + d) + 1e-3f * (i % 100);
  c.barrier();
  auto const t0 = Clock::now();
  c.alltoallv(send.data(), counts.data(), displs.data(), recv.data(), counts.data(), displs.data(),
              tessel::DataType::float32);
  double const took = seconds_since(t0);
  // Each port carries (w - 1) messages of 200 KB.
  double const bound = w > 1 ? (w - 1) * link.transfer_seconds(per_peer * sizeof(float)) + link.latency : 0.0;
  EXPECT_GE(took, bound * 0.999 - 0.002);
  EXPECT_LT(took, bound + 1.0);
  for (int s = 0; s < w; ++s)
    for (std::size_t i = 0; i < per_peer; i += 997)
      ASSERT_EQ(recv[static_cast<std::size_t>(s) * per_peer + i],
                static_cast<float>(s * 1000 + me) + 1e-3f * (i % 100));
}

TEST(PacedCommunicator, collectives_are_correct_and_paced) {
  LinkModel const link{10e6, 1e-3};
  auto c = paced(link);
  int const w = c.size();
  std::vector<double> x(100000, 1.0 + c.rank()), y(x.size());
  c.barrier();
  auto const t0 = Clock::now();
  c.allreduce(x.data(), y.data(), x.size(), ReduceOp::sum);
  double const took = seconds_since(t0);
  double const bytes = 2.0 * (w - 1) / w * static_cast<double>(x.size() * sizeof(double));
  EXPECT_GE(took, (w > 1 ? link.transfer_seconds(static_cast<std::size_t>(bytes)) : 0.0) * 0.999);
  for (std::size_t i = 0; i < y.size(); i += 1009)
    ASSERT_EQ(y[i], w * (w + 1) / 2.0);
  // Split communicators keep pacing and share the process's ports.
  auto half = c.split(c.rank() % 2, c.rank());
  ASSERT_NE(tessel::paced_backend_of(half), nullptr);
  EXPECT_EQ(half.allreduce_value<std::int32_t>(1, ReduceOp::sum), (w + 1 - c.rank() % 2) / 2);
}

TEST(PacedCommunicator, silent_peer_times_out_with_its_rank_named) {
  auto c = paced(LinkModel{1e9, 1e-6});
  if (c.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  c.set_timeout(std::chrono::milliseconds(300));
  if (c.rank() == 1) {
    float x = 0;
    auto r = c.irecv(&x, 1, 0, 77);
    try {
      r.wait();
      FAIL() << "expected a timeout";
    } catch (tessel::TimeoutError const &e) {
      EXPECT_EQ(e.peer(), 0);
      EXPECT_NE(std::string(e.what()).find("from rank 0"), std::string::npos) << e.what();
    }
  }
  c.set_timeout(std::chrono::seconds(60));
  c.barrier();
}

TEST(PacedCommunicator, a_link_too_slow_for_the_timeout_fails_at_the_timeout) {
  // 1 KB/s: this 400 KB allreduce would take minutes; the emulated link fails at the timeout, as a real one would.
  auto c = paced(LinkModel{1e3, 1e-6});
  if (c.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  c.set_timeout(std::chrono::milliseconds(400));
  std::vector<float> x(100000, 1.0f), y(x.size());
  auto const t0 = Clock::now();
  try {
    c.allreduce(x.data(), y.data(), x.size(), ReduceOp::sum);
    ADD_FAILURE() << "expected a timeout";
  } catch (tessel::TimeoutError const &e) {
    EXPECT_NE(std::string(e.what()).find("more than the timeout of 400 ms"), std::string::npos) << e.what();
  }
  double const took = seconds_since(t0);
  EXPECT_GE(took, 0.39);
  EXPECT_LT(took, 5.0);
}

TEST(PacedCommunicator, bad_link_parameters_are_rejected) {
  auto c = paced(LinkModel{});
  auto *backend = tessel::paced_backend_of(c);
  EXPECT_THROW(backend->set_link(LinkModel{-1.0, 0.0}), tessel::Exception);
  EXPECT_THROW(backend->set_link(LinkModel{1e9, -1.0}), tessel::Exception);
  backend->set_link(LinkModel{5e9, 3e-6});
  EXPECT_EQ(backend->link().bandwidth, 5e9);
}

} // namespace

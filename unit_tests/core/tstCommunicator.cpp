// Communicator tests, run under mpiexec at 1, 2 and 4 ranks (and once more on the Self backend). Every expected
// value is computed from a closed formula, not by another call of the code under test.
#include <tessel/core/Collectives.hpp>
#include <tessel/core/Communicator.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <set>
#include <thread>

namespace {

using namespace std::chrono_literals;
using tessel::Communicator;
using tessel::DataType;
using tessel::ReduceOp;

using tessel::test::error_of;

class CommunicatorTest : public ::testing::TestWithParam<bool> {
protected:
  // Parameter false: the world communicator (MPI under mpiexec); true: a one-rank Self communicator.
  Communicator comm() const { return GetParam() ? Communicator::self() : Communicator::world(); }
};

TEST_P(CommunicatorTest, rank_and_size) {
  auto const c = comm();
  EXPECT_GE(c.rank(), 0);
  EXPECT_LT(c.rank(), c.size());
  if (!GetParam()) {
    if (char const *env = std::getenv("OMPI_COMM_WORLD_SIZE")) {
      EXPECT_EQ(c.kind(), tessel::CommBackend::mpi);
      EXPECT_EQ(c.size(), std::atoi(env));
    }
  } else {
    EXPECT_EQ(c.kind(), tessel::CommBackend::self);
    EXPECT_EQ(c.size(), 1);
  }
}

TEST_P(CommunicatorTest, broadcast_from_every_root) {
  auto const c = comm();
  c.barrier();
  for (int root = 0; root < c.size(); ++root) {
    std::vector<std::int32_t> v(17, -1);
    if (c.rank() == root)
      for (int i = 0; i < 17; ++i)
        v[static_cast<std::size_t>(i)] = root * 100 + i;
    c.broadcast(v.data(), v.size(), DataType::int32, root);
    for (int i = 0; i < 17; ++i)
      EXPECT_EQ(v[static_cast<std::size_t>(i)], root * 100 + i);
  }
}

TEST_P(CommunicatorTest, allreduce_every_op) {
  auto const c = comm();
  std::int64_t const n = c.size(), r = c.rank();
  std::size_t const count = 33;
  std::vector<std::int64_t> mine(count), out(count);
  for (std::size_t i = 0; i < count; ++i)
    mine[i] = (r + 1) * static_cast<std::int64_t>(i + 1);
  c.allreduce(mine.data(), out.data(), count, ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i)
    EXPECT_EQ(out[i], static_cast<std::int64_t>(i + 1) * n * (n + 1) / 2);
  c.allreduce(mine.data(), out.data(), count, ReduceOp::min);
  for (std::size_t i = 0; i < count; ++i)
    EXPECT_EQ(out[i], static_cast<std::int64_t>(i + 1));
  c.allreduce(mine.data(), out.data(), count, ReduceOp::max);
  for (std::size_t i = 0; i < count; ++i)
    EXPECT_EQ(out[i], static_cast<std::int64_t>(i + 1) * n);
  std::int64_t factorial = 1;
  for (std::int64_t k = 2; k <= n; ++k)
    factorial *= k;
  EXPECT_EQ(c.allreduce_value<std::int64_t>(r + 1, ReduceOp::prod), factorial);

  // Floating point, in place (send == recv).
  std::vector<double> x(count);
  for (std::size_t i = 0; i < count; ++i)
    x[i] = static_cast<double>(r) + 0.5 * static_cast<double>(i);
  c.allreduce(x.data(), x.data(), count, DataType::float64, ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i)
    EXPECT_DOUBLE_EQ(x[i], static_cast<double>(n * (n - 1) / 2) + 0.5 * static_cast<double>(i * n));
}

TEST_P(CommunicatorTest, allreduce_views_fence_the_space) {
  auto const c = comm();
  Kokkos::DefaultHostExecutionSpace space;
  Kokkos::View<float *, Kokkos::HostSpace> send("Tessel::test::send", 8), recv("Tessel::test::recv", 8);
  int const rank = c.rank();
  Kokkos::parallel_for(
      "Tessel::test::fill", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(space, 0, 8),
      KOKKOS_LAMBDA(int i) { send(i) = static_cast<float>(rank + i); });
  tessel::allreduce(space, c, send, recv, ReduceOp::max);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(recv(i), static_cast<float>(c.size() - 1 + i));
}

TEST_P(CommunicatorTest, allgather_and_reduce_scatter) {
  auto const c = comm();
  int const n = c.size(), r = c.rank();
  std::vector<std::int32_t> mine{r * 10, r * 10 + 1, r * 10 + 2}, all(3 * static_cast<std::size_t>(n));
  c.allgather(mine.data(), all.data(), 3);
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(all[static_cast<std::size_t>(3 * s + k)], s * 10 + k);

  std::size_t const block = 5;
  std::vector<float> send(block * static_cast<std::size_t>(n)), recv(block);
  for (int d = 0; d < n; ++d)
    for (std::size_t k = 0; k < block; ++k)
      send[static_cast<std::size_t>(d) * block + k] = static_cast<float>(r + 1000 * d + static_cast<int>(k));
  c.reduce_scatter(send.data(), recv.data(), block, DataType::float32, ReduceOp::sum);
  for (std::size_t k = 0; k < block; ++k)
    EXPECT_EQ(recv[k], static_cast<float>(n * (1000 * r + static_cast<int>(k)) + n * (n - 1) / 2));
}

// Uneven all-to-all: rank s sends (s + 2d) % 3 elements to rank d (zero for some pairs).
TEST_P(CommunicatorTest, alltoallv_uneven_counts) {
  auto const c = comm();
  auto const n = static_cast<std::size_t>(c.size());
  auto const r = static_cast<std::size_t>(c.rank());
  auto const count = [](std::size_t s, std::size_t d) { return (s + 2 * d) % 3; };
  std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
  for (std::size_t p = 0; p < n; ++p) {
    sc[p] = count(r, p);
    rc[p] = count(p, r);
  }
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), std::size_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), std::size_t{0});
  std::vector<std::int64_t> send(sd.back() + sc.back()), recv(rd.back() + rc.back(), -1);
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t k = 0; k < sc[d]; ++k)
      send[sd[d] + k] = static_cast<std::int64_t>(r * 10000 + d * 100 + k);
  c.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), DataType::int64);
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t k = 0; k < rc[s]; ++k)
      EXPECT_EQ(recv[rd[s] + k], static_cast<std::int64_t>(s * 10000 + r * 100 + k));
}

TEST_P(CommunicatorTest, mismatched_arguments_fail_on_every_rank) {
  auto const c = comm();
  int const n = c.size(), r = c.rank();
  if (n == 1) {
    // One rank: a self-message whose send and receive counts differ.
    std::size_t sc = 2, sd = 0, rc = 3, rd = 0;
    std::vector<float> buf(4);
    EXPECT_NE(error_of([&] { c.alltoallv(buf.data(), &sc, &sd, buf.data(), &rc, &rd, DataType::float32); }), "");
    return;
  }
  // Rank 0 believes it sends one element more to the last rank than that rank expects.
  std::vector<std::size_t> sc(static_cast<std::size_t>(n), 1), sd(static_cast<std::size_t>(n)),
      rc(static_cast<std::size_t>(n), 1), rd(static_cast<std::size_t>(n));
  if (r == 0)
    sc.back() = 2;
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), std::size_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), std::size_t{0});
  std::vector<float> send(static_cast<std::size_t>(n) + 1), recv(static_cast<std::size_t>(n));
  auto const what = error_of(
      [&] { c.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), DataType::float32); });
  EXPECT_NE(what.find("rank 0 sends 2 elements to rank " + std::to_string(n - 1)), std::string::npos) << what;

  // Allreduce with a count that differs on the last rank.
  std::vector<double> x(5), y(5);
  auto const differ =
      error_of([&] { c.allreduce(x.data(), y.data(), r == n - 1 ? 4 : 5, DataType::float64, ReduceOp::sum); });
  EXPECT_NE(differ.find("arguments differ across ranks"), std::string::npos) << differ;
  EXPECT_NE(differ.find("count=4"), std::string::npos) << differ;

  // The communicator is still usable.
  EXPECT_EQ(c.allreduce_value<std::int32_t>(1, ReduceOp::sum), n);
}

TEST_P(CommunicatorTest, require_same_names_disagreeing_ranks) {
  auto const c = comm();
  EXPECT_NO_THROW(c.require_same("config hash", 1234));
  if (c.size() > 1) {
    auto const what = error_of([&] { c.require_same("config hash", c.rank() == 1 ? 99 : 1234); });
    EXPECT_NE(what.find("config hash differs across ranks: ranks 1 disagree with rank 0"), std::string::npos) << what;
  }
}

TEST_P(CommunicatorTest, all_or_none_raises_on_every_rank) {
  auto const c = comm();
  int const n = c.size(), r = c.rank();
  int ran = 0;
  EXPECT_NO_THROW(c.all_or_none([&] { ++ran; }, "elsewhere"));
  EXPECT_EQ(ran, 1);
  // The last rank fails: it sees its own error, every other rank the message for a failure elsewhere.
  auto const what = error_of([&] {
    c.all_or_none(
        [&] {
          if (r == n - 1)
            TESSEL_THROW("file 'x.h5': field y is bad on rank ", r);
        },
        "another rank could not read 'x.h5'");
  });
  if (r == n - 1)
    EXPECT_NE(what.find("file 'x.h5': field y is bad on rank " + std::to_string(r)), std::string::npos) << what;
  else
    EXPECT_NE(what.find("another rank could not read 'x.h5'"), std::string::npos) << what;
  // The communicator is still usable.
  EXPECT_EQ(c.allreduce_value<std::int32_t>(1, ReduceOp::sum), n);
}

// Ring exchange of tiles, consumed in completion order with wait_any.
TEST_P(CommunicatorTest, tile_messages_ring_with_wait_any) {
  auto const c = comm();
  int const n = c.size(), r = c.rank();
  int const next = (r + 1) % n, prev = (r + n - 1) % n;
  int const tiles = 9;
  std::size_t const tile = 64;
  std::vector<float> out(tile * tiles), in(tile * tiles, -1.f);
  for (int t = 0; t < tiles; ++t)
    for (std::size_t k = 0; k < tile; ++k)
      out[static_cast<std::size_t>(t) * tile + k] =
          static_cast<float>(r * 1000 + t * 10) + static_cast<float>(k) * 0.5f;
  std::vector<tessel::Request> recvs, sends;
  for (int t = 0; t < tiles; ++t)
    recvs.push_back(c.irecv(in.data() + static_cast<std::size_t>(t) * tile, tile, prev, t));
  for (int t = tiles - 1; t >= 0; --t) // reversed: completion order differs from posting order
    sends.push_back(c.isend(out.data() + static_cast<std::size_t>(t) * tile, tile, next, t));
  std::set<std::size_t> seen;
  for (int k = 0; k < tiles; ++k) {
    std::size_t const t = tessel::Request::wait_any(recvs, 10s);
    EXPECT_TRUE(seen.insert(t).second) << "tile " << t << " completed twice";
    EXPECT_TRUE(recvs[t].is_null());
    for (std::size_t j = 0; j < tile; ++j)
      ASSERT_EQ(in[t * tile + j],
                static_cast<float>(prev * 1000 + static_cast<int>(t) * 10) + static_cast<float>(j) * 0.5f);
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(tiles));
  EXPECT_THROW(tessel::Request::wait_any(recvs, 1s), tessel::Exception); // all null now
  tessel::Request::wait_all(sends, 10s);
  c.barrier();
}

// One rank never sends: the receiver gets a TimeoutError naming that peer, and nothing hangs.
TEST_P(CommunicatorTest, receive_from_silent_peer_times_out) {
  auto c = comm();
  int const sender = 0, receiver = 1 % c.size();
  if (c.rank() == receiver) {
    float buffer[4];
    auto request = c.irecv(buffer, 4, sender, /*tag=*/77);
    auto const start = std::chrono::steady_clock::now();
    try {
      request.wait(200ms);
      ADD_FAILURE() << "wait returned although rank " << sender << " never sent";
    } catch (tessel::TimeoutError const &e) {
      EXPECT_EQ(e.peer(), sender);
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(sender) + " never answered"), std::string::npos)
          << e.what();
    }
    auto const waited = std::chrono::steady_clock::now() - start;
    EXPECT_GE(waited, 200ms);
    EXPECT_LT(waited, 5s);
    std::vector<tessel::Request> pending;
    pending.push_back(c.irecv(buffer, 4, sender, 78));
    pending.push_back(c.irecv(buffer + 2, 2, sender, 79));
    auto const what = error_of([&] { tessel::Request::wait_all(pending, 100ms); });
    EXPECT_NE(what.find("tag 78"), std::string::npos) << what;
    EXPECT_NE(what.find("tag 79"), std::string::npos) << what;
  }
  c.barrier();
}

// A rank that never enters a collective: the others time out instead of hanging.
TEST_P(CommunicatorTest, collective_with_absent_rank_times_out) {
  auto const world = comm();
  if (world.size() == 1)
    GTEST_SKIP() << "needs two ranks";
  auto sub = world.split(0, world.rank());
  sub.set_timeout(300ms);
  if (sub.rank() != 0) {
    auto const what = error_of([&] { sub.barrier(); });
    EXPECT_NE(what.find("barrier"), std::string::npos) << what;
    EXPECT_NE(what.find("did not complete within 300 ms"), std::string::npos) << what;
  }
  world.barrier(); // everyone has timed out by now
  if (sub.rank() == 0)
    sub.barrier(); // late arrival completes the others' abandoned barrier
  world.barrier();
  // The sub-communicator stays usable once every rank is back in step.
  EXPECT_EQ(sub.allreduce_value<std::int32_t>(1, ReduceOp::sum), sub.size());
}

TEST_P(CommunicatorTest, split_by_parity) {
  auto const c = comm();
  auto const sub = c.split(c.rank() % 2, c.rank());
  int const expected = (c.size() + 1 - c.rank() % 2) / 2;
  EXPECT_EQ(sub.size(), expected);
  EXPECT_EQ(sub.rank(), c.rank() / 2);
  // Sum of the world ranks of the same parity.
  int sum = 0;
  for (int q = c.rank() % 2; q < c.size(); q += 2)
    sum += q;
  EXPECT_EQ(sub.allreduce_value<std::int32_t>(c.rank(), ReduceOp::sum), sum);
}

TEST_P(CommunicatorTest, bad_peers_and_tags_are_rejected) {
  auto const c = comm();
  float x = 0;
  EXPECT_THROW(c.isend(&x, 1, c.size(), 0), tessel::Exception);
  EXPECT_THROW(c.irecv(&x, 1, -1, 0), tessel::Exception);
  EXPECT_THROW(c.isend(&x, 1, 0, -5), tessel::Exception);
  EXPECT_THROW(c.broadcast(&x, 1, DataType::float32, c.size()), tessel::Exception);
}

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorTest, ::testing::Values(false, true),
                         [](auto const &info) { return info.param ? "self" : "world"; });

TEST(Communicator, self_messages_match_by_tag) {
  auto const c = Communicator::self();
  int a = 1, b = 2, ra = 0, rb = 0;
  auto rb_req = c.irecv(&rb, 1, 0, 2);
  auto sa = c.isend(&a, 1, 0, 1);
  EXPECT_FALSE(sa.test()); // no receive for tag 1 yet
  auto sb = c.isend(&b, 1, 0, 2);
  EXPECT_TRUE(rb_req.test());
  EXPECT_EQ(rb, 2);
  auto ra_req = c.irecv(&ra, 1, 0, 1);
  ra_req.wait(1s);
  sa.wait(1s);
  EXPECT_EQ(ra, 1);
  long big[4];
  auto too_small = [&] {
    auto s = c.isend(big, 4, DataType::int64, 0, 9);
    auto r = c.irecv(big, 2, DataType::int64, 0, 9);
  };
  EXPECT_THROW(too_small(), tessel::Exception);
}

TEST(Communicator, data_type_names_and_sizes) {
  EXPECT_EQ(tessel::size_of(DataType::bfloat16), 2u);
  EXPECT_EQ(tessel::size_of(DataType::float64), 8u);
  EXPECT_STREQ(tessel::name_of(DataType::uint32), "uint32");
  EXPECT_STREQ(tessel::name_of(ReduceOp::max), "max");
  EXPECT_EQ(tessel::data_type_of<float>, DataType::float32);
  EXPECT_EQ(tessel::data_type_of<std::uint8_t const>, DataType::uint8);
}

} // namespace

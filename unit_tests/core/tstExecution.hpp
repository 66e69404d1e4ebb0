#include <tessel/core/Execution.hpp>

#include <TesselToolsRecorder.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace {

TEST(TEST_CATEGORY, make_instances_run_independent_work) {
  using Space = TEST_EXECSPACE;
  auto instances = tessel::make_instances(Space(), 3);
  ASSERT_EQ(instances.size(), 3u);
  int const n = 1000;
  std::vector<Kokkos::View<int *, typename Space::memory_space>> out;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    out.emplace_back(Kokkos::view_alloc(instances[i], "Tessel::test::out"), n);
    auto v = out.back();
    int const value = static_cast<int>(i) + 1;
    Kokkos::parallel_for(
        "Tessel::test::fill", Kokkos::RangePolicy<Space>(instances[i], 0, n),
        KOKKOS_LAMBDA(int j) { v(j) = value * j; });
  }
  for (std::size_t i = 0; i < instances.size(); ++i) {
    instances[i].fence();
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out[i]);
    for (int j = 0; j < n; j += 97)
      EXPECT_EQ(host(j), static_cast<int>(i + 1) * j);
  }
}

TEST(TEST_CATEGORY, make_instances_any_count) {
  // More instances than threads (the default on a 2-core machine with 3 parts): the instances share threads.
  using Space = TEST_EXECSPACE;
  int const threads = tessel::compat::concurrency(Space());
  for (int n : {1, 2, threads, threads + 1, 2 * threads + 3}) {
    auto instances = tessel::make_instances(Space(), n);
    ASSERT_EQ(instances.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      auto const &space = instances[static_cast<std::size_t>(i)];
      EXPECT_GE(tessel::compat::concurrency(space), 1);
      Kokkos::View<int *, typename Space::memory_space> v(Kokkos::view_alloc(space, "Tessel::test::v"), 64);
      Kokkos::parallel_for(
          "Tessel::test::fill", Kokkos::RangePolicy<Space>(space, 0, 64), KOKKOS_LAMBDA(int j) { v(j) = i + j; });
      int sum = 0;
      Kokkos::parallel_reduce(
          "Tessel::test::sum", Kokkos::RangePolicy<Space>(space, 0, 64),
          KOKKOS_LAMBDA(int j, int &acc) { acc += v(j); }, sum);
      EXPECT_EQ(sum, 64 * i + 63 * 64 / 2) << n << " instances, instance " << i;
    }
  }
}

TEST(TEST_CATEGORY, make_instances_rejects_zero) {
  EXPECT_THROW(tessel::make_instances(TEST_EXECSPACE(), 0), tessel::Exception);
}

TEST(TEST_CATEGORY, timer_covers_enqueued_work) {
  using Space = TEST_EXECSPACE;
  Space space;
  tessel::Timer<Space> timer(space);
  // A kernel that must take measurable time: the timer fences before reading the clock.
  Kokkos::View<double *, typename Space::memory_space> v(Kokkos::view_alloc(space, "Tessel::test::timer"), 1 << 20);
  for (int rep = 0; rep < 20; ++rep)
    Kokkos::parallel_for(
        "Tessel::test::work", Kokkos::RangePolicy<Space>(space, 0, v.extent(0)),
        KOKKOS_LAMBDA(int i) { v(i) = v(i) * 0.5 + i; });
  double const t = timer.seconds();
  EXPECT_GT(t, 0.0);
  timer.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(timer.seconds(), 0.019);
}

TEST(TEST_CATEGORY, scoped_region_is_visible_to_kokkos_tools) {
  tessel::test::ToolsRecorder recorder;
  { tessel::ScopedRegion region("Tessel::test::region"); }
  ASSERT_EQ(recorder.regions.size(), 1u);
  EXPECT_EQ(recorder.regions[0], "Tessel::test::region");
}

} // namespace

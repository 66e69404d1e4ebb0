// Execution-space instances and threads: every kernel of a handle and of training runs on the instance it was
// given (Kokkos Tools device ids, as ArborX checks its instances), the deterministic kernels give bitwise the same
// result on every backend and thread count as on Serial, and a training run's loss curve does not depend on the
// number of threads.
#include <tessel/core/Execution.hpp>
#include <tessel/gnn/Model.hpp>

#include <GnnTestGraphs.hpp>
#include <TesselToolsRecorder.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace {

using namespace tessel::gnn;
using Space = TEST_EXECSPACE;
using Mem = Space::memory_space;
namespace KT = Kokkos::Tools::Experimental;

/// A graph large enough that every thread gets rows, with skewed degrees.
Graph<std::int32_t> test_graph() { return test::awkward_graph<std::int32_t>(3000, 17, 8.0); }

Matrix<Kokkos::HostSpace> random_matrix(std::size_t n, std::size_t f, std::uint64_t seed) {
  Matrix<Kokkos::HostSpace> x("Tessel::test::x", n, f);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.data()[k] = u(rng);
  return x;
}

SpmmOptions fixed(SpmmAlgorithm algorithm) {
  SpmmOptions o;
  o.algorithm = algorithm;
  o.part_size = 64;
  o.timing = false; // adaptive: the cost model's plan, the same on every run
  return o;
}

/// Y = A X on \p space with a fresh handle, in the original vertex order.
template <class ExecSpace>
std::vector<float> apply_on(ExecSpace const &space, Graph<std::int32_t> const &g, SpmmOptions const &o,
                            Matrix<Kokkos::HostSpace> const &xh) {
  using M = typename ExecSpace::memory_space;
  auto const n = xh.extent(0), f = xh.extent(1);
  SpmmHandle<std::int32_t, ExecSpace> handle(space, g, o);
  auto x = Kokkos::create_mirror_view_and_copy(space, xh);
  Matrix<M> xp(Kokkos::view_alloc(space, "Tessel::test::xp"), n, f),
      y(Kokkos::view_alloc(space, "Tessel::test::y"), n, f), yo(Kokkos::view_alloc(space, "Tessel::test::yo"), n, f);
  permute_rows(space, handle.permutation(), ConstMatrix<M>(x), xp);
  handle.apply(space, xp, y);
  unpermute_rows(space, handle.permutation(), ConstMatrix<M>(y), yo);
  auto out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), yo);
  return std::vector<float>(out.data(), out.data() + out.size());
}

TEST(TEST_CATEGORY, recorder_tells_backends_apart) {
  // The check below can only fail if a kernel launched elsewhere shows another device id: prove that it does
  // for the spaces this build has (a host backend's instances share one id up to Kokkos 4.6, backends differ).
  if constexpr (std::is_same_v<Space, Kokkos::DefaultHostExecutionSpace>) {
    GTEST_SKIP() << "the default host space is the tested one: no other backend to launch on";
  } else {
    tessel::test::ToolsRecorder recorder;
    Kokkos::parallel_for("Tessel::test::elsewhere", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, 4),
                         KOKKOS_LAMBDA(int){});
    ASSERT_EQ(recorder.kernel_devices.size(), 1u);
    EXPECT_NE(recorder.kernel_devices[0], KT::device_id(Space()));
  }
}

TEST(TEST_CATEGORY, handle_and_training_run_on_the_given_instance) {
  auto const instances = tessel::make_instances(Space(), 2);
  Space const space = instances[1];
  auto const want = KT::device_id(space);
  auto const g = gcn_normalize(test_graph());
  auto const xh = random_matrix(static_cast<std::size_t>(g.num_rows()), 24, 3);
  SbmOptions sbm;
  sbm.nodes = 400;
  sbm.community_size = 40;
  sbm.classes = 3;
  sbm.features = 8;
  auto const data = generate_sbm(sbm); // (not an operation on an instance)
  tessel::test::ToolsRecorder recorder;
  for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo,
                         SpmmAlgorithm::coo_atomic, SpmmAlgorithm::tiles, SpmmAlgorithm::kk})
    apply_on(space, g, fixed(algorithm), xh);
  SpmmOptions timed = fixed(SpmmAlgorithm::adaptive);
  timed.timing = true;
  {
    SpmmHandle<std::int32_t, Space> handle(space, g, timed);
    auto x = Kokkos::create_mirror_view_and_copy(space, xh);
    Matrix<Mem> y(Kokkos::view_alloc(space, "Tessel::test::y"), xh.extent(0), xh.extent(1));
    for (int i = 0; i < 40 && !handle.tuned(24); ++i)
      handle.apply(space, x, y);
    EXPECT_TRUE(handle.tuned(24));
  }
  TrainOptions o;
  o.epochs = 2;
  o.spmm.part_size = 40;
  train(space, data, o);
  ASSERT_FALSE(recorder.kernels.empty());
  for (std::size_t k = 0; k < recorder.kernels.size(); ++k)
    EXPECT_EQ(recorder.kernel_devices[k], want) << "kernel '" << recorder.kernels[k] << "' ran on device id "
                                                << recorder.kernel_devices[k] << ", the instance given is " << want;
  int tessel_fences = 0;
  for (std::size_t k = 0; k < recorder.fences.size(); ++k)
    if (tessel::test::tessel_labelled(recorder.fences[k])) {
      ++tessel_fences;
      EXPECT_EQ(recorder.fence_devices[k], want) << "fence '" << recorder.fences[k] << "'";
    }
  if (tessel::compat::has_labelled_fences) {
    EXPECT_GT(tessel_fences, 0);
  }
}

TEST(TEST_CATEGORY, deterministic_kernels_equal_serial_bitwise) {
#ifndef KOKKOS_ENABLE_SERIAL
  GTEST_SKIP() << "this Kokkos has no Serial backend to compare with";
#else
  auto const g = gcn_normalize(test_graph());
  std::vector<Space> spaces{Space()};
  // One thread as well as all of them (a partition of one thread where the space has more).
  int const threads = tessel::compat::concurrency(Space());
  if (threads > 1)
    spaces.push_back(tessel::make_instances(Space(), threads)[0]);
  for (std::size_t f : {std::size_t{5}, std::size_t{37}, std::size_t{64}}) {
    auto const xh = random_matrix(static_cast<std::size_t>(g.num_rows()), f, 100 + f);
    for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo,
                           SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::adaptive}) {
      auto const serial = apply_on(Kokkos::Serial(), g, fixed(algorithm), xh);
      for (std::size_t s = 0; s < spaces.size(); ++s) {
        auto const here = apply_on(spaces[s], g, fixed(algorithm), xh);
        ASSERT_EQ(here.size(), serial.size());
        EXPECT_EQ(std::memcmp(here.data(), serial.data(), here.size() * sizeof(float)), 0)
            << name_of(algorithm) << ", F = " << f << ", on " << tessel::compat::concurrency(spaces[s])
            << " thread(s) of " << Space::name() << ": not bitwise equal to Serial";
      }
    }
  }
#endif
}

TEST(TEST_CATEGORY, training_loss_curve_does_not_depend_on_threads) {
  int const threads = tessel::compat::concurrency(Space());
  if (threads < 2)
    GTEST_SKIP() << Space::name() << " has one thread here";
  SbmOptions sbm;
  sbm.nodes = 1200;
  sbm.community_size = 60;
  sbm.classes = 4;
  sbm.features = 16;
  auto const data = generate_sbm(sbm);
  TrainOptions o;
  o.epochs = 8;
  o.patience = 0;
  o.spmm.part_size = 60;
  o.spmm.timing = false; // a timed selection may pick other (equally exact) kernels at another thread count
  auto const all = train(Space(), data, o);
  auto const one = train(tessel::make_instances(Space(), threads)[0], data, o);
  ASSERT_EQ(all.history.size(), one.history.size());
  for (std::size_t e = 0; e < all.history.size(); ++e) {
    EXPECT_EQ(all.history[e].train_loss, one.history[e].train_loss) << "epoch " << e;
    EXPECT_EQ(all.history[e].val_loss, one.history[e].val_loss) << "epoch " << e;
  }
  EXPECT_EQ(all.test_acc, one.test_acc);
}

} // namespace

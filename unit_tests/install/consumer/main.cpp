// Uses the installed headers and libraries the way an application does, under GoogleTest: the config header,
// ScopeGuard, a communicator, a Kokkos kernel on an execution-space instance, the GEMM and JSON of core, HDF5 I/O
// (when built in), and one public operation of each installed package.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Execution.hpp>
#include <tessel/core/Gemm.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/ShareDirectory.hpp>
#include <tessel/core/Version.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif
#ifdef CONSUMER_HAS_GNN
#include <tessel/gnn/Spmm.hpp>
#endif
#ifdef CONSUMER_HAS_MOE
#include <tessel/moe/MoeConfig.hpp>
#endif
#ifdef CONSUMER_HAS_SCHED
#include <tessel/sched/Model.hpp>
#endif

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace {

using Host = Kokkos::DefaultHostExecutionSpace;

double instance_sum() {
  auto const instances = tessel::make_instances(Host(), 2);
  double sum = 0;
  Kokkos::parallel_reduce(
      "Tessel::consumer::sum", Kokkos::RangePolicy<Host>(instances[1], 0, 100),
      KOKKOS_LAMBDA(int i, double &s) { s += i; }, sum);
  return sum;
}

// The installed library reports the version of the installed headers and the commit it was built from.
TEST(Consumer, version_of_headers_and_library) {
  EXPECT_EQ(tessel::version(), TESSEL_VERSION_STRING);
  EXPECT_EQ(tessel::version_number(), TESSEL_VERSION);
  EXPECT_EQ(TESSEL_VERSION, TESSEL_VERSION_MAJOR * 10000 + TESSEL_VERSION_MINOR * 100 + TESSEL_VERSION_PATCH);
  // The commit of the build (a build reconfigured at a later commit but not rebuilt installs the earlier one).
  std::string const hash = tessel::git_hash();
  EXPECT_TRUE(hash == "unknown" ||
              (hash.size() == 12 && hash.find_first_not_of("0123456789abcdef") == std::string::npos))
      << hash;
}

// The installed library finds the installed data files beside itself (not the build tree's copy).
TEST(Consumer, share_directory_of_the_installation) {
  EXPECT_EQ(std::filesystem::canonical(tessel::share_directory()),
            std::filesystem::canonical(CONSUMER_EXPECT_SHARE_DIR));
#ifdef CONSUMER_HAS_SCHED
  EXPECT_TRUE(std::filesystem::is_regular_file(tessel::share_file("sched/clusters/crius_1280.csv")));
#endif
}

TEST(Consumer, allreduce_of_a_kokkos_reduction) {
  auto const comm = tessel::Communicator::world();
  EXPECT_EQ(comm.allreduce_value(instance_sum(), tessel::ReduceOp::sum), 4950.0 * comm.size());
}

// The GEMM reaches Kokkos Kernels and the BLAS through libtessel_core alone (the consumer links neither).
TEST(Consumer, gemm_through_the_installed_core) {
  std::vector<double> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4, -1.0);
  tessel::gemm(Host(), tessel::Op::none, tessel::Op::none, 1.0, tessel::MatrixRef<double const>(a.data(), 2, 2),
               tessel::MatrixRef<double const>(b.data(), 2, 2), 0.0, tessel::MatrixRef<double>(c.data(), 2, 2));
  Kokkos::fence();
  EXPECT_EQ(c, (std::vector<double>{19, 22, 43, 50}));
}

TEST(Consumer, json_keeps_values_and_key_order) {
  auto const doc = tessel::parse_json(R"({"ranks": 2, "name": "x"})", "consumer");
  EXPECT_EQ(tessel::json_get<int>(doc, "ranks", "consumer"), 2);
  EXPECT_EQ(doc.dump(), R"({"ranks":2,"name":"x"})");
  EXPECT_THROW(tessel::json_get<std::string>(doc, "ranks", "consumer"), tessel::Exception);
}

#ifdef TESSEL_ENABLE_HDF5
TEST(Consumer, hdf5_write_and_read_back) {
  auto const comm = tessel::Communicator::world();
  std::string const path = "consumer_" + std::to_string(comm.rank()) + ".h5";
  double const sum = instance_sum();
  {
    tessel::h5::File f(path, tessel::h5::Mode::truncate);
    f.write("x", std::vector<double>{sum});
    f.close();
  }
  EXPECT_EQ(tessel::h5::File(path).read<double>("x").data.at(0), sum);
}
#endif

#ifdef CONSUMER_HAS_GNN
// Y = A X on a path 0 - 1 - 2 (symmetrized): each row sums its neighbours' features.
TEST(Consumer, gnn_spmm_on_a_path) {
  std::vector<std::pair<std::int32_t, std::int32_t>> const edges{{0, 1}, {1, 2}};
  auto const g =
      tessel::gnn::graph_from_edges<std::int32_t>("path", 3, edges, tessel::gnn::EdgeListOptions{true, true});
  tessel::gnn::SpmmOptions options;
  options.algorithm = tessel::gnn::SpmmAlgorithm::csr;
  tessel::gnn::SpmmHandle<std::int32_t, Host> h(Host(), g, options);
  tessel::gnn::Matrix<Kokkos::HostSpace> x("Tessel::consumer::x", 3, 2), y("Tessel::consumer::y", 3, 2);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 2; ++j)
      x(i, j) = static_cast<float>(1 + i + 10 * j);
  h.apply(Host(), x, y);
  Host().fence();
  EXPECT_FLOAT_EQ(y(0, 0), 2.0f);
  EXPECT_FLOAT_EQ(y(1, 0), 4.0f);
  EXPECT_FLOAT_EQ(y(2, 0), 2.0f);
  EXPECT_FLOAT_EQ(y(1, 1), 24.0f);
}
#endif

#ifdef CONSUMER_HAS_MOE
TEST(Consumer, moe_config_validation) {
  tessel::moe::MoeConfig c;
  c.tokens = 16;
  c.hidden = 8;
  c.ffn = 16;
  c.experts = 4;
  c.topk = 2;
  EXPECT_NO_THROW(c.validate(1));
  c.topk = 5; // more than the experts
  EXPECT_THROW(c.validate(1), tessel::Exception);
}
#endif

#ifdef CONSUMER_HAS_SCHED
TEST(Consumer, sched_builtin_model_catalog) {
  auto const &catalog = tessel::sched::ModelCatalog::builtin();
  int const gpt = catalog.find("gpt__1.3B");
  ASSERT_GE(gpt, 0);
  EXPECT_EQ(catalog[gpt].name(), "gpt__1.3B");
  EXPECT_EQ(catalog.find("gpt__nosuch"), -1);
}
#endif

} // namespace

int main(int argc, char **argv) {
  tessel::ScopeGuard guard(argc, argv);
  std::printf("%s (Tessel %s)\n", tessel::build_summary().c_str(), TESSEL_VERSION_STRING);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

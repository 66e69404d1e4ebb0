// Shared main of every Tessel test binary: MPI (under mpiexec) and Kokkos come up through tessel::ScopeGuard
// before GoogleTest sees the remaining flags. Under MPI only rank 0 prints the full report; other ranks print
// their failures, prefixed with their rank, so a failure on any rank is visible and fails the run.
#include <tessel/core/Communicator.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : _rank(rank) {}
  void OnTestPartResult(::testing::TestPartResult const &result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", _rank, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

private:
  int _rank;
};

} // namespace

int main(int argc, char **argv) {
  // Layers that tune on first use write a per-user cache: a test run never writes the user's own.
  if (std::getenv("TESSEL_CACHE_DIR") == nullptr)
    setenv("TESSEL_CACHE_DIR", (std::filesystem::temp_directory_path() / "tessel-test-cache").c_str(), 1);
  tessel::ScopeGuard guard(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int const rank = tessel::Communicator::world().rank();
  if (rank != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int const result = RUN_ALL_TESTS();
  // Every rank must agree on success, otherwise a rank that passed would hide one that failed.
  int const failures = tessel::Communicator::world().allreduce_value(result != 0 ? 1 : 0, tessel::ReduceOp::sum);
  return failures == 0 ? 0 : 1;
}

// The huge-page allocations (Memory.hpp): where the arrays lie (2 MiB-aligned spans, zero-filled, the padding never in
// the used part), what the OS's refusal leaves (the same arrays on ordinary pages, the reason recorded), that the
// kernels and a model compute the same results bitwise with and without, and the tools' --huge-pages option.
#include <tessel/core/Error.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Memory.hpp>
#include <tessel/gnn/Model.hpp>
#include <tessel/gnn/Spmm.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/gnn/Options.hpp>

#include "impl/HugePages.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>

#include <sys/mman.h>

namespace {

using namespace tessel::gnn;
using Space = Kokkos::DefaultHostExecutionSpace;
using Mem = Space::memory_space;

std::uintptr_t address(void const *p) { return reinterpret_cast<std::uintptr_t>(p); }

/// The system's transparent huge page mode ("always", "madvise", "never"; "" where it cannot be read).
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  auto const open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

bool all_zero(Matrix<Mem> const &m) {
  for (std::size_t k = 0; k < m.size(); ++k)
    if (m.data()[k] != 0.0f)
      return false;
  return true;
}

/// Every test starts from zero counts and the system's advice call, and leaves them so.
class HugePagesTest : public ::testing::Test {
protected:
  void SetUp() override { Impl::reset_huge_page_stats(); }
  void TearDown() override {
    if (_replaced)
      Impl::set_advise_function(_system);
    Impl::reset_huge_page_stats();
  }
  void replace_advice(Impl::AdviseFunction f) {
    _system = Impl::set_advise_function(f);
    _replaced = true;
  }

private:
  Impl::AdviseFunction _system = nullptr;
  bool _replaced = false;
};

int refuse(void *, std::size_t, int) {
  errno = EINVAL;
  return -1;
}

int advice_calls = 0;
/// Counts the requests for huge pages (not the collapses of spans that were already in memory).
int count_and_accept(void *, std::size_t, int advice) {
  advice_calls += advice == MADV_HUGEPAGE;
  return 0;
}

TEST_F(HugePagesTest, matrices_lie_on_aligned_advised_spans) {
  for (std::size_t cols : {std::size_t{256}, std::size_t{64}, std::size_t{37}, std::size_t{1}}) {
    std::size_t const rows = (3 * huge_page_size) / (cols * sizeof(float)) + 11;
    auto const before = huge_page_stats();
    auto const m = make_matrix(Space(), "Tessel::test::m", rows, cols, HugePages::on);
    ASSERT_EQ(m.extent(0), rows);
    ASSERT_EQ(m.extent(1), cols);
    EXPECT_EQ(m.label(), "Tessel::test::m");
    EXPECT_TRUE(m.span_is_contiguous());
    // The padding is whole rows of the allocation: the matrix starts at its first row on or after a boundary.
    auto const offset = address(m.data()) % huge_page_size;
    EXPECT_LT(offset, cols * sizeof(float)) << "F = " << cols;
    EXPECT_TRUE(all_zero(m)) << "F = " << cols;
    auto const after = huge_page_stats();
    if (after.refused == before.refused) {
      EXPECT_EQ(after.advised, before.advised + 1);
      // The advised span covers the matrix from the boundary at or below it to the one at or above its end.
      EXPECT_GE(after.advised_bytes - before.advised_bytes,
                static_cast<std::int64_t>(rows * cols * sizeof(float) + offset));
      EXPECT_EQ((after.advised_bytes - before.advised_bytes) % static_cast<std::int64_t>(huge_page_size), 0);
    } else {
      EXPECT_FALSE(after.last_refusal.empty());
    }
  }
}

TEST_F(HugePagesTest, arrays_are_aligned_and_copies_equal) {
  std::size_t const n = huge_page_size / sizeof(std::int32_t) + 5;
  auto const a = make_array<std::int32_t>(Space(), "Tessel::test::a", n, HugePages::on);
  ASSERT_EQ(a.extent(0), n);
  EXPECT_EQ(address(a.data()) % huge_page_size, 0u);
  for (std::size_t k = 0; k < n; ++k)
    ASSERT_EQ(a(k), 0) << k;
  Kokkos::View<std::int32_t *, Mem> source("Tessel::test::source", n);
  for (std::size_t k = 0; k < n; ++k)
    source(k) = static_cast<std::int32_t>(k * 2654435761u);
  auto const copy = copy_array(Space(), "Tessel::test::copy", source, HugePages::on);
  ASSERT_EQ(copy.extent(0), n);
  EXPECT_EQ(address(copy.data()) % huge_page_size, 0u);
  EXPECT_NE(copy.data(), source.data());
  for (std::size_t k = 0; k < n; ++k)
    ASSERT_EQ(copy(k), source(k)) << k;
}

TEST_F(HugePagesTest, small_arrays_and_off_take_no_advice) {
  advice_calls = 0;
  replace_advice(count_and_accept);
  auto const small = make_matrix(Space(), "Tessel::test::small", 100, 64, HugePages::on); // 25 KiB
  EXPECT_EQ(small.extent(0), 100u);
  EXPECT_TRUE(all_zero(small));
  auto const off = make_matrix(Space(), "Tessel::test::off", 20000, 64, HugePages::off); // 5 MiB
  EXPECT_EQ(off.extent(0), 20000u);
  EXPECT_TRUE(all_zero(off));
  auto const empty = make_matrix(Space(), "Tessel::test::empty", 0, 0, HugePages::on);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(advice_calls, 0);
  EXPECT_EQ(huge_page_stats().advised, 0);
  auto const on = make_matrix(Space(), "Tessel::test::on", 20000, 64, HugePages::on);
  EXPECT_EQ(advice_calls, 1);
  EXPECT_EQ(huge_page_stats().advised, 1);
}

TEST_F(HugePagesTest, a_refusal_leaves_ordinary_pages_and_says_why) {
  replace_advice(refuse);
  std::size_t const rows = 9000, cols = 70;
  auto const m = make_matrix(Space(), "Tessel::test::refused", rows, cols, HugePages::on);
  ASSERT_EQ(m.extent(0), rows);
  ASSERT_EQ(m.extent(1), cols);
  EXPECT_TRUE(all_zero(m));
  EXPECT_LT(address(m.data()) % huge_page_size, cols * sizeof(float));
  // The array is usable as any other.
  for (std::size_t k = 0; k < m.size(); ++k)
    m.data()[k] = static_cast<float>(k);
  EXPECT_EQ(m(rows - 1, cols - 1), static_cast<float>(rows * cols - 1));
  auto const s = huge_page_stats();
  EXPECT_EQ(s.advised, 0);
  EXPECT_EQ(s.advised_bytes, 0);
  EXPECT_EQ(s.refused, 1);
  EXPECT_NE(s.last_refusal.find("madvise(MADV_HUGEPAGE) refused"), std::string::npos) << s.last_refusal;
  EXPECT_NE(s.last_refusal.find("errno " + std::to_string(EINVAL)), std::string::npos) << s.last_refusal;
  // What the tools report.
  auto const line = huge_pages_line(HugePages::on);
  EXPECT_NE(line.find("huge pages on: 0 allocations advised (0.0 MB), 1 refused: madvise(MADV_HUGEPAGE) refused"),
            std::string::npos)
      << line;
  auto const json = huge_pages_json(HugePages::on);
  EXPECT_EQ(json.at("refused").get<std::int64_t>(), 1);
  EXPECT_EQ(json.at("last_refusal").get<std::string>(), s.last_refusal);
}

TEST_F(HugePagesTest, advised_memory_gets_huge_pages_where_the_system_allows) {
  auto const mode = thp_mode();
  if (mode != "always" && mode != "madvise")
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' here";
  std::size_t const rows = 16384, cols = 256; // 16 MiB
  auto const m = make_matrix(Space(), "Tessel::test::backed", rows, cols, HugePages::on);
  ASSERT_EQ(huge_page_stats().refused, 0) << huge_page_stats().last_refusal;
  auto const backed = huge_page_bytes(m.data(), m.size() * sizeof(float));
  ASSERT_GE(backed, 0) << "/proc/self/smaps is not readable";
  // The kernel may fall back to small pages for some spans when memory is fragmented, never for all of them.
  EXPECT_GT(backed, 0) << "no huge page backs 16 MiB advised in THP mode " << mode;
  EXPECT_LE(backed, static_cast<std::int64_t>(rows * cols * sizeof(float)));
}

/// An R-MAT graph with more than 2 MiB of column indices, so its arrays in a handle are advised too.
Graph<std::int32_t> large_graph() {
  RmatOptions o;
  o.scale = 15;
  o.edge_factor = 12;
  o.features = 0;
  auto g = gcn_normalize(generate_rmat(o).graph);
  EXPECT_GE(static_cast<std::size_t>(g.nnz()) * sizeof(std::int32_t), huge_page_size);
  return g;
}

Matrix<Mem> random_matrix(std::size_t rows, std::size_t cols, HugePages huge) {
  auto m = make_matrix(Space(), "Tessel::test::x", rows, cols, huge);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::size_t k = 0; k < m.size(); ++k)
    m.data()[k] = u(rng);
  return m;
}

/// Y of a handle of \p algorithm (cost-model plans: the same plan either way) on memory as \p huge says.
Matrix<Mem> apply_once(Graph<std::int32_t> const &g, SpmmAlgorithm algorithm, std::size_t f, HugePages huge) {
  SpmmOptions o;
  o.algorithm = algorithm;
  o.timing = false;
  o.huge_pages = huge;
  SpmmHandle<std::int32_t, Space> handle(Space(), g, o);
  auto const n = static_cast<std::size_t>(g.num_rows());
  auto const x = random_matrix(n, f, huge);
  auto const xp = make_matrix(Space(), "Tessel::test::xp", n, f, huge);
  auto const y = make_matrix(Space(), "Tessel::test::y", n, f, huge);
  auto const yo = make_matrix(Space(), "Tessel::test::yo", n, f, HugePages::off);
  permute_rows(Space(), handle.permutation(), ConstMatrix<Mem>(x), xp);
  handle.apply(Space(), xp, y);
  unpermute_rows(Space(), handle.permutation(), ConstMatrix<Mem>(y), yo);
  Space().fence();
  return yo;
}

void expect_bitwise_equal(Matrix<Mem> const &a, Matrix<Mem> const &b, std::string const &what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t k = 0; k < a.size(); ++k)
    ASSERT_EQ(a.data()[k], b.data()[k]) << what << ", element " << k;
}

TEST_F(HugePagesTest, kernels_compute_the_same_with_and_without) {
  auto const g = large_graph();
  for (auto algorithm : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::adaptive})
    for (std::size_t f : {std::size_t{17}, std::size_t{64}}) {
      std::string const what = std::string(name_of(algorithm)) + ", F = " + std::to_string(f);
      Impl::reset_huge_page_stats();
      auto const on = apply_once(g, algorithm, f, HugePages::on);
      auto const advised = huge_page_stats().advised + huge_page_stats().refused;
      // X, its permuted copy and Y, and the handle's columns and values at least.
      EXPECT_GE(advised, 5) << what;
      auto const off = apply_once(g, algorithm, f, HugePages::off);
      expect_bitwise_equal(on, off, what);
    }
  // And where the OS refuses the advice.
  replace_advice(refuse);
  auto const refused = apply_once(g, SpmmAlgorithm::adaptive, 64, HugePages::on);
  EXPECT_GE(huge_page_stats().refused, 5);
  expect_bitwise_equal(refused, apply_once(g, SpmmAlgorithm::adaptive, 64, HugePages::off), "refused advice");
}

TEST_F(HugePagesTest, a_model_trains_the_same_with_and_without) {
  SbmOptions s;
  s.nodes = 9000;
  s.community_size = 90;
  s.p_in = 0.05;
  s.features = 64; // 2.3 MB of features, as the activations and gradients of 64 hidden units
  auto const data = generate_sbm(s);
  TrainOptions o;
  o.hidden = 64;
  o.epochs = 4;
  o.patience = 0;
  o.spmm.algorithm = SpmmAlgorithm::csr;
  o.spmm.huge_pages = HugePages::off;
  auto const off = train(Space(), data, o);
  EXPECT_EQ(huge_page_stats().advised + huge_page_stats().refused, 0);
  o.spmm.huge_pages = HugePages::on;
  auto const on = train(Space(), data, o);
  EXPECT_GE(huge_page_stats().advised + huge_page_stats().refused, 4);
  ASSERT_EQ(on.history.size(), off.history.size());
  for (std::size_t e = 0; e < on.history.size(); ++e) {
    EXPECT_EQ(on.history[e].train_loss, off.history[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(on.history[e].val_loss, off.history[e].val_loss) << "epoch " << e + 1;
  }
  EXPECT_EQ(on.test_acc, off.test_acc);
}

TEST(HugePagesOption, parsed_from_the_command_line) {
  EXPECT_EQ(parse_huge_pages("on"), HugePages::on);
  EXPECT_EQ(parse_huge_pages("off"), HugePages::off);
  EXPECT_STREQ(name_of(HugePages::on), "on");
  EXPECT_STREQ(name_of(HugePages::off), "off");
  try {
    parse_huge_pages("yes");
    ADD_FAILURE() << "'yes' was accepted";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("'yes' (expected on or off)"), std::string::npos) << e.what();
  }
  {
    tessel::CommandLine args(std::vector<std::string>{});
    EXPECT_EQ(spmm_options(args, SpmmAlgorithm::csr).huge_pages, HugePages::on); // the default
    args.finish();
  }
  for (auto const &[text, mode] : {std::pair<char const *, HugePages>{"off", HugePages::off}, {"on", HugePages::on}}) {
    tessel::CommandLine args({"--huge-pages", text});
    EXPECT_EQ(spmm_options(args, SpmmAlgorithm::adaptive).huge_pages, mode) << text;
    args.finish();
  }
  tessel::CommandLine bad({"--huge-pages", "sometimes"});
  try {
    spmm_options(bad, SpmmAlgorithm::csr);
    ADD_FAILURE() << "--huge-pages sometimes was accepted";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("option --huge-pages expects on or off, got 'sometimes'"), std::string::npos)
        << e.what();
  }
}

} // namespace

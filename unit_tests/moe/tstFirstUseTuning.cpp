// First-use tuning of the host layer, under mpiexec at 1, 2 and 4 ranks: a shape no registry knows is tuned on the
// first comet forward (every rank picks the same parameters, the output is right, rank 0 caches the result); a
// second layer of that shape takes them from the cache without a search; the budget bounds the search; the option
// and TESSEL_MOE_TUNE=off turn it off; given parameters are never replaced; a corrupt or unwritable cache is a
// warning. Each test uses its own cache file in a temporary directory, never the user's.
#include "MoeTestUtils.hpp"

#include <tessel/moe/CometSearch.hpp>
#include <tessel/moe/MoeLayer.hpp>
#include <tessel/moe/Reference.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

using namespace tessel::moe;
using namespace tessel::moe::test;
using tessel::Communicator;
using tessel::ReduceOp;
namespace fs = std::filesystem;

Communicator fresh_comm() {
  auto world = Communicator::world();
  return world.split(0, world.rank());
}

// A cache directory named by rank 0's process, the same on every rank; removed at the end.
struct CacheDir {
  Communicator comm;
  fs::path path;
  explicit CacheDir(Communicator const &c) : comm(c) {
    auto const pid =
        comm.allreduce_value(comm.rank() == 0 ? static_cast<std::int64_t>(::getpid()) : std::int64_t{0}, ReduceOp::sum);
    auto const *info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / ("tessel-first-use-" + std::string(info->name()) + "-" + std::to_string(pid));
    if (comm.rank() == 0) {
      fs::remove_all(path);
      fs::create_directories(path);
    }
    comm.barrier();
  }
  ~CacheDir() {
    comm.barrier();
    if (comm.rank() == 0) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
  std::string file() const { return (path / "moe-tuning.registry").string(); }
};

// A shape no registry has: the layer's registry is empty.
struct Fixture {
  Communicator comm = fresh_comm();
  MoeConfig config;
  Inputs in;
  TuningRegistry empty;
  Fixture() {
    config = shape(96, 64, 48, 8, 2);
    config.ep = 8 % comm.size() == 0 ? comm.size() : 1;
    config.tp = comm.size() / config.ep;
    Case c{"first use", config, GateKind::weight, {}};
    in = make_inputs(c, config, comm.rank(), 17);
  }
  LayerOptions options(std::string const &cache, double budget = 3.0) const {
    LayerOptions o;
    o.tune_on_first_use = true;
    o.registry = &empty;
    o.tuning_cache = cache;
    o.tune_budget = budget;
    return o;
  }
  MoeLayer layer(LayerOptions const &o) const {
    return MoeLayer(config, comm, shard_weights(config, comm.rank(), in.dense), o);
  }
  // Runs a comet forward and checks it against the dense reference on every rank.
  void forward_and_check(MoeLayer &layer) const {
    HostExecSpace space;
    HostMatrix out("out", static_cast<std::size_t>(config.tokens), static_cast<std::size_t>(config.hidden));
    Kokkos::deep_copy(out, std::nanf(""));
    layer.forward(space, in.tokens, in.gate(), out, Schedule::comet);
    auto const ref = reference_forward(config, in.tokens, in.gate(), layer.routing().experts, in.dense);
    EXPECT_LT(max_relative_error(out, ref.out), 1e-5) << "rank " << comm.rank();
  }
  // The same parameters on every rank.
  void expect_same_everywhere(CometParams const &p) const {
    auto const h = static_cast<std::int64_t>(p.hash() >> 1);
    EXPECT_EQ(comm.allreduce_value(h, ReduceOp::min), comm.allreduce_value(h, ReduceOp::max)) << p.describe();
  }
};

bool exists_on_rank0(Communicator const &comm, std::string const &path) {
  int const yes = comm.rank() == 0 && fs::exists(path) ? 1 : 0;
  return comm.allreduce_value(yes, ReduceOp::max) == 1;
}

TEST(FirstUseTuning, tunes_once_caches_and_the_next_layer_reuses) {
  Fixture f;
  CacheDir dir(f.comm);
  auto first = f.layer(f.options(dir.file()));
  EXPECT_EQ(first.comet_params_source(), "fallback rule"); // nothing known before the first comet forward
  f.forward_and_check(first);
  auto const &t = first.first_use_tuning();
  EXPECT_EQ(first.comet_params_source(), "tuned on first use");
  EXPECT_TRUE(t.ran);
  EXPECT_GE(t.measured.size(), 2u);
  EXPECT_GT(t.forwards, 2);
  EXPECT_GT(t.seconds, 0.0);
  EXPECT_EQ(t.cache, dir.file());
  f.expect_same_everywhere(first.comet_params());
  // The search is the tools' --tune search: every candidate lies on its grid (or keeps the rule's value).
  auto const grid = CometSearchGrid::of(f.config);
  auto const rule = fallback_params(f.config);
  auto const on = [](auto const &values, auto value, auto rule_value) {
    return value == rule_value || std::find(values.begin(), values.end(), value) != values.end();
  };
  for (auto const &[p, seconds] : t.measured)
    EXPECT_TRUE(on(grid.tiles, p.tile_m, rule.tile_m) && on(grid.splits, p.n_splits, rule.n_splits) &&
                on(grid.workers, p.comm_workers, rule.comm_workers) && on(grid.ranges, p.m_splits, rule.m_splits) &&
                on(grid.in_flight, p.in_flight, rule.in_flight))
        << p.describe() << " (" << seconds << " s)";
  // Only rank 0 writes; the entry is the machine's and holds what the layer runs.
  EXPECT_EQ(t.stored, f.comm.rank() == 0);
  if (f.comm.rank() == 0) {
    std::string warning;
    auto const cache = load_tuning_cache(dir.file(), &warning);
    EXPECT_EQ(warning, "");
    auto const *entry = cache.find(TuningKey::of(f.config), MachineKey::of(first.communicator()));
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->params, first.comet_params());
    EXPECT_NE(entry->note.find("first-use tuning"), std::string::npos);
  }
  // Later comet forwards run the winner without searching again.
  auto const forwards = t.forwards;
  f.forward_and_check(first);
  EXPECT_EQ(first.first_use_tuning().forwards, forwards);

  auto second = f.layer(f.options(dir.file()));
  f.forward_and_check(second);
  EXPECT_EQ(second.comet_params_source(), "cache");
  EXPECT_FALSE(second.first_use_tuning().ran);
  EXPECT_EQ(second.first_use_tuning().forwards, 0);
  EXPECT_EQ(second.comet_params(), first.comet_params());
}

TEST(FirstUseTuning, budget_bounds_the_search) {
  Fixture f;
  CacheDir dir(f.comm);
  // What one comet forward takes here (the slowest rank).
  auto probe = f.layer(f.options(dir.file()));
  probe.set_comet_params(fallback_params(f.config));
  HostExecSpace space;
  HostMatrix out("out", static_cast<std::size_t>(f.config.tokens), static_cast<std::size_t>(f.config.hidden));
  double one = 0.0;
  for (int i = 0; i < 3; ++i) {
    f.comm.barrier();
    auto const t0 = std::chrono::steady_clock::now();
    probe.forward(space, f.in.tokens, f.in.gate(), out, Schedule::comet);
    double const mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    one = std::max(one, f.comm.allreduce_value(mine, ReduceOp::max));
  }
  EXPECT_FALSE(exists_on_rank0(f.comm, dir.file())); // parameters set by hand: no tuning, no cache

  // A budget below one forward: the warm-up run only, no comparison, nothing cached.
  auto tight = f.layer(f.options(dir.file(), 1e-6));
  f.forward_and_check(tight);
  EXPECT_EQ(tight.first_use_tuning().forwards, 1);
  EXPECT_TRUE(tight.first_use_tuning().measured.empty());
  EXPECT_EQ(tight.comet_params(), fallback_params(f.config));
  EXPECT_EQ(tight.comet_params_source().rfind("fallback rule (a tuning budget of", 0), 0u)
      << tight.comet_params_source();
  EXPECT_FALSE(exists_on_rank0(f.comm, dir.file()));

  // A budget of a few forwards: it is kept, give or take one forward (and the time the others' noise adds).
  double const budget = std::max(0.02, 12 * one);
  auto bounded = f.layer(f.options(dir.file(), budget));
  f.forward_and_check(bounded);
  auto const &t = bounded.first_use_tuning();
  EXPECT_LE(t.seconds, budget + 3 * one + 0.05) << "budget " << budget << " s, one forward " << one << " s";
  EXPECT_GE(t.forwards, 1);
}

// A library user who asks for nothing gets no tuning time and no file: the default layer runs the fallback rule and
// leaves the cache file alone.
TEST(FirstUseTuning, off_by_default) {
  Fixture f;
  CacheDir dir(f.comm);
  auto o = f.options(dir.file());
  o.tune_on_first_use = LayerOptions{}.tune_on_first_use;
  auto plain = f.layer(o);
  f.forward_and_check(plain);
  EXPECT_EQ(plain.comet_params_source(), "fallback rule");
  EXPECT_FALSE(plain.first_use_tuning().ran);
  EXPECT_EQ(plain.first_use_tuning().forwards, 0);
  EXPECT_FALSE(std::filesystem::exists(dir.file())) << dir.file();
}

TEST(FirstUseTuning, off_by_option_or_environment_and_never_over_given_parameters) {
  Fixture f;
  CacheDir dir(f.comm);
  auto o = f.options(dir.file());
  o.tune_on_first_use = false;
  auto off = f.layer(o);
  f.forward_and_check(off);
  EXPECT_EQ(off.comet_params_source(), "fallback rule");
  EXPECT_FALSE(off.first_use_tuning().ran);

  ::setenv("TESSEL_MOE_TUNE", "off", 1);
  auto env_off = f.layer(f.options(dir.file()));
  f.forward_and_check(env_off);
  EXPECT_EQ(env_off.comet_params_source(), "fallback rule");
  ::setenv("TESSEL_MOE_TUNE", "sometimes", 1);
  EXPECT_NE(tessel::test::error_of([&] { f.layer(f.options(dir.file())); }).find("TESSEL_MOE_TUNE"), std::string::npos);
  ::unsetenv("TESSEL_MOE_TUNE");

  CometParams given;
  given.tile_m = 8;
  given.n_splits = 3;
  o = f.options(dir.file());
  o.comet = given;
  auto explicit_params = f.layer(o);
  f.forward_and_check(explicit_params);
  EXPECT_EQ(explicit_params.comet_params_source(), "given");
  EXPECT_EQ(explicit_params.comet_params(), given);
  EXPECT_FALSE(explicit_params.first_use_tuning().ran);
  EXPECT_FALSE(exists_on_rank0(f.comm, dir.file()));

  // Ranks that disagree fail at construction, every one of them, instead of waiting in the search for each other.
  if (f.comm.size() > 1) {
    auto mixed = f.options(dir.file());
    mixed.tune_on_first_use = f.comm.rank() != 1;
    EXPECT_NE(tessel::test::error_of([&] { f.layer(mixed); }).find("first-use tuning"), std::string::npos);
  }

  auto bad_budget = f.options(dir.file(), 0.0);
  EXPECT_NE(tessel::test::error_of([&] { f.layer(bad_budget); }).find("tune_budget"), std::string::npos);
}

TEST(FirstUseTuning, corrupt_or_unwritable_cache_does_not_stop_the_layer) {
  Fixture f;
  CacheDir dir(f.comm);
  if (f.comm.rank() == 0)
    std::ofstream(dir.file()) << "host 128 64 48 8 2 x 1 | 0 0 1 1 8 critical_path\n";
  f.comm.barrier();
  auto layer = f.layer(f.options(dir.file(), 1.0));
  testing::internal::CaptureStderr();
  f.forward_and_check(layer);
  auto const err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(layer.comet_params_source(), "tuned on first use");
  if (f.comm.rank() == 0) {
    EXPECT_NE(err.find("warning: ignoring the tuning cache"), std::string::npos) << err;
    EXPECT_NE(err.find(dir.file() + ":1: field 'EP'"), std::string::npos) << err;
    std::string warning;
    auto const rewritten = load_tuning_cache(dir.file(), &warning);
    EXPECT_EQ(warning, "");
    EXPECT_EQ(rewritten.entries().size(), 1u);
  }

  // The cache's directory cannot be made (a file is in the way): the tuned parameters are used all the same.
  auto const blocked = (dir.path / "file" / "moe-tuning.registry").string();
  if (f.comm.rank() == 0)
    std::ofstream((dir.path / "file").string()) << "not a directory\n";
  f.comm.barrier();
  auto unwritable = f.layer(f.options(blocked, 1.0));
  testing::internal::CaptureStderr();
  f.forward_and_check(unwritable);
  auto const err2 = testing::internal::GetCapturedStderr();
  EXPECT_EQ(unwritable.comet_params_source(), "tuned on first use");
  EXPECT_FALSE(unwritable.first_use_tuning().stored);
  if (f.comm.rank() == 0) {
    EXPECT_NE(err2.find("could not write the tuning cache '" + blocked + "'"), std::string::npos) << err2;
  }
}

} // namespace

// Tuning registry: key and bucket, lookup order (exact, nearest M bucket, fallback rule), file round trip,
// errors that name the file, line and field, and the committed registry.
#include <tessel/moe/Tuning.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <cstdio>
#include <fstream>

namespace {

using namespace tessel::moe;

MoeConfig mixtral(std::int64_t m) {
  MoeConfig c;
  c.tokens = m;
  c.hidden = 512;
  c.ffn = 1792;
  c.experts = 8;
  c.topk = 2;
  c.ep = 2;
  return c;
}

using tessel::test::error_of;

TEST(Tuning, m_bucket_is_the_next_power_of_two) {
  EXPECT_EQ(m_bucket(0), 1);
  EXPECT_EQ(m_bucket(1), 1);
  EXPECT_EQ(m_bucket(3), 4);
  EXPECT_EQ(m_bucket(4096), 4096);
  EXPECT_EQ(m_bucket(4097), 8192);
}

TEST(Tuning, fallback_rule) {
  auto const p = fallback_params(mixtral(4096)); // 1024 rows per (source, expert): tile 512
  EXPECT_EQ(p.tile_m, 512);
  EXPECT_EQ(p.n_splits, 2);
  EXPECT_EQ(p.m_splits, 1);
  EXPECT_EQ(p.comm_workers, 0);
  EXPECT_EQ(p.in_flight, 0);
  EXPECT_EQ(p.policy, PlanPolicy::critical_path);
  EXPECT_EQ(fallback_params(mixtral(1024)).tile_m, 128);
  EXPECT_EQ(fallback_params(mixtral(65536)).tile_m, 1024);
  auto small = mixtral(16);
  small.hidden = 64;
  auto const q = fallback_params(small);
  EXPECT_EQ(q.tile_m, 128);
  EXPECT_EQ(q.n_splits, 1);
  EXPECT_NO_THROW(q.validate(small));
}

TEST(Tuning, lookup_exact_then_nearest_bucket_then_rule) {
  TuningRegistry reg;
  CometParams a, b;
  a.n_splits = 8;
  a.tile_m = 256;
  b.n_splits = 2;
  b.tile_m = 64;
  b.comm_workers = 2;
  reg.set(TuningKey::of(mixtral(4096)), a, "measured");
  reg.set(TuningKey::of(mixtral(1024)), b);
  std::string how;
  EXPECT_EQ(reg.lookup(mixtral(4000), "host", &how), a);
  EXPECT_EQ(how, "registry");
  EXPECT_EQ(reg.lookup(mixtral(1024), "host", &how), b);
  // 2048 is one bucket from both: the larger wins.
  EXPECT_EQ(reg.lookup(mixtral(2048), "host", &how), a);
  EXPECT_EQ(how, "registry (M bucket 4096 for 2048)");
  EXPECT_EQ(reg.lookup(mixtral(300), "host", &how), b);
  auto other = mixtral(4096);
  other.ep = 4;
  EXPECT_EQ(reg.lookup(other, "host", &how), fallback_params(other));
  EXPECT_EQ(how, "fallback rule");
  auto const cuda = reg.lookup(mixtral(4096), "cuda", &how);
  EXPECT_EQ(cuda, fallback_params(mixtral(4096), "cuda"));
  EXPECT_EQ(how, "fallback rule");
  // The CUDA rule: Flux's 28 communication blocks, N / 512 column blocks in [1, 8], one token range.
  EXPECT_EQ(cuda.comm_workers, 28);
  EXPECT_EQ(cuda.n_splits, 1); // mixtral() here has N = 512
  EXPECT_EQ(cuda.m_splits, 1);
  auto wide = mixtral(4096);
  wide.hidden = 4096;
  EXPECT_EQ(fallback_params(wide, "cuda").n_splits, 8);
  wide.hidden = 65536;
  EXPECT_EQ(fallback_params(wide, "cuda").n_splits, 8);
  EXPECT_NO_THROW(cuda.validate(mixtral(4096), "cuda"));
  EXPECT_THROW(cuda.validate(mixtral(4096), "host"), tessel::Exception); // 28 workers: too many host threads
}

TEST(Tuning, file_round_trip_and_errors) {
  TuningRegistry reg;
  CometParams p;
  p.n_splits = 3;
  p.m_splits = 2;
  p.in_flight = 4;
  p.policy = PlanPolicy::local_first;
  reg.set(TuningKey::of(mixtral(8192)), p, "comet 1.0 ms");
  std::string const path = "tessel_moe_test_registry.txt";
  reg.save(path);
  auto const back = TuningRegistry::load(path);
  ASSERT_EQ(back.entries().size(), 1u);
  EXPECT_EQ(back.entries()[0].params, p);
  EXPECT_EQ(back.entries()[0].key, TuningKey::of(mixtral(8192)));
  EXPECT_EQ(back.entries()[0].note, "comet 1.0 ms");
  std::remove(path.c_str());

  EXPECT_NE(error_of([] {
              TuningRegistry::parse("host 4096 512 1792 8 2 2 | 1 0 4 1 128 critical_path\n", "f");
            }).find("f:1: the key needs 8 fields"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TuningRegistry::parse("# c\nhost 4096 512 1792 8 2 2 1 | 1 x 4 1 128 critical_path\n", "f");
            }).find("f:2: field 'in_flight' is not an integer: 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TuningRegistry::parse("host 4000 512 1792 8 2 2 1 | 1 0 4 1 128 critical_path\n", "f");
            }).find("m_bucket must be a power of two"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TuningRegistry::parse("host 4096 512 1792 8 2 2 1 | 1 0 4 1 128 greedy\n", "f");
            }).find("unknown plan policy 'greedy'"),
            std::string::npos);
  EXPECT_NE(error_of([] { TuningRegistry::load("/nonexistent/registry"); }).find("cannot open tuning registry"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TuningRegistry::parse("host 4096 512 1792 8 2 2 1 | 1 0 4 128 critical_path\n", "f");
            }).find("f:1: the parameters need 6 fields"),
            std::string::npos);
}

TEST(Tuning, builtin_registry_is_valid) {
  auto const &reg = TuningRegistry::builtin();
  for (auto const &e : reg.entries()) {
    MoeConfig c;
    c.tokens = e.key.m_bucket;
    c.hidden = e.key.n;
    c.ffn = e.key.k;
    c.experts = e.key.e;
    c.topk = e.key.topk;
    c.ep = e.key.ep;
    c.tp = e.key.tp;
    EXPECT_NO_THROW(c.validate()) << e.key.describe();
    EXPECT_NO_THROW(e.params.validate(c)) << e.key.describe();
    EXPECT_EQ(reg.lookup(c, e.key.backend), e.params);
  }
}

TEST(Tuning, params_validation) {
  CometParams p;
  auto const c = mixtral(64);
  p.comm_workers = -1;
  EXPECT_THROW(p.validate(c), tessel::Exception);
  p.comm_workers = 0; // the compute thread progresses the messages (host only)
  EXPECT_NO_THROW(p.validate(c));
  EXPECT_THROW(p.validate(c, "cuda"), tessel::Exception);
  p.comm_workers = 9;
  EXPECT_THROW(p.validate(c), tessel::Exception);
  p = CometParams{};
  p.n_splits = 513;
  EXPECT_THROW(p.validate(c), tessel::Exception);
  p = CometParams{};
  auto q = p;
  q.n_splits += 1;
  EXPECT_NE(p.hash(), q.hash());
}

} // namespace

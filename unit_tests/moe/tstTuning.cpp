// Tuning registry: key and bucket, lookup order (exact, nearest M bucket, fallback rule), file round trip,
// errors that name the file, line and field, and the committed registry; the per-user cache of first-use tuning.
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/PacedCommunicator.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

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

// The per-user cache of first-use tuning: machine keys, machine-keyed entries, the file's path, reading a missing
// or corrupt file, and atomic writes. Every test works in its own temporary directory, never in the user's home.
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with its contents at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    auto const *info = ::testing::UnitTest::GetInstance()->current_test_info();
    path =
        fs::temp_directory_path() / ("tessel-tuning-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(std::string const &name) const { return (path / name).string(); }
};

// Sets an environment variable for the scope of a test, then restores it.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, char const *value) : name(std::move(n)) {
    if (char const *v = std::getenv(name.c_str()))
      old = v;
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

std::string read_text(std::string const &path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

MachineKey machine(double bandwidth) {
  MachineKey m;
  m.cpu = "Test_CPU_@_2.0GHz";
  m.cores = 2;
  m.ranks = 2;
  m.transport = "mpi+paced";
  m.link_bandwidth = bandwidth;
  m.link_latency = 10e-6;
  return m;
}

TEST(TuningCache, machine_key_names_the_cpu_cores_ranks_and_transport) {
  auto const self = tessel::Communicator::self();
  auto const key = MachineKey::of(self);
  EXPECT_FALSE(key.cpu.empty());
  EXPECT_EQ(key.cpu.find(' '), std::string::npos) << key.cpu;
  EXPECT_EQ(key.cores, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(key.ranks, 1);
  EXPECT_EQ(key.transport, "self");
  EXPECT_EQ(key.link_bandwidth, 0.0);
  // /proc/cpuinfo's model name, blanks made '_' so that the key stays one registry field.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      auto const name = line.substr(line.find(':') + 2);
      EXPECT_EQ(key.cpu.substr(0, 3), name.substr(0, 3)) << key.cpu << " vs " << name;
      break;
    }
  auto const token = key.token();
  for (char const *field : {"cpu=", ";cores=", ";ranks=1;", ";transport=self;", ";link=0MB/s;", ";latency=0us"})
    EXPECT_NE(token.find(field), std::string::npos) << token << " lacks " << field;
  EXPECT_EQ(token.find(' '), std::string::npos);
  EXPECT_TRUE(MachineKey::parse(token).matches(key));

  // An emulated link is part of the transport: its bandwidth and latency.
  auto const paced = tessel::make_paced_communicator(self, tessel::LinkModel{61.6e6, 10e-6});
  auto const link = MachineKey::of(paced);
  EXPECT_EQ(link.transport, "self+paced");
  EXPECT_NE(link.token().find(";link=61.6MB/s;latency=10us"), std::string::npos) << link.token();
  EXPECT_FALSE(link.matches(key));

  EXPECT_NE(error_of([] {
              MachineKey::parse("cpu=x;cores=2;ranks=two;transport=mpi;link=0MB/s;latency=0us");
            }).find("'ranks'"),
            std::string::npos);
  EXPECT_NE(error_of([] { MachineKey::parse("cpu=x;cores=2"); }).find("needs cpu, cores"), std::string::npos);
}

TEST(TuningCache, machine_keys_match_on_the_same_machine_and_a_close_link) {
  EXPECT_TRUE(machine(40e6).matches(machine(40e6)));
  EXPECT_TRUE(machine(40e6).matches(machine(55e6))); // a link recalibrated on a busier machine
  EXPECT_FALSE(machine(40e6).matches(machine(80e6)));
  auto other = machine(40e6);
  other.ranks = 4;
  EXPECT_FALSE(other.matches(machine(40e6)));
  other = machine(40e6);
  other.cpu = "Other_CPU";
  EXPECT_FALSE(other.matches(machine(40e6)));
  other = machine(40e6);
  other.transport = "mpi";
  EXPECT_FALSE(other.matches(machine(40e6)));
  other = machine(40e6);
  other.link_latency = 20e-6;
  EXPECT_FALSE(other.matches(machine(40e6)));
}

TEST(TuningCache, machine_entries_round_trip_and_match_only_their_machine) {
  TuningRegistry reg;
  auto key = TuningKey::of(mixtral(1024));
  key.machine = machine(40e6).token();
  CometParams p;
  p.m_splits = 2;
  p.tile_m = 64;
  reg.set(key, p, "first-use tuning");
  key.machine = machine(100e6).token();
  CometParams q;
  q.n_splits = 4;
  reg.set(key, q);
  auto const back = TuningRegistry::parse(reg.to_string(), "cache");
  ASSERT_EQ(back.entries().size(), 2u);
  auto const *found = back.find(TuningKey::of(mixtral(1000)), machine(48e6));
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->params, p);
  EXPECT_EQ(found->note, "first-use tuning");
  ASSERT_NE(back.find(TuningKey::of(mixtral(1024)), machine(90e6)), nullptr);
  EXPECT_EQ(back.find(TuningKey::of(mixtral(1024)), machine(90e6))->params, q);
  EXPECT_EQ(back.find(TuningKey::of(mixtral(1024)), machine(10e6)), nullptr);
  EXPECT_EQ(back.find(TuningKey::of(mixtral(4096)), machine(40e6)), nullptr); // no nearest bucket in the cache
  // A registry lookup (no machine) never takes a machine's entry.
  std::string how;
  EXPECT_EQ(back.lookup(mixtral(1024), "host", &how), fallback_params(mixtral(1024)));
  EXPECT_EQ(how, "fallback rule");
  EXPECT_NE(error_of([] {
              TuningRegistry::parse("host 1024 512 1792 8 2 2 1 cpu=x;cores=z | 0 0 1 1 128 critical_path\n", "c");
            }).find("c:1: machine key"),
            std::string::npos);
}

TEST(TuningCache, path_from_the_environment) {
  ScopedEnv cache("TESSEL_CACHE_DIR", "/tmp/tc"), xdg("XDG_CACHE_HOME", "/tmp/xdg"), home("HOME", "/tmp/home");
  EXPECT_EQ(default_tuning_cache_path(), "/tmp/tc/moe-tuning.registry");
  ::unsetenv("TESSEL_CACHE_DIR");
  EXPECT_EQ(default_tuning_cache_path(), "/tmp/xdg/tessel/moe-tuning.registry");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_tuning_cache_path(), "/tmp/home/.cache/tessel/moe-tuning.registry");
  ::unsetenv("HOME");
  EXPECT_EQ(default_tuning_cache_path(), "");
}

TEST(TuningCache, store_creates_merges_and_writes_atomically) {
  TempDir dir;
  auto const path = dir.file("sub/dir/moe-tuning.registry");
  std::string warning;
  EXPECT_TRUE(load_tuning_cache(path, &warning).entries().empty()); // no file yet: an empty cache
  EXPECT_EQ(warning, "");
  auto key = TuningKey::of(mixtral(1024));
  key.machine = machine(40e6).token();
  CometParams p;
  p.tile_m = 256;
  ASSERT_TRUE(store_tuning_cache(path, {key, p, "a"}, &warning)) << warning;
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  auto key2 = key;
  key2.m_bucket = 4096;
  CometParams q;
  q.n_splits = 1;
  ASSERT_TRUE(store_tuning_cache(path, {key2, q, "b"}, &warning)) << warning;
  // Replaced by a rename (a new file), not rewritten in place, and no temporary left beside it.
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
  int files = 0;
  for (auto const &e : fs::directory_iterator(fs::path(path).parent_path()))
    files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
  auto const back = load_tuning_cache(path, &warning);
  EXPECT_EQ(warning, "");
  ASSERT_EQ(back.entries().size(), 2u);
  EXPECT_EQ(back.find(TuningKey::of(mixtral(1024)), machine(40e6))->params, p);
  EXPECT_EQ(back.find(TuningKey::of(mixtral(4096)), machine(40e6))->params, q);
}

TEST(TuningCache, corrupt_cache_is_reported_ignored_and_rewritten) {
  TempDir dir;
  auto const path = dir.file("moe-tuning.registry");
  std::ofstream(path) << "# cache\nhost 1024 512 1792 8 2 2 1 | 0 0 2 1 128 critical_path\nhost garbage\n";
  std::string warning;
  EXPECT_TRUE(load_tuning_cache(path, &warning).entries().empty());
  EXPECT_NE(warning.find(path + ":3:"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ignoring the tuning cache"), std::string::npos) << warning;
  auto key = TuningKey::of(mixtral(1024));
  key.machine = machine(40e6).token();
  ASSERT_TRUE(store_tuning_cache(path, {key, CometParams{}, "new"}, &warning)) << warning;
  warning.clear();
  auto const back = load_tuning_cache(path, &warning);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(back.entries().size(), 1u);
  EXPECT_EQ(read_text(path).find("garbage"), std::string::npos);
}

// Registry and cache files are regular files of bounded size: a FIFO (which blocks a reader until a writer comes),
// a device that never ends (/dev/zero, /dev/full) or a directory is refused before it is opened, with the path named;
// the per-user cache is then ignored with a warning, never waited for.
TEST(TuningCache, only_bounded_regular_files_are_read) {
  TempDir dir;
  auto const fifo = dir.file("fifo.registry");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (std::string const &path : {fifo, std::string("/dev/full"), std::string("/dev/zero"), dir.path.string()}) {
    try {
      (void)TuningRegistry::load(path);
      ADD_FAILURE() << path << " was read";
    } catch (tessel::Exception const &e) {
      EXPECT_NE(std::string(e.what()).find("'" + path + "' is not a regular file"), std::string::npos) << e.what();
    }
    std::string warning;
    EXPECT_TRUE(load_tuning_cache(path, &warning).entries().empty());
    EXPECT_NE(warning.find("not a regular file"), std::string::npos) << warning;
  }
  // A file over the bound is refused with its size, without reading it.
  auto const big = dir.file("big.registry");
  { std::ofstream create(big); }
  fs::resize_file(big, TuningRegistry::max_registry_bytes + 1);
  try {
    (void)TuningRegistry::load(big);
    ADD_FAILURE() << big << " was read";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(TuningRegistry::max_registry_bytes + 1) + " bytes"),
              std::string::npos)
        << e.what();
  }
}

// Loading is linear-logarithmic in the entries (it was quadratic: 10,000 entries took 6.7 s, 40,000 over 2 minutes).
// 40,000 distinct entries and a second copy of each (the later line wins) load in well under a second in a release
// build (1.9 s under AddressSanitizer in Debug); the bound of 10 s is wide (sanitizers, a loaded machine) yet an
// order of magnitude below what the quadratic load took (over 2 minutes).
TEST(TuningCache, a_large_cache_loads_in_linear_time) {
  std::ostringstream text;
  int const entries = 40000;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < entries; ++i)
      text << "host 1024 " << 64 + i << " 128 8 2 2 1 | 0 4 " << (pass == 0 ? 1 : 2) << " 1 128 critical_path | e" << i
           << "\n";
  TempDir dir;
  auto const path = dir.file("big.registry");
  std::ofstream(path) << text.str();
  auto const t0 = std::chrono::steady_clock::now();
  auto const reg = TuningRegistry::load(path);
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(reg.entries().size(), static_cast<std::size_t>(entries));
  for (auto const &e : reg.entries())
    EXPECT_EQ(e.params.n_splits, 2) << "the later line of a key wins: " << e.key.describe();
  EXPECT_LT(seconds, 10.0) << entries << " entries";
  // Merging them into another registry is as fast.
  auto merged = TuningRegistry::parse("host 1024 64 128 8 2 2 1 | 1 4 4 1 128 critical_path | old\n", "inline");
  auto const t1 = std::chrono::steady_clock::now();
  merged.merge(reg);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 10.0);
  EXPECT_EQ(merged.entries().size(), static_cast<std::size_t>(entries));
  EXPECT_EQ(merged.entries().front().note, "e0");
}

TEST(TuningCache, unwritable_cache_is_a_warning) {
  TempDir dir;
  std::ofstream(dir.file("plain")) << "a file where the cache directory should be\n";
  auto const path = dir.file("plain/moe-tuning.registry");
  auto key = TuningKey::of(mixtral(1024));
  key.machine = machine(40e6).token();
  std::string warning;
  EXPECT_FALSE(store_tuning_cache(path, {key, CometParams{}, ""}, &warning));
  EXPECT_NE(warning.find("could not write the tuning cache '" + path + "'"), std::string::npos) << warning;
  EXPECT_FALSE(store_tuning_cache("", {key, CometParams{}, ""}, &warning));
  EXPECT_NE(warning.find("no cache directory"), std::string::npos) << warning;
}

} // namespace

namespace {

// The test main (unit_tests/TesselTestMain.cpp) points the per-user tuning cache away from the home directory of
// whoever runs the tests, ctest or not: a test run never writes the user's own cache.
TEST(Tuning, tests_never_write_the_users_cache) {
  char const *dir = std::getenv("TESSEL_CACHE_DIR");
  ASSERT_NE(dir, nullptr);
  auto const path = tessel::moe::default_tuning_cache_path();
  EXPECT_EQ(path.rfind(dir, 0), 0u) << path;
  if (char const *home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    EXPECT_NE(path.rfind(std::string(home) + "/.cache", 0), 0u) << path;
  }
}

} // namespace

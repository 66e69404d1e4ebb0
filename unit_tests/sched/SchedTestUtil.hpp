#ifndef TESSEL_UNIT_TESTS_SCHED_SCHEDTESTUTIL_HPP
#define TESSEL_UNIT_TESTS_SCHED_SCHEDTESTUTIL_HPP

// Shared fixtures of the sched tests: small clusters, hand-made profile tables, temporary files.

#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Model.hpp>
#include <tessel/sched/Profile.hpp>
#include <tessel/sched/Simulator.hpp>
#include <tessel/sched/Trace.hpp>

#include <tessel/core/Error.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sched_test {

namespace fs = std::filesystem;
using namespace tessel::sched;

// A temporary folder removed at the end of the test.
class TempDir {
public:
  TempDir() {
    auto const *info = ::testing::UnitTest::GetInstance()->current_test_info();
    _dir = fs::temp_directory_path() / ("tessel_sched_" + std::string(info->test_suite_name()) + "_" + info->name() +
                                        "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    fs::create_directories(_dir);
  }
  ~TempDir() { fs::remove_all(_dir); }
  std::string path(std::string const &name) const { return (_dir / name).string(); }
  std::string write(std::string const &name, std::string const &text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }

private:
  fs::path _dir;
};

// Expects a tessel::Exception whose message holds every fragment.
template <class F> void expect_error(F &&f, std::initializer_list<char const *> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected tessel::Exception";
  } catch (tessel::Exception const &e) {
    std::string const what = e.what();
    for (auto const *fragment : fragments)
      EXPECT_NE(what.find(fragment), std::string::npos) << "'" << fragment << "' missing in: " << what;
  }
}

inline int model(char const *name) {
  int const m = ModelCatalog::builtin().find(name);
  EXPECT_GE(m, 0) << name;
  return m;
}

// One a100 node and one v100 node, 4 GPUs each: GPUs 0-3 are a100, 4-7 are v100.
inline Cluster two_type_cluster() {
  return Cluster({Cluster::known_gpu("a100"), Cluster::known_gpu("v100")}, {{0, 1, 4}, {1, 1, 4}});
}

// moe__690M at batch 256: on a100 2 s / 1 s / 0.5 s per iteration on 1 / 2 / 4 GPUs, on v100 twice as long;
// pure data parallelism needs 10 GB per GPU everywhere.
inline ProfileTable simple_profile() {
  ProfileTable t;
  int const m = model("moe__690M");
  double const a100[] = {2.0, 1.0, 0.5}, v100[] = {4.0, 2.0, 1.0};
  for (int k = 0; k < 3; ++k) {
    t.add(ProfileEntry{m, 256, "a100", 1, 1 << k, a100[k]});
    t.add(ProfileEntry{m, 256, "v100", 1, 1 << k, v100[k]});
  }
  t.add(DpMemory{m, 256, {10, 10, 10, 10, 10}});
  return t;
}

inline JobSpec job(std::string id, double submit, long long iters, char const *model_name, int batch, int gpus,
                   int type) {
  JobSpec j;
  j.id = std::move(id);
  j.submit_time = submit;
  j.iterations = iters;
  j.model = model(model_name);
  j.batch_size = batch;
  j.num_gpus = gpus;
  j.gpu_type = type;
  return j;
}

inline Trace make_trace(Cluster const &cluster, std::vector<JobSpec> jobs) {
  Trace t;
  t.jobs = std::move(jobs);
  for (auto const &g : cluster.types())
    t.type_names.push_back(g.name);
  t.source = "test";
  return t;
}

// GPUs held by each job at every round: holders[round][job] = GPU list.
struct Recorder {
  std::vector<std::vector<std::vector<int>>> holders;
  void attach(SimOptions &opt, std::size_t jobs) {
    opt.observer = [this, jobs](int round, Allocation const &alloc, std::vector<JobRecord> const &) {
      if (static_cast<int>(holders.size()) <= round)
        holders.resize(static_cast<std::size_t>(round) + 1);
      auto &r = holders[static_cast<std::size_t>(round)];
      r.assign(jobs, {});
      for (int g = 0; g < alloc.cluster().num_gpus(); ++g)
        if (alloc.owner(g) >= 0)
          r[static_cast<std::size_t>(alloc.owner(g))].push_back(g);
    };
  }
  std::vector<int> gpus(int round, int job) const {
    return holders.at(static_cast<std::size_t>(round)).at(static_cast<std::size_t>(job));
  }
};

inline JobResult const &result_of(SimResult const &r, std::string const &id) {
  for (auto const &j : r.jobs)
    if (j.id == id)
      return j;
  ADD_FAILURE() << "no job " << id;
  return r.jobs.front();
}

inline char const *data_dir() { return std::getenv("TESSEL_DATA_DIR"); }

} // namespace sched_test

#endif

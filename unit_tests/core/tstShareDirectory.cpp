// share_directory() and share_file(): found in the build tree for uninstalled programs (the installed case is
// checked by install.consumer), TESSEL_SHARE_DIR overrides, and missing files or directories are errors naming them.
#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/ShareDirectory.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

struct ShareDirectory : ::testing::Test {
  void SetUp() override { ::unsetenv("TESSEL_SHARE_DIR"); }
  void TearDown() override { ::unsetenv("TESSEL_SHARE_DIR"); }
};

TEST_F(ShareDirectory, finds_the_data_files_of_the_build) {
  std::string const dir = tessel::share_directory();
  EXPECT_TRUE(fs::is_directory(dir)) << dir;
#ifdef TESSEL_ENABLE_SCHED
  std::string const cluster = tessel::share_file("sched/clusters/hetero_64.csv");
  EXPECT_TRUE(fs::is_regular_file(cluster)) << cluster;
  EXPECT_EQ(fs::path(cluster).filename(), "hetero_64.csv");
#endif
#ifdef TESSEL_ENABLE_MOE
  EXPECT_TRUE(fs::is_regular_file(tessel::share_file("moe/host.registry")));
#endif
}

TEST_F(ShareDirectory, missing_file_is_an_error_naming_it) {
  try {
    tessel::share_file("sched/clusters/no_such_cluster.csv");
    FAIL() << "a missing data file was returned";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("no_such_cluster.csv"), std::string::npos) << e.what();
  }
}

TEST_F(ShareDirectory, environment_variable_overrides) {
  fs::path const dir = fs::temp_directory_path() / ("tessel-share-" + std::to_string(::getpid()));
  fs::create_directories(dir / "sched");
  {
    std::FILE *f = std::fopen((dir / "sched" / "mine.csv").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  ::setenv("TESSEL_SHARE_DIR", dir.c_str(), 1);
  EXPECT_EQ(tessel::share_directory(), dir.string());
  EXPECT_EQ(tessel::share_file("sched/mine.csv"), (dir / "sched" / "mine.csv").string());
  ::setenv("TESSEL_SHARE_DIR", (dir / "absent").c_str(), 1);
  try {
    tessel::share_directory();
    FAIL() << "TESSEL_SHARE_DIR naming nothing was accepted";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("TESSEL_SHARE_DIR"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

} // namespace

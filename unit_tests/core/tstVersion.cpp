// The library's run-time version agrees with the headers' macros, and the commit is a short hash (or "unknown"
// outside a git checkout).
#include <tessel/core/Version.hpp>

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace {

TEST(Version, library_matches_headers) {
  EXPECT_EQ(tessel::version(), TESSEL_VERSION_STRING);
  EXPECT_EQ(tessel::version_number(), TESSEL_VERSION);
  EXPECT_EQ(std::to_string(TESSEL_VERSION_MAJOR) + "." + std::to_string(TESSEL_VERSION_MINOR) + "." +
                std::to_string(TESSEL_VERSION_PATCH),
            tessel::version());
  EXPECT_EQ(TESSEL_VERSION, TESSEL_VERSION_MAJOR * 10000 + TESSEL_VERSION_MINOR * 100 + TESSEL_VERSION_PATCH);
}

TEST(Version, git_hash_is_a_short_commit) {
  std::string const hash = tessel::git_hash();
  EXPECT_TRUE(hash == "unknown" || std::regex_match(hash, std::regex("[0-9a-f]{12}"))) << hash;
}

} // namespace

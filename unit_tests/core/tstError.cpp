#include <tessel/core/Error.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace {

int checked_divide(int a, int b) {
  TESSEL_REQUIRE(b != 0, "cannot divide ", a, " by zero");
  return a / b;
}

TEST(Error, require_names_function_values_and_location) {
  EXPECT_EQ(checked_divide(6, 3), 2);
  try {
    checked_divide(7, 0);
    FAIL() << "expected tessel::Exception";
  } catch (tessel::Exception const &e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("tessel::checked_divide"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot divide 7 by zero"), std::string::npos) << what;
    EXPECT_NE(what.find("tstError.cpp"), std::string::npos) << what;
  }
}

TEST(Error, exceptions_are_runtime_errors) {
  EXPECT_THROW(checked_divide(1, 0), std::runtime_error);
  tessel::TimeoutError timeout("waited", 3);
  EXPECT_EQ(timeout.peer(), 3);
  EXPECT_STREQ(timeout.what(), "waited");
}

TEST(Error, first_non_finite_finds_nan_and_inf) {
  float values[] = {1.f, 2.f, std::numeric_limits<float>::quiet_NaN(), 4.f};
  EXPECT_EQ(tessel::first_non_finite(values, 4), 2u);
  EXPECT_EQ(tessel::first_non_finite(values, 2), 2u); // clean prefix: returns n
  double inf[] = {0.0, -std::numeric_limits<double>::infinity()};
  EXPECT_EQ(tessel::first_non_finite(inf, 2), 1u);
  int ints[] = {1, 2, 3};
  EXPECT_EQ(tessel::first_non_finite(ints, 3), 3u);
}

} // namespace

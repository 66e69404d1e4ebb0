#include <tessel/core/Error.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace {

int checked_divide(int a, int b) {
  TESSEL_REQUIRE(b != 0, "cannot divide ", a, " by zero");
  return a / b;
}

TEST(Error, require_gives_the_message_to_people_and_the_location_to_developers) {
  EXPECT_EQ(checked_divide(6, 3), 2);
  try {
    checked_divide(7, 0);
    FAIL() << "expected tessel::Exception";
  } catch (tessel::Exception const &e) {
    EXPECT_STREQ(e.what(), "cannot divide 7 by zero");
    std::string const where = e.where();
    EXPECT_NE(where.find("tessel::checked_divide"), std::string::npos) << where;
    EXPECT_NE(where.find("unit_tests/core/tstError.cpp:"), std::string::npos) << where;
    EXPECT_EQ(where.find("/work/"), std::string::npos) << "no build-machine directories: " << where;
  }
}

TEST(Error, usage_and_communication_errors_are_exceptions) {
  auto const usage = [] { TESSEL_REQUIRE_USAGE(false, "option --n expects an integer in [1, 10], got '0'"); };
  EXPECT_THROW(usage(), tessel::UsageError);
  EXPECT_THROW(usage(), tessel::Exception);
  tessel::TimeoutError timeout("waited", 1);
  tessel::CommunicationError const &comm = timeout;
  EXPECT_STREQ(comm.what(), "waited");
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

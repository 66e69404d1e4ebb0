// CSV records: plain and quoted fields, doubled quotes, commas inside quotes, empty fields, '\r' line ends, and
// the error for an unterminated quote naming where it was.
#include <tessel/core/Csv.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <string>
#include <vector>

namespace {

using tessel::split_csv_record;
using tessel::test::error_of;
using Fields = std::vector<std::string>;

TEST(Csv, splits_plain_and_quoted_fields) {
  EXPECT_EQ(split_csv_record("a,b,c", "t"), (Fields{"a", "b", "c"}));
  EXPECT_EQ(split_csv_record("\"x, y\",2", "t"), (Fields{"x, y", "2"}));
  EXPECT_EQ(split_csv_record("\"say \"\"hi\"\"\",z", "t"), (Fields{"say \"hi\"", "z"}));
  EXPECT_EQ(split_csv_record("1,,3,", "t"), (Fields{"1", "", "3", ""}));
  EXPECT_EQ(split_csv_record("", "t"), (Fields{""}));
  EXPECT_EQ(split_csv_record("u,v\r", "t"), (Fields{"u", "v"}));
}

TEST(Csv, unterminated_quote_names_the_place) {
  auto const message = error_of([] { split_csv_record("1,\"open", "file 'e.csv' line 7"); });
  EXPECT_NE(message.find("file 'e.csv' line 7"), std::string::npos) << message;
  EXPECT_NE(message.find("unterminated quoted field"), std::string::npos) << message;
}

} // namespace

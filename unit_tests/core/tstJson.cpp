#include <tessel/core/Error.hpp>
#include <tessel/core/Json.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unistd.h>

namespace {

std::string temp_path(std::string const &name) {
  return (std::filesystem::temp_directory_path() / ("tessel_json_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string slurp(std::string const &path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <class F> std::string error_of(F &&f) {
  try {
    f();
  } catch (tessel::Exception const &e) {
    return e.what();
  }
  return "";
}

TEST(Json, write_then_read_keeps_order_values_and_escapes) {
  auto const path = temp_path("roundtrip.json");
  tessel::Json doc = {{"zeta", 1},
                      {"alpha", 0.1},
                      {"name", "a \"quoted\"\\path\n\t\x01"},
                      {"nan", std::numeric_limits<double>::quiet_NaN()},
                      {"list", {1, 2, 3}}};
  tessel::write_json(path, doc);
  auto const text = slurp(path);
  EXPECT_LT(text.find("zeta"), text.find("alpha")) << "insertion order";
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("\"nan\": null"), std::string::npos) << text;
  auto const back = tessel::read_json(path);
  EXPECT_EQ(back["name"].get<std::string>(), "a \"quoted\"\\path\n\t\x01");
  EXPECT_EQ(back["alpha"].get<double>(), 0.1); // round-trip precision
  EXPECT_TRUE(back["nan"].is_null());
  EXPECT_EQ(tessel::json_get<std::vector<int>>(back, "list", path), (std::vector<int>{1, 2, 3}));
  std::remove(path.c_str());
}

TEST(Json, errors_name_the_file_offset_and_field) {
  auto const path = temp_path("bad.json");
  { std::ofstream(path) << "{\"a\": 1,\n \"b\": }"; }
  auto const syntax = error_of([&] { tessel::read_json(path); });
  EXPECT_NE(syntax.find(path + ": not valid JSON at line 2, column 7: syntax error"), std::string::npos) << syntax;
  std::remove(path.c_str());

  auto const missing = error_of([&] { tessel::read_json(temp_path("absent.json")); });
  EXPECT_NE(missing.find("absent.json: cannot open the file"), std::string::npos) << missing;

  auto const doc = tessel::parse_json(R"({"n": 2.5, "s": "x", "big": 5000000000, "v": [1, "two"]})", "spec.json");
  EXPECT_EQ(tessel::json_get<double>(doc, "n", "spec.json"), 2.5);
  EXPECT_EQ(tessel::json_get<std::int64_t>(doc, "big", "spec.json"), 5000000000);
  auto const field = error_of([&] { tessel::json_get<int>(doc, "m", "spec.json, cluster"); });
  EXPECT_NE(field.find("spec.json, cluster: missing field 'm'"), std::string::npos) << field;
  auto const type = error_of([&] { tessel::json_get<int>(doc, "s", "spec.json"); });
  EXPECT_NE(type.find("field 's' expects an integer, got \"x\""), std::string::npos) << type;
  auto const fraction = error_of([&] { tessel::json_get<int>(doc, "n", "spec.json"); });
  EXPECT_NE(fraction.find("expects an integer, got 2.5"), std::string::npos) << fraction;
  auto const range = error_of([&] { tessel::json_get<int>(doc, "big", "spec.json"); });
  EXPECT_NE(range.find("expects an integer, got 5000000000"), std::string::npos) << range;
  auto const array = error_of([&] { tessel::json_get<std::vector<int>>(doc, "v", "spec.json"); });
  EXPECT_NE(array.find("field 'v' expects an array"), std::string::npos) << array;
  auto const not_object = error_of([&] { tessel::json_member(doc["v"], "k", "spec.json, v"); });
  EXPECT_NE(not_object.find("expected an object holding 'k', got array"), std::string::npos) << not_object;
}

TEST(Json, write_to_a_missing_directory_fails_naming_it) {
  auto const path = temp_path("no_such_dir") + "/out.json";
  auto const error = error_of([&] { tessel::write_json(path, {{"a", 1}}); });
  EXPECT_NE(error.find("no_such_dir"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(path));
}

} // namespace

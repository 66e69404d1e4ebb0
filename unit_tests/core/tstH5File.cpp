#include <tessel/core/H5File.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>

namespace {

namespace fs = std::filesystem;
using tessel::h5::File;
using tessel::h5::Mode;

class H5FileTest : public ::testing::Test {
protected:
  void SetUp() override {
    _dir =
        fs::temp_directory_path() / ("tessel_h5_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                     "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(_dir);
  }
  void TearDown() override { fs::remove_all(_dir); }
  std::string path(std::string const &name) const { return (_dir / name).string(); }

  // Expects \p f to throw a tessel::Exception whose message holds every fragment.
  template <class F> static void expect_error(F &&f, std::initializer_list<char const *> fragments) {
    try {
      f();
      ADD_FAILURE() << "expected tessel::Exception";
    } catch (tessel::Exception const &e) {
      std::string const what = e.what();
      for (auto const *fragment : fragments)
        EXPECT_NE(what.find(fragment), std::string::npos) << "'" << fragment << "' missing in: " << what;
    }
  }

  fs::path _dir;
};

template <class T> std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<T> out(n);
  for (auto &x : out) {
    if constexpr (std::is_floating_point_v<T>)
      x = std::uniform_real_distribution<T>(-1000, 1000)(gen);
    else
      x = static_cast<T>(gen());
  }
  return out;
}

template <class T> void round_trip_2d(std::string const &file) {
  auto const data = random_values<T>(7 * 5, 42);
  {
    File f(file, Mode::truncate);
    f.write("group/sub/values", data.data(), {7, 5});
    f.close();
  }
  File f(file);
  auto const back = f.read<T>("group/sub/values", {7, 5});
  EXPECT_EQ(back.shape, (std::vector<std::size_t>{7, 5}));
  EXPECT_EQ(back.data, data);
  EXPECT_EQ(f.dtype("group/sub/values"), tessel::data_type_of<T>);
}

TEST_F(H5FileTest, numeric_round_trips_every_type) {
  round_trip_2d<std::int8_t>(path("i8.h5"));
  round_trip_2d<std::uint8_t>(path("u8.h5"));
  round_trip_2d<std::int32_t>(path("i32.h5"));
  round_trip_2d<std::uint32_t>(path("u32.h5"));
  round_trip_2d<std::int64_t>(path("i64.h5"));
  round_trip_2d<std::uint64_t>(path("u64.h5"));
  round_trip_2d<float>(path("f32.h5"));
  round_trip_2d<double>(path("f64.h5"));
}

TEST_F(H5FileTest, one_dimensional_empty_and_scalar) {
  std::vector<double> const v = random_values<double>(11, 1);
  {
    File f(path("a.h5"), Mode::truncate);
    f.write("v", v);
    f.write("empty", std::vector<float>{});
    double const s = 3.25;
    f.write("scalar", &s, {});
    f.close();
  }
  File f(path("a.h5"));
  EXPECT_EQ(f.read<double>("v").data, v);
  EXPECT_EQ(f.shape("v"), (std::vector<std::size_t>{11}));
  auto const empty = f.read<float>("empty", {0});
  EXPECT_TRUE(empty.data.empty());
  auto const scalar = f.read<double>("scalar");
  EXPECT_TRUE(scalar.shape.empty());
  ASSERT_EQ(scalar.data.size(), 1u);
  EXPECT_EQ(scalar.data[0], 3.25);
}

TEST_F(H5FileTest, rows_of_a_dataset_read_alone) {
  auto const flat = random_values<std::int64_t>(1000, 3);
  auto const matrix = random_values<float>(60 * 7, 4);
  {
    File f(path("rows.h5"), Mode::truncate);
    f.write("flat", flat.data(), {1000});
    f.write("matrix", matrix.data(), {60, 7});
    f.close();
  }
  File f(path("rows.h5"));
  for (auto [first, count] : {std::pair<std::size_t, std::size_t>{0, 1000}, {0, 1}, {999, 1}, {123, 456}, {500, 0}}) {
    auto const part = f.read_rows<std::int64_t>("flat", first, count);
    EXPECT_EQ(part.shape, (std::vector<std::size_t>{count}));
    EXPECT_EQ(part.data, std::vector<std::int64_t>(flat.begin() + static_cast<std::ptrdiff_t>(first),
                                                   flat.begin() + static_cast<std::ptrdiff_t>(first + count)));
  }
  auto const rows = f.read_rows<double>("matrix", 13, 9); // widened while read
  ASSERT_EQ(rows.shape, (std::vector<std::size_t>{9, 7}));
  for (std::size_t k = 0; k < rows.data.size(); ++k)
    EXPECT_EQ(rows.data[k], static_cast<double>(matrix[13 * 7 + k]));
  expect_error([&] { f.read_rows<std::int64_t>("flat", 990, 11); }, {"rows.h5", "'flat'", "1000 rows", "[990, 1001)"});
  expect_error([&] { f.read_rows<std::int64_t>("flat", 1001, 0); }, {"rows.h5", "'flat'", "1000 rows"});
  expect_error([&] { f.read_rows<std::int32_t>("flat", 0, 1); }, {"rows.h5", "'flat'", "int32"});
}

TEST_F(H5FileTest, widening_reads_are_allowed) {
  {
    File f(path("w.h5"), Mode::truncate);
    f.write("i32", std::vector<std::int32_t>{-1, 2, 3});
    f.write("u32", std::vector<std::uint32_t>{4000000000u});
    f.write("f32", std::vector<float>{0.5f});
    f.close();
  }
  File f(path("w.h5"));
  EXPECT_EQ(f.read<std::int64_t>("i32").data, (std::vector<std::int64_t>{-1, 2, 3}));
  EXPECT_EQ(f.read<std::int64_t>("u32").data, (std::vector<std::int64_t>{4000000000LL}));
  EXPECT_EQ(f.read<double>("f32").data, (std::vector<double>{0.5}));
}

TEST_F(H5FileTest, views_round_trip_in_both_layouts) {
  Kokkos::View<float **, Kokkos::LayoutRight, Kokkos::HostSpace> right("Tessel::test::right", 4, 3);
  Kokkos::View<float **, Kokkos::LayoutLeft, Kokkos::HostSpace> left("Tessel::test::left", 4, 3);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      right(i, j) = left(i, j) = static_cast<float>(10 * i + j);
  {
    File f(path("v.h5"), Mode::truncate);
    f.write("right", right);
    f.write("left", left);
    f.close();
  }
  File f(path("v.h5"));
  // Both are stored row-major: the same values at the same (i, j).
  auto const a = f.read<float>("right", {4, 3});
  auto const b = f.read<float>("left", {4, 3});
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.data[1 * 3 + 2], 12.f);
  Kokkos::View<float **, Kokkos::LayoutLeft, Kokkos::HostSpace> back("Tessel::test::back", 4, 3);
  f.read("right", back);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(back(i, j), right(i, j));
  Kokkos::View<float **, Kokkos::HostSpace> wrong("Tessel::test::wrong", 3, 4);
  expect_error([&] { f.read("right", wrong); }, {"v.h5", "'right'", "(4, 3)", "expected (3, 4)"});
}

TEST_F(H5FileTest, attributes_strings_groups) {
  {
    File f(path("attr.h5"), Mode::truncate);
    f.create_group("config/layer");
    f.write_attribute("config", "experts", std::int64_t{8});
    f.write_attribute("config", "scale", 0.125);
    f.write_attribute("/", "name", "mixtral-scaled");
    f.write_attribute("config/layer", "dims", std::vector<std::int32_t>{4, 5, 6});
    f.write_strings("names", {"a100", "v100", "", "h200 sxm"});
    f.close();
  }
  File f(path("attr.h5"), Mode::append); // re-open read-write
  EXPECT_TRUE(f.has("config/layer"));
  EXPECT_FALSE(f.has("config/missing/deeper"));
  EXPECT_TRUE(f.has_attribute("config", "experts"));
  EXPECT_FALSE(f.has_attribute("config", "nope"));
  EXPECT_EQ(f.read_attribute<std::int64_t>("config", "experts"), 8);
  EXPECT_EQ(f.read_attribute<double>("config", "scale"), 0.125);
  EXPECT_EQ(f.read_string_attribute("/", "name"), "mixtral-scaled");
  EXPECT_EQ(f.read_attribute_array<std::int32_t>("config/layer", "dims"), (std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_EQ(f.read_strings("names"), (std::vector<std::string>{"a100", "v100", "", "h200 sxm"}));
  auto const members = f.list("/");
  EXPECT_NE(std::find(members.begin(), members.end(), "config"), members.end());
  EXPECT_NE(std::find(members.begin(), members.end(), "names"), members.end());
  // Replacing a dataset and an attribute in place.
  f.write("names_count", std::vector<std::int32_t>{4});
  f.write("names_count", std::vector<std::int32_t>{5, 6});
  EXPECT_EQ(f.read<std::int32_t>("names_count").data, (std::vector<std::int32_t>{5, 6}));
  f.write_attribute("config", "experts", std::int64_t{16});
  EXPECT_EQ(f.read_attribute<std::int64_t>("config", "experts"), 16);
}

TEST_F(H5FileTest, errors_name_file_dataset_and_expectation) {
  {
    File f(path("e.h5"), Mode::truncate);
    f.write("x", std::vector<double>{1, 2, 3});
    f.write("idx", std::vector<std::int64_t>{1, 2});
    f.write_attribute("/", "count", 2.5);
    f.close();
  }
  File f(path("e.h5"));
  expect_error([&] { f.read<double>("missing"); }, {"e.h5", "dataset 'missing' not found"});
  expect_error([&] { f.read<double>("x", {4}); }, {"e.h5", "'x'", "has shape (3,)", "expected (4,)"});
  expect_error([&] { f.read<double>("x", {3, 1}); }, {"has shape (3,)", "expected (3, 1)"});
  expect_error([&] { f.read<std::int32_t>("x"); }, {"e.h5", "'x'", "has type float64", "expected int32"});
  expect_error([&] { f.read<std::int32_t>("idx"); }, {"'idx'", "has type int64", "expected int32"});
  expect_error([&] { f.read<float>("x"); }, {"has type float64", "expected float32"});
  expect_error([&] { f.read_attribute<std::int64_t>("/", "count"); }, {"attribute 'count'", "float64"});
  expect_error([&] { f.read_attribute<double>("/", "absent"); }, {"attribute 'absent'", "not found"});
  expect_error([&] { f.read_strings("x"); }, {"'x'", "expected strings"});
  File ro(path("e.h5"));
  expect_error([&] { ro.write("y", std::vector<double>{1}); }, {"read-only", "'y'"});
}

TEST_F(H5FileTest, missing_foreign_truncated_and_corrupt_files) {
  expect_error([&] { File f(path("nope.h5")); }, {"nope.h5", "file not found"});
  { std::ofstream(path("text.h5")) << "this is not HDF5\n"; }
  expect_error([&] { File f(path("text.h5")); }, {"text.h5", "not an HDF5 file"});

  std::vector<double> const big = random_values<double>(64 * 1024, 3);
  {
    File f(path("full.h5"), Mode::truncate);
    f.write("big", big.data(), {64, 1024});
    f.close();
  }
  auto const size = fs::file_size(path("full.h5"));
  fs::copy_file(path("full.h5"), path("cut.h5"));
  fs::resize_file(path("cut.h5"), size / 2);
  // A truncated file either fails to open or fails to read; both must be a clear error, never garbage.
  try {
    File f(path("cut.h5"));
    auto const data = f.read<double>("big");
    ADD_FAILURE() << "read " << data.data.size() << " values from a truncated file";
  } catch (tessel::Exception const &e) {
    EXPECT_NE(std::string(e.what()).find("cut.h5"), std::string::npos) << e.what();
  }

  // Damage raw data (middle of the file) and, separately, metadata (right after the superblock): both are
  // covered by checksums and must fail with the file named, not return altered values.
  for (auto const offset : {static_cast<std::uintmax_t>(size / 2), std::uintmax_t{64}}) {
    std::string const name = "corrupt_" + std::to_string(offset) + ".h5";
    fs::copy_file(path("full.h5"), path(name));
    {
      std::fstream io(path(name), std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(static_cast<std::streamoff>(offset));
      std::string const junk(256, '\x5a');
      io.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    expect_error(
        [&] {
          File f(path(name));
          auto const data = f.read<double>("big");
          (void)data;
        },
        {name.c_str()});
  }
}

} // namespace

// The MoE layer HDF5 file: round trip, sharded reads, and errors that name the file and the field for a
// missing dataset, a wrong schema, a wrong shape and NaN values.
#include "MoeTestUtils.hpp"

#include <tessel/moe/MoeFile.hpp>

#include <tessel/core/H5File.hpp>

#include <gtest/gtest.h>

#include <TesselTestError.hpp>

#include <cmath>
#include <cstdio>

namespace {

using namespace tessel::moe;

MoeFileInfo small_info() {
  MoeFileInfo info;
  auto &c = info.config;
  c.tokens = 12;
  c.hidden = 8;
  c.ffn = 6;
  c.experts = 4;
  c.topk = 2;
  c.activation = Activation::gelu;
  c.normalize_topk = false;
  info.model = "test";
  info.scale = 2.0;
  info.source = "tstMoeFile";
  info.total_tokens = 12;
  return info;
}

using tessel::test::error_of;

struct TempFile {
  std::string path;
  explicit TempFile(std::string p) : path(std::move(p)) {}
  ~TempFile() { std::remove(path.c_str()); }
};

TEST(MoeFile, round_trip_with_gate_weight_and_shards) {
  TempFile file("tessel_moe_test_roundtrip.h5");
  auto const info = small_info();
  auto const tokens = test::random_matrix("tokens", 12, 8, 1);
  GateData gate;
  gate.weight = test::random_matrix("gate", 8, 4, 2);
  gate.bias = HostVector("bias", 4);
  gate.bias(2) = 0.5f;
  auto const dense = test::random_weights(info.config, 3);
  MoeFile::write(file.path, info, tokens, gate, dense);

  MoeFile f(file.path);
  EXPECT_EQ(f.info().config.hidden, 8);
  EXPECT_EQ(f.info().config.activation, Activation::gelu);
  EXPECT_FALSE(f.info().config.normalize_topk);
  EXPECT_EQ(f.info().total_tokens, 12);
  EXPECT_EQ(f.info().model, "test");
  EXPECT_EQ(f.info().scale, 2.0);
  EXPECT_FALSE(f.info().has_logits);
  EXPECT_TRUE(f.info().has_bias);
  auto const part = f.tokens(4, 3);
  ASSERT_EQ(part.extent(0), 3u);
  EXPECT_EQ(part(1, 5), tokens(5, 5));
  auto const g = f.gate(4, 3);
  EXPECT_EQ(g.weight(7, 3), gate.weight(7, 3));
  EXPECT_EQ(g.bias(2), 0.5f);
  EXPECT_EQ(g.input().kind, GateInput::Kind::weight);
  auto layer = info.config;
  layer.ep = 2;
  layer.tp = 3;
  layer.tokens = 2;
  for (int rank = 0; rank < 6; ++rank) {
    auto const shard = f.shard(layer, rank);
    auto const expected = shard_weights(layer, rank, dense);
    for (std::size_t i = 0; i < shard.w0.size(); ++i)
      ASSERT_EQ(shard.w0.data()[i], expected.w0.data()[i]);
    for (std::size_t i = 0; i < shard.w1.size(); ++i)
      ASSERT_EQ(shard.w1.data()[i], expected.w1.data()[i]);
  }
  EXPECT_NE(error_of([&] { f.tokens(10, 3); }).find("tokens [10, 13) requested, the file has 12"), std::string::npos);
}

TEST(MoeFile, logits_file) {
  TempFile file("tessel_moe_test_logits.h5");
  auto const info = small_info();
  GateData gate;
  gate.logits = test::random_matrix("logits", 12, 4, 5);
  MoeFile::write(file.path, info, test::random_matrix("tokens", 12, 8, 4), gate, test::random_weights(info.config, 6));
  MoeFile f(file.path);
  EXPECT_TRUE(f.info().has_logits);
  auto const g = f.gate(2, 5);
  EXPECT_EQ(g.logits.extent(0), 5u);
  EXPECT_EQ(g.logits(0, 1), gate.logits(2, 1));
  EXPECT_EQ(g.input().kind, GateInput::Kind::logits);
}

TEST(MoeFile, errors_name_the_file_and_field) {
  auto const info = small_info();
  auto const tokens = test::random_matrix("tokens", 12, 8, 1);
  auto const dense = test::random_weights(info.config, 3);
  GateData gate;
  gate.weight = test::random_matrix("gate", 8, 4, 2);
  {
    // Missing gate.
    TempFile file("tessel_moe_test_nogate.h5");
    MoeFile::write(file.path, info, tokens, gate, dense);
    {
      tessel::h5::File raw(file.path, tessel::h5::Mode::truncate);
      raw.write_attribute("/", "schema", MoeFile::schema);
      raw.write_attribute("/", "schema_version", std::int64_t{1});
      raw.create_group("config");
      for (char const *a : {"hidden", "ffn", "experts", "topk", "gated", "normalize_topk"})
        raw.write_attribute("config", a,
                            std::int64_t{std::string(a) == "hidden"    ? 8
                                         : std::string(a) == "ffn"     ? 6
                                         : std::string(a) == "experts" ? 4
                                         : std::string(a) == "topk"    ? 2
                                                                       : 1});
      raw.write_attribute("config", "activation", "silu");
      raw.write("tokens", tokens);
      raw.close();
    }
    auto const what = error_of([&] { MoeFile f(file.path); });
    EXPECT_NE(what.find(file.path), std::string::npos) << what;
    EXPECT_NE(what.find("neither dataset 'gate/weight'"), std::string::npos) << what;
  }
  {
    // Missing expert dataset.
    TempFile file("tessel_moe_test_noexpert.h5");
    MoeFile::write(file.path, info, tokens, gate, dense);
    {
      tessel::h5::File raw(file.path, tessel::h5::Mode::append);
      raw.write("experts/4/w0", std::vector<float>{1.0f}); // extra data is fine; now corrupt the schema
      raw.write_attribute("/", "schema", "tessel.gnn.graph");
    }
    auto const what = error_of([&] { MoeFile f(file.path); });
    EXPECT_NE(what.find("root attribute 'schema' is 'tessel.gnn.graph', expected 'tessel.moe.layer'"),
              std::string::npos)
        << what;
  }
  {
    // NaN tokens: the error names the file, the dataset, the row and the column.
    TempFile file("tessel_moe_test_nan.h5");
    auto bad = test::random_matrix("tokens", 12, 8, 1);
    bad(7, 2) = std::nanf("");
    MoeFile::write(file.path, info, bad, gate, dense);
    MoeFile f(file.path);
    EXPECT_NO_THROW(f.tokens(0, 7));
    auto const what = error_of([&] { f.tokens(0, 12); });
    EXPECT_NE(what.find(file.path + ": dataset 'tokens' holds nan at row 7, column 2"), std::string::npos) << what;
  }
  {
    // Bad configuration attribute.
    TempFile file("tessel_moe_test_badconfig.h5");
    auto wrong = info;
    MoeFile::write(file.path, wrong, tokens, gate, dense);
    {
      tessel::h5::File raw(file.path, tessel::h5::Mode::append);
      raw.write_attribute("config", "topk", std::int64_t{5});
    }
    auto const what = error_of([&] { MoeFile f(file.path); });
    EXPECT_NE(what.find("configuration attributes are invalid"), std::string::npos) << what;
    EXPECT_NE(what.find("topk must be in [1, E=4], got 5"), std::string::npos) << what;
  }
  {
    // A wrong expert shape is caught when the file is opened, before anything is allocated for the weights.
    TempFile file("tessel_moe_test_shape.h5");
    MoeFile::write(file.path, info, tokens, gate, dense);
    {
      tessel::h5::File raw(file.path, tessel::h5::Mode::append);
      raw.write("experts/1/w1", std::vector<float>(6 * 7, 0.0f).data(), {6, 7});
    }
    auto const what = error_of([&] { MoeFile f(file.path); });
    EXPECT_NE(what.find("experts/1/w1"), std::string::npos) << what;
    EXPECT_NE(what.find("expected (6, 8)"), std::string::npos) << what;
  }
  EXPECT_NE(error_of([] { MoeFile f("/nonexistent/moe.h5"); }).find("file not found"), std::string::npos);
}

// Values that a lenient reader would take as something else (a flag of 2 as true, an expert count beyond an int's
// range wrapped to a small one, a scale that is not a number, no tokens, two gates) are errors naming the field.
TEST(MoeFile, values_are_what_they_say_or_refused) {
  auto const info = small_info();
  auto const tokens = test::random_matrix("tokens", 12, 8, 1);
  auto const dense = test::random_weights(info.config, 3);
  GateData gate;
  gate.weight = test::random_matrix("gate", 8, 4, 2);
  auto const refused = [&](char const *what, auto &&edit, std::string const &expected) {
    TempFile file(std::string("tessel_moe_test_value_") + what + ".h5");
    MoeFile::write(file.path, info, tokens, gate, dense);
    {
      tessel::h5::File raw(file.path, tessel::h5::Mode::append);
      edit(raw);
    }
    auto const message = error_of([&] { MoeFile f(file.path); });
    EXPECT_NE(message.find(file.path), std::string::npos) << what << ": " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << what << ": " << message;
  };
  using tessel::h5::File;
  refused(
      "gated", [](File &f) { f.write_attribute("config", "gated", std::int64_t{2}); },
      "attribute 'config/gated' is 2, expected 0 or 1");
  refused(
      "normalize", [](File &f) { f.write_attribute("config", "normalize_topk", std::int64_t{-1}); },
      "attribute 'config/normalize_topk' is -1, expected 0 or 1");
  refused(
      "experts", [](File &f) { f.write_attribute("config", "experts", (std::int64_t{1} << 32) + 4); },
      "attribute 'config/experts' is 4294967300, expected an integer in [1, 2147483647]");
  refused(
      "hidden", [](File &f) { f.write_attribute("config", "hidden", std::int64_t{-8}); },
      "attribute 'config/hidden' is -8");
  refused(
      "scale", [](File &f) { f.write_attribute("config", "scale", std::nan("")); },
      "attribute 'config/scale' is nan, expected a positive number");
  refused(
      "no_tokens",
      [](File &f) {
        f.write("tokens", std::vector<float>().data(), {0, 8});
      },
      "dataset 'tokens' holds no token");
  refused(
      "two_gates",
      [](File &f) {
        f.write("gate/logits", std::vector<float>(12 * 4, 0.0f).data(), {12, 4});
      },
      "both 'gate/logits' and 'gate/weight' found");
  refused(
      "bias", [](File &f) { f.write("gate/bias", std::vector<float>(3, 0.0f).data(), {3}); },
      "dataset 'gate/bias' has shape (3,), expected (4,)");
}

} // namespace

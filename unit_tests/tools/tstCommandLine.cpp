#include <tessel/core/Error.hpp>
#include <tessel/tools/CommandLine.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using tessel::CommandLine;

// Runs \p f, expects a tessel::Exception and checks that its message contains every piece of \p pieces.
template <class F> void expect_error(F &&f, std::vector<std::string> const &pieces) {
  try {
    f();
    ADD_FAILURE() << "expected tessel::Exception containing '" << pieces.front() << "'";
  } catch (tessel::Exception const &e) {
    std::string const what = e.what();
    for (auto const &p : pieces)
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

TEST(CommandLine, values_in_both_spellings_and_defaults) {
  CommandLine cl({"--trace", "a.csv", "--cluster=crius", "--json=out=1.json"});
  EXPECT_EQ(cl.get("trace", "x"), "a.csv");
  EXPECT_EQ(cl.get("cluster", "x"), "crius");
  EXPECT_EQ(cl.get("json", ""), "out=1.json"); // only the first '=' separates
  EXPECT_EQ(cl.get("profile", "fallback"), "fallback");
  EXPECT_EQ(cl.get_int<int>("rounds", 7, 0, 100), 7);
  EXPECT_DOUBLE_EQ(cl.get_double("interval", 300.5, tessel::Range::positive()), 300.5);
  EXPECT_EQ(cl.get_list("policy", {"crius"}), std::vector<std::string>{"crius"});
  cl.finish();
}

TEST(CommandLine, typed_getters) {
  CommandLine cl({"--n", "-12", "--big", "9000000000", "--x", "-2.5e-3", "--y=.5", "--list", "crius,fcfs,sia"});
  EXPECT_EQ(cl.get_int<int>("n", 0, -100, 100), -12); // a negative number is a value, not an option
  EXPECT_EQ(cl.get_int<std::int64_t>("big", 0, 0, INT64_MAX), 9000000000LL);
  EXPECT_DOUBLE_EQ(cl.get_double("x", 0, tessel::Range{}), -2.5e-3);
  EXPECT_DOUBLE_EQ(cl.get_double("y", 0, tessel::Range::closed(0, 1)), 0.5);
  EXPECT_EQ(cl.get_list("list", {}), (std::vector<std::string>{"crius", "fcfs", "sia"}));
  EXPECT_EQ(cl.get_int_list<std::int64_t>("tokens", {1024, 4096}, 1, 1 << 20), (std::vector<std::int64_t>{1024, 4096}));
  cl.finish();
  CommandLine ints({"--tokens", "64,-2,4096"});
  EXPECT_EQ(ints.get_int_list<std::int64_t>("tokens", {}, -10, 10000), (std::vector<std::int64_t>{64, -2, 4096}));
}

TEST(CommandLine, flags_do_not_take_the_next_argument) {
  CommandLine cl({"--verify", "layer.h5", "--quiet=true", "--check=0", "--stats=false", "--tune=1"});
  EXPECT_TRUE(cl.flag("verify"));
  EXPECT_TRUE(cl.flag("quiet"));
  EXPECT_FALSE(cl.flag("check"));
  EXPECT_FALSE(cl.flag("stats"));
  EXPECT_TRUE(cl.flag("tune"));
  EXPECT_FALSE(cl.flag("absent"));
  EXPECT_EQ(cl.positionals(), std::vector<std::string>{"layer.h5"});
  cl.finish();
}

TEST(CommandLine, short_aliases_like_nccl_tests) {
  CommandLine cl({"-b", "8", "-e128M", "-f=2", "--iters", "20", "-c", "1", "-J", "r.json", "-h"});
  EXPECT_EQ(cl.get({"minbytes", 'b'}, ""), "8");
  EXPECT_EQ(cl.get({"maxbytes", 'e'}, ""), "128M");
  EXPECT_DOUBLE_EQ(cl.get_double({"stepfactor", 'f'}, 0, tessel::Range::positive()), 2.0);
  EXPECT_EQ(cl.get_int<int>({"iters", 'n'}, 0, 1, 1000), 20); // the long spelling works for an aliased option
  EXPECT_EQ(cl.get_int<int>({"check", 'c'}, 0, 0, 1), 1);
  EXPECT_EQ(cl.get({"json", 'J'}, ""), "r.json");
  EXPECT_TRUE(cl.flag({"help", 'h'}));
  EXPECT_FALSE(cl.flag({"warmup_iters", 'w'}));
  cl.finish();
}

TEST(CommandLine, last_occurrence_wins) {
  CommandLine cl({"--iters", "3", "-n", "9", "--verbose", "--verbose=false"});
  EXPECT_EQ(cl.get_int<int>({"iters", 'n'}, 0, 1, 1000), 9);
  EXPECT_FALSE(cl.flag("verbose"));
  cl.finish();
}

TEST(CommandLine, positionals_and_double_dash) {
  CommandLine cl({"in.h5", "--iters", "4", "--", "--not-an-option", "-5"});
  EXPECT_EQ(cl.get_int<int>("iters", 0, 1, 1000), 4);
  EXPECT_EQ(cl.positionals(), (std::vector<std::string>{"in.h5", "--not-an-option", "-5"}));
  cl.finish();
  CommandLine none({"--json", "-"}); // "-" (stdout) is a value
  EXPECT_EQ(none.get("json", ""), "-");
  EXPECT_TRUE(none.positionals().empty());
}

TEST(CommandLine, argv_constructor_and_has) {
  char const *argv[] = {"--data", "g.h5", "--resume"};
  CommandLine cl(3, argv);
  EXPECT_TRUE(cl.has("data"));
  EXPECT_FALSE(cl.has("json"));
  EXPECT_THROW(cl.finish(), tessel::Exception); // has() does not consume
  EXPECT_EQ(cl.require("data"), "g.h5");
  EXPECT_TRUE(cl.flag("resume"));
  cl.finish();
}

TEST(CommandLine, required_options) {
  CommandLine cl({"--gpus", "8", "--share", "0.5", "--model", "gpt"});
  EXPECT_EQ(cl.require("model"), "gpt");
  EXPECT_EQ(cl.require_int<int>("gpus", 1, 1024), 8);
  EXPECT_DOUBLE_EQ(cl.require_double("share", tessel::Range::closed(0, 1)), 0.5);
  expect_error([&] { cl.require("trace"); }, {"missing required option --trace"});
  expect_error([&] { cl.require_int<int>("batch", 1, 1024); }, {"missing required option --batch"});
  expect_error([&] { cl.require_double({"factor", 'f'}, tessel::Range{}); }, {"missing required option -f/--factor"});
}

TEST(CommandLine, malformed_numbers_name_option_and_value) {
  CommandLine cl({"--iters", "abc", "--ep", "4x", "--lr", "1e-2.5", "--big", "99999999999999999999", "--t", "nan",
                  "--u", "inf", "--w=", "-f", "fast", "--sp= 3"});
  expect_error([&] { cl.get_int<int>("iters", 0, 1, 10); }, {"--iters", "expects an integer in [1, 10]", "'abc'"});
  expect_error([&] { cl.get_int<int>("ep", 0, 1, 8); }, {"--ep", "'4x'"});
  expect_error([&] { cl.get_double("lr", 0, tessel::Range::positive(1)); },
               {"--lr", "expects a number in (0, 1]", "'1e-2.5'"});
  expect_error([&] { cl.get_int<std::int64_t>("big", 0, 0, INT64_MAX); },
               {"--big", "'99999999999999999999'", "in [0, 9223372036854775807]"});
  expect_error([&] { cl.get_double("t", 0, tessel::Range{}); }, {"--t", "(-inf, inf)", "'nan'"});
  expect_error([&] { cl.get_double("u", 0, tessel::Range{}); }, {"--u", "'inf'"});
  expect_error([&] { cl.get_int<int>("w", 0, 0, 1); }, {"--w", "needs a value"});
  expect_error([&] { cl.get_double({"stepfactor", 'f'}, 0, tessel::Range{}); }, {"-f/--stepfactor", "'fast'"});
  expect_error([&] { cl.get_int<int>("sp", 0, 0, 10); }, {"--sp", "' 3'"});
  expect_error([] { CommandLine::parse_int<int>("--x", "", 0, 1); }, {"--x", "expects an integer", "''"});
  expect_error([] { CommandLine::parse_double("--x", "1.5 ", tessel::Range{}); }, {"--x", "'1.5 '"});
  EXPECT_EQ(CommandLine::parse_int<int>("--x", "+17", 0, 100), 17);
}

TEST(CommandLine, numbers_are_parsed_into_their_type_and_range) {
  CommandLine cl({"--epochs", "4294967299", "--neg", "-1", "--zero", "0", "--share", "1", "--bw", "0", "--seed",
                  "18446744073709551615", "--huge", "1e400", "--frac", "1.5", "--tiny", "-0.5"});
  // 2^32 + 3 would wrap into 3 as an int: it is out of the option's range instead.
  expect_error([&] { cl.get_int<int>("epochs", 200, 1, 1000000); }, {"--epochs", "in [1, 1000000]", "'4294967299'"});
  expect_error([&] { cl.get_int<int>("neg", 1, 1, 10); }, {"--neg", "in [1, 10]", "'-1'"});
  expect_error([&] { cl.get_int<int>("zero", 1, 1, 10); }, {"--zero", "'0'"});
  expect_error([&] { cl.get_double("share", 0.5, tessel::Range{0, 1, true, true}); }, {"--share", "(0, 1)", "'1'"});
  expect_error([&] { cl.get_double("bw", 1, tessel::Range::positive()); }, {"--bw", "(0, inf)", "'0'"});
  EXPECT_EQ(cl.get_int<std::uint64_t>("seed", 0, 0, UINT64_MAX), UINT64_MAX);
  expect_error([&] { cl.get_double("huge", 1, tessel::Range{}); }, {"--huge", "'1e400'"});
  expect_error([&] { cl.get_int<int>("frac", 1, 0, 9); }, {"--frac", "expects an integer", "'1.5'"});
  expect_error([&] { cl.get_double("tiny", 1, tessel::Range::at_least(0)); }, {"--tiny", "[0, inf)", "'-0.5'"});
  try {
    CommandLine({"--n", "x"}).get_int<int>("n", 0, 0, 1);
    ADD_FAILURE() << "no error";
  } catch (tessel::UsageError const &) {
  }
}

TEST(CommandLine, missing_values) {
  CommandLine end({"--trace"});
  expect_error([&] { end.get("trace", ""); }, {"option --trace needs a value"});
  CommandLine before_option({"--trace", "--quiet"}); // a forgotten value does not eat the next option
  expect_error([&] { before_option.get("trace", ""); }, {"option --trace needs a value"});
  CommandLine before_short({"-o", "-c", "1"});
  expect_error([&] { before_short.get({"op", 'o'}, ""); }, {"-o/--op needs a value"});
  CommandLine before_dash({"--trace", "--", "file"});
  expect_error([&] { before_dash.get("trace", ""); }, {"--trace needs a value"});
}

TEST(CommandLine, flags_reject_values) {
  CommandLine cl({"--check=yes"});
  expect_error([&] { cl.flag("check"); }, {"--check", "is a flag", "'yes'"});
  CommandLine attached({"-hx"});
  expect_error([&] { attached.flag({"help", 'h'}); }, {"-h/--help", "'x'"});
}

TEST(CommandLine, lists_reject_empty_items) {
  CommandLine cl({"--policy", "crius,,fcfs", "--features=16,"});
  expect_error([&] { cl.get_list("policy", {}); }, {"--policy", "empty item", "'crius,,fcfs'"});
  expect_error([&] { cl.get_list("features", {}); }, {"--features", "'16,'"});
  CommandLine ints({"--tokens", "64,x4", "--chunks", "2,,4"});
  expect_error([&] { ints.get_int_list<int>("tokens", {}, 0, 100); }, {"--tokens", "expects an integer", "'x4'"});
  expect_error([&] { ints.get_int_list<int>("chunks", {}, 0, 10); }, {"--chunks", "empty item", "'2,,4'"});
}

TEST(CommandLine, unknown_and_unused_arguments) {
  CommandLine unknown({"--trace", "t.csv", "--polcy", "crius"});
  EXPECT_EQ(unknown.get("trace", ""), "t.csv");
  expect_error([&] { unknown.finish(); }, {"unknown option '--polcy'", "--help"});
  // The unknown option is reported before its value could pass for a positional argument.
  expect_error([&] { unknown.positionals(); }, {"unknown option '--polcy'"});

  CommandLine unknown_short({"-x", "3"});
  expect_error([&] { unknown_short.finish(); }, {"unknown option '-x'"});
  CommandLine unknown_inline({"--colour=red"});
  expect_error([&] { unknown_inline.finish(); }, {"unknown option '--colour=red'"});

  CommandLine stray({"--quiet", "extra"});
  EXPECT_TRUE(stray.flag("quiet"));
  expect_error([&] { stray.finish(); }, {"unexpected argument 'extra'"});

  CommandLine after_dash({"--", "late"});
  expect_error([&] { after_dash.finish(); }, {"unexpected argument 'late'"});

  CommandLine unused({"--json", "out.json"}); // a value nobody asked for
  expect_error([&] { unused.finish(); }, {"unknown option '--json'"});
}

TEST(CommandLine, option_names_are_checked) {
  expect_error([] { tessel::OptionName("--iters"); }, {"'--iters'", "without dashes"});
  expect_error([] { tessel::OptionName("a=b"); }, {"'a=b'"});
  expect_error([] { tessel::OptionName("five", '5'); }, {"--five", "must be a letter"});
  EXPECT_EQ(tessel::OptionName("iters", 'n').spelling(), "-n/--iters");
  EXPECT_EQ(tessel::OptionName("iters").spelling(), "--iters");
}

} // namespace

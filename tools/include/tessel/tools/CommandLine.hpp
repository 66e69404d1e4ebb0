#ifndef TESSEL_TOOLS_COMMANDLINE_HPP
#define TESSEL_TOOLS_COMMANDLINE_HPP

/// \file CommandLine.hpp
/// \brief The one command-line parser of Tessel's apps, benchmarks and data-set tools.

#include <tessel/core/Error.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessel {

/// \brief An option's long spelling (`--name`) and, where a tool mirrors a getopt-style peer such as nccl-tests,
/// its one-letter alias (`-n`).
struct OptionName {
  OptionName(char const *long_name) : OptionName(std::string(long_name)) {}
  OptionName(std::string long_name, char short_name = '\0');
  std::string long_name;
  char short_name;
  /// `--name` or `-n/--name`, as error messages show it.
  std::string spelling() const;
};

/// \brief The values a floating-point option accepts: an interval whose ends may be open (`(0, 1)`) or infinite.
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;
  /// [lo, hi]
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }
  /// (0, hi]: a size, a rate, a duration.
  static Range positive(double hi = std::numeric_limits<double>::infinity()) { return {0.0, hi, true, false}; }
  /// [lo, hi]
  static Range at_least(double lo, double hi = std::numeric_limits<double>::infinity()) { return {lo, hi}; }
  bool contains(double v) const { return (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max); }
  /// "(0, 1]", as error messages show it.
  std::string describe() const;
};

/// \brief Arguments queried by name, so each tool states its options where it uses them.
///
/// Parsing is driven by the queries: get() takes the token after `--name` as its value, flag() takes none, so no
/// table of options is needed up front and `--flag FILE` never swallows a positional argument. Accepted
/// spellings: `--name VALUE`, `--name=VALUE`, `-n VALUE`, `-nVALUE`, `-n=VALUE`; flags as `--name`, `-n` or
/// `--name=true|false|1|0`; `--` ends the options. A value cannot start with `-` unless it is a number (`-5`,
/// `-.5`): a forgotten value then fails as "needs a value" instead of eating the next option. When an option is
/// given twice the last one wins (scripts append overrides). After the last query, finish() rejects whatever no
/// query consumed (positionals() takes the leftover arguments but rejects leftover options), so a misspelt option
/// fails instead of being ignored. Every number is parsed into its final type within the range the tool states,
/// so that no value is wrapped, truncated or replaced. Every error is a tessel::UsageError naming the option, the
/// accepted range and the offending text.
class CommandLine {
public:
  /// Takes the \p argc arguments at \p argv; pass `argc - 1, argv + 1` to skip the program name, and construct
  /// after tessel::ScopeGuard so Kokkos has removed its own `--kokkos-*` options.
  CommandLine(int argc, char const *const *argv);
  CommandLine(int argc, char **argv);
  explicit CommandLine(std::vector<std::string> args);

  /// Whether the flag is given; consumes it.
  bool flag(OptionName const &name);
  /// The first argument when it is not an option (a subcommand such as `train`), consumed; else "".
  std::string subcommand();
  /// Whether the option is given, without consuming it (for defaults that depend on another option).
  bool has(OptionName const &name) const;

  /// The option's value, or \p fallback when it is absent.
  std::string get(OptionName const &name, std::string const &fallback);
  /// Integer value (decimal, optional sign) in [\p min, \p max], as type \p Int; "12abc", "1e3" and values
  /// outside the range are errors that state the range.
  template <class Int> Int get_int(OptionName const &name, Int fallback, Int min, Int max) {
    static_assert(std::is_integral_v<Int>, "get_int reads integers");
    std::string value;
    return find_value(name, value) ? parse_int(name.spelling(), value, min, max) : fallback;
  }
  /// Decimal floating-point value (tessel::parse_decimal: no hexadecimal, inf or nan) in \p range; trailing text is
  /// an error.
  double get_double(OptionName const &name, double fallback, Range range);
  /// The option's value (or \p fallback) converted by \p parse, a function of the text such as a name-to-enum
  /// lookup; an error it raises becomes a UsageError naming the option.
  template <class Parse> auto get_parsed(OptionName const &name, std::string const &fallback, Parse &&parse) {
    return parse_value(name.spelling(), get(name, fallback), std::forward<Parse>(parse));
  }
  /// Comma-separated list ("a,b,c"); empty items are errors.
  std::vector<std::string> get_list(OptionName const &name, std::vector<std::string> const &fallback);
  /// Comma-separated integers ("1024,4096"), each in [\p min, \p max].
  template <class Int>
  std::vector<Int> get_int_list(OptionName const &name, std::vector<Int> const &fallback, Int min, Int max) {
    std::string value;
    if (!find_value(name, value))
      return fallback;
    std::vector<Int> out;
    for (auto const &item : split_list(name.spelling(), value))
      out.push_back(parse_int(name.spelling(), item, min, max));
    return out;
  }

  /// The option's value; throws "missing required option" when it is absent.
  std::string require(OptionName const &name);
  template <class Int> Int require_int(OptionName const &name, Int min, Int max) {
    return parse_int(name.spelling(), require(name), min, max);
  }
  double require_double(OptionName const &name, Range range);

  /// The arguments no query consumed, in order; throws on a leftover option first (an unknown option's value
  /// would otherwise look like a positional argument). Call after all option queries.
  std::vector<std::string> positionals();
  /// Throws naming the first unknown option or unexpected argument; call after the last query.
  void finish() const;

  /// The integer in \p text within [\p min, \p max], or an error naming \p option, the range and \p text.
  template <class Int> static Int parse_int(std::string const &option, std::string const &text, Int min, Int max) {
    static_assert(std::is_integral_v<Int>, "parse_int reads integers");
    auto const lo = static_cast<long double>(min), hi = static_cast<long double>(max);
    return static_cast<Int>(parse_integer(option, text, lo, hi));
  }
  /// The number in \p text within \p range, or an error naming \p option, the range and \p text.
  static double parse_double(std::string const &option, std::string const &text, Range range);
  /// \p parse applied to \p text; an error it raises becomes a UsageError naming \p option.
  template <class Parse> static auto parse_value(std::string const &option, std::string const &text, Parse &&parse) {
    try {
      return parse(text);
    } catch (Exception const &e) {
      throw UsageError("option " + option + ": " + e.what(), e.where());
    }
  }
  /// \p text split at commas, or an error naming \p option when an item is empty.
  static std::vector<std::string> split_list(std::string const &option, std::string const &text);

private:
  struct Match {
    std::size_t index;   // token holding the option
    bool inline_value;   // value attached (`--name=v`, `-nv`)
    std::string value;   // attached value, when inline_value
    bool has_next_value; // the following token can be a value
  };
  std::vector<Match> matches(OptionName const &name) const;
  // The integer in text, checked against [min, max] (exact for every 64-bit bound).
  static long double parse_integer(std::string const &option, std::string const &text, long double min,
                                   long double max);
  bool find_value(OptionName const &name, std::string &value);

  std::vector<std::string> _args;
  std::vector<bool> _used;
  std::size_t _end_of_options; // index of "--", or _args.size()
};

} // namespace tessel

#endif

#ifndef TESSEL_CORE_COMMANDLINE_HPP
#define TESSEL_CORE_COMMANDLINE_HPP

/// \file CommandLine.hpp
/// \brief The one command-line parser of Tessel's apps, benchmarks and data-set tools.

#include <cstdint>
#include <string>
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

/// \brief Arguments queried by name, so each tool states its options where it uses them.
///
/// Parsing is driven by the queries: get() takes the token after `--name` as its value, flag() takes none, so no
/// table of options is needed up front and `--flag FILE` never swallows a positional argument. Accepted
/// spellings: `--name VALUE`, `--name=VALUE`, `-n VALUE`, `-nVALUE`, `-n=VALUE`; flags as `--name`, `-n` or
/// `--name=true|false|1|0`; `--` ends the options. A value cannot start with `-` unless it is a number (`-5`,
/// `-.5`): a forgotten value then fails as "needs a value" instead of eating the next option. When an option is
/// given twice the last one wins (scripts append overrides). After the last query, finish() rejects whatever no
/// query consumed (positionals() takes the leftover arguments but rejects leftover options), so a misspelt option
/// fails instead of being ignored. Every error is a tessel::Exception naming the option and the offending text.
class CommandLine {
public:
  /// Takes the \p argc arguments at \p argv; pass `argc - 1, argv + 1` to skip the program name, and construct
  /// after tessel::ScopeGuard so Kokkos has removed its own `--kokkos-*` options.
  CommandLine(int argc, char const *const *argv);
  CommandLine(int argc, char **argv);
  explicit CommandLine(std::vector<std::string> args);

  /// Whether the flag is given; consumes it.
  bool flag(OptionName const &name);
  /// Whether the option is given, without consuming it (for defaults that depend on another option).
  bool has(OptionName const &name) const;

  /// The option's value, or \p fallback when it is absent.
  std::string get(OptionName const &name, std::string const &fallback);
  /// Integer value (decimal, optional sign); "12abc" and out-of-range values are errors.
  std::int64_t get_int(OptionName const &name, std::int64_t fallback);
  /// Floating-point value as std::strtod reads it; trailing text is an error.
  double get_double(OptionName const &name, double fallback);
  /// Comma-separated list ("a,b,c"); empty items are errors.
  std::vector<std::string> get_list(OptionName const &name, std::vector<std::string> const &fallback);
  /// Comma-separated integers ("1024,4096"); every item is checked as get_int() checks its value.
  std::vector<std::int64_t> get_int_list(OptionName const &name, std::vector<std::int64_t> const &fallback);

  /// The option's value; throws "missing required option" when it is absent.
  std::string require(OptionName const &name);
  std::int64_t require_int(OptionName const &name);
  double require_double(OptionName const &name);

  /// The arguments no query consumed, in order; throws on a leftover option first (an unknown option's value
  /// would otherwise look like a positional argument). Call after all option queries.
  std::vector<std::string> positionals();
  /// Throws naming the first unknown option or unexpected argument; call after the last query.
  void finish() const;

  /// The integer in \p text, or an error naming \p option and \p text (for values a tool post-processes).
  static std::int64_t parse_int(std::string const &option, std::string const &text);
  /// The number in \p text, or an error naming \p option and \p text.
  static double parse_double(std::string const &option, std::string const &text);
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
  bool find_value(OptionName const &name, std::string &value);

  std::vector<std::string> _args;
  std::vector<bool> _used;
  std::size_t _end_of_options; // index of "--", or _args.size()
};

} // namespace tessel

#endif

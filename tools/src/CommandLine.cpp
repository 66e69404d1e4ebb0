#include <tessel/core/Error.hpp>
#include <tessel/core/Numbers.hpp>
#include <tessel/tools/CommandLine.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <sstream>

namespace tessel {

namespace {

// A number may start with '-' (`--offset -5`), so only "-x..." with a non-digit x is an option.
bool is_option(std::string const &t) {
  if (t.size() < 2 || t[0] != '-' || t == "--")
    return false;
  return !(std::isdigit(static_cast<unsigned char>(t[1])) || t[1] == '.');
}

} // namespace

OptionName::OptionName(std::string long_name_, char short_name_)
    : long_name(std::move(long_name_)), short_name(short_name_) {
  TESSEL_REQUIRE(!long_name.empty() && long_name[0] != '-' && long_name.find('=') == std::string::npos, "option name '",
                 long_name, "' must be given without dashes and contain no '='");
  TESSEL_REQUIRE(short_name == '\0' || (std::isalpha(static_cast<unsigned char>(short_name))), "short alias of --",
                 long_name, " must be a letter");
}

std::string OptionName::spelling() const {
  return short_name ? std::string("-") + short_name + "/--" + long_name : "--" + long_name;
}

CommandLine::CommandLine(std::vector<std::string> args) : _args(std::move(args)), _used(_args.size(), false) {
  auto const end = std::find(_args.begin(), _args.end(), "--");
  _end_of_options = static_cast<std::size_t>(end - _args.begin());
  if (_end_of_options < _args.size())
    _used[_end_of_options] = true;
}

CommandLine::CommandLine(int argc, char const *const *argv)
    : CommandLine(std::vector<std::string>(argv, argv + std::max(argc, 0))) {}

CommandLine::CommandLine(int argc, char **argv) : CommandLine(argc, const_cast<char const *const *>(argv)) {}

std::vector<CommandLine::Match> CommandLine::matches(OptionName const &name) const {
  std::vector<Match> out;
  for (std::size_t i = 0; i < _end_of_options; ++i) {
    std::string const &t = _args[i];
    if (!is_option(t))
      continue;
    Match m{i, false, {}, false};
    if (t.compare(0, 2, "--") == 0) {
      auto const eq = t.find('=');
      if (t.compare(2, eq == std::string::npos ? std::string::npos : eq - 2, name.long_name) != 0)
        continue;
      if (eq != std::string::npos) {
        m.inline_value = true;
        m.value = t.substr(eq + 1);
      }
    } else {
      if (!name.short_name || t[1] != name.short_name)
        continue;
      if (t.size() > 2) {
        m.inline_value = true;
        m.value = t.substr(t[2] == '=' ? 3 : 2);
      }
    }
    m.has_next_value = i + 1 < _end_of_options && !is_option(_args[i + 1]);
    out.push_back(std::move(m));
  }
  return out;
}

bool CommandLine::find_value(OptionName const &name, std::string &value) {
  auto const found = matches(name);
  for (auto const &m : found) {
    _used[m.index] = true;
    if (m.inline_value) {
      value = m.value;
    } else {
      TESSEL_REQUIRE_USAGE(m.has_next_value, "option ", name.spelling(), " needs a value");
      _used[m.index + 1] = true;
      value = _args[m.index + 1];
    }
    TESSEL_REQUIRE_USAGE(!value.empty(), "option ", name.spelling(), " needs a value (got an empty one)");
  }
  return !found.empty();
}

bool CommandLine::flag(OptionName const &name) {
  bool on = false;
  for (auto const &m : matches(name)) {
    _used[m.index] = true;
    if (!m.inline_value) {
      on = true;
    } else if (m.value == "true" || m.value == "1") {
      on = true;
    } else if (m.value == "false" || m.value == "0") {
      on = false;
    } else {
      TESSEL_REQUIRE_USAGE(false, "option ", name.spelling(), " is a flag and takes no value (got '", m.value,
                           "'; use =true or =false)");
    }
  }
  return on;
}

std::string CommandLine::subcommand() {
  if (_args.empty() || _end_of_options == 0 || is_option(_args[0]) || _used[0])
    return {};
  _used[0] = true;
  return _args[0];
}

bool CommandLine::has(OptionName const &name) const { return !matches(name).empty(); }

std::string CommandLine::get(OptionName const &name, std::string const &fallback) {
  std::string value;
  return find_value(name, value) ? value : fallback;
}

double CommandLine::get_double(OptionName const &name, double fallback, Range range) {
  std::string value;
  return find_value(name, value) ? parse_double(name.spelling(), value, range) : fallback;
}

std::vector<std::string> CommandLine::get_list(OptionName const &name, std::vector<std::string> const &fallback) {
  std::string value;
  return find_value(name, value) ? split_list(name.spelling(), value) : fallback;
}

std::string CommandLine::require(OptionName const &name) {
  std::string value;
  TESSEL_REQUIRE_USAGE(find_value(name, value), "missing required option ", name.spelling());
  return value;
}

double CommandLine::require_double(OptionName const &name, Range range) {
  return parse_double(name.spelling(), require(name), range);
}

std::vector<std::string> CommandLine::positionals() {
  for (std::size_t i = 0; i < _end_of_options; ++i)
    TESSEL_REQUIRE_USAGE(_used[i] || !is_option(_args[i]), "unknown option '", _args[i], "' (see --help)");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < _args.size(); ++i) {
    if (!_used[i]) {
      _used[i] = true;
      out.push_back(_args[i]);
    }
  }
  return out;
}

void CommandLine::finish() const {
  for (std::size_t i = 0; i < _end_of_options; ++i)
    TESSEL_REQUIRE_USAGE(_used[i] || !is_option(_args[i]), "unknown option '", _args[i], "' (see --help)");
  for (std::size_t i = 0; i < _args.size(); ++i)
    TESSEL_REQUIRE_USAGE(_used[i], "unexpected argument '", _args[i], "' (see --help)");
}

std::string Range::describe() const {
  auto const bound = [](double v) {
    if (std::isinf(v))
      return std::string(v < 0 ? "-inf" : "inf");
    std::ostringstream os;
    os << v;
    return os.str();
  };
  return (min_open || std::isinf(min) ? "(" : "[") + bound(min) + ", " + bound(max) +
         (max_open || std::isinf(max) ? ")" : "]");
}

long double CommandLine::parse_integer(std::string const &option, std::string const &text, long double min,
                                       long double max) {
  auto const expected = [&] {
    std::ostringstream os;
    os << "option " << option << " expects an integer in [" << static_cast<long long>(min) << ", ";
    if (max > static_cast<long double>(std::numeric_limits<long long>::max()))
      os << static_cast<unsigned long long>(max);
    else
      os << static_cast<long long>(max);
    os << "], got '" << text << "'";
    return os.str();
  };
  // Decimal only (tessel::parse_decimal_int): " 12", "12abc", "0x10" and "1e3" are not integers; a value past 64
  // bits is out of every range, so it gets the same message as any other out-of-range value.
  std::optional<long double> value;
  if (!text.empty() && text[0] == '-') {
    if (auto const v = parse_decimal_int(text))
      value = static_cast<long double>(*v);
  } else if (auto const v = parse_decimal_uint(text)) {
    value = static_cast<long double>(*v);
  }
  TESSEL_REQUIRE_USAGE(value && *value >= min && *value <= max, expected());
  return *value;
}

double CommandLine::parse_double(std::string const &option, std::string const &text, Range range) {
  // Decimal only (tessel::parse_decimal): strtod would also take hexadecimal ("0x10" as 16), "inf" and "nan".
  auto const v = parse_decimal(text);
  TESSEL_REQUIRE_USAGE(v && range.contains(*v), "option ", option, " expects a number in ", range.describe(), ", got '",
                       text, "'");
  return *v;
}

std::vector<std::string> CommandLine::split_list(std::string const &option, std::string const &text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto const comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    TESSEL_REQUIRE_USAGE(!item.empty(), "option ", option, " has an empty item in the list '", text, "'");
    out.push_back(std::move(item));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

} // namespace tessel

#include <tessel/core/CommandLine.hpp>
#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

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
      TESSEL_REQUIRE(m.has_next_value, "option ", name.spelling(), " needs a value");
      _used[m.index + 1] = true;
      value = _args[m.index + 1];
    }
    TESSEL_REQUIRE(!value.empty(), "option ", name.spelling(), " needs a value (got an empty one)");
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
      TESSEL_THROW("option ", name.spelling(), " is a flag and takes no value (got '", m.value,
                   "'; use =true or =false)");
    }
  }
  return on;
}

bool CommandLine::has(OptionName const &name) const { return !matches(name).empty(); }

std::string CommandLine::get(OptionName const &name, std::string const &fallback) {
  std::string value;
  return find_value(name, value) ? value : fallback;
}

std::int64_t CommandLine::get_int(OptionName const &name, std::int64_t fallback) {
  std::string value;
  return find_value(name, value) ? parse_int(name.spelling(), value) : fallback;
}

double CommandLine::get_double(OptionName const &name, double fallback) {
  std::string value;
  return find_value(name, value) ? parse_double(name.spelling(), value) : fallback;
}

std::vector<std::string> CommandLine::get_list(OptionName const &name, std::vector<std::string> const &fallback) {
  std::string value;
  return find_value(name, value) ? split_list(name.spelling(), value) : fallback;
}

std::vector<std::int64_t> CommandLine::get_int_list(OptionName const &name, std::vector<std::int64_t> const &fallback) {
  std::string value;
  if (!find_value(name, value))
    return fallback;
  std::vector<std::int64_t> out;
  for (auto const &item : split_list(name.spelling(), value))
    out.push_back(parse_int(name.spelling(), item));
  return out;
}

std::string CommandLine::require(OptionName const &name) {
  std::string value;
  TESSEL_REQUIRE(find_value(name, value), "missing required option ", name.spelling());
  return value;
}

std::int64_t CommandLine::require_int(OptionName const &name) { return parse_int(name.spelling(), require(name)); }

double CommandLine::require_double(OptionName const &name) { return parse_double(name.spelling(), require(name)); }

std::vector<std::string> CommandLine::positionals() {
  for (std::size_t i = 0; i < _end_of_options; ++i)
    TESSEL_REQUIRE(_used[i] || !is_option(_args[i]), "unknown option '", _args[i], "' (see --help)");
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
    TESSEL_REQUIRE(_used[i] || !is_option(_args[i]), "unknown option '", _args[i], "' (see --help)");
  for (std::size_t i = 0; i < _args.size(); ++i)
    TESSEL_REQUIRE(_used[i], "unexpected argument '", _args[i], "' (see --help)");
}

std::int64_t CommandLine::parse_int(std::string const &option, std::string const &text) {
  // strtoll alone would accept " 12", "12abc" (as 12) and saturate on overflow.
  bool const shaped = !text.empty() && !std::isspace(static_cast<unsigned char>(text[0]));
  char *end = nullptr;
  errno = 0;
  long long const v = shaped ? std::strtoll(text.c_str(), &end, 10) : 0;
  TESSEL_REQUIRE(shaped && end && *end == '\0' && end != text.c_str(), "option ", option, " expects an integer, got '",
                 text, "'");
  TESSEL_REQUIRE(errno != ERANGE, "option ", option, " value '", text, "' is out of the 64-bit integer range");
  return static_cast<std::int64_t>(v);
}

double CommandLine::parse_double(std::string const &option, std::string const &text) {
  bool const shaped = !text.empty() && !std::isspace(static_cast<unsigned char>(text[0]));
  char *end = nullptr;
  double const v = shaped ? std::strtod(text.c_str(), &end) : 0.0;
  TESSEL_REQUIRE(shaped && end && *end == '\0' && end != text.c_str(), "option ", option, " expects a number, got '",
                 text, "'");
  TESSEL_REQUIRE(std::isfinite(v), "option ", option, " expects a finite number, got '", text, "'");
  return v;
}

std::vector<std::string> CommandLine::split_list(std::string const &option, std::string const &text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto const comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    TESSEL_REQUIRE(!item.empty(), "option ", option, " has an empty item in the list '", text, "'");
    out.push_back(std::move(item));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

} // namespace tessel

#include <tessel/core/Numbers.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace tessel {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// [sign] digits: the shape every integer must have before strtoll/strtoull see it (they skip spaces, take "0x",
// and stop at the first character that does not fit).
bool integer_shaped(std::string_view text, bool allow_minus) {
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '+' || (allow_minus && text[i] == '-')))
    ++i;
  if (i == text.size())
    return false;
  for (; i < text.size(); ++i)
    if (!is_digit(text[i]))
      return false;
  return true;
}

} // namespace

std::optional<std::int64_t> parse_decimal_int(std::string_view text) {
  if (!integer_shaped(text, true))
    return std::nullopt;
  std::string const s(text);
  errno = 0;
  char *end = nullptr;
  long long const v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE || end != s.c_str() + s.size())
    return std::nullopt;
  return static_cast<std::int64_t>(v);
}

std::optional<std::uint64_t> parse_decimal_uint(std::string_view text) {
  if (!integer_shaped(text, false))
    return std::nullopt;
  std::string const s(text);
  errno = 0;
  char *end = nullptr;
  unsigned long long const v = std::strtoull(s.c_str(), &end, 10);
  if (errno == ERANGE || end != s.c_str() + s.size())
    return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

std::optional<double> parse_decimal(std::string_view text) {
  // [sign] digits [. digits] [e [sign] digits], at least one digit in the mantissa.
  std::size_t i = 0, digits = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-'))
    ++i;
  for (; i < text.size() && is_digit(text[i]); ++i)
    ++digits;
  if (i < text.size() && text[i] == '.')
    for (++i; i < text.size() && is_digit(text[i]); ++i)
      ++digits;
  if (digits == 0)
    return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-'))
      ++i;
    std::size_t exponent_digits = 0;
    for (; i < text.size() && is_digit(text[i]); ++i)
      ++exponent_digits;
    if (exponent_digits == 0)
      return std::nullopt;
  }
  if (i != text.size())
    return std::nullopt;
  std::string const s(text);
  double const v = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(v))
    return std::nullopt;
  return v;
}

} // namespace tessel

#ifndef TESSEL_CORE_NUMBERS_HPP
#define TESSEL_CORE_NUMBERS_HPP

/// \file Numbers.hpp
/// \brief Numbers read from text (options, environment variables, CSV fields) in their documented decimal form:
/// one parser, so that "0x10", " 12", "12abc", "1e3" as an integer, "inf" and "nan" mean the same (nothing) everywhere.

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessel {

/// \brief The decimal integer in \p text: an optional sign and digits, nothing else (no spaces, no hexadecimal, no
/// fraction or exponent); nothing when \p text is not one or does not fit in 64 bits.
std::optional<std::int64_t> parse_decimal_int(std::string_view text);

/// \brief The same for unsigned values (no sign; up to 2^64 - 1).
std::optional<std::uint64_t> parse_decimal_uint(std::string_view text);

/// \brief The finite decimal number in \p text ("1.5", "-2e-3", ".5"): no spaces, no hexadecimal, no "inf" or "nan";
/// nothing when \p text is not one or overflows a double.
std::optional<double> parse_decimal(std::string_view text);

} // namespace tessel

#endif

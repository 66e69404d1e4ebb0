#pragma once

#include <tessel/core/Error.hpp>

#include <string>

namespace tessel::test {

/// The message of the tessel::Exception that \p f throws, or an empty string when it throws none, so that a test
/// can check both that an error was raised and what it names.
template <class F> std::string error_of(F &&f) {
  try {
    f();
  } catch (tessel::Exception const &e) {
    return e.what();
  }
  return {};
}

} // namespace tessel::test

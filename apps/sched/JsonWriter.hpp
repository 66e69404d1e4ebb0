#ifndef TESSEL_APPS_SCHED_JSONWRITER_HPP
#define TESSEL_APPS_SCHED_JSONWRITER_HPP

// A streaming JSON writer for the app's result files (objects, arrays, numbers, strings).

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

namespace tessel::sched::app {

class JsonWriter {
public:
  explicit JsonWriter(std::ostream &os) : _os(os) {}

  JsonWriter &begin_object() {
    value_prefix();
    _os << '{';
    _first.push_back(true);
    return *this;
  }
  JsonWriter &end_object() {
    _first.pop_back();
    _os << '}';
    return *this;
  }
  JsonWriter &begin_array() {
    value_prefix();
    _os << '[';
    _first.push_back(true);
    return *this;
  }
  JsonWriter &end_array() {
    _first.pop_back();
    _os << ']';
    return *this;
  }
  JsonWriter &key(std::string const &k) {
    if (!_first.back())
      _os << ',';
    _first.back() = false;
    string_literal(k);
    _os << ':';
    _after_key = true;
    return *this;
  }
  JsonWriter &value(double v) {
    value_prefix();
    if (!std::isfinite(v)) {
      _os << "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.10g", v);
      _os << buf;
    }
    return *this;
  }
  JsonWriter &value(long long v) {
    value_prefix();
    _os << v;
    return *this;
  }
  JsonWriter &value(int v) { return value(static_cast<long long>(v)); }
  JsonWriter &value(std::size_t v) { return value(static_cast<long long>(v)); }
  JsonWriter &value(bool v) {
    value_prefix();
    _os << (v ? "true" : "false");
    return *this;
  }
  JsonWriter &value(std::string const &v) {
    value_prefix();
    string_literal(v);
    return *this;
  }
  JsonWriter &value(char const *v) { return value(std::string(v)); }
  template <class T> JsonWriter &array(std::vector<T> const &values) {
    begin_array();
    for (auto const &v : values)
      value(v);
    return end_array();
  }
  template <class T> JsonWriter &field(std::string const &k, T const &v) {
    key(k);
    return value(v);
  }

private:
  void value_prefix() {
    if (_after_key) {
      _after_key = false;
      return;
    }
    if (!_first.empty()) {
      if (!_first.back())
        _os << ',';
      _first.back() = false;
    }
  }
  void string_literal(std::string const &s) {
    _os << '"';
    for (char c : s) {
      switch (c) {
      case '"':
        _os << "\\\"";
        break;
      case '\\':
        _os << "\\\\";
        break;
      case '\n':
        _os << "\\n";
        break;
      case '\t':
        _os << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          _os << buf;
        } else {
          _os << c;
        }
      }
    }
    _os << '"';
  }

  std::ostream &_os;
  std::vector<bool> _first;
  bool _after_key = false;
};

} // namespace tessel::sched::app

#endif

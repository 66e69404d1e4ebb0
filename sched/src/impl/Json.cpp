#include "Json.hpp"

#include <tessel/core/Error.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessel::sched::Impl {

JsonValue const *JsonValue::find(std::string const &key) const {
  for (auto const &kv : object)
    if (kv.first == key)
      return &kv.second;
  return nullptr;
}

namespace {

class Parser {
public:
  Parser(std::string const &text, std::string const &name) : _s(text), _name(name) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip();
    TESSEL_REQUIRE(_i == _s.size(), _name, ": unexpected trailing characters at byte ", _i);
    return v;
  }

private:
  void skip() {
    while (_i < _s.size() && (_s[_i] == ' ' || _s[_i] == '\n' || _s[_i] == '\r' || _s[_i] == '\t'))
      ++_i;
  }
  [[noreturn]] void fail(char const *what) { TESSEL_THROW(_name, ": invalid JSON at byte ", _i, ": ", what); }
  char peek() {
    skip();
    if (_i >= _s.size())
      fail("unexpected end of input");
    return _s[_i];
  }
  void expect(char c) {
    if (peek() != c) {
      std::string msg = std::string("expected '") + c + "'";
      fail(msg.c_str());
    }
    ++_i;
  }

  std::string string_literal() {
    expect('"');
    std::string out;
    while (_i < _s.size() && _s[_i] != '"') {
      char c = _s[_i++];
      if (c == '\\') {
        if (_i >= _s.size())
          fail("unterminated escape");
        char e = _s[_i++];
        switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u':
          // Only ASCII escapes are expected in the Crius files; others are kept as '?'.
          if (_i + 4 > _s.size())
            fail("short \\u escape");
          {
            long const code = std::strtol(_s.substr(_i, 4).c_str(), nullptr, 16);
            out += code < 128 ? static_cast<char>(code) : '?';
          }
          _i += 4;
          break;
        default:
          out += e;
        }
      } else {
        out += c;
      }
    }
    if (_i >= _s.size())
      fail("unterminated string");
    ++_i;
    return out;
  }

  JsonValue value(int depth) {
    if (depth > 64)
      fail("nesting too deep");
    JsonValue v;
    char const c = peek();
    if (c == '{') {
      ++_i;
      v.kind = JsonValue::Kind::object;
      if (peek() == '}') {
        ++_i;
        return v;
      }
      while (true) {
        std::string key = string_literal();
        expect(':');
        v.object.emplace_back(std::move(key), value(depth + 1));
        char const d = peek();
        ++_i;
        if (d == '}')
          break;
        if (d != ',')
          fail("expected ',' or '}'");
      }
    } else if (c == '[') {
      ++_i;
      v.kind = JsonValue::Kind::array;
      if (peek() == ']') {
        ++_i;
        return v;
      }
      while (true) {
        v.array.push_back(value(depth + 1));
        char const d = peek();
        ++_i;
        if (d == ']')
          break;
        if (d != ',')
          fail("expected ',' or ']'");
      }
    } else if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.string = string_literal();
    } else if (_s.compare(_i, 4, "true") == 0) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = true;
      _i += 4;
    } else if (_s.compare(_i, 5, "false") == 0) {
      v.kind = JsonValue::Kind::boolean;
      _i += 5;
    } else if (_s.compare(_i, 4, "null") == 0) {
      _i += 4;
    } else {
      char const *begin = _s.c_str() + _i;
      char *end = nullptr;
      v.number = std::strtod(begin, &end);
      if (end == begin)
        fail("expected a value");
      v.kind = JsonValue::Kind::number;
      _i += static_cast<std::size_t>(end - begin);
    }
    return v;
  }

  std::string const &_s;
  std::string const &_name;
  std::size_t _i = 0;
};

} // namespace

JsonValue parse_json(std::string const &text, std::string const &name) { return Parser(text, name).document(); }

JsonValue read_json(std::string const &path) {
  std::ifstream in(path);
  TESSEL_REQUIRE(in.good(), "cannot open JSON file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_json(ss.str(), path);
}

} // namespace tessel::sched::Impl

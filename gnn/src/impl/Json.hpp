#ifndef TESSEL_GNN_IMPL_JSON_HPP
#define TESSEL_GNN_IMPL_JSON_HPP

// Minimal JSON writing helpers (strings escaped, non-finite numbers written as null).
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tessel::gnn::Impl {

inline std::string json_string(std::string const &s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

inline std::string json_pairs(std::vector<std::pair<std::string, double>> const &pairs) {
  std::string out = "{";
  for (std::size_t i = 0; i < pairs.size(); ++i)
    out += (i ? ", " : "") + json_string(pairs[i].first) + ": " + json_number(pairs[i].second);
  return out + "}";
}

} // namespace tessel::gnn::Impl

#endif

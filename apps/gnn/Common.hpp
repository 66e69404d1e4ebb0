#ifndef TESSEL_APPS_GNN_COMMON_HPP
#define TESSEL_APPS_GNN_COMMON_HPP

// Printing helpers shared by the tessel-gnn commands (host and CUDA bench).
#include <tessel/gnn/Spmm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tessel::gnn::app {

inline std::string json_str(std::string const &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

inline std::string num(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

inline std::string env_or(char const *name, char const *fallback) {
  char const *v = std::getenv(name);
  return v ? v : fallback;
}

inline void print_plan(SpmmPlan const &p) {
  std::printf("  plan F=%d: partition %s, %lld parts, %.1f%% of entries intra-part, %s, remainder %s%s%s\n", p.features,
              p.partition_method.c_str(), static_cast<long long>(p.parts), 100 * p.intra_fraction,
              p.timed ? "timed" : "cost model", p.rest_kernel.c_str(),
              p.dense_engine.empty() ? "" : ", dense blocks on ", p.dense_engine.c_str());
  for (auto const &c : p.classes) {
    if (c.nnz == 0)
      continue;
    std::printf("    %s density [%.3g, %.3g): %lld blocks, %lld nnz -> %s", c.intra ? "intra" : "inter", c.density_min,
                c.density_max, static_cast<long long>(c.blocks), static_cast<long long>(c.nnz), c.kernel.c_str());
    for (auto const &[k, t] : c.measured)
      std::printf(" %s=%.3gms", k.c_str(), 1e3 * t);
    std::printf("\n");
  }
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

} // namespace tessel::gnn::app

#endif

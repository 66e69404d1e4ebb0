#ifndef TESSEL_APPS_GNN_COMMON_HPP
#define TESSEL_APPS_GNN_COMMON_HPP

// Printing helpers shared by the tessel-gnn commands (host and CUDA bench).
#include <tessel/gnn/Spmm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
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

/// One width's results of a bench (host or device): prints adaptive's speedup over every other kernel (\p leading
/// first, e.g. the vendor baseline) and over the best single full-graph kernel, and appends the width's JSON
/// record to \p js. "permute_in_out" (host: moving X in and Y out) is reported apart, never a kernel.
inline void report_width(std::ostringstream &js, bool first_width, int f, double flops,
                         std::map<std::string, double> const &ms, std::map<std::string, double> const *errors,
                         std::map<std::string, std::string> const &notes, std::vector<std::string> const &leading,
                         std::string const &plan_json) {
  auto const is_kernel = [](std::string const &k) { return k != "adaptive" && k != "permute_in_out"; };
  double best = INFINITY;
  std::string best_name;
  for (auto const &[k, v] : ms)
    if (is_kernel(k) && k != "csr(reordered)" && v < best) {
      best = v;
      best_name = k;
    }
  auto const write_map = [&js](char const *name, auto const &map, auto &&value) {
    js << ", \"" << name << "\": {";
    bool first = true;
    for (auto const &[k, v] : map) {
      js << (first ? "" : ", ") << json_str(k) << ": " << value(v);
      first = false;
    }
    js << "}";
  };
  js << (first_width ? "" : ",") << "\n    {\"features\": " << f << ", \"flops\": " << num(flops);
  write_map("median_ms", ms, [](double v) { return num(v); });
  if (errors)
    write_map("max_err_over_abs_a_abs_x", *errors, [](double v) { return num(v); });
  write_map("notes", notes, [](std::string const &v) { return json_str(v); });
  auto const adaptive = ms.find("adaptive");
  if (adaptive != ms.end()) {
    double const ad = adaptive->second;
    std::vector<std::string> order;
    for (auto const &k : leading)
      if (ms.count(k))
        order.push_back(k);
    for (auto const &[k, v] : ms)
      if (is_kernel(k) && std::find(order.begin(), order.end(), k) == order.end())
        order.push_back(k);
    std::printf("  adaptive speedup:");
    js << ", \"adaptive_speedup\": {";
    bool first = true;
    for (auto const &k : order) {
      double const ratio = ms.at(k) / ad;
      std::printf(" vs %s %.2fx", k.c_str(), ratio);
      js << (first ? "" : ", ") << json_str(k) << ": " << num(ratio);
      first = false;
    }
    std::printf("\n  best single full-graph kernel: %s (%.4f ms); adaptive / best = %.2fx faster\n", best_name.c_str(),
                best, best / ad);
    js << "}, \"best_single\": " << json_str(best_name) << ", \"speedup_vs_best_single\": " << num(best / ad);
    auto const permute = ms.find("permute_in_out");
    if (permute != ms.end())
      js << ", \"speedup_vs_best_single_with_permute\": " << num(best / (ad + permute->second));
  }
  js << ", \"plan\": " << plan_json << "}";
  std::fflush(stdout);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

} // namespace tessel::gnn::app

#endif

#include "Report.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessel::gnn::bench {

namespace {
bool is_kernel(std::string const &k) { return k != "adaptive" && k != "permute_in_out"; }
} // namespace

Json report_width(int f, double flops, std::map<std::string, double> const &ms,
                  std::map<std::string, double> const *errors, std::map<std::string, std::string> const &notes,
                  std::vector<std::string> const &leading, Json plan) {
  double best = INFINITY;
  std::string best_name;
  for (auto const &[k, v] : ms)
    if (is_kernel(k) && k != "csr(reordered)" && v < best) {
      best = v;
      best_name = k;
    }
  Json record = {{"features", f}, {"flops", flops}, {"median_ms", ms}};
  if (errors)
    record["max_err_over_abs_a_abs_x"] = *errors;
  record["notes"] = notes;
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
    Json speedup = Json::object();
    for (auto const &k : order) {
      double const ratio = ms.at(k) / ad;
      std::printf(" vs %s %.2fx", k.c_str(), ratio);
      speedup[k] = ratio;
    }
    record["adaptive_speedup"] = speedup;
    if (best_name.empty()) { // nothing to compare with: no ratio rather than one of nothing
      std::printf("%s\n  no single full-graph kernel was timed beside adaptive: no ratio\n",
                  order.empty() ? " none" : "");
    } else {
      std::printf("\n  best single full-graph kernel: %s (%.4f ms); adaptive / best = %.2fx faster\n",
                  best_name.c_str(), best, best / ad);
      record["best_single"] = best_name;
      record["speedup_vs_best_single"] = best / ad;
      auto const permute = ms.find("permute_in_out");
      if (permute != ms.end())
        record["speedup_vs_best_single_with_permute"] = best / (ad + permute->second);
    }
  }
  record["plan"] = std::move(plan);
  std::fflush(stdout);
  return record;
}

void add_run_fields(Json &doc, std::string const &data, std::string const &dataset, Graph<std::int32_t> const &op,
                    std::string const &op_name, int reps) {
  doc["data"] = data;
  doc["dataset"] = dataset;
  doc["nodes"] = op.num_rows();
  doc["nnz"] = op.nnz();
  doc["operator"] = op_name;
  doc["reps"] = reps;
}

void require_nodes(Dataset const &data, std::string const &path) {
  TESSEL_REQUIRE(data.num_nodes() > 0, "data set '", data.name, "' in '", path,
                 "' has no nodes: there is nothing to time");
}

void require_distinct(char const *option, std::vector<std::string> values) {
  std::sort(values.begin(), values.end());
  auto const twice = std::adjacent_find(values.begin(), values.end());
  TESSEL_REQUIRE_USAGE(twice == values.end(), "option ", option, " lists ", twice == values.end() ? "" : *twice,
                       " twice");
}

void require_distinct(char const *option, std::vector<int> const &values) {
  std::vector<std::string> text;
  for (int v : values)
    text.push_back(std::to_string(v));
  require_distinct(option, std::move(text));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

} // namespace tessel::gnn::bench

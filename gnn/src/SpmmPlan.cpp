#include <tessel/gnn/Spmm.hpp>

#include <cstdio>

namespace tessel::gnn {

namespace {
template <class Name> Json seconds_by_name(std::vector<std::pair<Name, double>> const &pairs) {
  Json out = Json::object();
  for (auto const &[name, seconds] : pairs) {
    if constexpr (std::is_same_v<Name, std::string>)
      out[name] = seconds;
    else
      out[name_of(name)] = seconds;
  }
  return out;
}
} // namespace

Json SpmmPlan::json() const {
  Json classes_json = Json::array();
  for (auto const &k : classes)
    classes_json.push_back({{"intra", k.intra},
                            {"density", {k.density_min, k.density_max}},
                            {"blocks", k.blocks},
                            {"nnz", k.nnz},
                            {"tiles", k.tiles},
                            {"dense_elements", k.dense_elements},
                            {"kernel", name_of(k.kernel)},
                            {"predicted", seconds_by_name(k.predicted)},
                            {"measured", seconds_by_name(k.measured)},
                            {"reason", k.reason}});
  return {{"graph", graph},
          {"rows", rows},
          {"nnz", nnz},
          {"features", features},
          {"algorithm", name_of(algorithm)},
          {"partition", partition_method},
          {"ordering", ordering},
          {"partition_seconds", partition_seconds},
          {"parts", parts},
          {"intra_fraction", intra_fraction},
          {"timed", timed},
          {"frozen", frozen},
          {"rest_kernel", name_of(rest_kernel)},
          {"backend", backend},
          {"dense_engine", dense_engine},
          {"reason", reason},
          {"preprocess_seconds", preprocess_seconds},
          {"probe_seconds", probe_seconds},
          {"tuning_seconds", tuning_seconds},
          {"tuning_build_seconds", tuning_build_seconds},
          {"tuning_applies", tuning_applies},
          {"apply_seconds", apply_seconds},
          {"final_measured", seconds_by_name(final_measured)},
          {"classes", classes_json}};
}

std::string SpmmPlan::to_json() const { return json().dump(); }

std::string SpmmPlan::summary() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line),
                "  plan F=%d: partition %s, %lld parts, %.1f%% of entries intra-part, %s, remainder %s%s%s\n", features,
                partition_method.c_str(), static_cast<long long>(parts), 100 * intra_fraction,
                timed ? "timed" : "cost model", name_of(rest_kernel), dense_engine.empty() ? "" : ", dense blocks on ",
                dense_engine.c_str());
  out += line;
  for (auto const &c : classes) {
    if (c.nnz == 0)
      continue;
    std::snprintf(line, sizeof(line), "    %s density [%.3g, %.3g): %lld blocks, %lld nnz -> %s",
                  c.intra ? "intra" : "inter", c.density_min, c.density_max, static_cast<long long>(c.blocks),
                  static_cast<long long>(c.nnz), name_of(c.kernel));
    out += line;
    for (auto const &[k, t] : c.measured) {
      std::snprintf(line, sizeof(line), " %s=%.3gms", name_of(k), 1e3 * t);
      out += line;
    }
    out += "\n";
  }
  return out;
}

} // namespace tessel::gnn

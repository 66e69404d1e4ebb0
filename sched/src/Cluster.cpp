#include <tessel/core/OutputFile.hpp>
#include <tessel/sched/Cluster.hpp>

#include "impl/CriusJson.hpp"
#include "impl/Csv.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>

namespace tessel::sched {

namespace {
bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool ends_with(std::string const &s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
} // namespace

Cluster::Cluster(std::vector<GpuSpec> types, std::vector<NodeGroup> groups)
    : _types(std::move(types)), _groups(std::move(groups)) {
  TESSEL_REQUIRE(!_types.empty(), "a cluster needs at least one GPU type");
  TESSEL_REQUIRE(!_groups.empty(), "a cluster needs at least one node group");
  for (std::size_t t = 0; t < _types.size(); ++t) {
    auto const &g = _types[t];
    TESSEL_REQUIRE(!g.name.empty(), "GPU type ", t, " has an empty name");
    for (std::size_t u = 0; u < t; ++u)
      TESSEL_REQUIRE(_types[u].name != g.name, "GPU type '", g.name, "' is listed twice");
    for (double v : {g.memory_gb, g.peak_tflops, g.mem_bandwidth_gbps, g.intra_node_gbps, g.inter_node_gbps})
      TESSEL_REQUIRE(std::isfinite(v) && v > 0, "GPU type '", g.name,
                     "': memory, peak FLOP/s and bandwidths must be positive and finite, got ", v);
  }
  long long total = 0;
  for (auto const &grp : _groups)
    total += static_cast<long long>(std::max(grp.num_nodes, 0)) * std::max(grp.gpus_per_node, 0);
  TESSEL_REQUIRE(total <= kMaxGpus, "a cluster of ", total, " GPUs (", _groups.size(),
                 " node groups) is larger than the ", kMaxGpus,
                 " GPUs a cluster may have: every GPU is tracked on its own, and the policies copy those tables");
  _type_cap.assign(_types.size(), 0);
  _type_gpus.assign(_types.size(), 0);
  _type_nodes.assign(_types.size(), {});
  for (std::size_t gi = 0; gi < _groups.size(); ++gi) {
    auto const &grp = _groups[gi];
    TESSEL_REQUIRE(grp.gpu_type >= 0 && grp.gpu_type < num_types(), "node group ", gi, ": GPU type index ",
                   grp.gpu_type, " is out of range [0, ", num_types(), ")");
    TESSEL_REQUIRE(grp.num_nodes >= 1, "node group ", gi, " (", _types[grp.gpu_type].name,
                   "): num_nodes must be >= 1, got ", grp.num_nodes);
    TESSEL_REQUIRE(is_power_of_two(grp.gpus_per_node), "node group ", gi, " (", _types[grp.gpu_type].name,
                   "): gpus_per_node must be a power of two, got ", grp.gpus_per_node);
    auto &cap = _type_cap[static_cast<std::size_t>(grp.gpu_type)];
    TESSEL_REQUIRE(cap == 0 || cap == grp.gpus_per_node, "node group ", gi, ": all nodes of type '",
                   _types[grp.gpu_type].name, "' must have the same GPU count (", cap, " vs ", grp.gpus_per_node, ")");
    cap = grp.gpus_per_node;
    for (int n = 0; n < grp.num_nodes; ++n) {
      int const node = static_cast<int>(_node_type.size());
      _node_type.push_back(grp.gpu_type);
      _node_cap.push_back(grp.gpus_per_node);
      _node_first.push_back(_num_gpus);
      _type_nodes[static_cast<std::size_t>(grp.gpu_type)].push_back(node);
      for (int g = 0; g < grp.gpus_per_node; ++g)
        _gpu_node.push_back(node);
      _num_gpus += grp.gpus_per_node;
      _type_gpus[static_cast<std::size_t>(grp.gpu_type)] += grp.gpus_per_node;
    }
  }
}

int Cluster::find_type(std::string_view name) const {
  for (std::size_t t = 0; t < _types.size(); ++t)
    if (_types[t].name == name)
      return static_cast<int>(t);
  return -1;
}

GpuSpec Cluster::known_gpu(std::string_view name) {
  // memory GB, dense fp16 tensor TFLOP/s, HBM GB/s, intra-node GB/s per direction, inter-node GB/s per GPU.
  struct Row {
    char const *name;
    double mem, tflops, hbm, intra, inter;
  };
  static Row const rows[] = {
      {"a100", 40, 312, 1555, 150, 12.5}, {"a100-80g", 80, 312, 2039, 300, 25}, {"v100", 32, 125, 900, 150, 12.5},
      {"a40", 48, 149.7, 696, 25, 12.5},  {"a10", 24, 125, 600, 25, 12.5},      {"h100", 80, 989, 3350, 450, 50},
      {"h200", 141, 989, 4800, 450, 50},  {"l20", 48, 119.5, 864, 25, 25},      {"t4", 16, 65, 320, 12.5, 12.5},
      {"p100", 12, 18.7, 549, 40, 12.5},
  };
  for (auto const &r : rows)
    if (name == r.name)
      return GpuSpec{r.name, r.mem, r.tflops, r.hbm, r.intra, r.inter};
  TESSEL_THROW("unknown GPU type '", name,
               "': give its memory_gb, peak_tflops, mem_bandwidth_gbps, intra_node_gbps and inter_node_gbps "
               "(known: a100, a100-80g, v100, a40, a10, h100, h200, l20, t4, p100)");
}

Cluster Cluster::crius_simulated() {
  std::vector<GpuSpec> types{known_gpu("a100"), known_gpu("v100"), known_gpu("a40"), known_gpu("a10")};
  return Cluster(std::move(types), {{0, 80, 4}, {1, 20, 16}, {2, 160, 2}, {3, 160, 2}});
}

namespace {

Cluster load_cluster_csv(std::string const &path) {
  auto const t = Impl::CsvTable::read(path);
  int const c_type = t.require_column("gpu_type");
  int const c_nodes = t.require_column("num_nodes");
  int const c_per = t.require_column("gpus_per_node");
  char const *spec_cols[] = {"memory_gb", "peak_tflops", "mem_bandwidth_gbps", "intra_node_gbps", "inter_node_gbps"};
  int spec_idx[5];
  for (int i = 0; i < 5; ++i)
    spec_idx[i] = t.column(spec_cols[i]);
  TESSEL_REQUIRE(t.rows() > 0, path, ": no node groups (the file has only a header)");
  std::vector<GpuSpec> types;
  std::vector<NodeGroup> groups;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    std::string const name = t.cell(r, c_type);
    TESSEL_REQUIRE(!name.empty(), t.where(r, c_type), ": empty GPU type");
    GpuSpec spec;
    bool const any_spec =
        spec_idx[0] >= 0 || spec_idx[1] >= 0 || spec_idx[2] >= 0 || spec_idx[3] >= 0 || spec_idx[4] >= 0;
    bool all_given = true;
    for (int i = 0; i < 5; ++i)
      all_given = all_given && spec_idx[i] >= 0 && !t.cell(r, spec_idx[i]).empty();
    if (all_given) {
      spec.name = name;
      double *fields[] = {&spec.memory_gb, &spec.peak_tflops, &spec.mem_bandwidth_gbps, &spec.intra_node_gbps,
                          &spec.inter_node_gbps};
      for (int i = 0; i < 5; ++i) {
        *fields[i] = t.real(r, spec_idx[i]);
        TESSEL_REQUIRE(std::isfinite(*fields[i]) && *fields[i] > 0, t.where(r, spec_idx[i]),
                       ": must be a positive number, got ", t.cell(r, spec_idx[i]));
      }
    } else {
      try {
        spec = Cluster::known_gpu(name);
      } catch (tessel::Exception const &e) {
        TESSEL_THROW(t.where(r, c_type), any_spec ? ": incomplete spec columns and " : ": ", e.what());
      }
    }
    int type = -1;
    for (std::size_t u = 0; u < types.size(); ++u)
      if (types[u].name == name)
        type = static_cast<int>(u);
    if (type < 0) {
      type = static_cast<int>(types.size());
      types.push_back(spec);
    }
    long long const nodes = t.integer(r, c_nodes), per = t.integer(r, c_per);
    TESSEL_REQUIRE(nodes >= 1 && nodes <= 1000000, t.where(r, c_nodes), ": must be >= 1, got ", nodes);
    TESSEL_REQUIRE(is_power_of_two(static_cast<int>(per)) && per <= 1024, t.where(r, c_per),
                   ": must be a power of two <= 1024, got ", per);
    groups.push_back({type, static_cast<int>(nodes), static_cast<int>(per)});
  }
  try {
    return Cluster(std::move(types), std::move(groups));
  } catch (tessel::Exception const &e) {
    TESSEL_THROW(path, ": ", e.what());
  }
}

#ifdef TESSEL_ENABLE_HDF5
Cluster load_cluster_h5(std::string const &path) {
  h5::File f(path, h5::Mode::read);
  TESSEL_REQUIRE(f.has_attribute("/", "schema") && f.read_string_attribute("/", "schema") == "tessel.sched.cluster",
                 path, ": not a cluster file (root attribute schema must be 'tessel.sched.cluster')");
  auto const names = f.read_strings("gpu_types/name");
  std::size_t const T = names.size();
  TESSEL_REQUIRE(T > 0, path, ": gpu_types/name is empty");
  auto const mem = f.read<double>("gpu_types/memory_gb", {T});
  auto const peak = f.read<double>("gpu_types/peak_tflops", {T});
  auto const hbm = f.read<double>("gpu_types/mem_bandwidth_gbps", {T});
  auto const intra = f.read<double>("gpu_types/intra_node_gbps", {T});
  auto const inter = f.read<double>("gpu_types/inter_node_gbps", {T});
  std::vector<GpuSpec> types;
  for (std::size_t t = 0; t < T; ++t)
    types.push_back({names[t], mem.data[t], peak.data[t], hbm.data[t], intra.data[t], inter.data[t]});
  auto const gtype = f.read<int>("groups/gpu_type");
  std::size_t const G = gtype.data.size();
  auto const gnodes = f.read<int>("groups/num_nodes", {G});
  auto const gper = f.read<int>("groups/gpus_per_node", {G});
  std::vector<NodeGroup> groups;
  for (std::size_t g = 0; g < G; ++g)
    groups.push_back({gtype.data[g], gnodes.data[g], gper.data[g]});
  try {
    return Cluster(std::move(types), std::move(groups));
  } catch (tessel::Exception const &e) {
    TESSEL_THROW(path, ": ", e.what());
  }
}
#endif

} // namespace

Cluster load_cluster(std::string const &path) {
  if (path == "crius")
    return Cluster::crius_simulated();
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) {
#ifdef TESSEL_ENABLE_HDF5
    return load_cluster_h5(path);
#else
    TESSEL_THROW(path, ": reading HDF5 needs a Tessel built with Tessel_ENABLE_HDF5=ON");
#endif
  }
  return load_cluster_csv(path);
}

Cluster load_crius_cluster_spec(std::string const &spec_json, std::string const &device_infos_json) {
  Json const doc = read_json(spec_json);
  Json const &obj = Impl::crius_object(doc, spec_json, "{gpu_type: {\"node_num\": n}}");
  struct Cap {
    char const *name;
    int cap;
  };
  static Cap const caps[] = {{"a100", 4},   {"v100", 16}, {"a40", 2},  {"a10", 2}, {"p100", 8},
                             {"1080ti", 8}, {"3090", 8},  {"h100", 8}, {"l20", 16}};
  // Device entries without a usable type or bandwidth are skipped, as is a device_infos.json that is not a list.
  Json infos = device_infos_json.empty() ? Json::array() : read_json(device_infos_json);
  if (!infos.is_array())
    infos = Json::array();
  std::vector<GpuSpec> types;
  std::vector<NodeGroup> groups;
  for (auto const &[name, value] : obj.items()) {
    Json const *n = value.is_object() && value.contains("node_num") ? &value["node_num"] : nullptr;
    TESSEL_REQUIRE(n && n->is_number() && n->get<double>() >= 1, spec_json, ": type '", name,
                   "' needs a positive node_num");
    int cap = 0;
    for (auto const &c : caps)
      if (name == c.name)
        cap = c.cap;
    TESSEL_REQUIRE(cap > 0, spec_json, ": no known node capacity for GPU type '", name, "'");
    GpuSpec spec = Cluster::known_gpu(name);
    for (auto const &d : infos) {
      if (!d.is_object())
        continue;
      auto const t = d.find("gpu_type");
      auto const bw = d.find("mem_bandwidth_gb");
      if (t != d.end() && t->is_string() && t->get<std::string>() == name && bw != d.end() && bw->is_number() &&
          bw->get<double>() > 0)
        spec.mem_bandwidth_gbps = bw->get<double>();
    }
    groups.push_back({static_cast<int>(types.size()), static_cast<int>(n->get<double>()), cap});
    types.push_back(spec);
  }
  return Cluster(std::move(types), std::move(groups));
}

void save_cluster(Cluster const &cluster, std::string const &path, std::string const &source) {
#ifdef TESSEL_ENABLE_HDF5
  h5::File f(path, h5::Mode::truncate);
  f.write_attribute("/", "schema", "tessel.sched.cluster");
  f.write_attribute("/", "schema_version", 1);
  f.write_attribute("/", "source", source);
  std::vector<std::string> names;
  std::vector<double> mem, peak, hbm, intra, inter;
  for (auto const &g : cluster.types()) {
    names.push_back(g.name);
    mem.push_back(g.memory_gb);
    peak.push_back(g.peak_tflops);
    hbm.push_back(g.mem_bandwidth_gbps);
    intra.push_back(g.intra_node_gbps);
    inter.push_back(g.inter_node_gbps);
  }
  f.write_strings("gpu_types/name", names);
  f.write("gpu_types/memory_gb", mem);
  f.write("gpu_types/peak_tflops", peak);
  f.write("gpu_types/mem_bandwidth_gbps", hbm);
  f.write("gpu_types/intra_node_gbps", intra);
  f.write("gpu_types/inter_node_gbps", inter);
  std::vector<int> gt, gn, gp;
  for (auto const &g : cluster.groups()) {
    gt.push_back(g.gpu_type);
    gn.push_back(g.num_nodes);
    gp.push_back(g.gpus_per_node);
  }
  f.write("groups/gpu_type", gt);
  f.write("groups/num_nodes", gn);
  f.write("groups/gpus_per_node", gp);
  f.close();
#else
  (void)cluster;
  (void)source;
  TESSEL_THROW(path, ": writing HDF5 needs a Tessel built with Tessel_ENABLE_HDF5=ON");
#endif
}

void save_cluster_csv(Cluster const &cluster, std::string const &path) {
  OutputFile file(path);
  auto &out = file.stream();
  out << "gpu_type,num_nodes,gpus_per_node,memory_gb,peak_tflops,mem_bandwidth_gbps,intra_node_gbps,inter_node_gbps\n";
  out << std::setprecision(10);
  for (auto const &g : cluster.groups()) {
    auto const &s = cluster.type(g.gpu_type);
    out << s.name << ',' << g.num_nodes << ',' << g.gpus_per_node << ',' << s.memory_gb << ',' << s.peak_tflops << ','
        << s.mem_bandwidth_gbps << ',' << s.intra_node_gbps << ',' << s.inter_node_gbps << '\n';
  }
  file.commit();
}

} // namespace tessel::sched

// The cluster and throughput source of a state folder (Judge), job specs and their durable intake (submit_job).

#include "../impl/Controller.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <map>

namespace tessel::sched {

namespace Impl {

namespace {

// Node groups of the model from the Slurm nodes: one group per GPU type (in order of first appearance), nodes of a
// type in Slurm's order. Every node of a type must have the same power-of-two GPU count.
Cluster cluster_of(Json const &nodes, std::vector<std::string> &names, std::string const &source) {
  std::vector<std::string> types;
  std::map<std::string, std::vector<std::pair<std::string, int>>> by_type;
  for (auto const &n : nodes) {
    std::string const name = json_get<std::string>(n, "name", source);
    std::string const type = json_get<std::string>(n, "gpu_type", source + ": node " + name);
    int const gpus = json_get<int>(n, "gpus", source + ": node " + name);
    if (type.empty() || gpus <= 0)
      continue; // no typed GPUs: not schedulable by this controller
    if (!by_type.count(type))
      types.push_back(type);
    by_type[type].emplace_back(name, gpus);
  }
  TESSEL_REQUIRE(!types.empty(), source, ": no node has typed GPUs (GRES gpu:<type>:<count>)");
  std::vector<GpuSpec> specs;
  std::vector<NodeGroup> groups;
  names.clear();
  for (std::size_t t = 0; t < types.size(); ++t) {
    try {
      specs.push_back(Cluster::known_gpu(types[t]));
    } catch (tessel::Exception const &) {
      TESSEL_REQUIRE(false, source, ": GPU type '", types[t], "' (GRES of node ", by_type[types[t]][0].first,
                     ") is not a known GPU type (a100, a100-80g, v100, a40, a10, h100, h200, l20, t4, p100)");
    }
    auto const &list = by_type[types[t]];
    for (auto const &[name, gpus] : list) {
      TESSEL_REQUIRE(gpus == list[0].second && is_power_of_two(gpus), source, ": node ", name, " has ", gpus, " ",
                     types[t], " GPUs; every node of a type must have the same power-of-two count (", list[0].first,
                     " has ", list[0].second, ")");
      names.push_back(name);
    }
    groups.push_back({static_cast<int>(t), static_cast<int>(list.size()), list[0].second});
  }
  return Cluster(std::move(specs), std::move(groups));
}

int layout_hosts(int gpus, int cap) { return cap > 0 && gpus > cap ? (gpus + cap - 1) / cap : 1; }

// The names a spec field lists in an error: the catalog's models or the cluster's GPU types.
std::string model_names() {
  auto const &catalog = ModelCatalog::builtin();
  std::string known;
  for (int m = 0; m < catalog.size(); ++m)
    known += (m ? ", " : "") + catalog[m].name();
  return known;
}

std::string type_names(Cluster const &cluster) {
  std::string known;
  for (int t = 0; t < cluster.num_types(); ++t)
    known += (t ? ", " : "") + cluster.type(t).name;
  return known;
}

// Reads the fields of one spec object, every error naming the source and the field.
class SpecFields {
public:
  SpecFields(Json const &spec, std::string const &source) : _spec(spec), _source(source) {
    TESSEL_REQUIRE(spec.is_object(), source, ": a job spec is a JSON object");
  }
  Json const &field(char const *name) const {
    TESSEL_REQUIRE(_spec.contains(name), _source, ": field '", name, "' is missing");
    return _spec[name];
  }
  long long integer(char const *name, long long lo, long long hi) const {
    Json const &v = field(name);
    TESSEL_REQUIRE(v.is_number_integer(), _source, ": field '", name, "' must be an integer, got ", v.dump());
    long long const x = v.get<long long>();
    TESSEL_REQUIRE(x >= lo && x <= hi, _source, ": field '", name, "' must be in [", lo, ", ", hi, "], got ", x);
    return x;
  }
  std::string text(char const *name) const {
    Json const &v = field(name);
    TESSEL_REQUIRE(v.is_string() && !v.get<std::string>().empty(), _source, ": field '", name,
                   "' must be a non-empty string, got ", v.dump());
    return v.get<std::string>();
  }
  void only_known() const {
    static char const *const known[] = {"name", "model",    "size",     "batch_size", "iterations",
                                        "gpus", "gpu_type", "deadline", "command"};
    for (auto const &item : _spec.items())
      TESSEL_REQUIRE(std::find(std::begin(known), std::end(known), item.key()) != std::end(known), _source, ": field '",
                     item.key(),
                     "' is not a job spec field (name, model, size, batch_size, iterations, gpus, gpu_type, "
                     "deadline, command)");
  }

private:
  Json const &_spec;
  std::string const &_source;
};

} // namespace

Judge::Judge(Json const &nodes, std::string const &where, ProfileTable const *table, ThroughputSource source,
             double interval) {
  cluster = cluster_of(nodes, node_names, where);
  estimator = std::make_unique<Estimator>(cluster);
  if (table)
    estimator->calibrate(*table);
  oracle = std::make_unique<ThroughputOracle>(cluster, table, estimator.get(), source, interval);
}

Json nodes_json(std::vector<SlurmNode> const &nodes) {
  Json out = Json::array();
  for (auto const &n : nodes)
    out.push_back({{"name", n.name}, {"gpu_type", n.gpu_type}, {"gpus", n.gpus}});
  return out;
}

JobSpec parse_spec(Json const &spec, std::string const &source, Judge const &judge, std::string &command) {
  SpecFields const f(spec, source);
  JobSpec s;
  s.id = f.text("name");
  TESSEL_REQUIRE(s.id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
                     std::string::npos,
                 source, ": field 'name' may hold letters, digits, '-' and '_' only, got '", s.id, "'");
  TESSEL_REQUIRE(s.id.size() <= kMaxJobName, source, ": field 'name' has ", s.id.size(), " characters, at most ",
                 kMaxJobName, " (it names the job's folder and its Slurm jobs)");
  std::string model = f.text("model");
  if (spec.contains("size"))
    model += "__" + f.text("size");
  s.model = ModelCatalog::builtin().find(model);
  TESSEL_REQUIRE(s.model >= 0, source, ": field 'model': unknown model '", model, "' (known: ", model_names(), ")");
  s.batch_size = static_cast<int>(f.integer("batch_size", 1, 1 << 24));
  s.iterations = f.integer("iterations", 1, 1LL << 40);
  s.num_gpus = static_cast<int>(f.integer("gpus", 1, 1 << 20));
  std::string const type = f.text("gpu_type");
  Cluster const &cluster = judge.cluster;
  s.gpu_type = cluster.find_type(type);
  TESSEL_REQUIRE(s.gpu_type >= 0, source, ": field 'gpu_type': the cluster has no '", type, "' GPUs (it has ",
                 type_names(cluster), ")");
  int const avail = cluster.type_gpus(s.gpu_type);
  TESSEL_REQUIRE(s.num_gpus <= avail, source, ": field 'gpus': ", s.num_gpus, " ", type,
                 " GPUs requested; the cluster has ", avail);
  TESSEL_REQUIRE(is_power_of_two(s.num_gpus), source, ": field 'gpus': ", s.num_gpus,
                 " is not a power of two (placement supports power-of-two GPU counts)");
  int const cap = cluster.type_capacity(s.gpu_type);
  int const hosts = layout_hosts(s.num_gpus, cap);
  TESSEL_REQUIRE(judge.oracle->adaptive(s.model, s.batch_size, s.gpu_type, hosts, s.num_gpus / hosts) > 0, source,
                 ": fields 'model', 'batch_size', 'gpus': ", model, " with a global batch of ", s.batch_size,
                 " has no feasible parallel plan on ", s.num_gpus, " ", type, " GPUs");
  if (spec.contains("deadline")) {
    Json const &d = spec["deadline"];
    TESSEL_REQUIRE(d.is_number() && d.get<double>() > 0, source,
                   ": field 'deadline' must be a positive number of seconds after submission, got ", d.dump());
    s.deadline = d.get<double>();
  }
  command = spec.contains("command") ? f.text("command") : std::string("tessel-sched-trainer");
  TESSEL_REQUIRE(command.size() <= kMaxCommand, source, ": field 'command' has ", command.size(), " bytes, at most ",
                 kMaxCommand, " (it becomes the job's batch script, which Slurm limits)");
  TESSEL_REQUIRE(command.find('\0') == std::string::npos, source, ": field 'command' holds a NUL character");
  TESSEL_REQUIRE(command.find_first_not_of(" \t\r\n") != std::string::npos, source, ": field 'command' is blank");
  f.only_known();
  return s;
}

long long done_field(Json const &doc, std::string const &path, long long iterations) {
  Json const &d = json_member(doc, "done", path);
  bool const in_range =
      (d.is_number_unsigned() && d.get<unsigned long long>() <= static_cast<unsigned long long>(iterations)) ||
      (d.is_number_integer() && !d.is_number_unsigned() && d.get<long long>() >= 0 && d.get<long long>() <= iterations);
  TESSEL_REQUIRE(in_range, path, ": field 'done' must be an integer in [0, ", iterations, "], got ", d.dump());
  return d.get<long long>();
}

std::string state_dir_problem(std::string const &state_dir) {
  if (state_dir.find_first_of("%\\") != std::string::npos)
    return "the path holds '%' or '\\', which Slurm reads as a file name pattern in the jobs' output paths";
  if (state_dir.find_first_of("\n\r") != std::string::npos)
    return "the path holds a line break";
  if (state_dir.size() > kMaxStatePath)
    return tessel::Impl::concat("the path has ", state_dir.size(), " characters, at most ", kMaxStatePath,
                                " (the files of its jobs must stay within 4,096)");
  return {};
}

} // namespace Impl

Json parse_job_spec(std::string const &text, std::string const &source) {
  TESSEL_REQUIRE(text.size() <= Impl::Journal::kMaxRecord - 4096, source, ": a job spec of ", text.size(),
                 " bytes is larger than one may be (", Impl::Journal::kMaxRecord - 4096, ")");
  // parse_json refuses a key given twice: which of the two values counts would be a guess.
  return parse_json(text, source);
}

std::string submit_job(std::string const &state_dir, Json const &spec, std::string const &source) {
  std::string const config_path = state_dir + "/config.json";
  TESSEL_REQUIRE(Impl::read_state_file(config_path, Impl::kMaxConfig).exists, "no controller state in ", state_dir,
                 " (start tessel-sched serve --state ", state_dir, " first)");
  Json const config = Impl::read_state_json(config_path, Impl::kMaxConfig);
  // The same judgement as the controller's: its cluster, and its throughput source (the table is re-read when the
  // controller used one).
  std::string const src = json_get<std::string>(config, "source", config_path);
  ThroughputSource throughput = ThroughputSource::estimator;
  TESSEL_REQUIRE(parse_source(src, throughput), config_path, ": field 'source': unknown throughput source '", src, "'");
  std::unique_ptr<ProfileTable> table;
  if (config.contains("profile") && config["profile"].is_string() && !config["profile"].get<std::string>().empty())
    table = std::make_unique<ProfileTable>(load_profile(config["profile"].get<std::string>()));
  Impl::Judge const judge(json_member(config, "nodes", config_path), config_path, table.get(), throughput,
                          json_get<double>(config, "round_seconds", config_path) *
                              json_get<double>(config, "time_scale", config_path));
  std::string command;
  JobSpec const s = Impl::parse_spec(spec, source, judge, command);
  Impl::Journal const journal(state_dir + "/jobs.journal");
  std::uint64_t offset = 0;
  // Lines the controller will skip (a record cut by a killed writer) do not stop a submission.
  for (auto const &rec : Impl::journal_records(journal, offset, [](std::string const &) {})) {
    auto const it = rec.find("spec");
    bool const same = it != rec.end() && it->is_object() && it->contains("name") && (*it)["name"] == s.id;
    TESSEL_REQUIRE(!same, source, ": field 'name': a job named '", s.id, "' was already submitted");
  }
  journal.append({{"op", "submit"}, {"time", Impl::wall_seconds()}, {"spec", spec}});
  return s.id;
}

} // namespace tessel::sched

#include <tessel/sched/SlurmController.hpp>

#include "../impl/Journal.hpp"
#include "../impl/Statistics.hpp"

#include <tessel/core/Error.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/JobContext.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

namespace tessel::sched {

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool exists(std::string const &path) { return std::filesystem::exists(path); }

void make_dirs(std::string const &path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  TESSEL_REQUIRE(!ec, "cannot create folder ", path, ": ", ec.message());
}

bool alive_state(std::string const &s) {
  static char const *const alive[] = {"PENDING",   "RUNNING",   "CONFIGURING", "COMPLETING",
                                      "SUSPENDED", "REQUEUED",  "REQUEUE_FED", "REQUEUE_HOLD",
                                      "RESIZING",  "SIGNALING", "STAGE_OUT",   "STOPPED"};
  return std::find(std::begin(alive), std::end(alive), s) != std::end(alive);
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

double max_of(std::vector<double> const &v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

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

Json nodes_json(std::vector<SlurmNode> const &nodes) {
  Json out = Json::array();
  for (auto const &n : nodes)
    out.push_back({{"name", n.name}, {"gpu_type", n.gpu_type}, {"gpus", n.gpus}});
  return out;
}

struct Enacted {
  std::vector<int> nodes, counts; // cluster node indices and GPUs on each
  friend bool operator==(Enacted const &a, Enacted const &b) { return a.nodes == b.nodes && a.counts == b.counts; }
};

// True when `after` holds more GPUs than `before` on some node.
bool gained(Enacted const &before, Enacted const &after) {
  for (std::size_t k = 0; k < after.nodes.size(); ++k) {
    auto const it = std::find(before.nodes.begin(), before.nodes.end(), after.nodes[k]);
    if (it == before.nodes.end() ||
        before.counts[static_cast<std::size_t>(it - before.nodes.begin())] < after.counts[k])
      return true;
  }
  return false;
}

// What the policies and submit use to judge a job: the cluster and the throughput source of a state folder.
struct Judge {
  Cluster cluster;
  std::vector<std::string> node_names;
  std::unique_ptr<Estimator> estimator;
  std::unique_ptr<ThroughputOracle> oracle;

  Judge(Json const &nodes, std::string const &where, ProfileTable const *table, ThroughputSource source,
        double interval) {
    cluster = cluster_of(nodes, node_names, where);
    estimator = std::make_unique<Estimator>(cluster);
    if (table)
      estimator->calibrate(*table);
    oracle = std::make_unique<ThroughputOracle>(cluster, table, estimator.get(), source, interval);
  }
};

int layout_hosts(int gpus, int cap) { return cap > 0 && gpus > cap ? (gpus + cap - 1) / cap : 1; }

// A job spec from its JSON: every field named in errors as "<source>: field 'x': ...".
JobSpec parse_spec(Json const &spec, std::string const &source, Judge const &judge, std::string &command) {
  TESSEL_REQUIRE(spec.is_object(), source, ": a job spec is a JSON object");
  auto field = [&](char const *name) -> Json const & {
    TESSEL_REQUIRE(spec.contains(name), source, ": field '", name, "' is missing");
    return spec[name];
  };
  auto integer = [&](char const *name, long long lo, long long hi) {
    Json const &v = field(name);
    TESSEL_REQUIRE(v.is_number_integer(), source, ": field '", name, "' must be an integer, got ", v.dump());
    long long const x = v.get<long long>();
    TESSEL_REQUIRE(x >= lo && x <= hi, source, ": field '", name, "' must be in [", lo, ", ", hi, "], got ", x);
    return x;
  };
  auto text = [&](char const *name) {
    Json const &v = field(name);
    TESSEL_REQUIRE(v.is_string() && !v.get<std::string>().empty(), source, ": field '", name,
                   "' must be a non-empty string, got ", v.dump());
    return v.get<std::string>();
  };
  JobSpec s;
  s.id = text("name");
  TESSEL_REQUIRE(s.id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
                     std::string::npos,
                 source, ": field 'name' may hold letters, digits, '-' and '_' only, got '", s.id, "'");
  std::string model = text("model");
  if (spec.contains("size"))
    model += "__" + text("size");
  auto const &catalog = ModelCatalog::builtin();
  s.model = catalog.find(model);
  if (s.model < 0) {
    std::string known;
    for (int m = 0; m < catalog.size(); ++m)
      known += (m ? ", " : "") + catalog[m].name();
    TESSEL_REQUIRE(false, source, ": field 'model': unknown model '", model, "' (known: ", known, ")");
  }
  s.batch_size = static_cast<int>(integer("batch_size", 1, 1 << 24));
  s.iterations = integer("iterations", 1, 1LL << 40);
  s.num_gpus = static_cast<int>(integer("gpus", 1, 1 << 20));
  std::string const type = text("gpu_type");
  Cluster const &cluster = judge.cluster;
  s.gpu_type = cluster.find_type(type);
  if (s.gpu_type < 0) {
    std::string known;
    for (int t = 0; t < cluster.num_types(); ++t)
      known += (t ? ", " : "") + cluster.type(t).name;
    TESSEL_REQUIRE(false, source, ": field 'gpu_type': the cluster has no '", type, "' GPUs (it has ", known, ")");
  }
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
  command = spec.contains("command") ? text("command") : std::string("tessel-sched-trainer");
  for (auto const &[key, value] : spec.items()) {
    static char const *const known[] = {"name", "model",    "size",     "batch_size", "iterations",
                                        "gpus", "gpu_type", "deadline", "command"};
    TESSEL_REQUIRE(std::find(std::begin(known), std::end(known), key) != std::end(known), source, ": field '", key,
                   "' is not a job spec field (name, model, size, batch_size, iterations, gpus, gpu_type, deadline, "
                   "command)");
    (void)value;
  }
  return s;
}

ProfileTable const *no_table = nullptr;

} // namespace

// ---------------------------------------------------------------------------------------------------------------
// The controller's world
// ---------------------------------------------------------------------------------------------------------------

struct SlurmController::State final : SchedWorld {
  struct Live {
    std::string command;
    int attempt = 0;
    long slurm_id = 0;    ///< the current attempt's Slurm job while running
    Enacted enacted;      ///< where it runs in Slurm
    Enacted last;         ///< where it ran last (kept after it ended)
    long stopping_id = 0; ///< an earlier attempt asked to checkpoint and exit
    int stopping_round = 0;
    bool restore = false; ///< the next start restores from a checkpoint after a failure
    std::string last_failure;
  };

  ControllerOptions opt;
  SlurmClient slurm;
  ProfileTable const *table;
  ThroughputSource source;
  std::unique_ptr<Judge> judge;
  std::unique_ptr<Policy> policy;
  Allocation allocation;
  std::deque<JobSpec> specs;
  std::vector<JobRecord> records;
  std::vector<Live> live;
  std::map<std::string, int> by_name;
  std::vector<int> arrived_, ended_, evicted_, repaired_;
  std::vector<int> adopted; ///< running jobs found at start-up, re-decided in the first round
  Impl::Journal submits, journal;
  std::uint64_t submit_offset = 0;
  double t0 = 0;
  int round_ = 0, rounds_run = 0;
  double now_ = 0;
  std::string slurm_error;
  double slurm_error_since = 0;
  std::map<std::string, SlurmNode> node_state;
  std::map<long, std::string> slurm_states; ///< this round's squeue: Slurm job id -> state
  double last_round_ms = 0, last_decide_ms = 0;
  std::vector<double> round_ms, decide_ms;         ///< every round of this process (the controller's own cost)
  std::vector<int> decide_running, decide_pending; ///< the jobs each of those decisions saw

  State(ControllerOptions o, ProfileTable const *t, ThroughputSource s)
      : opt(std::move(o)), slurm(opt.slurm), table(t), source(s), submits(opt.state_dir + "/jobs.journal"),
        journal(opt.state_dir + "/controller.journal") {
    if (!opt.log)
      opt.log = [](std::string const &line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      };
  }

  // SchedWorld
  Cluster const &cluster() const override { return judge->cluster; }
  ThroughputOracle const &oracle() const override { return *judge->oracle; }
  Allocation &alloc() override { return allocation; }
  std::vector<JobRecord> &jobs() override { return records; }
  int round() const override { return round_; }
  double now() const override { return now_; }
  double interval() const override { return opt.round_seconds * opt.time_scale; }
  bool arena_compat() const override { return false; }
  std::vector<int> const &arrived() const override { return arrived_; }
  std::vector<int> const &ended() const override { return ended_; }
  std::vector<int> const &evicted() const override { return evicted_; }
  std::vector<int> const &repaired() const override { return repaired_; }
  void start(int job) override {
    auto &j = records.at(static_cast<std::size_t>(job));
    TESSEL_REQUIRE(j.state == JobState::pending, "round ", round_, ": cannot start job ", j.spec->id, " in state ",
                   state_name(j.state));
    TESSEL_REQUIRE(placement_of(allocation, job).num_gpus > 0, "round ", round_, ": job ", j.spec->id,
                   " started without GPUs");
    j.state = JobState::running;
    if (j.start_time < 0)
      j.start_time = now_;
  }
  void suspend(int job) override {
    auto &j = records.at(static_cast<std::size_t>(job));
    TESSEL_REQUIRE(j.state == JobState::running, "round ", round_, ": cannot suspend job ", j.spec->id, " in state ",
                   state_name(j.state));
    allocation.release(job);
    j.state = JobState::pending;
    ++j.suspensions;
  }
  void reject(int job, std::string reason) override {
    auto &j = records.at(static_cast<std::size_t>(job));
    TESSEL_REQUIRE(j.state == JobState::pending, "round ", round_, ": cannot reject job ", j.spec->id, " in state ",
                   state_name(j.state));
    j.state = JobState::rejected;
    j.reject_reason = std::move(reason);
  }

  void log(std::string const &line) const { opt.log(tessel::Impl::concat("round ", round_, ": ", line)); }
  std::string dir_of(JobRecord const &j) const { return opt.state_dir + "/jobs/" + j.spec->id; }
  // Every attempt of a job has the job's name (Slurm's singleton dependency serializes them) and its number in the
  // comment.
  std::string slurm_name(JobRecord const &j) const { return opt.job_prefix + j.spec->id; }
  static std::string attempt_comment(int attempt) { return "attempt=" + std::to_string(attempt); }
  static int attempt_of(SlurmJob const &s) {
    return s.comment.rfind("attempt=", 0) == 0 ? std::atoi(s.comment.c_str() + 8) : -1;
  }
  // The job a Slurm job is an attempt of, or -1.
  int job_of(SlurmJob const &s) const {
    auto const it = by_name.find(s.name.substr(std::min(s.name.size(), opt.job_prefix.size())));
    return it == by_name.end() ? -1 : it->second;
  }

  // What progress.json of a job says: iterations done, the job's state and when it wrote that (model time).
  struct Progress {
    long long done = 0;
    std::string state;
    double now = -1;
  };
  Progress progress(JobRecord const &j) const {
    std::string const path = dir_of(j) + "/progress.json";
    if (!exists(path))
      return {};
    try {
      Json const doc = read_json(path);
      double const t = doc.value("time", -1.0);
      return {doc.value("done", 0LL), doc.value("state", std::string()), t > 0 ? (t - t0) * opt.time_scale : -1};
    } catch (tessel::Exception const &e) {
      log(tessel::Impl::concat("job ", j.spec->id, ": unreadable progress (", e.what(), "); keeping the last"));
      return {j.spec->iterations - static_cast<long long>(j.remaining), "", -1};
    }
  }
  long long checkpointed(JobRecord const &j) const {
    std::string const path = dir_of(j) + "/checkpoint.json";
    return exists(path) ? read_json(path).value("done", 0LL) : 0;
  }

  int add_job(JobSpec spec, std::string command, double submit_time, int submit_round) {
    int const id = static_cast<int>(records.size());
    specs.push_back(std::move(spec));
    JobRecord j;
    j.spec = &specs.back();
    j.id = id;
    j.state = JobState::pending;
    j.submit_round = submit_round;
    j.submit_time = submit_time;
    j.quota_type = j.spec->gpu_type;
    j.quota_gpus = j.spec->num_gpus;
    int const cap = judge->cluster.type_capacity(j.quota_type);
    j.quota_per_host = cap > 0 ? std::min(j.quota_gpus, cap) : j.quota_gpus;
    j.quota_hosts = std::max(1, j.quota_gpus / std::max(1, j.quota_per_host));
    j.remaining = static_cast<double>(j.spec->iterations);
    j.checkpoint_remaining = j.remaining;
    records.push_back(j);
    Live l;
    l.command = std::move(command);
    live.push_back(std::move(l));
    by_name[records.back().spec->id] = id;
    return id;
  }

  // New submissions in the journal become pending jobs that arrive this round.
  void read_submissions(bool at_start) {
    for (auto const &rec : submits.read(submit_offset)) {
      std::string const where = submits.path();
      std::string command;
      JobSpec spec = parse_spec(json_member(rec, "spec", where), where + ": job", *judge, command);
      if (by_name.count(spec.id)) {
        log(tessel::Impl::concat("ignoring a second submission of job ", spec.id));
        continue;
      }
      double const submitted = (json_get<double>(rec, "time", where) - t0) * opt.time_scale;
      spec.submit_time = std::max(0.0, submitted);
      if (spec.deadline > 0)
        spec.deadline += spec.submit_time;
      // Jobs recovered at start-up arrived in the round after their submission; new ones arrive now.
      int const seen = at_start ? static_cast<int>(std::floor(submitted / interval())) + 1 : round_;
      int const id = add_job(std::move(spec), std::move(command), std::max(0.0, submitted), seen);
      if (!at_start) {
        arrived_.push_back(id);
        log(tessel::Impl::concat("job ", records[static_cast<std::size_t>(id)].spec->id, " submitted"));
      }
    }
  }

  Enacted enacted_of(int job) const {
    Placement const p = placement_of(allocation, job);
    return {p.nodes, p.counts};
  }

  void place(int job, Enacted const &e) {
    for (std::size_t k = 0; k < e.nodes.size(); ++k) {
      int const node = e.nodes[k];
      int left = e.counts[k];
      int const first = judge->cluster.node_first_gpu(node);
      for (int g = first; g < first + judge->cluster.node_capacity(node) && left > 0; ++g)
        if (allocation.owner(g) == kFree) {
          allocation.assign(g, job);
          --left;
        }
      TESSEL_REQUIRE(left == 0, "job ", records[static_cast<std::size_t>(job)].spec->id, ": node ",
                     judge->node_names[static_cast<std::size_t>(node)], " has no room for it");
    }
  }

  Enacted enacted_from(Json const &rec, std::string const &where) const {
    Enacted e;
    int const per = json_get<int>(rec, "gpus_per_node", where);
    for (auto const &n : json_get<std::vector<std::string>>(rec, "nodes", where)) {
      auto const it = std::find(judge->node_names.begin(), judge->node_names.end(), n);
      TESSEL_REQUIRE(it != judge->node_names.end(), where, ": node ", n, " is not in the cluster");
      e.nodes.push_back(static_cast<int>(it - judge->node_names.begin()));
      e.counts.push_back(per);
    }
    return e;
  }

  template <class F> auto read_slurm_until_reachable(F &&read) {
    for (int attempt = 1;; ++attempt) {
      try {
        return read();
      } catch (SlurmError const &e) {
        opt.log(tessel::Impl::concat("Slurm not reachable at start-up (attempt ", attempt, "): ", e.what(),
                                     "; retrying in ", opt.round_seconds, " s"));
        if (opt.max_rounds > 0 && attempt >= std::max(3, opt.max_rounds))
          throw;
        std::this_thread::sleep_for(std::chrono::duration<double>(opt.round_seconds));
      }
    }
  }

  // Start-up: the cluster, the journals, and the jobs still in Slurm.
  void recover() {
    make_dirs(opt.state_dir + "/jobs");
    std::string const config_path = opt.state_dir + "/config.json";
    Json config;
    if (exists(config_path)) {
      config = read_json(config_path);
      std::string const partition = json_get<std::string>(config, "partition", config_path);
      TESSEL_REQUIRE(partition == opt.partition, config_path,
                     ": this state folder belongs to a controller of partition '", partition, "', not '", opt.partition,
                     "'");
      t0 = json_get<double>(config, "t0", config_path);
      TESSEL_REQUIRE(json_get<double>(config, "time_scale", config_path) == opt.time_scale &&
                         json_get<double>(config, "round_seconds", config_path) == opt.round_seconds,
                     config_path, ": the state folder was made with another --round or --time-scale");
    } else {
      auto const nodes = read_slurm_until_reachable([&] { return slurm.nodes(opt.partition); });
      t0 = wall_seconds();
      config = {{"partition", opt.partition},
                {"t0", t0},
                {"round_seconds", opt.round_seconds},
                {"time_scale", opt.time_scale},
                {"policy", opt.policy},
                {"source", source_name(source)},
                {"profile", opt.profile},
                {"nodes", nodes_json(nodes)}};
      write_json(config_path, config);
    }
    judge = std::make_unique<Judge>(json_member(config, "nodes", config_path), config_path, table, source, interval());
    allocation = Allocation(judge->cluster);
    policy = make_policy(opt.policy, opt.policy_options);
    round_ = static_cast<int>(std::floor((wall_seconds() - t0) / opt.round_seconds));
    read_submissions(true);

    // The controller's own records: attempts, failures, ends.
    std::map<int, Json> last_launch;
    std::uint64_t offset = 0;
    for (auto const &rec : journal.read(offset)) {
      std::string const where = journal.path();
      std::string const op = json_get<std::string>(rec, "op", where);
      auto const it = by_name.find(json_get<std::string>(rec, "job", where));
      if (it == by_name.end())
        continue;
      int const id = it->second;
      auto &j = records[static_cast<std::size_t>(id)];
      auto &l = live[static_cast<std::size_t>(id)];
      if (op == "launch") {
        l.attempt = std::max(l.attempt, json_get<int>(rec, "attempt", where));
        last_launch[id] = rec;
        if (j.start_time < 0)
          j.start_time = json_get<double>(rec, "now", where);
      } else if (op == "stop") {
        last_launch.erase(id);
      } else if (op == "fail") {
        ++j.failures;
        l.restore = true;
        last_launch.erase(id);
      } else if (op == "move") {
        j.reschedules += rec.value("gained", true) ? 1 : 0;
      } else if (op == "end") {
        j.state = JobState::completed;
        j.finish_time = json_get<double>(rec, "now", where);
        last_launch.erase(id);
      } else if (op == "reject") {
        j.state = JobState::rejected;
        j.reject_reason = json_get<std::string>(rec, "reason", where);
        last_launch.erase(id);
      }
    }
    // Jobs still in Slurm: the latest attempt of each job that was running is adopted; older ones are stopping.
    auto const in_slurm = read_slurm_until_reachable([&] { return slurm.jobs(opt.job_prefix); });
    for (auto const &[id, rec] : last_launch) {
      auto &j = records[static_cast<std::size_t>(id)];
      auto &l = live[static_cast<std::size_t>(id)];
      if (j.state != JobState::pending)
        continue;
      int const attempt = json_get<int>(rec, "attempt", journal.path());
      for (auto const &s : in_slurm)
        if (s.name == slurm_name(j) && attempt_of(s) == attempt && alive_state(s.state)) {
          l.slurm_id = s.id;
          l.enacted = l.last = enacted_from(rec, journal.path());
        }
      auto const p = progress(j);
      j.remaining = static_cast<double>(j.spec->iterations - p.done);
      if (l.slurm_id > 0) {
        place(id, l.enacted);
        j.state = JobState::running;
        adopted.push_back(id);
        log(tessel::Impl::concat("adopted job ", j.spec->id, " (Slurm job ", l.slurm_id, ")"));
      } else if (p.state == "done") {
        j.state = JobState::completed;
        j.finish_time = p.now >= 0 ? p.now : now_;
        journal.append({{"op", "end"}, {"job", j.spec->id}, {"now", j.finish_time}});
      }
    }
    // Other attempts still in Slurm (asked to stop before the restart, or submitted by an sbatch that outlived the
    // controller) are dealt with by the first round's reconcile (stray attempts).
    int pending = 0, running = 0, done = 0;
    for (auto const &j : records) {
      pending += j.state == JobState::pending;
      running += j.state == JobState::running;
      done += j.state == JobState::completed || j.state == JobState::rejected;
    }
    opt.log(tessel::Impl::concat("controller on ", judge->node_names.size(), " nodes, ", judge->cluster.num_gpus(),
                                 " GPUs; policy ", policy->name(), "; rounds of ", opt.round_seconds, " s (",
                                 interval(), " s of model time); recovered ", records.size(), " jobs: ", running,
                                 " running, ", pending, " pending, ", done, " ended"));
  }

  void fail(int id, std::string const &reason) {
    auto &j = records[static_cast<std::size_t>(id)];
    auto &l = live[static_cast<std::size_t>(id)];
    allocation.release(id);
    ++j.failures;
    l.last_failure = reason;
    l.slurm_id = 0;
    l.enacted = {};
    l.restore = true;
    journal.append({{"op", "fail"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"reason", reason}, {"now", now_}});
    j.state = JobState::pending;
    j.remaining = static_cast<double>(j.spec->iterations - checkpointed(j));
    if (j.failures > opt.max_failures) {
      std::string const why = tessel::Impl::concat("failed ", j.failures, " times (more than --max-failures ",
                                                   opt.max_failures, "); last: ", reason);
      reject(id, why);
      // Its GPUs are free: for the policy it ended like a completed job.
      ended_.push_back(id);
      journal.append({{"op", "reject"}, {"job", j.spec->id}, {"reason", why}, {"now", now_}});
      log(tessel::Impl::concat("job ", j.spec->id, " rejected: ", why));
      return;
    }
    evicted_.push_back(id);
    log(tessel::Impl::concat("job ", j.spec->id, " failed (", reason, "); back to pending, resumes from iteration ",
                             checkpointed(j)));
  }

  // Brings the jobs up to date with Slurm: completions, failures, progress, node states.
  void reconcile(std::vector<SlurmNode> const &nodes, std::vector<SlurmJob> const &in_slurm) {
    std::map<long, SlurmJob const *> by_id;
    slurm_states.clear();
    for (auto const &s : in_slurm) {
      by_id[s.id] = &s;
      slurm_states[s.id] = s.state;
    }
    // Stray attempts: alive in Slurm but neither a job's current attempt nor the one checkpointing (an sbatch that
    // outlived a killed controller, a job not in the journal). A running one is asked to checkpoint, a waiting one
    // cancelled; Slurm's singleton dependency already keeps it from running beside the current attempt.
    for (auto const &s : in_slurm) {
      if (!alive_state(s.state))
        continue;
      int const id = job_of(s);
      if (id >= 0 && (s.id == live[static_cast<std::size_t>(id)].slurm_id ||
                      s.id == live[static_cast<std::size_t>(id)].stopping_id))
        continue;
      auto &l = live[static_cast<std::size_t>(std::max(id, 0))];
      if (id >= 0 && (s.state == "RUNNING" || s.state == "CONFIGURING") && l.stopping_id == 0) {
        log(tessel::Impl::concat("job ", s.name, ": stray attempt ", attempt_of(s), " (Slurm job ", s.id,
                                 ") runs: asking it to checkpoint"));
        try {
          slurm.signal(s.id, "USR1");
          l.stopping_id = s.id;
          l.stopping_round = round_;
          continue;
        } catch (SlurmError const &) {
        }
      }
      log(tessel::Impl::concat(id >= 0 ? "job " : "Slurm job ", s.name, ": cancelling stray Slurm job ", s.id));
      slurm.cancel(s.id);
    }
    node_state.clear();
    for (auto const &n : nodes)
      node_state[n.name] = n;
    // A node Slurm will not start jobs on takes no new job; only one Slurm declared failed (DOWN, DRAINED, FAIL)
    // ends the jobs on it: a node not responding for a moment (a restarted slurmctld) keeps them.
    auto node_of = [&](int node) -> SlurmNode const * {
      auto const it = node_state.find(judge->node_names[static_cast<std::size_t>(node)]);
      return it == node_state.end() ? nullptr : &it->second;
    };
    auto usable = [&](int node) { return node_of(node) && node_of(node)->usable; };
    auto failed = [&](int node) { return !node_of(node) || node_of(node)->failed; };
    for (auto &j : records) {
      auto &l = live[static_cast<std::size_t>(j.id)];
      if (l.stopping_id > 0) {
        auto const it = by_id.find(l.stopping_id);
        if (it == by_id.end() || !alive_state(it->second->state)) {
          l.stopping_id = 0;
        } else if (round_ - l.stopping_round >= opt.stop_grace_rounds) {
          log(tessel::Impl::concat("job ", j.spec->id, ": Slurm job ", l.stopping_id, " did not checkpoint within ",
                                   opt.stop_grace_rounds, " rounds: cancelling it"));
          slurm.cancel(l.stopping_id);
          l.stopping_id = 0;
        }
      }
      if (j.state != JobState::running)
        continue;
      auto const p = progress(j);
      j.remaining = static_cast<double>(j.spec->iterations - std::min(p.done, j.spec->iterations));
      auto const it = by_id.find(l.slurm_id);
      SlurmJob const *s = it == by_id.end() ? nullptr : it->second;
      if (p.state == "done" && (!s || !alive_state(s->state) || s->state == "COMPLETING")) {
        allocation.release(j.id);
        j.state = JobState::completed;
        // The job's own finish time: the controller only sees it at its next round.
        j.finish_time = p.now >= 0 ? p.now : now_;
        j.remaining = 0;
        l.slurm_id = 0;
        ended_.push_back(j.id);
        journal.append({{"op", "end"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"now", j.finish_time}});
        log(tessel::Impl::concat("job ", j.spec->id, " completed (JCT ", std::lround(j.finish_time - j.submit_time),
                                 " s of model time)"));
        continue;
      }
      std::string reason;
      for (int node : l.enacted.nodes)
        if (reason.empty() && failed(node))
          reason = tessel::Impl::concat("node ", judge->node_names[static_cast<std::size_t>(node)], " is ",
                                        node_of(node) ? node_of(node)->state : std::string("gone"));
      if (reason.empty() && !s)
        reason = tessel::Impl::concat("its Slurm job ", l.slurm_id, " is gone");
      else if (reason.empty() && s->state == "PENDING" && s->restarts > 0)
        reason = tessel::Impl::concat("Slurm requeued its job ", s->id, " (", s->reason, ")");
      else if (reason.empty() && !alive_state(s->state))
        reason =
            s->state == "COMPLETED"
                ? tessel::Impl::concat("Slurm job ", s->id, " exited before its iterations were done")
                : tessel::Impl::concat("Slurm job ", s->id, " ended ", s->state, " (exit code ", s->exit_code, ")");
      if (!reason.empty()) {
        if (s && alive_state(s->state))
          slurm.cancel(s->id);
        fail(j.id, reason);
      }
    }
    for (int n = 0; n < judge->cluster.num_nodes(); ++n) {
      bool const down = !usable(n);
      if (down == allocation.node_down(n))
        continue;
      // A failed node was emptied above (its jobs failed); a node only unusable for now keeps its jobs and is
      // withheld from new ones once they are gone.
      if (down && allocation.free_on_node(n) != judge->cluster.node_capacity(n))
        continue;
      allocation.set_node_down(n, down);
      if (!down)
        repaired_.push_back(n);
      SlurmNode const *s = node_of(n);
      log(tessel::Impl::concat("node ", judge->node_names[static_cast<std::size_t>(n)],
                               down ? " is out of service (" + (s ? s->state : std::string("gone")) + ")"
                                    : " is back"));
    }
  }

  // The plan file of an attempt: the Cell, its best plan and its throughput.
  std::string write_plan(JobRecord const &j, Enacted const &e, int attempt, double startup) const {
    Cluster const &c = judge->cluster;
    int const type = c.node_type(e.nodes[0]);
    int const hosts = static_cast<int>(e.nodes.size()), per = e.counts[0];
    double const thr = judge->oracle->adaptive(j.spec->model, j.spec->batch_size, type, hosts, per);
    auto const best = judge->estimator->best(j.spec->model, j.spec->batch_size, type, hosts, per);
    Json stages = Json::array();
    int micro = 1;
    if (best.feasible) {
      for (auto const &s : best.plan.stages)
        stages.push_back({{"dp", s.dp}, {"tp", s.tp}});
      micro = best.plan.micro_batches;
    } else {
      stages.push_back({{"dp", hosts * per}, {"tp", 1}});
    }
    std::vector<std::string> names;
    for (int n : e.nodes)
      names.push_back(judge->node_names[static_cast<std::size_t>(n)]);
    std::string const path = dir_of(j) + "/plan." + std::to_string(attempt) + ".json";
    write_json(path, Json{{"job", j.spec->id},
                          {"attempt", attempt},
                          {"model", ModelCatalog::builtin()[j.spec->model].name()},
                          {"batch_size", j.spec->batch_size},
                          {"iterations", j.spec->iterations},
                          {"gpu_type", c.type(type).name},
                          {"nodes", names},
                          {"gpus_per_node", per},
                          {"plan", {{"stages", stages}, {"micro_batches", micro}}},
                          {"throughput", thr},
                          {"time_scale", opt.time_scale},
                          {"startup_s", startup},
                          {"checkpoint_s", opt.checkpoint_s},
                          {"dir", dir_of(j)}});
    return path;
  }

  // Starts (or restarts elsewhere) job `id` where the policy placed it.
  void launch(int id, Enacted const &e, bool moved) {
    auto &j = records[static_cast<std::size_t>(id)];
    auto &l = live[static_cast<std::size_t>(id)];
    std::vector<std::string> names;
    for (int n : e.nodes)
      names.push_back(judge->node_names[static_cast<std::size_t>(n)]);
    bool const uniform = std::all_of(e.counts.begin(), e.counts.end(), [&](int c) { return c == e.counts[0]; });
    std::string error;
    if (!uniform) {
      error = "the policy placed it unevenly across nodes, which one sbatch cannot ask for";
    } else {
      int const attempt = l.attempt + 1;
      int const gpus = static_cast<int>(e.nodes.size()) * e.counts[0];
      // Re-tuning on the new GPUs, as the simulator charges it, plus the restore after a failure.
      double const startup = policy->resched_cost().of(gpus) + (l.restore ? opt.restart_cost : 0.0);
      try {
        make_dirs(dir_of(j));
        std::string const plan = write_plan(j, e, attempt, startup);
        SbatchRequest r;
        r.name = slurm_name(j);
        r.comment = attempt_comment(attempt);
        r.singleton = true;
        r.partition = opt.partition;
        r.nodes = names;
        r.gpu_type = judge->cluster.type(judge->cluster.node_type(e.nodes[0])).name;
        r.gpus_per_node = e.counts[0];
        r.script = "exec " + l.command;
        r.output = dir_of(j) + "/slurm." + std::to_string(attempt) + ".out";
        r.workdir = dir_of(j);
        r.env = {{"TESSEL_SCHED_PLAN", plan}, {"TESSEL_SCHED_JOB_DIR", dir_of(j)}};
        // Recorded before sbatch: a controller killed in between finds the attempt in Slurm by its name.
        journal.append({{"op", "launch"},
                        {"job", j.spec->id},
                        {"attempt", attempt},
                        {"nodes", names},
                        {"gpu_type", r.gpu_type},
                        {"gpus_per_node", r.gpus_per_node},
                        {"now", now_}});
        l.attempt = attempt;
        l.slurm_id = slurm.submit(r);
        l.enacted = l.last = e;
        l.restore = false;
        log(tessel::Impl::concat(
            moved ? "moved" : "started", " job ", j.spec->id, " on ", r.gpus_per_node * names.size(), " ", r.gpu_type,
            " GPUs (", names.size(), " nodes x ", r.gpus_per_node, ") as Slurm job ", l.slurm_id,
            l.stopping_id ? tessel::Impl::concat(" (after Slurm job ", l.stopping_id, " checkpoints)")
                          : std::string()));
        return;
      } catch (tessel::Exception const &ex) {
        error = ex.what();
      }
    }
    log(tessel::Impl::concat("job ", j.spec->id, " could not be started: ", error, "; it stays pending"));
    journal.append({{"op", "stop"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"now", now_}});
    allocation.release(id);
    j.state = JobState::pending;
    l.slurm_id = 0;
    l.enacted = {};
  }

  void ask_to_stop(int id, long slurm_id) {
    auto &l = live[static_cast<std::size_t>(id)];
    auto const it = slurm_states.find(slurm_id);
    std::string const state = it == slurm_states.end() ? std::string() : it->second;
    if (state == "RUNNING" || state == "CONFIGURING") {
      try {
        slurm.signal(slurm_id, "USR1");
        l.stopping_id = slurm_id;
        l.stopping_round = round_;
        return;
      } catch (SlurmError const &e) {
        log(tessel::Impl::concat("job ", records[static_cast<std::size_t>(id)].spec->id, ": ", e.what(),
                                 "; cancelling Slurm job ", slurm_id));
      }
    }
    // Not started yet (nothing to checkpoint; signalling a pending job blocks scancel for half a minute), or the
    // signal failed: cancel it.
    if (state.empty() || alive_state(state))
      slurm.cancel(slurm_id);
  }

  // Carries the policy's decisions out in Slurm.
  void enact(std::vector<JobState> const &before_state, std::vector<Enacted> const &before) {
    for (auto &j : records) {
      auto const i = static_cast<std::size_t>(j.id);
      auto &l = live[i];
      bool const was_running = before_state[i] == JobState::running;
      if (j.state == JobState::running) {
        Enacted const now = enacted_of(j.id);
        if (was_running && now == before[i])
          continue;
        long const old = was_running ? l.slurm_id : 0;
        if (old > 0) {
          ask_to_stop(j.id, old);
          // A reschedule as the simulator counts it (Arena's): the job gained a GPU it did not hold. A shrink
          // is a new Slurm attempt too, but not a reschedule.
          if (gained(before[i], now))
            ++j.reschedules;
          journal.append({{"op", "move"},
                          {"job", j.spec->id},
                          {"attempt", l.attempt},
                          {"gained", gained(before[i], now)},
                          {"now", now_}});
        }
        // The next attempt waits (singleton) for the one still checkpointing and resumes from its checkpoint.
        launch(j.id, now, old > 0);
      } else if (was_running && j.state == JobState::pending) {
        long const old = l.slurm_id;
        journal.append({{"op", "stop"}, {"job", j.spec->id}, {"attempt", l.attempt}, {"now", now_}});
        l.slurm_id = 0;
        l.enacted = {};
        ask_to_stop(j.id, old);
        log(tessel::Impl::concat("suspended job ", j.spec->id, " (Slurm job ", old, " checkpoints)"));
      } else if (j.state == JobState::rejected && before_state[i] == JobState::pending) {
        journal.append({{"op", "reject"}, {"job", j.spec->id}, {"reason", j.reject_reason}, {"now", now_}});
        log(tessel::Impl::concat("job ", j.spec->id, " rejected by ", policy->name(), ": ", j.reject_reason));
      }
    }
  }

  // Quotas and throughputs of the running jobs (the policies read them); at the end of a round also the queueing
  // time of the waiting ones.
  void account(bool end_of_round) {
    for (auto &j : records) {
      if (end_of_round && j.state == JobState::pending)
        j.queue_time += interval();
      if (j.state != JobState::running)
        continue;
      Placement const p = placement_of(allocation, j.id);
      j.quota_type = p.gpu_type;
      j.quota_gpus = p.num_gpus;
      j.quota_hosts = static_cast<int>(p.nodes.size());
      j.quota_per_host = j.quota_hosts > 0 ? p.num_gpus / j.quota_hosts : 0;
      j.throughput = std::max(0.0, judge->oracle->adaptive(j.spec->model, j.spec->batch_size, j.quota_type,
                                                           j.quota_hosts, j.quota_per_host));
    }
  }

  bool step() {
    using clock = std::chrono::steady_clock;
    auto const t_start = clock::now();
    double const wall = wall_seconds();
    round_ = std::max(round_, static_cast<int>(std::floor((wall - t0) / opt.round_seconds)));
    now_ = (wall - t0) * opt.time_scale;
    std::vector<SlurmNode> nodes;
    std::vector<SlurmJob> in_slurm;
    try {
      nodes = slurm.nodes(opt.partition);
      in_slurm = slurm.jobs(opt.job_prefix);
    } catch (SlurmError const &e) {
      if (slurm_error.empty())
        slurm_error_since = wall;
      slurm_error = e.what();
      log(tessel::Impl::concat("Slurm not reachable for ", std::lround(wall - slurm_error_since), " s: ", e.what(),
                               "; no decision this round, retrying in ", opt.round_seconds, " s"));
      publish();
      return false;
    }
    if (!slurm_error.empty())
      log(tessel::Impl::concat("Slurm reachable again after ", std::lround(wall - slurm_error_since), " s"));
    slurm_error.clear();
    bool const first = rounds_run == 0;
    if (!first) {
      arrived_.clear();
      ended_.clear();
      evicted_.clear();
      repaired_.clear();
    }
    std::vector<JobState> before_state(records.size());
    std::vector<Enacted> before(records.size());
    try {
      reconcile(nodes, in_slurm);
      read_submissions(false);
      before_state.resize(records.size());
      before.resize(records.size());
      for (auto const &j : records) {
        before_state[static_cast<std::size_t>(j.id)] = j.state;
        if (j.state == JobState::running)
          before[static_cast<std::size_t>(j.id)] = enacted_of(j.id);
      }
      if (first) {
        // A restarted controller's policy has not seen these jobs: every job not ended arrives again, in
        // submission order; a running job it places where it already runs keeps running.
        arrived_.clear();
        for (auto &j : records)
          if (j.state == JobState::running || j.state == JobState::pending) {
            if (j.state == JobState::running) {
              allocation.release(j.id);
              j.state = JobState::pending;
            }
            arrived_.push_back(j.id);
          }
      }
      account(false);
      SchedContext ctx(*this);
      int seen_running = 0, seen_pending = 0;
      for (auto const &j : records) {
        seen_running += j.state == JobState::running;
        seen_pending += j.state == JobState::pending;
      }
      auto const t_decide = clock::now();
      policy->schedule(ctx);
      last_decide_ms = std::chrono::duration<double, std::milli>(clock::now() - t_decide).count();
      decide_ms.push_back(last_decide_ms);
      decide_running.push_back(seen_running);
      decide_pending.push_back(seen_pending);
      enact(before_state, before);
      account(true);
    } catch (SlurmError const &e) {
      if (slurm_error.empty())
        slurm_error_since = wall;
      slurm_error = e.what();
      log(tessel::Impl::concat("Slurm failed during the round: ", e.what(), "; retrying next round"));
    }
    ++rounds_run;
    last_round_ms = std::chrono::duration<double, std::milli>(clock::now() - t_start).count();
    round_ms.push_back(last_round_ms);
    publish();
    return slurm_error.empty();
  }

  Json status() const {
    Json jobs = Json::array();
    int running = 0, pending = 0, completed = 0, rejected = 0;
    for (auto const &j : records) {
      auto const &l = live[static_cast<std::size_t>(j.id)];
      running += j.state == JobState::running;
      pending += j.state == JobState::pending;
      completed += j.state == JobState::completed;
      rejected += j.state == JobState::rejected;
      long long const done = j.spec->iterations - static_cast<long long>(j.remaining);
      Json job = {
          {"name", j.spec->id},
          {"state", state_name(j.state)},
          {"model", ModelCatalog::builtin()[j.spec->model].name()},
          {"requested", tessel::Impl::concat(j.spec->num_gpus, " ", judge->cluster.type(j.spec->gpu_type).name)},
          {"done", done},
          {"iterations", j.spec->iterations},
          {"attempt", l.attempt},
          {"slurm_id", l.slurm_id},
          {"submit_time", j.submit_time},
          {"submit_round", j.submit_round},
          {"start_time", j.start_time},
          {"finish_time", j.finish_time},
          {"reschedules", j.reschedules},
          {"failures", j.failures}};
      if (j.state == JobState::running) {
        std::vector<std::string> names;
        for (int n : l.enacted.nodes)
          names.push_back(judge->node_names[static_cast<std::size_t>(n)]);
        job["cell"] = {{"gpu_type", judge->cluster.type(j.quota_type).name},
                       {"gpus", j.quota_gpus},
                       {"nodes", names},
                       {"gpus_per_node", j.quota_per_host}};
        job["throughput"] = j.throughput;
        double const left = j.throughput > 0 ? j.remaining * j.spec->batch_size / j.throughput : -1;
        job["predicted_finish"] = left >= 0 ? now_ + left : -1.0;
      }
      if (!l.last.nodes.empty()) {
        Cluster const &c = judge->cluster;
        std::vector<std::string> names;
        for (int n : l.last.nodes)
          names.push_back(judge->node_names[static_cast<std::size_t>(n)]);
        job["last_cell"] = {{"gpu_type", c.type(c.node_type(l.last.nodes[0])).name},
                            {"gpus", l.last.counts[0] * static_cast<int>(l.last.nodes.size())},
                            {"nodes", names},
                            {"gpus_per_node", l.last.counts[0]}};
      }
      if (j.state == JobState::rejected)
        job["reason"] = j.reject_reason;
      if (!l.last_failure.empty())
        job["last_failure"] = l.last_failure;
      jobs.push_back(job);
    }
    Json nodes = Json::array();
    for (int n = 0; n < judge->cluster.num_nodes(); ++n)
      nodes.push_back({{"name", judge->node_names[static_cast<std::size_t>(n)]},
                       {"gpu_type", judge->cluster.type(judge->cluster.node_type(n)).name},
                       {"gpus", judge->cluster.node_capacity(n)},
                       {"free", allocation.free_on_node(n)},
                       {"down", allocation.node_down(n)}});
    return {{"round", round_},
            {"now", now_},
            {"time_scale", opt.time_scale},
            {"policy", policy->name()},
            {"updated", wall_seconds()},
            {"slurm_error", slurm_error},
            {"round_ms", last_round_ms},
            {"decide_ms", last_decide_ms},
            {"cost",
             {{"rounds", round_ms.size()},
              {"round_ms_median", Impl::percentile(round_ms, 50)},
              {"round_ms_max", max_of(round_ms)},
              {"decide_ms_median", Impl::percentile(decide_ms, 50)},
              {"decide_ms_max", max_of(decide_ms)},
              {"slowest_decision_saw", slowest_decision()},
              {"recent_decisions", recent_decisions()}}},
            {"counts", {{"running", running}, {"pending", pending}, {"completed", completed}, {"rejected", rejected}}},
            {"nodes", nodes},
            {"jobs", jobs}};
  }

  // The running and pending jobs the slowest decision of this process saw.
  Json slowest_decision() const {
    if (decide_ms.empty())
      return Json::object();
    auto const k = static_cast<std::size_t>(std::max_element(decide_ms.begin(), decide_ms.end()) - decide_ms.begin());
    return {{"running", decide_running[k]}, {"pending", decide_pending[k]}};
  }

  // The last 1,000 decisions: milliseconds, running and pending jobs seen.
  Json recent_decisions() const {
    Json out = Json::array();
    for (std::size_t k = decide_ms.size() > 1000 ? decide_ms.size() - 1000 : 0; k < decide_ms.size(); ++k)
      out.push_back(Json::array({decide_ms[k], decide_running[k], decide_pending[k]}));
    return out;
  }

  void publish() const {
    try {
      write_json(opt.state_dir + "/status.json", status());
    } catch (tessel::Exception const &e) {
      log(tessel::Impl::concat("cannot publish the status: ", e.what()));
    }
  }

  bool all_done() const {
    if (records.empty())
      return false;
    return std::all_of(
               records.begin(), records.end(),
               [&](JobRecord const &j) { return j.state == JobState::completed || j.state == JobState::rejected; }) &&
           std::all_of(live.begin(), live.end(), [](Live const &l) { return l.stopping_id == 0; });
  }
};

SlurmController::SlurmController(ControllerOptions options, ProfileTable const *table, ThroughputSource source)
    : _state(std::make_unique<State>(std::move(options), table, source)) {
  TESSEL_REQUIRE(_state->opt.round_seconds > 0 && _state->opt.time_scale > 0,
                 "the round and the time scale must be positive");
  _state->recover();
}

SlurmController::~SlurmController() = default;

bool SlurmController::step() { return _state->step(); }

Json SlurmController::status() const { return _state->status(); }

void SlurmController::run(std::atomic<bool> const *stop) {
  auto &s = *_state;
  for (int r = 0; s.opt.max_rounds <= 0 || r < s.opt.max_rounds; ++r) {
    if (stop && stop->load())
      break;
    s.step();
    if (s.opt.until_done && s.all_done()) {
      s.opt.log(tessel::Impl::concat("round ", s.round_, ": every job ended"));
      break;
    }
    // Next round at the next multiple of the round length on the controller's clock.
    double const next = s.t0 + (std::floor((wall_seconds() - s.t0) / s.opt.round_seconds) + 1) * s.opt.round_seconds;
    while (wall_seconds() < next && !(stop && stop->load()))
      std::this_thread::sleep_for(std::chrono::milliseconds(
          std::max<long>(1, std::min<long>(100, std::lround((next - wall_seconds()) * 1000)))));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Intake and status
// ---------------------------------------------------------------------------------------------------------------

std::string submit_job(std::string const &state_dir, Json const &spec, std::string const &source) {
  std::string const config_path = state_dir + "/config.json";
  TESSEL_REQUIRE(exists(config_path), "no controller state in ", state_dir, " (start tessel-sched serve --state ",
                 state_dir, " first)");
  Json const config = read_json(config_path);
  // The same judgement as the controller's: its cluster, and its throughput source (the table is re-read when the
  // controller used one).
  std::string const src = json_get<std::string>(config, "source", config_path);
  ThroughputSource throughput = ThroughputSource::estimator;
  TESSEL_REQUIRE(parse_source(src, throughput), config_path, ": field 'source': unknown throughput source '", src, "'");
  std::unique_ptr<ProfileTable> table;
  if (config.contains("profile") && config["profile"].is_string() && !config["profile"].get<std::string>().empty())
    table = std::make_unique<ProfileTable>(load_profile(config["profile"].get<std::string>()));
  Judge const judge(json_member(config, "nodes", config_path), config_path, table ? table.get() : no_table, throughput,
                    json_get<double>(config, "round_seconds", config_path) *
                        json_get<double>(config, "time_scale", config_path));
  std::string command;
  JobSpec const s = parse_spec(spec, source, judge, command);
  Impl::Journal const journal(state_dir + "/jobs.journal");
  std::uint64_t offset = 0;
  for (auto const &rec : journal.read(offset))
    TESSEL_REQUIRE(json_member(rec, "spec", journal.path()).value("name", std::string()) != s.id, source,
                   ": field 'name': a job named '", s.id, "' was already submitted");
  journal.append({{"op", "submit"}, {"time", wall_seconds()}, {"spec", spec}});
  return s.id;
}

Json read_status(std::string const &state_dir) {
  std::string const path = state_dir + "/status.json";
  TESSEL_REQUIRE(exists(path), "no status in ", state_dir, " (is tessel-sched serve running with --state ", state_dir,
                 "?)");
  Json status = read_json(path);
  std::set<std::string> known;
  for (auto const &j : json_member(status, "jobs", path))
    known.insert(j.value("name", std::string()));
  Impl::Journal const journal(state_dir + "/jobs.journal");
  std::uint64_t offset = 0;
  Json waiting = Json::array();
  for (auto const &rec : journal.read(offset)) {
    std::string const name = json_member(rec, "spec", journal.path()).value("name", std::string());
    if (!known.count(name))
      waiting.push_back(name);
  }
  status["submitted_not_seen"] = waiting;
  return status;
}

} // namespace tessel::sched

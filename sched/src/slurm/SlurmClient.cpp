#include <tessel/sched/Slurm.hpp>

#include "../impl/Process.hpp"

#include <tessel/core/Json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace tessel::sched {

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

std::string trim(std::string const &text) {
  auto const b = text.find_first_not_of(" \t\r\n");
  auto const e = text.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
}

// "gpu:a100:2(S:0-1),gpu:v100:1" -> the typed GPU entries. A node of the model has GPUs of one type.
void parse_gres(std::string const &gres, SlurmNode &node, std::string const &source) {
  std::size_t pos = 0;
  while (pos < gres.size()) {
    // Commas also appear inside "(S:0,1)": split only outside parentheses.
    std::size_t end = pos;
    int depth = 0;
    for (; end < gres.size(); ++end) {
      depth += gres[end] == '(' ? 1 : gres[end] == ')' ? -1 : 0;
      if (gres[end] == ',' && depth == 0)
        break;
    }
    std::string entry = gres.substr(pos, end - pos);
    pos = end + 1;
    entry = entry.substr(0, entry.find('('));
    if (entry.rfind("gpu:", 0) != 0)
      continue;
    auto const second = entry.find(':', 4);
    TESSEL_REQUIRE(second != std::string::npos, source, ": node ", node.name, ": GRES '", entry,
                   "' has no GPU type (expected gpu:<type>:<count>)");
    std::string const type = lower(entry.substr(4, second - 4));
    int count = 0;
    try {
      count = std::stoi(entry.substr(second + 1));
    } catch (std::exception const &) {
      TESSEL_REQUIRE(false, source, ": node ", node.name, ": GRES '", entry, "' has no count");
    }
    TESSEL_REQUIRE(node.gpu_type.empty() || node.gpu_type == type, source, ": node ", node.name,
                   " has GPUs of two types (", node.gpu_type, " and ", type,
                   "); the scheduler models one GPU type per node");
    node.gpu_type = type;
    node.gpus += count;
  }
}

// Slurm's words for "the controller did not answer" (the CLIs exit 1 with these when slurmctld is down or busy).
bool no_answer(std::string const &text) {
  static char const *const phrases[] = {
      "Unable to contact slurm controller", "Socket timed out",
      "Zero Bytes were transmitted",        "Connection refused",
      "Communication connection failure",   "Slurm backup controller in standby mode"};
  for (char const *p : phrases)
    if (text.find(p) != std::string::npos)
      return true;
  return false;
}

// Runs \p argv, adding the wall time it took to \p waited.
Impl::ProcessResult timed_run(std::vector<std::string> const &argv, double timeout_s, double &waited) {
  auto const start = std::chrono::steady_clock::now();
  Impl::ProcessResult r = Impl::run_process(argv, timeout_s);
  waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

Json parse_cli_json(std::string const &text, std::string const &source) {
  Json doc = parse_json(text, source);
  if (doc.contains("errors") && doc["errors"].is_array() && !doc["errors"].empty())
    throw SlurmError(tessel::Impl::concat(source, " reported errors: ", doc["errors"].dump()));
  return doc;
}

} // namespace

std::vector<SlurmNode> parse_sinfo_json(std::string const &text, std::string const &source) {
  Json const doc = parse_cli_json(text, source);
  std::vector<SlurmNode> nodes;
  for (auto const &n : json_member(doc, "nodes", source)) {
    SlurmNode node;
    node.name = json_get<std::string>(n, "name", source + ": nodes[]");
    std::string const where = source + ": node " + node.name;
    parse_gres(n.value("gres", std::string()), node, where);
    node.state = lower(json_get<std::string>(n, "state", where));
    if (n.contains("state_flags") && n["state_flags"].is_array())
      for (auto const &f : n["state_flags"])
        node.flags.push_back(upper(f.get<std::string>()));
    node.reason = n.value("reason", std::string());
    static char const *const bad_states[] = {"down",   "drained", "draining", "drain",  "fail",      "failing",
                                             "future", "unknown", "maint",    "reboot", "power_down"};
    static char const *const bad_flags[] = {
        "DRAIN", "FAIL", "NOT_RESPONDING", "MAINTENANCE", "REBOOT_REQUESTED", "POWER_DOWN", "POWERED_DOWN"};
    static char const *const failed_states[] = {"down", "drained", "fail"};
    for (char const *s : failed_states)
      node.failed = node.failed || node.state == s;
    for (char const *s : bad_states)
      node.usable = node.usable && node.state != s;
    for (char const *f : bad_flags)
      node.usable = node.usable && std::find(node.flags.begin(), node.flags.end(), f) == node.flags.end();
    nodes.push_back(std::move(node));
  }
  return nodes;
}

std::vector<SlurmJob> parse_squeue_json(std::string const &text, std::string const &source,
                                        std::string const &name_prefix) {
  Json const doc = parse_cli_json(text, source);
  std::vector<SlurmJob> jobs;
  for (auto const &j : json_member(doc, "jobs", source)) {
    SlurmJob job;
    job.name = j.value("name", std::string());
    if (job.name.rfind(name_prefix, 0) != 0)
      continue;
    std::string const where = source + ": job " + job.name;
    job.id = json_get<std::int64_t>(j, "job_id", where);
    job.state = upper(json_get<std::string>(j, "job_state", where));
    job.reason = j.value("state_reason", std::string());
    // exit_code is the raw wait status in this data parser (exit status << 8 | signal).
    long const raw = j.contains("exit_code") && j["exit_code"].is_number() ? j["exit_code"].get<long>() : 0;
    job.exit_code = raw > 255 ? static_cast<int>((raw >> 8) & 0xff) : static_cast<int>(raw);
    job.restarts = j.contains("restart_cnt") && j["restart_cnt"].is_number() ? j["restart_cnt"].get<int>() : 0;
    job.comment = j.contains("comment") && j["comment"].is_string() ? j["comment"].get<std::string>() : "";
    if (j.contains("job_resources") && j["job_resources"].is_object() && j["job_resources"].contains("allocated_nodes"))
      for (auto const &n : j["job_resources"]["allocated_nodes"])
        job.nodes.push_back(n.value("nodename", std::string()));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

std::string SlurmClient::run(std::vector<std::string> const &argv) const {
  auto const r = timed_run(argv, _opt.timeout_s, _waited);
  std::string const cmd = Impl::command_text(argv);
  if (r.not_found)
    throw SlurmError(tessel::Impl::concat("Slurm is not reachable: ", r.err, " (is Slurm installed and on PATH?)"));
  if (r.timed_out)
    throw SlurmError(
        tessel::Impl::concat("Slurm is not reachable: '", cmd, "' did not answer within ", _opt.timeout_s, " s"));
  if (r.status != 0)
    throw SlurmError(tessel::Impl::concat("'", cmd, "' failed (exit status ", r.status, "): ", trim(r.err + r.out)),
                     no_answer(r.err + r.out));
  return r.out;
}

std::string SlurmClient::run_json(std::vector<std::string> const &argv) const {
  auto const r = timed_run(argv, _opt.timeout_s, _waited);
  std::string const cmd = Impl::command_text(argv);
  if (r.not_found || r.timed_out || r.status != 0)
    return run(argv); // the same call, for its error
  // The CLIs exit 0 with an "errors" array when slurmctld cannot be reached; their stderr says why.
  Json const doc = parse_json(r.out, cmd);
  if (doc.contains("errors") && doc["errors"].is_array() && !doc["errors"].empty())
    throw SlurmError(tessel::Impl::concat("Slurm is not reachable: '", cmd,
                                          "': ", trim(r.err).empty() ? doc["errors"].dump() : trim(r.err)));
  return r.out;
}

std::vector<SlurmNode> SlurmClient::nodes(std::string const &partition) const {
  std::vector<std::string> argv = {"sinfo", "--json"};
  if (!partition.empty())
    argv.insert(argv.end(), {"--partition", partition});
  auto nodes = parse_sinfo_json(run_json(argv), "sinfo --json");
  if (!partition.empty()) {
    // sinfo --json lists every node in this data parser version: keep the partition's.
    std::vector<SlurmNode> kept;
    std::string const out = run({"sinfo", "--noheader", "--Node", "--partition", partition, "--format", "%N"});
    std::vector<std::string> names;
    std::size_t pos = 0;
    while (pos < out.size()) {
      auto const end = out.find('\n', pos);
      std::string const name = trim(out.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
      if (!name.empty())
        names.push_back(name);
      pos = end == std::string::npos ? out.size() : end + 1;
    }
    TESSEL_REQUIRE(!names.empty(), "Slurm partition '", partition, "' has no nodes (or does not exist)");
    for (auto &n : nodes)
      if (std::find(names.begin(), names.end(), n.name) != names.end())
        kept.push_back(std::move(n));
    nodes = std::move(kept);
  }
  return nodes;
}

std::vector<SlurmJob> SlurmClient::jobs(std::string const &name_prefix) const {
  // --me: only this user's jobs (another user's job of the same name is none of the controller's business).
  return parse_squeue_json(run_json({"squeue", "--json", "--me"}), "squeue --json --me", name_prefix);
}

std::vector<std::string> SlurmClient::sbatch_command(SbatchRequest const &r) {
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=" + r.name};
  if (!r.partition.empty())
    argv.push_back("--partition=" + r.partition);
  std::string nodelist;
  for (auto const &n : r.nodes)
    nodelist += (nodelist.empty() ? "" : ",") + n;
  argv.push_back("--nodes=" + std::to_string(r.nodes.size()));
  argv.push_back("--nodelist=" + nodelist);
  argv.push_back("--gres=gpu:" + r.gpu_type + ":" + std::to_string(r.gpus_per_node));
  argv.push_back("--ntasks-per-node=" + std::to_string(r.gpus_per_node));
  argv.push_back(r.requeue ? "--requeue" : "--no-requeue");
  if (r.singleton)
    argv.push_back("--dependency=singleton");
  if (!r.comment.empty())
    argv.push_back("--comment=" + r.comment);
  if (!r.output.empty())
    argv.push_back("--output=" + r.output);
  if (!r.workdir.empty())
    argv.push_back("--chdir=" + r.workdir);
  std::string exports = "ALL";
  for (auto const &[k, v] : r.env) {
    TESSEL_REQUIRE(v.find(',') == std::string::npos, "sbatch: the value of ", k, " contains a comma: '", v, "'");
    exports += "," + k + "=" + v;
  }
  argv.push_back("--export=" + exports);
  argv.push_back(r.script_file);
  return argv;
}

long SlurmClient::submit(SbatchRequest const &request) const {
  TESSEL_REQUIRE(!request.nodes.empty() && request.gpus_per_node > 0 && !request.script_file.empty(), "sbatch for ",
                 request.name, ": no nodes, GPUs or batch script");
  std::string const out = trim(run(sbatch_command(request)));
  // --parsable prints "<id>" or "<id>;<cluster>".
  try {
    return std::stol(out.substr(0, out.find(';')));
  } catch (std::exception const &) {
    throw SlurmError(tessel::Impl::concat("sbatch for ", request.name, " printed no job id: '", out, "'"), false);
  }
}

void SlurmClient::signal(long job, std::string const &signal) const {
  run({"scancel", "--full", "--signal=" + signal, std::to_string(job)});
}

void SlurmClient::cancel(long job) const {
  auto const r = timed_run({"scancel", std::to_string(job)}, _opt.timeout_s, _waited);
  if (r.not_found || r.timed_out)
    throw SlurmError(
        tessel::Impl::concat("Slurm is not reachable: scancel ", job, r.timed_out ? " timed out" : ": " + r.err));
  // An ended job is not an error for a cancel.
  if (r.status != 0 && r.err.find("already completed") == std::string::npos &&
      r.err.find("Invalid job id") == std::string::npos)
    throw SlurmError(tessel::Impl::concat("scancel ", job, " failed: ", trim(r.err)), false);
}

} // namespace tessel::sched

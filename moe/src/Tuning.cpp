#include <tessel/core/OutputFile.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/InputFile.hpp>
#include <tessel/core/PacedCommunicator.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace tessel::moe {

namespace Impl {
// Generated from moe/tuning/host.registry at configure time (BuiltinRegistry.cpp).
extern char const *const builtin_registry_text;
} // namespace Impl

std::string CometParams::describe() const {
  std::ostringstream os;
  os << "workers=" << comm_workers << " in_flight=" << in_flight << " n_splits=" << n_splits << " m_splits=" << m_splits
     << " tile_m=" << tile_m << " policy=" << name_of(policy);
  return os.str();
}

void CometParams::validate(MoeConfig const &config, std::string const &backend) const {
  if (backend == "cuda") {
    TESSEL_REQUIRE(comm_workers >= 1 && comm_workers <= 1024,
                   "CometParams: comm_workers (communication blocks) must be in [1, 1024], got ", comm_workers);
    TESSEL_REQUIRE(m_splits == 1,
                   "CometParams: the CUDA comet schedule runs COMET's single token range (m_splits = 1), got ",
                   m_splits);
  } else {
    TESSEL_REQUIRE(comm_workers >= 0 && comm_workers <= 8,
                   "CometParams: comm_workers must be in [0, 8] (0: the compute thread progresses the messages), got ",
                   comm_workers);
  }
  TESSEL_REQUIRE(in_flight >= 0, "CometParams: in_flight must be >= 0 (0: no limit), got ", in_flight);
  TESSEL_REQUIRE(n_splits >= 1 && n_splits <= config.hidden, "CometParams: n_splits must be in [1, N=", config.hidden,
                 "], got ", n_splits);
  TESSEL_REQUIRE(m_splits >= 1 && m_splits <= 64, "CometParams: m_splits must be in [1, 64], got ", m_splits);
  TESSEL_REQUIRE(n_splits * m_splits < 16384, "CometParams: n_splits x m_splits = ", n_splits * m_splits,
                 " exceeds the 16383 combine messages a source can tell apart");
  TESSEL_REQUIRE(tile_m >= 1, "CometParams: tile_m must be positive, got ", tile_m);
}

std::uint64_t CometParams::hash() const {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t v : {static_cast<std::uint64_t>(comm_workers), static_cast<std::uint64_t>(in_flight),
                          static_cast<std::uint64_t>(n_splits), static_cast<std::uint64_t>(m_splits),
                          static_cast<std::uint64_t>(tile_m), static_cast<std::uint64_t>(policy)})
    h = (h ^ v) * 1099511628211ull;
  return h;
}

std::int64_t m_bucket(std::int64_t m) {
  std::int64_t b = 1;
  while (b < m)
    b *= 2;
  return b;
}

TuningKey TuningKey::of(MoeConfig const &config, std::string backend) {
  TuningKey key;
  key.backend = std::move(backend);
  key.m_bucket = moe::m_bucket(config.tokens);
  key.n = config.hidden;
  key.k = config.ffn;
  key.e = config.experts;
  key.topk = config.topk;
  key.ep = config.ep;
  key.tp = config.tp;
  return key;
}

std::string TuningKey::describe() const {
  std::ostringstream os;
  os << backend << " " << m_bucket << " " << n << " " << k << " " << e << " " << topk << " " << ep << " " << tp;
  if (!machine.empty())
    os << " " << machine;
  return os.str();
}

namespace {

// One registry field: blanks and the format's separators become '_'.
std::string field_safe(std::string const &text) {
  std::string out;
  for (char c : text) {
    bool const separator = c == ' ' || c == '\t' || c == '|' || c == '#' || c == ';' || c == '=';
    if (separator && (out.empty() || out.back() == '_'))
      continue;
    out += separator ? '_' : c;
  }
  while (!out.empty() && out.back() == '_')
    out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto const colon = line.find(':');
      if (colon != std::string::npos)
        return field_safe(line.substr(colon + 1));
    }
  return "unknown";
}

std::string format_number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", v);
  return text;
}

} // namespace

MachineKey MachineKey::of(Communicator const &comm) {
  MachineKey key;
  static std::string const cpu = cpu_model();
  key.cpu = cpu;
  // The machine's threads, not this process's affinity: a launcher that binds each rank to one core would
  // otherwise give ranks of the same job different keys.
  key.cores = static_cast<int>(std::thread::hardware_concurrency());
  key.ranks = comm.size();
  key.transport = name_of(comm.kind());
  if (auto const *paced = paced_backend_of(comm)) {
    key.transport += "+paced";
    key.link_bandwidth = paced->link().bandwidth;
    key.link_latency = paced->link().latency;
  }
  return key;
}

std::string MachineKey::token() const {
  std::ostringstream os;
  os << "cpu=" << field_safe(cpu) << ";cores=" << cores << ";ranks=" << ranks << ";transport=" << field_safe(transport)
     << ";link=" << format_number(link_bandwidth / 1e6) << "MB/s;latency=" << format_number(link_latency * 1e6) << "us";
  return os.str();
}

MachineKey MachineKey::parse(std::string const &token) {
  MachineKey key;
  auto const number = [&](std::string const &value, char const *field, char const *unit) {
    char *end = nullptr;
    double const v = std::strtod(value.c_str(), &end);
    TESSEL_REQUIRE(end != value.c_str() && std::string(end) == unit && std::isfinite(v) && v >= 0,
                   "machine key field '", field, "' is not a number of ", *unit ? unit : "units", ": '", value, "'");
    return v;
  };
  int seen = 0;
  std::istringstream is(token);
  std::string item;
  while (std::getline(is, item, ';')) {
    auto const eq = item.find('=');
    TESSEL_REQUIRE(eq != std::string::npos, "machine key item '", item, "' is not name=value");
    auto const name = item.substr(0, eq), value = item.substr(eq + 1);
    if (name == "cpu")
      key.cpu = value;
    else if (name == "cores")
      key.cores = static_cast<int>(number(value, "cores", ""));
    else if (name == "ranks")
      key.ranks = static_cast<int>(number(value, "ranks", ""));
    else if (name == "transport")
      key.transport = value;
    else if (name == "link")
      key.link_bandwidth = number(value, "link", "MB/s") * 1e6;
    else if (name == "latency")
      key.link_latency = number(value, "latency", "us") * 1e-6;
    else
      TESSEL_THROW("machine key has an unknown field '", name, "'");
    ++seen;
  }
  TESSEL_REQUIRE(seen == 6, "machine key needs cpu, cores, ranks, transport, link and latency, got '", token, "'");
  return key;
}

bool MachineKey::matches(MachineKey const &o, double tolerance) const {
  if (cpu != o.cpu || cores != o.cores || ranks != o.ranks || transport != o.transport)
    return false;
  // The token keeps 4 significant digits: compare what survives it.
  auto const close = [](double a, double b, double factor) {
    if (a <= 0.0 || b <= 0.0)
      return a <= 0.0 && b <= 0.0;
    return std::max(a, b) <= std::min(a, b) * factor;
  };
  return close(link_latency, o.link_latency, 1.001) && close(link_bandwidth, o.link_bandwidth, 1.0 + tolerance);
}

CometParams fallback_params(MoeConfig const &config, std::string const &backend) {
  CometParams p;
  if (backend == "cuda") {
    p.comm_workers = 28;
    p.n_splits = static_cast<int>(std::clamp<std::int64_t>(config.hidden / 512, 1, 8));
    p.m_splits = 1;
    p.tile_m = 128;
    p.in_flight = 0;
    p.policy = PlanPolicy::critical_path;
    return p;
  }
  // Rows one source sends for one expert; half of them per message keeps two messages per (source, expert)
  // while the GEMMs stay large enough for the BLAS to amortize packing the expert's weights.
  std::int64_t const per_pair = config.tokens * config.topk / std::max(config.experts, 1);
  std::int64_t tile = 128;
  while (tile * 2 <= per_pair / 2 && tile < 1024)
    tile *= 2;
  p.tile_m = tile;
  p.n_splits = config.hidden >= 256 ? 2 : 1;
  p.m_splits = 1;
  // The compute thread progresses the messages between tiles: a communication thread only pays off on a spare
  // core, and MPI jobs usually run one rank per core.
  p.comm_workers = 0;
  p.in_flight = 0;
  p.policy = PlanPolicy::critical_path;
  return p;
}

namespace {

std::string trim(std::string const &s) {
  auto const b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return {};
  auto const e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> words(std::string const &s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  std::string w;
  while (is >> w)
    out.push_back(w);
  return out;
}

std::int64_t parse_int(std::string const &text, std::string const &where, char const *field) {
  char *end = nullptr;
  long long const v = std::strtoll(text.c_str(), &end, 10);
  TESSEL_REQUIRE(end != text.c_str() && *end == '\0', where, ": field '", field, "' is not an integer: '", text, "'");
  return static_cast<std::int64_t>(v);
}

bool key_less(TuningKey const &a, TuningKey const &b) {
  return std::tie(a.backend, a.machine, a.n, a.k, a.e, a.topk, a.ep, a.tp, a.m_bucket) <
         std::tie(b.backend, b.machine, b.n, b.k, b.e, b.topk, b.ep, b.tp, b.m_bucket);
}

} // namespace

TuningRegistry TuningRegistry::parse(std::string const &text, std::string const &origin) {
  TuningRegistry reg;
  std::vector<TuningEntry> parsed;
  std::istringstream is(text);
  std::string line;
  int number = 0;
  while (std::getline(is, line)) {
    ++number;
    auto const where = origin + ":" + std::to_string(number);
    std::string body = line;
    auto const hash = body.find('#');
    if (hash != std::string::npos)
      body = body.substr(0, hash);
    if (trim(body).empty())
      continue;
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (true) {
      auto const bar = body.find('|', start);
      parts.push_back(trim(body.substr(start, bar == std::string::npos ? std::string::npos : bar - start)));
      if (bar == std::string::npos)
        break;
      start = bar + 1;
    }
    TESSEL_REQUIRE(
        parts.size() == 2 || parts.size() == 3, where,
        ": expected 'backend m_bucket N K E topk EP TP | workers in_flight n_splits m_splits tile_m policy | note'");
    auto const k = words(parts[0]);
    auto const p = words(parts[1]);
    TESSEL_REQUIRE(k.size() == 8 || k.size() == 9, where,
                   ": the key needs 8 fields (backend m_bucket N K E topk EP TP) and may have a machine, got ",
                   k.size());
    TESSEL_REQUIRE(p.size() == 6, where,
                   ": the parameters need 6 fields (workers in_flight n_splits m_splits tile_m policy), got ",
                   p.size());
    TuningEntry entry;
    entry.key.backend = k[0];
    entry.key.m_bucket = parse_int(k[1], where, "m_bucket");
    entry.key.n = parse_int(k[2], where, "N");
    entry.key.k = parse_int(k[3], where, "K");
    entry.key.e = static_cast<int>(parse_int(k[4], where, "E"));
    entry.key.topk = static_cast<int>(parse_int(k[5], where, "topk"));
    entry.key.ep = static_cast<int>(parse_int(k[6], where, "EP"));
    entry.key.tp = static_cast<int>(parse_int(k[7], where, "TP"));
    TESSEL_REQUIRE(entry.key.m_bucket >= 1 && moe::m_bucket(entry.key.m_bucket) == entry.key.m_bucket, where,
                   ": m_bucket must be a power of two, got ", entry.key.m_bucket);
    if (k.size() == 9) {
      try {
        entry.key.machine = MachineKey::parse(k[8]).token();
      } catch (Exception const &e) {
        TESSEL_THROW(where, ": ", e.what());
      }
    }
    entry.params.comm_workers = static_cast<int>(parse_int(p[0], where, "workers"));
    entry.params.in_flight = static_cast<int>(parse_int(p[1], where, "in_flight"));
    entry.params.n_splits = static_cast<int>(parse_int(p[2], where, "n_splits"));
    entry.params.m_splits = static_cast<int>(parse_int(p[3], where, "m_splits"));
    entry.params.tile_m = parse_int(p[4], where, "tile_m");
    try {
      entry.params.policy = parse_plan_policy(p[5]);
    } catch (Exception const &e) {
      TESSEL_THROW(where, ": ", e.what());
    }
    TESSEL_REQUIRE(
        entry.params.comm_workers >= 0 && entry.params.in_flight >= 0 && entry.params.n_splits >= 1 &&
            entry.params.m_splits >= 1 && entry.params.tile_m >= 1,
        where, ": parameters out of range (workers >= 0, in_flight >= 0, n_splits >= 1, m_splits >= 1, tile_m >= 1)");
    entry.note = parts.size() == 3 ? parts[2] : std::string();
    parsed.push_back(std::move(entry));
  }
  reg.add(std::move(parsed));
  return reg;
}

TuningRegistry TuningRegistry::load(std::string const &path) {
  // A regular file of bounded size (tessel::read_input_file): a FIFO would block the reader until a writer comes,
  // a device such as /dev/zero or /dev/full would never end.
  return parse(read_input_file(path, max_registry_bytes, "tuning registry"), path);
}

std::string TuningRegistry::to_string() const {
  std::ostringstream os;
  os << "# Tessel moe tuning registry (written by --tune or by first-use tuning; see moe/README.md)\n"
     << "# backend m_bucket N K E topk EP TP [machine] | workers in_flight n_splits m_splits tile_m policy | note\n";
  for (auto const &e : _entries)
    os << e.key.describe() << " | " << e.params.comm_workers << " " << e.params.in_flight << " " << e.params.n_splits
       << " " << e.params.m_splits << " " << e.params.tile_m << " " << name_of(e.params.policy) << " | " << e.note
       << "\n";
  return os.str();
}

void TuningRegistry::save(std::string const &path) const { write_file(path, to_string()); }

void TuningRegistry::set(TuningKey const &key, CometParams const &params, std::string note) {
  auto const less = [](TuningEntry const &e, TuningKey const &k) { return key_less(e.key, k); };
  auto const at = std::lower_bound(_entries.begin(), _entries.end(), key, less);
  if (at != _entries.end() && at->key == key) {
    at->params = params;
    at->note = std::move(note);
    return;
  }
  _entries.insert(at, {key, params, std::move(note)});
}

void TuningRegistry::add(std::vector<TuningEntry> entries) {
  // One sort instead of a search per entry: a cache of tens of thousands of entries loads in linear-logarithmic
  // time. Of equal keys the last one stays (a later line, or the merged registry, replaces an earlier entry).
  auto all = std::move(_entries);
  all.insert(all.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
  std::stable_sort(all.begin(), all.end(),
                   [](TuningEntry const &a, TuningEntry const &b) { return key_less(a.key, b.key); });
  _entries.clear();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (i + 1 == all.size() || !(all[i].key == all[i + 1].key))
      _entries.push_back(std::move(all[i]));
}

void TuningRegistry::merge(TuningRegistry const &other) { add(other._entries); }

CometParams TuningRegistry::lookup(MoeConfig const &config, std::string const &backend, std::string *how) const {
  auto const key = TuningKey::of(config, backend);
  TuningEntry const *nearest = nullptr;
  double best = 0.0;
  for (auto const &e : _entries) {
    if (e.key == key) {
      if (how)
        *how = "registry";
      return e.params;
    }
    if (!e.key.same_shape(key))
      continue;
    double const d =
        std::abs(std::log2(static_cast<double>(e.key.m_bucket)) - std::log2(static_cast<double>(key.m_bucket)));
    if (!nearest || d < best || (d == best && e.key.m_bucket > nearest->key.m_bucket)) {
      nearest = &e;
      best = d;
    }
  }
  if (nearest) {
    if (how)
      *how =
          "registry (M bucket " + std::to_string(nearest->key.m_bucket) + " for " + std::to_string(key.m_bucket) + ")";
    return nearest->params;
  }
  if (how)
    *how = "fallback rule";
  return fallback_params(config, backend);
}

TuningEntry const *TuningRegistry::find(TuningKey const &key, MachineKey const &machine) const {
  TuningEntry const *best = nullptr;
  double best_distance = 0.0;
  for (auto const &e : _entries) {
    if (e.key.machine.empty() || e.key.backend != key.backend || e.key.m_bucket != key.m_bucket || e.key.n != key.n ||
        e.key.k != key.k || e.key.e != key.e || e.key.topk != key.topk || e.key.ep != key.ep || e.key.tp != key.tp)
      continue;
    MachineKey theirs;
    try {
      theirs = MachineKey::parse(e.key.machine);
    } catch (Exception const &) {
      continue; // set() takes any text; parse() only checked tokens
    }
    if (!theirs.matches(machine))
      continue;
    double const distance = theirs.link_bandwidth > 0 && machine.link_bandwidth > 0
                                ? std::abs(std::log(theirs.link_bandwidth / machine.link_bandwidth))
                                : 0.0;
    if (!best || distance < best_distance) {
      best = &e;
      best_distance = distance;
    }
  }
  return best;
}

TuningRegistry const &TuningRegistry::builtin() {
  static TuningRegistry const registry = [] {
    auto reg = parse(Impl::builtin_registry_text, "moe/tuning/host.registry (built in)");
    if (char const *path = std::getenv("TESSEL_MOE_TUNING"))
      if (*path)
        reg.merge(load(path));
    return reg;
  }();
  return registry;
}

CometParams resolve_comet_params(MoeConfig const &config, std::optional<CometParams> const &given,
                                 TuningRegistry const *registry, std::string const &backend, std::string *source) {
  CometParams params;
  if (given) {
    params = *given;
    if (source)
      *source = "given";
  } else {
    params = (registry ? *registry : TuningRegistry::builtin()).lookup(config, backend, source);
  }
  params.validate(config, backend);
  return params;
}

std::string default_tuning_cache_path() {
  auto const set = [](char const *name) -> std::string {
    char const *value = std::getenv(name);
    return value && *value ? value : "";
  };
  std::string dir = set("TESSEL_CACHE_DIR");
  if (dir.empty() && !set("XDG_CACHE_HOME").empty())
    dir = set("XDG_CACHE_HOME") + "/tessel";
  if (dir.empty() && !set("HOME").empty())
    dir = set("HOME") + "/.cache/tessel";
  return dir.empty() ? std::string() : dir + "/moe-tuning.registry";
}

TuningRegistry load_tuning_cache(std::string const &path, std::string *warning) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec))
    return {};
  try {
    return TuningRegistry::load(path);
  } catch (Exception const &e) {
    if (warning)
      *warning = "ignoring the tuning cache (it will be rewritten): " + std::string(e.what());
  }
  return {};
}

bool store_tuning_cache(std::string const &path, TuningEntry const &entry, std::string *warning) {
  auto const fail = [&](std::string const &why) {
    if (warning)
      *warning = "could not write the tuning cache '" + path + "' (the tuned parameters are still used): " + why;
    return false;
  };
  if (path.empty())
    return fail("no cache directory (set TESSEL_CACHE_DIR, XDG_CACHE_HOME or HOME)");
  // Written only as a regular file: writing into a named pipe or a device would wait for a reader or go nowhere.
  if (std::error_code ec; std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    return fail("it is not a regular file");
  // A corrupt cache was already reported when it was read: it is replaced, not kept.
  auto cache = load_tuning_cache(path);
  cache.set(entry.key, entry.params, entry.note);
  try {
    auto const dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty())
      std::filesystem::create_directories(dir, ec);
    if (ec)
      return fail("cannot create '" + dir.string() + "': " + ec.message());
    cache.save(path);
  } catch (Exception const &e) {
    return fail(e.what());
  }
  return true;
}

} // namespace tessel::moe

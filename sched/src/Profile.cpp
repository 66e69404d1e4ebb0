#include <tessel/sched/Profile.hpp>

#include <tessel/sched/Model.hpp>

#include "impl/CriusJson.hpp"
#include "impl/Csv.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif

#include <cmath>
#include <filesystem>

namespace tessel::sched {

int ProfileTable::gpu_index(std::string const &gpu, bool insert) {
  for (std::size_t i = 0; i < _gpus.size(); ++i)
    if (_gpus[i] == gpu)
      return static_cast<int>(i);
  if (!insert)
    return -1;
  _gpus.push_back(gpu);
  return static_cast<int>(_gpus.size()) - 1;
}

std::uint64_t ProfileTable::key(int model, int batch, std::string const &gpu, int hosts, int per_host) const {
  int g = -1;
  for (std::size_t i = 0; i < _gpus.size(); ++i)
    if (_gpus[i] == gpu)
      g = static_cast<int>(i);
  if (g < 0)
    return ~std::uint64_t(0);
  return (std::uint64_t(model) << 52) | (std::uint64_t(batch & 0xFFFFF) << 32) | (std::uint64_t(g & 0xFF) << 24) |
         (std::uint64_t(hosts & 0xFFF) << 12) | std::uint64_t(per_host & 0xFFF);
}

void ProfileTable::add(ProfileEntry entry) {
  gpu_index(entry.gpu, true);
  auto const k = key(entry.model, entry.batch_size, entry.gpu, entry.hosts, entry.per_host);
  auto const it = _entry_index.find(k);
  if (it != _entry_index.end()) {
    _entries[it->second] = std::move(entry);
    return;
  }
  _entry_index.emplace(k, _entries.size());
  _entries.push_back(std::move(entry));
}

void ProfileTable::add(DpMemory memory) {
  std::uint64_t const k = (std::uint64_t(memory.model) << 32) | std::uint64_t(memory.batch_size);
  auto const it = _dp_index.find(k);
  if (it != _dp_index.end()) {
    _dp[it->second] = memory;
    return;
  }
  _dp_index.emplace(k, _dp.size());
  _dp.push_back(memory);
}

std::optional<double> ProfileTable::iter_time(int model, int batch_size, std::string const &gpu, int hosts,
                                              int per_host) const {
  auto const k = key(model, batch_size, gpu, hosts, per_host);
  auto const it = _entry_index.find(k);
  if (it == _entry_index.end())
    return std::nullopt;
  return _entries[it->second].iter_time;
}

DpMemory const *ProfileTable::dp_memory(int model, int batch_size) const {
  std::uint64_t const k = (std::uint64_t(model) << 32) | std::uint64_t(batch_size);
  auto const it = _dp_index.find(k);
  return it == _dp_index.end() ? nullptr : &_dp[it->second];
}

namespace {

int require_model(std::string const &where, std::string const &family, std::string const &size) {
  int const m = ModelCatalog::builtin().find(family, size);
  TESSEL_REQUIRE(m >= 0, where, ": unknown model '", family, "' size '", size, "'");
  return m;
}

void read_optimal_csv(ProfileTable &table, std::string const &path) {
  auto const t = Impl::CsvTable::read(path);
  int const c_model = t.require_column("model_name"), c_param = t.require_column("param_num");
  int const c_bs = t.require_column("batch_size"), c_gpu = t.require_column("gpu_type");
  int const c_h = t.require_column("num_hosts"), c_d = t.require_column("num_devices_per_host");
  int const c_prefix = t.column("key_prefix_hosts");
  int const c_it = t.require_column("optimal_iter_time"), c_status = t.column("status");
  for (std::size_t r = 0; r < t.rows(); ++r) {
    std::string const where = path + ":" + std::to_string(t.line(r));
    if (c_status >= 0 && t.cell(r, c_status) != "ok") {
      table.skipped.push_back(where + ": status '" + t.cell(r, c_status) + "'");
      continue;
    }
    ProfileEntry e;
    e.model = require_model(where, t.cell(r, c_model), t.cell(r, c_param));
    e.batch_size = static_cast<int>(t.integer(r, c_bs));
    e.gpu = t.cell(r, c_gpu);
    e.hosts = static_cast<int>(t.integer(r, c_h));
    e.per_host = static_cast<int>(t.integer(r, c_d));
    TESSEL_REQUIRE(e.batch_size > 0 && e.hosts > 0 && e.per_host > 0, where,
                   ": batch_size, num_hosts and num_devices_per_host must be positive");
    if (c_prefix >= 0 && t.integer(r, c_prefix) != e.hosts) {
      // Arena builds device keys as "{hosts}_{gpu}_{hosts}_n_{d}_d"; such rows are unreachable there.
      table.skipped.push_back(where + ": device key prefix differs from num_hosts");
      continue;
    }
    e.iter_time = t.real(r, c_it);
    TESSEL_REQUIRE(std::isfinite(e.iter_time), where, ": optimal_iter_time is not finite");
    table.add(std::move(e));
  }
}

void read_plans_csv(ProfileTable &table, std::string const &path) {
  auto const t = Impl::CsvTable::read(path);
  int const c_model = t.require_column("model_name"), c_param = t.require_column("param_num");
  int const c_bs = t.require_column("batch_size"), c_gpu = t.require_column("gpu_type");
  int const c_h = t.require_column("num_hosts"), c_d = t.require_column("num_devices_per_host");
  int const c_pp = t.require_column("pp_degree"), c_dp = t.require_column("dp_degree");
  int const c_mp = t.require_column("mp_degree");
  int const c_comp = t.require_column("comp_time"), c_intra = t.require_column("intra_stage_comm_time");
  int const c_inter = t.require_column("inter_stage_comm_time"), c_e2e = t.require_column("e2e_iter_time");
  int const c_status = t.column("status"), c_prefix = t.column("key_prefix_hosts");
  for (std::size_t r = 0; r < t.rows(); ++r) {
    std::string const where = path + ":" + std::to_string(t.line(r));
    if (c_status >= 0 && t.cell(r, c_status) != "ok") {
      table.skipped.push_back(where + ": status '" + t.cell(r, c_status) + "'");
      continue;
    }
    PlanRecord p;
    p.model = require_model(where, t.cell(r, c_model), t.cell(r, c_param));
    p.batch_size = static_cast<int>(t.integer(r, c_bs));
    p.gpu = t.cell(r, c_gpu);
    p.hosts = static_cast<int>(t.integer(r, c_h));
    p.per_host = static_cast<int>(t.integer(r, c_d));
    if (c_prefix >= 0 && t.integer(r, c_prefix) != p.hosts) {
      table.skipped.push_back(where + ": device key prefix differs from num_hosts");
      continue;
    }
    p.pp = static_cast<int>(t.integer(r, c_pp));
    p.dp = static_cast<int>(t.integer(r, c_dp));
    p.tp = static_cast<int>(t.integer(r, c_mp));
    p.comp = t.real(r, c_comp);
    p.intra = t.real(r, c_intra);
    p.inter = t.real(r, c_inter);
    p.e2e = t.real(r, c_e2e);
    if (!(std::isfinite(p.comp) && std::isfinite(p.intra) && std::isfinite(p.inter) && std::isfinite(p.e2e))) {
      table.skipped.push_back(where + ": non-finite times (plan did not run)");
      continue;
    }
    TESSEL_REQUIRE(p.pp * p.dp * p.tp == p.hosts * p.per_host, where, ": pp*dp*mp = ", p.pp * p.dp * p.tp,
                   " differs from the GPU count ", p.hosts * p.per_host);
    table.add(std::move(p));
  }
}

void read_dp_mem_json(ProfileTable &table, std::string const &path) {
  Json const doc = read_json(path);
  Json const &obj = Impl::crius_object(doc, path, "an object of <model>_<size>_<batch>");
  for (auto const &[key, value] : obj.items()) {
    auto const sep = key.rfind('_');
    TESSEL_REQUIRE(sep != std::string::npos, path, ": key '", key, "' is not <model>_<size>_<batch>");
    DpMemory m;
    m.model = ModelCatalog::builtin().find(key.substr(0, sep));
    TESSEL_REQUIRE(m.model >= 0, path, ": key '", key, "': unknown model");
    std::string const batch = key.substr(sep + 1);
    TESSEL_REQUIRE(!batch.empty() && batch.size() <= 8 && batch.find_first_not_of("0123456789") == std::string::npos,
                   path, ": key '", key, "': the batch size after the last '_' is not a number");
    m.batch_size = std::stoi(batch);
    TESSEL_REQUIRE(value.is_array() && value.size() == 5, path, ": key '", key,
                   "': expected 5 numbers (1, 2, 4, 8, 16 GPUs)");
    for (std::size_t i = 0; i < 5; ++i) {
      TESSEL_REQUIRE(value[i].is_number(), path, ": key '", key, "': entry ", i, " is not a number");
      m.gb[i] = value[i].get<double>();
    }
    table.add(m);
  }
}

#ifdef TESSEL_ENABLE_HDF5
ProfileTable load_profile_h5(std::string const &path) {
  h5::File f(path, h5::Mode::read);
  TESSEL_REQUIRE(f.has_attribute("/", "schema") && f.read_string_attribute("/", "schema") == "tessel.sched.profile",
                 path, ": not a profile file (root attribute schema must be 'tessel.sched.profile')");
  auto const &cat = ModelCatalog::builtin();
  ProfileTable table;
  auto model_of = [&](std::string const &name, std::string const &where) {
    int const m = cat.find(name);
    TESSEL_REQUIRE(m >= 0, path, ": ", where, ": unknown model '", name, "'");
    return m;
  };
  if (f.has("optimal/model")) {
    auto const models = f.read_strings("optimal/model");
    std::size_t const n = models.size();
    auto const gpus = f.read_strings("optimal/gpu_type");
    TESSEL_REQUIRE(gpus.size() == n, path, ": optimal/gpu_type has ", gpus.size(), " entries, expected ", n);
    auto const bs = f.read<int>("optimal/batch_size", {n});
    auto const hosts = f.read<int>("optimal/num_hosts", {n});
    auto const per = f.read<int>("optimal/gpus_per_host", {n});
    auto const it = f.read<double>("optimal/iter_time", {n});
    for (std::size_t i = 0; i < n; ++i) {
      std::string const where = "optimal row " + std::to_string(i);
      TESSEL_REQUIRE(bs.data[i] > 0 && hosts.data[i] > 0 && per.data[i] > 0, path, ": ", where,
                     ": batch size, hosts and GPUs per host must be positive");
      TESSEL_REQUIRE(std::isfinite(it.data[i]), path, ": ", where, ": iter_time is not finite");
      table.add(ProfileEntry{model_of(models[i], where), bs.data[i], gpus[i], hosts.data[i], per.data[i], it.data[i]});
    }
  }
  if (f.has("dp_memory/model")) {
    auto const models = f.read_strings("dp_memory/model");
    std::size_t const n = models.size();
    auto const bs = f.read<int>("dp_memory/batch_size", {n});
    auto const gb = f.read<double>("dp_memory/gb", {n, 5});
    for (std::size_t i = 0; i < n; ++i) {
      DpMemory m;
      m.model = model_of(models[i], "dp_memory row " + std::to_string(i));
      m.batch_size = bs.data[i];
      for (std::size_t k = 0; k < 5; ++k) {
        m.gb[k] = gb.data[i * 5 + k];
        TESSEL_REQUIRE(std::isfinite(m.gb[k]), path, ": dp_memory row ", i, ": gb is not finite");
      }
      table.add(m);
    }
  }
  if (f.has("plans/model")) {
    auto const models = f.read_strings("plans/model");
    std::size_t const n = models.size();
    auto const gpus = f.read_strings("plans/gpu_type");
    TESSEL_REQUIRE(gpus.size() == n, path, ": plans/gpu_type has ", gpus.size(), " entries, expected ", n);
    auto const bs = f.read<int>("plans/batch_size", {n});
    auto const hosts = f.read<int>("plans/num_hosts", {n});
    auto const per = f.read<int>("plans/gpus_per_host", {n});
    auto const deg = f.read<int>("plans/degrees", {n, 3});
    auto const times = f.read<double>("plans/times", {n, 4});
    for (std::size_t i = 0; i < n; ++i) {
      PlanRecord p;
      p.model = model_of(models[i], "plans row " + std::to_string(i));
      p.batch_size = bs.data[i];
      p.gpu = gpus[i];
      p.hosts = hosts.data[i];
      p.per_host = per.data[i];
      p.pp = deg.data[i * 3];
      p.dp = deg.data[i * 3 + 1];
      p.tp = deg.data[i * 3 + 2];
      p.comp = times.data[i * 4];
      p.intra = times.data[i * 4 + 1];
      p.inter = times.data[i * 4 + 2];
      p.e2e = times.data[i * 4 + 3];
      TESSEL_REQUIRE(p.pp * p.dp * p.tp == p.hosts * p.per_host, path, ": plans row ", i,
                     ": pp*dp*tp differs from the GPU count");
      for (int k = 0; k < 4; ++k)
        TESSEL_REQUIRE(std::isfinite(times.data[i * 4 + k]), path, ": plans row ", i, ": times are not finite");
      table.add(std::move(p));
    }
  }
  TESSEL_REQUIRE(!table.empty(), path, ": the profile file holds no optimal/, dp_memory/ or plans/ rows");
  return table;
}
#endif

} // namespace

ProfileTable load_crius_profile(std::string const &optimal_csv, std::string const &plans_csv,
                                std::string const &dp_mem_json) {
  ProfileTable table;
  if (!optimal_csv.empty())
    read_optimal_csv(table, optimal_csv);
  if (!plans_csv.empty())
    read_plans_csv(table, plans_csv);
  if (!dp_mem_json.empty())
    read_dp_mem_json(table, dp_mem_json);
  return table;
}

ProfileTable load_profile(std::string const &path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    auto file = [&](char const *name) {
      auto const p = fs::path(path) / name;
      return fs::exists(p) ? p.string() : std::string();
    };
    std::string const optimal = file("prof_database.csv");
    TESSEL_REQUIRE(!optimal.empty(), path, ": folder has no prof_database.csv");
    return load_crius_profile(optimal, file("prof_database_est.csv"), file("dp_mem.json"));
  }
#ifdef TESSEL_ENABLE_HDF5
  return load_profile_h5(path);
#else
  TESSEL_THROW(path, ": reading HDF5 needs a Tessel built with Tessel_ENABLE_HDF5=ON");
#endif
}

void save_profile(ProfileTable const &table, std::string const &path, std::string const &source) {
#ifdef TESSEL_ENABLE_HDF5
  auto const &cat = ModelCatalog::builtin();
  h5::File f(path, h5::Mode::truncate);
  f.write_attribute("/", "schema", "tessel.sched.profile");
  f.write_attribute("/", "schema_version", 1);
  f.write_attribute("/", "source", source);
  if (!table.entries().empty()) {
    std::vector<std::string> models, gpus;
    std::vector<int> bs, hosts, per;
    std::vector<double> it;
    for (auto const &e : table.entries()) {
      models.push_back(cat[e.model].name());
      gpus.push_back(e.gpu);
      bs.push_back(e.batch_size);
      hosts.push_back(e.hosts);
      per.push_back(e.per_host);
      it.push_back(e.iter_time);
    }
    f.write_strings("optimal/model", models);
    f.write_strings("optimal/gpu_type", gpus);
    f.write("optimal/batch_size", bs);
    f.write("optimal/num_hosts", hosts);
    f.write("optimal/gpus_per_host", per);
    f.write("optimal/iter_time", it);
  }
  if (!table.dp_memory().empty()) {
    std::vector<std::string> models;
    std::vector<int> bs;
    std::vector<double> gb;
    for (auto const &m : table.dp_memory()) {
      models.push_back(cat[m.model].name());
      bs.push_back(m.batch_size);
      gb.insert(gb.end(), m.gb.begin(), m.gb.end());
    }
    f.write_strings("dp_memory/model", models);
    f.write("dp_memory/batch_size", bs);
    f.write("dp_memory/gb", gb.data(), {models.size(), 5});
  }
  if (!table.plans().empty()) {
    std::vector<std::string> models, gpus;
    std::vector<int> bs, hosts, per, deg;
    std::vector<double> times;
    for (auto const &p : table.plans()) {
      models.push_back(cat[p.model].name());
      gpus.push_back(p.gpu);
      bs.push_back(p.batch_size);
      hosts.push_back(p.hosts);
      per.push_back(p.per_host);
      deg.insert(deg.end(), {p.pp, p.dp, p.tp});
      times.insert(times.end(), {p.comp, p.intra, p.inter, p.e2e});
    }
    f.write_strings("plans/model", models);
    f.write_strings("plans/gpu_type", gpus);
    f.write("plans/batch_size", bs);
    f.write("plans/num_hosts", hosts);
    f.write("plans/gpus_per_host", per);
    f.write("plans/degrees", deg.data(), {models.size(), 3});
    f.write("plans/times", times.data(), {models.size(), 4});
  }
  f.close();
#else
  (void)table;
  (void)source;
  TESSEL_THROW(path, ": writing HDF5 needs a Tessel built with Tessel_ENABLE_HDF5=ON");
#endif
}

} // namespace tessel::sched

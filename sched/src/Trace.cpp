#include <tessel/core/OutputFile.hpp>
#include <tessel/sched/Trace.hpp>

#include "impl/Csv.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#ifdef TESSEL_ENABLE_HDF5
#include <tessel/core/H5File.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <unordered_set>

namespace tessel::sched {

namespace {

bool ends_with(std::string const &s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr double kMaxTraceTime = 1e12;

// Shared row validation of CSV and HDF5 traces; \p where names the row for messages.
struct RowChecker {
  Cluster const &cluster;
  std::unordered_set<std::string> ids;

  JobSpec check(std::string const &where, std::string id, double submit, long long iters, std::string const &model,
                long long batch, long long gpus, std::string const &type, double deadline) {
    TESSEL_REQUIRE(!id.empty(), where, ": empty job_id");
    TESSEL_REQUIRE(ids.insert(id).second, where, ": duplicate job_id '", id, "'");
    // Times may be relative to the trace's start or absolute (Unix epoch seconds, as Slurm's accounting and the
    // Helios traces write them): the simulator starts at the first submission. Beyond 1e12 s (31,700 years) a time
    // no longer resolves milliseconds, and is no clock's.
    TESSEL_REQUIRE(std::isfinite(submit) && submit >= 0 && submit <= kMaxTraceTime, where, " (job ", id,
                   "): submission_time must be a time in seconds in [0, 1e12] (relative, or Unix epoch seconds), got ",
                   submit);
    TESSEL_REQUIRE(iters > 0, where, " (job ", id, "): num_iteration must be > 0, got ", iters);
    TESSEL_REQUIRE(batch > 0 && batch <= (1 << 24), where, " (job ", id, "): batch_size must be > 0, got ", batch);
    TESSEL_REQUIRE(gpus > 0 && gpus <= (1 << 20), where, " (job ", id, "): num_gpu must be > 0, got ", gpus);
    TESSEL_REQUIRE(std::isfinite(deadline) && deadline <= kMaxTraceTime, where, " (job ", id,
                   "): deadline must be a time in seconds up to 1e12 (or < 0: none), got ", deadline);
    TESSEL_REQUIRE(deadline < 0 || deadline >= submit, where, " (job ", id, "): deadline ", deadline,
                   " s is before the job's submission at ", submit, " s (deadlines are absolute, on the same clock)");
    JobSpec j;
    j.id = std::move(id);
    j.submit_time = submit;
    j.iterations = iters;
    j.model = ModelCatalog::builtin().find(model);
    TESSEL_REQUIRE(j.model >= 0, where, " (job ", j.id, "): unknown model '", model,
                   "' (expected <family>__<size>, e.g. moe__2.4B; families wide_resnet, bert, moe, gpt)");
    j.batch_size = static_cast<int>(batch);
    j.num_gpus = static_cast<int>(gpus);
    j.gpu_type = cluster.find_type(type);
    if (j.gpu_type < 0) {
      std::string known;
      for (auto const &t : cluster.types())
        known += (known.empty() ? "" : ", ") + t.name;
      TESSEL_THROW(where, " (job ", j.id, "): unknown GPU type '", type, "' (the cluster has: ", known, ")");
    }
    j.deadline = deadline;
    return j;
  }
};

Trace load_trace_csv(std::string const &path, Cluster const &cluster) {
  auto const t = Impl::CsvTable::read(path);
  int const c_id = t.require_column("job_id");
  int const c_sub = t.require_column("submission_time");
  int const c_it = t.require_column("num_iteration");
  int const c_model = t.require_column("model_name");
  int const c_bs = t.require_column("batch_size");
  int const c_gpu = t.require_column("num_gpu");
  int const c_type = t.require_column("gpu_type");
  int const c_ddl = t.column("deadline");
  RowChecker check{cluster, {}};
  Trace trace;
  trace.source = path;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    std::string const where = path + ":" + std::to_string(t.line(r));
    double const deadline = c_ddl >= 0 && !t.cell(r, c_ddl).empty() ? t.real(r, c_ddl) : -1.0;
    trace.jobs.push_back(check.check(where, t.cell(r, c_id), t.real(r, c_sub), t.integer(r, c_it), t.cell(r, c_model),
                                     t.integer(r, c_bs), t.integer(r, c_gpu), t.cell(r, c_type), deadline));
  }
  return trace;
}

#ifdef TESSEL_ENABLE_HDF5
Trace load_trace_h5(std::string const &path, Cluster const &cluster) {
  h5::File f(path, h5::Mode::read);
  TESSEL_REQUIRE(f.has_attribute("/", "schema") && f.read_string_attribute("/", "schema") == "tessel.sched.trace", path,
                 ": not a trace file (root attribute schema must be 'tessel.sched.trace')");
  auto const ids = f.read_strings("jobs/id");
  std::size_t const n = ids.size();
  auto const sub = f.read<double>("jobs/submit_time", {n});
  auto const iters = f.read<std::int64_t>("jobs/iterations", {n});
  auto const models = f.read_strings("jobs/model");
  TESSEL_REQUIRE(models.size() == n, path, ": jobs/model has ", models.size(), " entries, jobs/id has ", n);
  auto const bs = f.read<std::int64_t>("jobs/batch_size", {n});
  auto const gpus = f.read<std::int64_t>("jobs/num_gpus", {n});
  auto const types = f.read_strings("jobs/gpu_type");
  TESSEL_REQUIRE(types.size() == n, path, ": jobs/gpu_type has ", types.size(), " entries, jobs/id has ", n);
  std::vector<double> deadline(n, -1.0);
  if (f.has("jobs/deadline"))
    deadline = f.read<double>("jobs/deadline", {n}).data;
  RowChecker check{cluster, {}};
  Trace trace;
  trace.source = path;
  for (std::size_t i = 0; i < n; ++i)
    trace.jobs.push_back(check.check(path + ": jobs row " + std::to_string(i), ids[i], sub.data[i], iters.data[i],
                                     models[i], bs.data[i], gpus.data[i], types[i], deadline[i]));
  return trace;
}
#endif

} // namespace

Trace load_trace(std::string const &path, Cluster const &cluster) {
  Trace trace;
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) {
#ifdef TESSEL_ENABLE_HDF5
    trace = load_trace_h5(path, cluster);
#else
    TESSEL_THROW(path, ": reading HDF5 needs a Tessel built with Tessel_ENABLE_HDF5=ON");
#endif
  } else {
    trace = load_trace_csv(path, cluster);
  }
  TESSEL_REQUIRE(!trace.jobs.empty(), path, ": the trace has no jobs");
  std::stable_sort(trace.jobs.begin(), trace.jobs.end(),
                   [](JobSpec const &a, JobSpec const &b) { return a.submit_time < b.submit_time; });
  for (auto const &t : cluster.types())
    trace.type_names.push_back(t.name);
  return trace;
}

void save_trace(Trace const &trace, std::string const &path) {
#ifdef TESSEL_ENABLE_HDF5
  h5::File f(path, h5::Mode::truncate);
  f.write_attribute("/", "schema", "tessel.sched.trace");
  f.write_attribute("/", "schema_version", 1);
  f.write_attribute("/", "source", trace.source);
  std::vector<std::string> ids, models, types;
  std::vector<double> sub, ddl;
  std::vector<std::int64_t> iters, bs, gpus;
  auto const &cat = ModelCatalog::builtin();
  for (auto const &j : trace.jobs) {
    ids.push_back(j.id);
    models.push_back(cat[j.model].name());
    types.push_back(trace.type_names.at(static_cast<std::size_t>(j.gpu_type)));
    sub.push_back(j.submit_time);
    ddl.push_back(j.deadline);
    iters.push_back(j.iterations);
    bs.push_back(j.batch_size);
    gpus.push_back(j.num_gpus);
  }
  f.write_strings("jobs/id", ids);
  f.write("jobs/submit_time", sub);
  f.write("jobs/iterations", iters);
  f.write_strings("jobs/model", models);
  f.write("jobs/batch_size", bs);
  f.write("jobs/num_gpus", gpus);
  f.write_strings("jobs/gpu_type", types);
  f.write("jobs/deadline", ddl);
  f.close();
#else
  (void)trace;
  TESSEL_THROW(path, ": writing HDF5 needs a Tessel built with Tessel_ENABLE_HDF5=ON");
#endif
}

void save_trace_csv(Trace const &trace, std::string const &path) {
  OutputFile file(path);
  auto &out = file.stream();
  out << "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n";
  out << std::setprecision(15);
  auto const &cat = ModelCatalog::builtin();
  for (auto const &j : trace.jobs)
    out << j.id << ',' << j.submit_time << ',' << j.iterations << ',' << cat[j.model].name() << ',' << j.deadline << ','
        << j.batch_size << ',' << j.num_gpus << ',' << trace.type_names.at(static_cast<std::size_t>(j.gpu_type))
        << '\n';
  file.commit();
}

} // namespace tessel::sched

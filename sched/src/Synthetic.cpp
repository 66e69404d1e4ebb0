#include <tessel/sched/Synthetic.hpp>

#include <tessel/sched/Model.hpp>

#include "impl/Csv.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cmath>

namespace tessel::sched {

namespace {

// splitmix64-based generator: the same numbers on every platform and standard library.
class Rng {
public:
  explicit Rng(std::uint64_t seed) : _s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::uint64_t next() {
    std::uint64_t z = (_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  double normal() {
    double u1 = uniform();
    while (u1 <= 0)
      u1 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * uniform());
  }

private:
  std::uint64_t _s;
};

// Index of the first cumulative threshold above a draw in [0, thresholds.back()).
int pick_cumulative(Rng &rng, std::vector<int> const &thresholds) {
  int const x = rng.below(thresholds.back());
  for (std::size_t i = 0; i < thresholds.size(); ++i)
    if (x < thresholds[i])
      return static_cast<int>(i);
  return static_cast<int>(thresholds.size()) - 1;
}

struct Draw {
  int model, batch, gpus, type;
};

class JobDrawer {
public:
  JobDrawer(Cluster const &cluster, ThroughputOracle const &oracle, std::vector<std::pair<std::string, double>> mix,
            double gpt_share)
      : _cluster(cluster), _oracle(oracle), _gpt_share(gpt_share) {
    if (mix.empty())
      mix = {{"a100", 15}, {"v100", 15}, {"a40", 30}, {"a10", 30}};
    for (auto const &[name, w] : mix) {
      TESSEL_REQUIRE(w >= 0 && std::isfinite(w), "GPU type weight of '", name, "' must be >= 0");
      int const t = cluster.find_type(name);
      if (t >= 0 && w > 0) {
        _types.push_back(t);
        _weights.push_back(w);
      }
    }
    if (_types.empty())
      for (int t = 0; t < cluster.num_types(); ++t) {
        _types.push_back(t);
        _weights.push_back(1);
      }
  }

  // Arena's draw, repeated until the best plan of the drawn allocation is feasible.
  Draw draw(Rng &rng, int keep_gpus) const {
    auto const &cat = ModelCatalog::builtin();
    for (int attempt = 0; attempt < 100000; ++attempt) {
      ModelFamily family;
      if (_gpt_share > 0 && rng.uniform() < _gpt_share) {
        family = ModelFamily::gpt;
      } else {
        static std::vector<int> const fam{15, 40, 100};
        ModelFamily const families[] = {ModelFamily::wide_resnet, ModelFamily::bert, ModelFamily::moe};
        family = families[pick_cumulative(rng, fam)];
      }
      static std::vector<int> const bs_odds{50, 60, 65};
      int const bs_idx = pick_cumulative(rng, bs_odds);
      int const batches_wr[] = {256, 512, 1024}, batches_bert[] = {128, 256, 512};
      int const batch =
          family == ModelFamily::bert || family == ModelFamily::gpt ? batches_bert[bs_idx] : batches_wr[bs_idx];
      static std::vector<int> const size_odds{10, 25, 50, 70, 85, 95};
      int const size_idx = pick_cumulative(rng, size_odds);
      std::vector<int> sizes;
      for (int m = 0; m < cat.size(); ++m)
        if (cat[m].family == family)
          sizes.push_back(m);
      // GPT's catalog starts one size lower (350M); skip it to keep Arena's size steps.
      if (family == ModelFamily::gpt && sizes.size() > 6)
        sizes.erase(sizes.begin());
      int const model = sizes[static_cast<std::size_t>(std::min<int>(size_idx, static_cast<int>(sizes.size()) - 1))];
      static std::vector<int> const gpu_odds{10, 25, 45, 65, 80};
      int gpus;
      if (keep_gpus > 0) {
        gpus = keep_gpus;
      } else {
        int const max_sel = std::min(4, size_idx + 2);
        std::vector<int> const odds(gpu_odds.begin(), gpu_odds.begin() + max_sel + 1);
        gpus = 1 << pick_cumulative(rng, odds);
      }
      double total = 0;
      for (double w : _weights)
        total += w;
      double x = rng.uniform() * total;
      int type = _types.back();
      for (std::size_t i = 0; i < _types.size(); ++i) {
        if (x < _weights[i]) {
          type = _types[i];
          break;
        }
        x -= _weights[i];
      }
      if (gpus > _cluster.type_gpus(type))
        continue;
      int const cap = _cluster.type_capacity(type);
      int const per = std::min(gpus, cap);
      if (_oracle.adaptive(model, batch, type, gpus / per, per) > 0)
        return {model, batch, gpus, type};
    }
    TESSEL_THROW("no feasible job found in 100000 draws: the throughput source rejects every allocation");
  }

  double iter_time(Draw const &d) const {
    int const per = std::min(d.gpus, _cluster.type_capacity(d.type));
    return _oracle.iter_time(d.model, d.batch, d.type, d.gpus / per, per);
  }

private:
  Cluster const &_cluster;
  ThroughputOracle const &_oracle;
  double _gpt_share;
  std::vector<int> _types;
  std::vector<double> _weights;
};

} // namespace

Trace generate_trace(Cluster const &cluster, ThroughputOracle const &oracle, SyntheticOptions const &o) {
  TESSEL_REQUIRE(o.jobs > 0, "synthetic trace: jobs must be positive, got ", o.jobs);
  TESSEL_REQUIRE(o.jobs_per_hour > 0, "synthetic trace: jobs_per_hour must be positive");
  TESSEL_REQUIRE(o.median_hours > 0 && o.sigma >= 0 && o.max_hours > 0, "synthetic trace: invalid durations");
  TESSEL_REQUIRE(o.gpt_share >= 0 && o.gpt_share <= 1, "synthetic trace: gpt_share must be in [0, 1]");
  Rng rng(o.seed);
  JobDrawer const drawer(cluster, oracle, o.type_mix, o.gpt_share);
  Trace trace;
  trace.source = "tessel-sched synthetic (seed " + std::to_string(o.seed) + ")";
  for (auto const &t : cluster.types())
    trace.type_names.push_back(t.name);
  double t = o.start_time;
  for (int i = 0; i < o.jobs; ++i) {
    double u = rng.uniform();
    while (u <= 0)
      u = rng.uniform();
    t += -std::log(u) * 3600.0 / o.jobs_per_hour;
    Draw const d = drawer.draw(rng, 0);
    double const hours = std::clamp(o.median_hours * std::exp(o.sigma * rng.normal()), 1.0 / 60.0, o.max_hours);
    JobSpec j;
    j.id = "job" + std::to_string(i);
    j.submit_time = std::floor(t);
    j.model = d.model;
    j.batch_size = d.batch;
    j.num_gpus = d.gpus;
    j.gpu_type = d.type;
    j.iterations = std::max<long long>(1, static_cast<long long>(hours * 3600.0 / drawer.iter_time(d)));
    trace.jobs.push_back(std::move(j));
  }
  // Derived: the arrivals' span (a tiny rate puts the last arrival beyond any clock).
  TESSEL_REQUIRE(std::isfinite(t) && t <= 1e12, "synthetic trace: ", o.jobs, " jobs at ", o.jobs_per_hour,
                 " jobs per hour arrive over ", t - o.start_time,
                 " s, beyond the 1e12 s a trace's clock may hold; raise the rate or lower the job count");
  return trace;
}

void regenerate_jobs(Trace &trace, std::vector<int> const &old_batch, Cluster const &cluster,
                     ThroughputOracle const &oracle, std::uint64_t seed, bool keep_gpus) {
  TESSEL_REQUIRE(old_batch.size() == trace.jobs.size(), "regenerate_jobs: one original batch size per job");
  Rng rng(seed);
  JobDrawer const drawer(cluster, oracle, {}, 0);
  trace.type_names.clear();
  for (auto const &t : cluster.types())
    trace.type_names.push_back(t.name);
  for (std::size_t i = 0; i < trace.jobs.size(); ++i) {
    auto &j = trace.jobs[i];
    int keep = 0;
    if (keep_gpus) {
      keep = 1;
      while (keep < j.num_gpus && keep < 16)
        keep *= 2;
    }
    Draw const d = drawer.draw(rng, keep);
    j.iterations = std::max<long long>(1, static_cast<long long>(double(j.iterations) * old_batch[i] / d.batch));
    j.model = d.model;
    j.batch_size = d.batch;
    j.num_gpus = d.gpus;
    j.gpu_type = d.type;
  }
}

Trace convert_elasticflow_trace(std::string const &path, Cluster const &cluster, ThroughputOracle const &oracle,
                                std::uint64_t seed, bool keep_gpus, double from_time, int sample) {
  TESSEL_REQUIRE(sample >= 1, "sample must be >= 1, got ", sample);
  auto const t = Impl::CsvTable::read(path);
  int const c_id = t.require_column("job_id"), c_sub = t.require_column("submission_time");
  int const c_it = t.require_column("num_iteration"), c_bs = t.require_column("batch_size");
  int const c_gpu = t.require_column("num_gpu"), c_ddl = t.column("deadline");
  Trace trace;
  trace.source = path + " (ElasticFlow trace, jobs regenerated as Arena's regenerate_sim_trace.py, seed " +
                 std::to_string(seed) + ")";
  std::vector<int> old_batch;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    if (r % static_cast<std::size_t>(sample) != 0)
      continue;
    double const sub = t.real(r, c_sub);
    TESSEL_REQUIRE(std::isfinite(sub) && sub >= 0, t.where(r, c_sub), ": must be a number >= 0");
    if (sub < from_time)
      continue;
    JobSpec j;
    j.id = t.cell(r, c_id);
    TESSEL_REQUIRE(!j.id.empty(), t.where(r, c_id), ": empty job id");
    j.submit_time = sub;
    j.iterations = t.integer(r, c_it);
    TESSEL_REQUIRE(j.iterations > 0, t.where(r, c_it), ": must be > 0");
    long long const bs = t.integer(r, c_bs), gpus = t.integer(r, c_gpu);
    TESSEL_REQUIRE(bs > 0, t.where(r, c_bs), ": must be > 0");
    TESSEL_REQUIRE(gpus > 0, t.where(r, c_gpu), ": must be > 0");
    j.num_gpus = static_cast<int>(gpus);
    j.deadline = c_ddl >= 0 && !t.cell(r, c_ddl).empty() ? t.real(r, c_ddl) : -1;
    old_batch.push_back(static_cast<int>(bs));
    trace.jobs.push_back(std::move(j));
  }
  TESSEL_REQUIRE(!trace.jobs.empty(), path, ": no job submitted at or after ", from_time, " s");
  std::vector<std::size_t> order(trace.jobs.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return trace.jobs[a].submit_time < trace.jobs[b].submit_time; });
  std::vector<JobSpec> jobs;
  std::vector<int> batches;
  for (std::size_t i : order) {
    jobs.push_back(std::move(trace.jobs[i]));
    batches.push_back(old_batch[i]);
  }
  trace.jobs = std::move(jobs);
  regenerate_jobs(trace, batches, cluster, oracle, seed, keep_gpus);
  return trace;
}

} // namespace tessel::sched

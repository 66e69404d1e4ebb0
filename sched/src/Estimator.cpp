#include <tessel/sched/Estimator.hpp>

#include <tessel/sched/Model.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace tessel::sched {

namespace {

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

int floor_power_of_two(double x) {
  int p = 1;
  while (p * 2 <= x)
    p *= 2;
  return p;
}

int family_index(ModelFamily f) { return static_cast<int>(f); }

// Bytes of optimizer state per parameter, fitted to the intercepts of Arena's dp_mem.json (fp32 SGD with momentum
// for Wide-ResNet; fp16 weights and gradients with some extra for the transformers).
double state_bytes_per_param(ModelFamily f) {
  switch (f) {
  case ModelFamily::wide_resnet:
    return 12.2;
  case ModelFamily::moe:
    return 5.6;
  default:
    return 6.0;
  }
}
double grad_bytes(ModelFamily f) { return f == ModelFamily::wide_resnet ? 4.0 : 2.0; }

// Collective latency per hop (seconds).
constexpr double kLatency = 10e-6;
constexpr double kOverheadGb = 1.0;     // framework and workspace memory per GPU
constexpr double kMemoryFraction = 0.8; // XLA pre-allocates 80 % of the GPU (Arena's pre_alloc_memory_fraction)
constexpr double kMemoryMargin = 1.2;   // Arena's OOM rule: 1.2 x need <= 0.8 x memory
constexpr double kDefaultCompute = 0.4; // uncalibrated fraction of peak
constexpr double kDefaultComm = 0.7;    // uncalibrated fraction of link bandwidth
constexpr int kMaxMicroBatches = 16;

double median(std::vector<double> v) {
  if (v.empty())
    return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  std::size_t const n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

} // namespace

Estimator::Estimator(Cluster cluster) : _cluster(std::move(cluster)) {
  auto const T = static_cast<std::size_t>(_cluster.num_types());
  _cal.compute.assign(T, {kDefaultCompute, kDefaultCompute, kDefaultCompute, kDefaultCompute});
  _cal.tp.assign(T, {kDefaultComm, kDefaultComm, kDefaultComm, kDefaultComm});
  _cal.dp.assign(T, kDefaultComm);
  _cal.pp.assign(T, kDefaultComm);
}

int Estimator::micro_batches(Cell const &cell, ParallelPlan const &plan) const {
  if (plan.pp() <= 1)
    return 1;
  int max_dp = 1;
  for (auto const &s : plan.stages)
    max_dp = std::max(max_dp, s.dp);
  return std::max(1, std::min(kMaxMicroBatches, floor_power_of_two(double(cell.batch_size) / max_dp)));
}

namespace {

// Why \p plan is not a well-formed plan of \p cell for model \p m (empty when it is).
std::string plan_error(Cell const &cell, ParallelPlan const &plan, ModelSpec const &m) {
  int const N = cell.num_gpus();
  int const S = plan.pp();
  if (S != cell.stages || S < 1 || N % S != 0)
    return "plan has " + std::to_string(S) + " stages, the Cell " + std::to_string(cell.stages);
  if (S > m.layers)
    return "more stages than layers";
  int const G = N / S;
  int const M = plan.micro_batches;
  if (M < 1)
    return "micro-batch count must be >= 1";
  for (auto const &s : plan.stages) {
    if (!is_power_of_two(s.dp) || !is_power_of_two(s.tp) || s.dp * s.tp != G)
      return "stage shape " + std::to_string(s.dp) + "x" + std::to_string(s.tp) + " does not cover " +
             std::to_string(G) + " GPUs";
    if (double(cell.batch_size) / M < s.dp)
      return "dp " + std::to_string(s.dp) + " exceeds the micro-batch of " + std::to_string(cell.batch_size / M) +
             " samples";
    if (m.heads > 0 && (s.tp > m.heads || m.heads % s.tp != 0))
      return "tp " + std::to_string(s.tp) + " does not divide the " + std::to_string(m.heads) + " heads";
    if (m.heads == 0 && (s.tp > 8 || m.hidden % s.tp != 0))
      return "tp " + std::to_string(s.tp) + " is not a channel split of the convolutions";
  }
  return {};
}

std::string memory_error(double gb, GpuSpec const &g) {
  std::ostringstream os;
  os << "needs " << gb << " GB per GPU; " << g.name << " allows " << kMemoryFraction * g.memory_gb / kMemoryMargin;
  return os.str();
}

} // namespace

PlanEstimate Estimator::evaluate(Cell const &cell, ParallelPlan const &plan, Efficiency const &eff) const {
  PlanEstimate out;
  auto const &m = ModelCatalog::builtin()[cell.model];
  auto const &g = _cluster.type(cell.gpu_type);
  out.why = plan_error(cell, plan, m);
  if (!out.why.empty()) {
    out.valid = false;
    return out;
  }
  int const S = plan.pp();
  int const G = cell.num_gpus() / S;
  int const M = plan.micro_batches;
  out.valid = true;

  double const peak = g.peak_tflops * 1e12 * eff.compute;
  double const intra_bw = g.intra_node_gbps * 1e9, inter_bw = g.inter_node_gbps * 1e9;
  double const hbm = g.mem_bandwidth_gbps * 1e9;
  double const f = 1.0 / S;
  double const layers_per_stage = double(m.layers) / S;
  double const micro = double(cell.batch_size) / M; // samples per micro-batch
  double fw_max = 0, fw_sum = 0, bw_max = 0, bw_sum = 0, x_max = 0, x_sum = 0, gs_sum = 0, ap_max = 0;
  double cf_max = 0, cf_sum = 0, tf_max = 0, tf_sum = 0, mem_peak = 0;
  for (int j = 0; j < S; ++j) {
    auto const s = plan.stages[static_cast<std::size_t>(j)];
    double const b = micro / s.dp; // samples per replica per micro-batch
    double const cf = m.fwd_flops * f * b / s.tp / peak;
    // Tensor parallelism: two all-reduces per transformer layer in each direction (Megatron), one per block for
    // convolutions, over the activations of b samples.
    double tf = 0;
    if (s.tp > 1) {
      double const bytes = m.heads > 0 ? b * m.seq_len * m.hidden * 2.0 : b * m.boundary_bytes;
      double const per_layer = m.heads > 0 ? 2.0 : 1.0;
      double const bw = (s.tp <= cell.per_host ? intra_bw : inter_bw) * eff.tp;
      tf = per_layer * layers_per_stage * (2.0 * (s.tp - 1) / s.tp * bytes / bw + kLatency * (s.tp - 1));
    }
    tf_max = std::max(tf_max, tf);
    tf_sum += tf;
    // Cross-stage activations, split over min(#GPUs of sender, receiver) (Crius's f_r); stages are contiguous GPU
    // ranges, so a boundary crosses nodes when a stage spans a node or ends on a node boundary.
    double x = 0;
    if (j + 1 < S) {
      bool const crosses = G >= cell.per_host || ((j + 1) * G) % cell.per_host == 0;
      x = micro * m.boundary_bytes / G / ((crosses ? inter_bw : intra_bw) * eff.pp) + kLatency;
    }
    double const stage_params = m.params * f / s.tp;
    if (s.dp > 1) {
      double const bw = (s.dp * s.tp <= cell.per_host && G <= cell.per_host ? intra_bw : inter_bw) * eff.dp;
      gs_sum += 2.0 * (s.dp - 1) / s.dp * stage_params * grad_bytes(m.family) / bw + kLatency * (s.dp - 1);
    }
    ap_max = std::max(ap_max, 16.0 * stage_params / hbm); // optimizer step, memory bound
    fw_max = std::max(fw_max, cf + tf);
    fw_sum += cf + tf;
    bw_max = std::max(bw_max, 2.0 * cf + tf);
    bw_sum += 2.0 * cf + tf;
    x_max = std::max(x_max, x);
    x_sum += x;
    cf_max = std::max(cf_max, cf);
    cf_sum += cf;
    // 1F1B keeps at most S - j micro-batches of activations alive on stage j.
    int const inflight = std::min(M, S - j);
    double const mem = state_bytes_per_param(m.family) * stage_params + m.act_bytes * f * b * inflight / s.tp;
    mem_peak = std::max(mem_peak, mem / 1e9 + kOverheadGb);
  }
  // Crius's _gpipe_e2e_pipeline (no overlap): forward and backward each take the slowest stage x (B - 1) plus the
  // sum over stages, and the same for cross-stage transfers; then every stage's gradient synchronization and the
  // slowest optimizer step.
  double const fw = fw_max * (M - 1) + fw_sum + x_max * (M - 1) + x_sum;
  double const bw = bw_max * (M - 1) + bw_sum + x_max * (M - 1) + x_sum;
  out.e2e = fw + bw + gs_sum + ap_max;
  out.comp = 3.0 * (cf_max * (M - 1) + cf_sum);
  out.inter = 2.0 * (x_max * (M - 1) + x_sum);
  out.intra = std::max(0.0, out.e2e - out.comp - out.inter);
  out.tp_comm = 2.0 * (tf_max * (M - 1) + tf_sum);
  out.dp_sync = gs_sum;
  out.memory_gb = mem_peak;
  out.fits = kMemoryMargin * mem_peak <= kMemoryFraction * g.memory_gb;
  if (!out.fits)
    out.why = memory_error(mem_peak, g);
  return out;
}

PlanEstimate Estimator::estimate(Cell const &cell, ParallelPlan const &plan) const {
  auto const &m = ModelCatalog::builtin()[cell.model];
  TESSEL_REQUIRE(cell.gpu_type >= 0 && cell.gpu_type < _cluster.num_types(), "GPU type index ", cell.gpu_type,
                 " out of range");
  auto const t = static_cast<std::size_t>(cell.gpu_type);
  auto const f = static_cast<std::size_t>(family_index(m.family));
  return evaluate(cell, plan, Efficiency{_cal.compute[t][f], _cal.tp[t][f], _cal.dp[t], _cal.pp[t]});
}

std::vector<ParallelPlan> Estimator::enumerate_plans(Cell const &cell, PlanStrategy strategy) const {
  std::vector<ParallelPlan> plans;
  int const S = cell.stages;
  if (S < 1 || cell.num_gpus() % S != 0)
    return plans;
  int const G = cell.stage_gpus();
  if (!is_power_of_two(G))
    return plans;
  auto const &m = ModelCatalog::builtin()[cell.model];
  std::vector<StageShape> shapes;
  for (int tp = 1; tp <= G; tp *= 2) {
    if (m.heads > 0 && m.heads % tp != 0)
      continue;
    if (m.heads == 0 && (tp > 8 || m.hidden % tp != 0))
      continue;
    shapes.push_back({G / tp, tp});
  }
  auto finish = [&](ParallelPlan p) {
    p.micro_batches = micro_batches(cell, p);
    auto const e = estimate(cell, p);
    if (e.valid && e.fits)
      plans.push_back(std::move(p));
  };
  if (strategy == PlanStrategy::minimal) {
    finish(ParallelPlan{std::vector<StageShape>(static_cast<std::size_t>(S), StageShape{G, 1}), 1});
    if (G > 1 && (m.heads == 0 ? (G <= 8 && m.hidden % G == 0) : m.heads % G == 0))
      finish(ParallelPlan{std::vector<StageShape>(static_cast<std::size_t>(S), StageShape{1, G}), 1});
  } else if (strategy == PlanStrategy::uniform) {
    for (auto const &sh : shapes)
      finish(ParallelPlan{std::vector<StageShape>(static_cast<std::size_t>(S), sh), 1});
  } else {
    // Greedy per stage: the shape with least intra-stage communication (tensor-parallel traffic + gradient
    // synchronization) that fits in memory; changing shape from the previous stage costs a factor 1.1.
    ParallelPlan p;
    StageShape prev{0, 0};
    for (int j = 0; j < S; ++j) {
      double best = std::numeric_limits<double>::infinity();
      StageShape chosen{0, 0};
      for (auto const &sh : shapes) {
        // Score the shape on a one-stage probe Cell of the same per-stage size.
        ParallelPlan probe{std::vector<StageShape>(static_cast<std::size_t>(S), sh), 1};
        probe.micro_batches = micro_batches(cell, probe);
        auto const e = estimate(cell, probe);
        if (!e.valid || !e.fits)
          continue;
        double score = e.intra + e.inter;
        if (prev.dp > 0 && sh != prev)
          score *= 1.1;
        if (score < best) {
          best = score;
          chosen = sh;
        }
      }
      if (chosen.dp == 0)
        return plans;
      p.stages.push_back(chosen);
      prev = chosen;
    }
    finish(std::move(p));
  }
  return plans;
}

Estimator::Best Estimator::best(int model, int batch_size, int gpu_type, int hosts, int per_host,
                                PlanStrategy strategy) const {
  Best out;
  int const N = hosts * per_host;
  int const layers = ModelCatalog::builtin()[model].layers;
  for (int S = 1; S <= N && S <= layers; S *= 2) {
    if (N % S != 0)
      continue;
    Cell const cell{model, batch_size, gpu_type, hosts, per_host, S};
    for (auto const &plan : enumerate_plans(cell, strategy)) {
      ++out.plans_considered;
      auto const e = estimate(cell, plan);
      if (e.valid && e.fits && (!out.feasible || e.e2e < out.estimate.e2e)) {
        out.feasible = true;
        out.cell = cell;
        out.plan = plan;
        out.estimate = e;
      }
    }
  }
  return out;
}

PlanEstimate Estimator::data_parallel(int model, int batch_size, int gpu_type, int hosts, int per_host) const {
  int const N = hosts * per_host;
  Cell const cell{model, batch_size, gpu_type, hosts, per_host, 1};
  return estimate(cell, ParallelPlan{{StageShape{N, 1}}, 1});
}

namespace {

// Median per (type, family) with fallbacks: the family's mean over types, then the mean of everything fitted, then
// \p fallback.
void fill_family_table(std::vector<std::array<std::vector<double>, 4>> const &samples,
                       std::vector<std::array<double, 4>> &out, double fallback) {
  std::size_t const T = samples.size();
  std::array<double, 4> fam_sum{}, fam_n{};
  double all_sum = 0, all_n = 0;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t f = 0; f < 4; ++f) {
      double const v = median(samples[t][f]);
      if (std::isfinite(v)) {
        fam_sum[f] += v;
        fam_n[f] += 1;
        all_sum += v;
        all_n += 1;
      }
    }
  for (std::size_t t = 0; t < T; ++t) {
    // A type's own families, for the families it lacks, before other types' values.
    double type_sum = 0, type_n = 0;
    for (std::size_t f = 0; f < 4; ++f) {
      double const v = median(samples[t][f]);
      if (std::isfinite(v)) {
        type_sum += v;
        type_n += 1;
      }
    }
    for (std::size_t f = 0; f < 4; ++f) {
      double v = median(samples[t][f]);
      if (!std::isfinite(v))
        v = fam_n[f] > 0 ? fam_sum[f] / fam_n[f]
            : type_n > 0 ? type_sum / type_n
            : all_n > 0  ? all_sum / all_n
                         : fallback;
      out[t][f] = v;
    }
  }
}

void fill_type_table(std::vector<std::vector<double>> const &samples, std::vector<double> &out, double fallback) {
  double sum = 0, n = 0;
  for (auto const &s : samples) {
    double const v = median(s);
    if (std::isfinite(v)) {
      sum += v;
      n += 1;
    }
  }
  for (std::size_t t = 0; t < samples.size(); ++t) {
    double const v = median(samples[t]);
    out[t] = std::isfinite(v) ? v : (n > 0 ? sum / n : fallback);
  }
}

} // namespace

Calibration const &Estimator::calibrate(ProfileTable const &table) {
  auto const T = static_cast<std::size_t>(_cluster.num_types());
  std::vector<std::array<std::vector<double>, 4>> comp(T), tp(T);
  std::vector<std::vector<double>> dp(T), pp(T);
  _cal.plans_used = 0;
  auto const &cat = ModelCatalog::builtin();
  // Raw (efficiency 1) components: a measured time is raw / efficiency.
  struct Sample {
    std::size_t t, f;
    PlanEstimate raw;
    PlanRecord const *rec;
  };
  std::vector<Sample> samples;
  for (auto const &rec : table.plans()) {
    int const t = _cluster.find_type(rec.gpu);
    if (t < 0 || rec.e2e <= 0)
      continue;
    int const N = rec.hosts * rec.per_host;
    if (rec.pp < 1 || N % rec.pp != 0)
      continue;
    Cell const cell{rec.model, rec.batch_size, t, rec.hosts, rec.per_host, rec.pp};
    ParallelPlan plan{std::vector<StageShape>(static_cast<std::size_t>(rec.pp), StageShape{rec.dp, rec.tp}), 1};
    plan.micro_batches = micro_batches(cell, plan);
    auto const e = evaluate(cell, plan, Efficiency{});
    if (!e.valid)
      continue;
    ++_cal.plans_used;
    samples.push_back(
        {static_cast<std::size_t>(t), static_cast<std::size_t>(family_index(cat[rec.model].family)), e, &rec});
  }
  for (auto const &s : samples) {
    if (s.rec->comp > 0)
      comp[s.t][s.f].push_back(s.raw.comp / s.rec->comp);
    if (s.rec->inter > 0.01 * s.rec->e2e && s.raw.inter > 0)
      pp[s.t].push_back(s.raw.inter / s.rec->inter);
    // Gradient synchronization from plans without tensor parallelism.
    if (s.raw.tp_comm == 0 && s.raw.dp_sync > 0 && s.rec->intra > 0.02 * s.rec->e2e)
      dp[s.t].push_back(s.raw.dp_sync / s.rec->intra);
  }
  fill_family_table(comp, _cal.compute, kDefaultCompute);
  fill_type_table(dp, _cal.dp, kDefaultComm);
  fill_type_table(pp, _cal.pp, kDefaultComm);
  // Tensor-parallel traffic: what the calibrated synchronization model leaves of the measured intra-stage time.
  for (auto const &s : samples) {
    if (s.raw.tp_comm <= 0)
      continue;
    double const rest = s.rec->intra - s.raw.dp_sync / _cal.dp[s.t];
    if (rest > 0.02 * s.rec->e2e)
      tp[s.t][s.f].push_back(s.raw.tp_comm / rest);
  }
  fill_family_table(tp, _cal.tp, kDefaultComm);
  return _cal;
}

} // namespace tessel::sched

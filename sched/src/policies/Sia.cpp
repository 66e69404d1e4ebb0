// Sia-style scheduling (heterogeneity-aware, adaptive GPU count, data parallelism only): a job's goodput on each
// (GPU type, GPU count) configuration is its data-parallel throughput (memory-checked), normalized as Sia does
// (G = N_min x thr / min thr over the job's feasible configurations) and valued as G^p with Sia's fairness p = 0.5.
// Whenever jobs arrive or GPUs free up, the pending jobs (FIFO, none blocks another) first get their minimum GPU
// count on the type where that is worth most, as long as it can be placed; the GPUs left are then handed out by
// doubling, each time to the newly placed job with the largest gain in G^p per added GPU, up to 16 GPUs. Running
// jobs are never re-allocated (non-preemptive, as Arena's Sia baseline). Batch-size tuning is off (as in Arena).
// Simplified against Sia: the mixed-integer program over all jobs and configurations is replaced by this greedy
// water-filling over the jobs waiting in a round; the throughput model is the profile (or estimator) itself rather
// than Sia's bootstrapped, online-refined model.

#include "../impl/Policies.hpp"
#include "../impl/PolicyHelpers.hpp"

#include <array>
#include <cmath>
#include <unordered_map>

namespace tessel::sched::Impl {

namespace {

constexpr int kMaxGpus = 16;
constexpr double kFairness = 0.5; // Sia's p

class Sia final : public Policy {
public:
  explicit Sia(PolicyOptions const &) {}
  std::string name() const override { return "sia"; }

  void schedule(SchedContext &ctx) override {
    for (int j : ctx.evicted())
      insert_by_priority(_pending, ctx.jobs(), j);
    for (int id : ctx.arrived()) {
      if (!profile(ctx, id).any) {
        ctx.reject(id, "data parallelism does not fit in memory on up to 16 GPUs of any type");
        continue;
      }
      _pending.push_back(id);
    }
    if (_pending.empty() ||
        (ctx.arrived().empty() && ctx.ended().empty() && ctx.evicted().empty() && ctx.repaired().empty()))
      return;
    allocate(ctx);
  }

private:
  struct Profile {
    bool any = false;
    // value[type][k] = G^p for 2^k GPUs, or -1 when infeasible
    std::vector<std::array<double, 5>> value;
  };

  Profile const &profile(SchedContext &ctx, int id) {
    auto it = _profiles.find(id);
    if (it != _profiles.end())
      return it->second;
    auto const &j = ctx.job(id);
    int const T = ctx.cluster().num_types();
    Profile p;
    p.value.assign(static_cast<std::size_t>(T), {-1, -1, -1, -1, -1});
    std::vector<std::array<double, 5>> thr(static_cast<std::size_t>(T), {0, 0, 0, 0, 0});
    int n_min = 1 << 30;
    double min_thr = 0;
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < 5; ++k) {
        int const n = 1 << k;
        if (n > ctx.cluster().type_gpus(t))
          continue;
        Layout const l = best_layout(n, ctx.cluster().type_capacity(t));
        double const v = ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, t, l.hosts, l.per_host, true);
        if (v > 0) {
          thr[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)] = v;
          n_min = std::min(n_min, n);
          min_thr = p.any ? std::min(min_thr, v) : v;
          p.any = true;
        }
      }
    if (p.any)
      for (int t = 0; t < T; ++t)
        for (int k = 0; k < 5; ++k) {
          double const v = thr[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)];
          if (v > 0)
            p.value[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)] =
                std::pow(n_min * v / min_thr, kFairness);
        }
    return _profiles.emplace(id, std::move(p)).first->second;
  }

  // Best locality, else fewer GPUs per node while the DP plan stays feasible.
  bool place(SchedContext &ctx, Allocation &alloc, int id, int type, int gpus) const {
    auto const &j = ctx.job(id);
    Layout l = best_layout(gpus, ctx.cluster().type_capacity(type));
    while (true) {
      if (!(ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, type, l.hosts, l.per_host, true) > 0))
        return false;
      if (place_scatter(alloc, id, type, l))
        return true;
      if (l.per_host == 1)
        return false;
      l.per_host /= 2;
      l.hosts = gpus / l.per_host;
    }
  }

  void allocate(SchedContext &ctx) {
    Allocation alloc = ctx.alloc();
    int const T = ctx.cluster().num_types();
    struct Placed {
      int job, type, k;
      bool frozen;
    };
    std::vector<Placed> placed;
    std::vector<int> still;
    // Every waiting job gets its smallest feasible count on the type where it is worth most and can be placed.
    for (int id : _pending) {
      auto const &p = profile(ctx, id);
      int best_t = -1, best_k = -1;
      double best = -1;
      for (int t = 0; t < T; ++t)
        for (int k = 0; k < 5; ++k) {
          double const v = p.value[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)];
          if (v < 0)
            continue;
          if (v > best && alloc.free_of_type(t) >= (1 << k)) {
            Allocation probe = alloc;
            if (place(ctx, probe, id, t, 1 << k)) {
              best = v;
              best_t = t;
              best_k = k;
            }
          }
          break; // only the smallest feasible count of each type
        }
      if (best_t < 0) {
        still.push_back(id);
        continue;
      }
      place(ctx, alloc, id, best_t, 1 << best_k);
      placed.push_back({id, best_t, best_k, false});
    }
    // Water-filling: double the placed job with the largest gain per added GPU while GPUs remain.
    while (!placed.empty()) {
      int pick = -1;
      double best = 0;
      for (std::size_t i = 0; i < placed.size(); ++i) {
        auto const &pl = placed[i];
        if (pl.frozen || pl.k >= 4 || (1 << (pl.k + 1)) > kMaxGpus)
          continue;
        auto const &p = profile(ctx, pl.job);
        double const cur = p.value[static_cast<std::size_t>(pl.type)][static_cast<std::size_t>(pl.k)];
        double const next = p.value[static_cast<std::size_t>(pl.type)][static_cast<std::size_t>(pl.k + 1)];
        if (next < 0 || alloc.free_of_type(pl.type) < (1 << pl.k))
          continue;
        double const gain = (next - cur) / (1 << pl.k);
        if (gain > best) {
          best = gain;
          pick = static_cast<int>(i);
        }
      }
      if (pick < 0)
        break;
      auto &pl = placed[static_cast<std::size_t>(pick)];
      Allocation trial = alloc;
      trial.release(pl.job);
      if (place(ctx, trial, pl.job, pl.type, 1 << (pl.k + 1))) {
        alloc = std::move(trial);
        ++pl.k;
      } else {
        pl.frozen = true; // cannot grow here (fragmentation)
      }
    }
    ctx.alloc() = alloc;
    for (auto const &pl : placed)
      ctx.start(pl.job);
    _pending.swap(still);
  }

  std::vector<int> _pending;
  std::unordered_map<int, Profile> _profiles;
};

} // namespace

std::unique_ptr<Policy> make_sia(PolicyOptions const &options) { return std::make_unique<Sia>(options); }

} // namespace tessel::sched::Impl

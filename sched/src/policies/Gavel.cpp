// Gavel (heterogeneity-aware, rigid jobs) as Arena runs it (baselines/gavel_sched.py): Gavel's max-sum-throughput
// policy decides, whenever a job is admitted, the GPU type of every admitted job from their data-parallel
// throughputs on each type (best locality), with per-type GPU totals as capacity and at most three already admitted
// jobs changing type; jobs keep their requested GPU count. Placement scatters each job over the nodes with the most
// free GPUs, relaxing locality (fewer GPUs per node) when needed. Pending jobs retry when a job ends, FIFO with the
// queue of a GPU type blocked by its first failure.
// Simplified against Gavel: no time-sharing rounds or lease-based preemption (Arena's variant is admission-time
// only), no space sharing; the ILP is solved exactly by move-class enumeration (TypeAssignment.hpp).

#include "../impl/Policies.hpp"
#include "../impl/PolicyHelpers.hpp"

#include <tessel/sched/TypeAssignment.hpp>

namespace tessel::sched::Impl {

namespace {

constexpr int kMaxMoves = 3; // Arena's MAX_MGRT_JOB_NUM

class Gavel final : public Policy {
public:
  explicit Gavel(PolicyOptions const &) {}
  std::string name() const override { return "gavel"; }

  void schedule(SchedContext &ctx) override {
    // Admitted jobs that ended (or lost their node) leave the allocation matrix.
    _admitted.erase(std::remove_if(_admitted.begin(), _admitted.end(),
                                   [&](Admitted const &a) { return ctx.job(a.job).state != JobState::running; }),
                    _admitted.end());
    requeue_and_restart(ctx, _pending, [&](int id) { return fit(ctx, id); });
    admit_arrivals(
        ctx, _pending, [&](int id) { return rejection(ctx, id); }, [&](int id) { return fit(ctx, id); });
  }

private:
  // Why an arriving job is rejected; empty when it is admitted.
  std::string rejection(SchedContext &ctx, int id) const {
    auto const &j = ctx.job(id);
    bool any_plan = false, any_dp = false;
    for (int t = 0; t < ctx.cluster().num_types(); ++t) {
      if (ctx.cluster().type_gpus(t) < j.quota_gpus)
        continue;
      Layout const l = best_layout(j.quota_gpus, ctx.cluster().type_capacity(t));
      any_plan =
          any_plan || ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, t, l.hosts, l.per_host, false) > 0;
      any_dp = any_dp || dp_thr(ctx, id, t) > 0;
    }
    if (!any_plan)
      return "no feasible plan for " + std::to_string(j.quota_gpus) + " GPUs of any type";
    if (!any_dp && !ctx.arena_compat())
      return "data parallelism does not fit in memory on " + std::to_string(j.quota_gpus) +
             " GPUs of any type (Gavel schedules with DP throughput)";
    return {};
  }
  struct Admitted {
    int job;
    int gpus;
    int type; // type in the allocation matrix
  };

  double dp_thr(SchedContext &ctx, int id, int type) const {
    auto const &j = ctx.job(id);
    Layout const l = best_layout(j.quota_gpus, ctx.cluster().type_capacity(type));
    return ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, type, l.hosts, l.per_host, true);
  }

  // Best locality, else halve the GPUs per node while the DP plan stays feasible (Arena's relaxed placement).
  bool place(SchedContext &ctx, Allocation &alloc, int id, int type) const {
    auto const &j = ctx.job(id);
    int const gpus = j.quota_gpus;
    Layout l = best_layout(gpus, ctx.cluster().type_capacity(type));
    if (!(ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, type, l.hosts, l.per_host, true) > 0))
      return false;
    if (place_scatter(alloc, id, type, l))
      return true;
    while (l.per_host > 1) {
      l.per_host /= 2;
      l.hosts = gpus / l.per_host;
      if (!(ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, type, l.hosts, l.per_host, true) > 0))
        return false;
      if (place_scatter(alloc, id, type, l))
        return true;
    }
    return false;
  }

  bool fit(SchedContext &ctx, int target) {
    int const T = ctx.cluster().num_types();
    TypeAssignmentProblem p;
    for (int t = 0; t < T; ++t) {
      int cap = 0;
      for (int n : ctx.cluster().type_nodes(t))
        cap += ctx.alloc().node_down(n) ? 0 : ctx.cluster().node_capacity(n);
      p.capacity.push_back(cap);
    }
    for (auto const &a : _admitted) {
      p.gpus.push_back(a.gpus);
      p.current.push_back(a.type);
      bool const settling = still_settling(ctx, ctx.job(a.job)); // it keeps its type
      std::vector<double> row;
      for (int t = 0; t < T; ++t)
        row.push_back(settling && t != a.type ? kInfeasible : dp_thr(ctx, a.job, t));
      p.value.push_back(std::move(row));
    }
    p.new_gpus = ctx.job(target).quota_gpus;
    for (int t = 0; t < T; ++t)
      p.new_value.push_back(dp_thr(ctx, target, t));
    p.max_moves = _admitted.empty() ? 0 : kMaxMoves;
    TypeAssignment const sol = solve_type_assignment(p);
    if (!sol.feasible || sol.objective == 0)
      return false;
    // Arena records the new matrix before placing; a failed placement keeps the other jobs' new types there.
    std::vector<Admitted> const before = _admitted;
    for (auto const &[k, type] : sol.moves)
      _admitted[static_cast<std::size_t>(k)].type = type;
    Allocation alloc = ctx.alloc();
    for (auto const &mv : sol.moves)
      alloc.release(_admitted[static_cast<std::size_t>(mv.first)].job);
    bool ok = true;
    for (auto const &mv : sol.moves)
      ok = ok && place(ctx, alloc, _admitted[static_cast<std::size_t>(mv.first)].job, mv.second);
    ok = ok && place(ctx, alloc, target, sol.new_type);
    if (!ok) {
      if (!ctx.arena_compat())
        _admitted = before;
      return false;
    }
    ctx.alloc() = alloc;
    _admitted.push_back({target, ctx.job(target).quota_gpus, sol.new_type});
    return true;
  }

  std::vector<Admitted> _admitted;
  std::vector<int> _pending;
};

} // namespace

std::unique_ptr<Policy> make_gavel(PolicyOptions const &options) { return std::make_unique<Gavel>(options); }

} // namespace tessel::sched::Impl

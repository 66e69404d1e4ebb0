// ElasticFlow-style elastic data parallelism, as Arena runs it ("ElasticFlow-LS", baselines/elasticflow_sched.py
// with deadlines loosened to 1e9 s): jobs keep their requested GPU type; admission gives every job of that type its
// minimum satisfactory share (the fewest GPUs, doubling from 1, on which its data-parallel plan fits in memory);
// the remaining GPUs of the type go, one doubling at a time, to the job whose DP throughput gains most; then every
// job of the type is re-placed buddy-style (multi-node jobs on whole nodes first, the rest packed node by node).
// Simplified: ElasticFlow's deadline-driven admission (and its drops) is not modelled; only elastic DP remains.

#include "../impl/Policies.hpp"
#include "../impl/PolicyHelpers.hpp"

#include <tessel/core/Error.hpp>

namespace tessel::sched::Impl {

namespace {

constexpr int kMaxGpus = 16; // Arena's MAX_SUPPORTED_GPU_NUM

class ElasticFlow final : public Policy {
public:
  explicit ElasticFlow(PolicyOptions const &) {}
  std::string name() const override { return "elasticflow"; }

  void schedule(SchedContext &ctx) override {
    requeue_and_restart(ctx, _pending, [&](int id) { return fit(ctx, id); });
    admit_arrivals(
        ctx, _pending, [&](int id) { return rejection(ctx, id); }, [&](int id) { return fit(ctx, id); });
  }

private:
  // Why an arriving job is rejected; empty when it is admitted.
  std::string rejection(SchedContext &ctx, int id) const {
    if (ctx.arena_compat() || min_share(ctx, id) != 0)
      return {};
    return "data parallelism does not fit in " + ctx.cluster().type(ctx.job(id).quota_type).name +
           " memory on up to 16 GPUs";
  }
  // Fewest GPUs (1, 2, 4, ... 16) on which the job's DP plan is feasible; 0 if none.
  int min_share(SchedContext &ctx, int id) const {
    auto const &j = ctx.job(id);
    int const cap = ctx.cluster().type_capacity(j.quota_type);
    for (int n = 1; n <= kMaxGpus; n *= 2) {
      Layout const l = best_layout(n, cap);
      if (ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, j.quota_type, l.hosts, l.per_host, true) > 0)
        return n;
    }
    return 0;
  }

  double dp_thr(SchedContext &ctx, int id, int n) const {
    auto const &j = ctx.job(id);
    Layout const l = best_layout(n, ctx.cluster().type_capacity(j.quota_type));
    return ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, j.quota_type, l.hosts, l.per_host, true);
  }

  // Arena's _get_delta_thr with data-parallel throughputs.
  double gain(SchedContext &ctx, int id, int from, int to) const {
    double const next = dp_thr(ctx, id, to);
    if (next <= kInfeasible)
      return kInfeasible;
    double const prev = dp_thr(ctx, id, from);
    return prev <= kInfeasible ? next - kInfeasible : next - prev;
  }

  bool fit(SchedContext &ctx, int target) {
    Allocation alloc = ctx.alloc();
    auto const &cluster = ctx.cluster();
    int const type = ctx.job(target).quota_type;
    // Jobs of the type: the target first, then running jobs in start order (Arena's job_list).
    std::vector<int> jobs{target};
    for (int id : _running)
      if (ctx.job(id).state == JobState::running && ctx.job(id).quota_type == type)
        jobs.push_back(id);
    // A job still settling after its last move keeps its GPUs (Arena re-places every job at every admission).
    std::vector<char> settled(jobs.size(), 0);
    int total = 0;
    for (int n : cluster.type_nodes(type))
      if (!alloc.node_down(n))
        total += cluster.node_capacity(n);
    for (std::size_t k = 1; k < jobs.size(); ++k)
      settled[k] = still_settling(ctx, ctx.job(jobs[k]));
    std::vector<int> share(jobs.size());
    if (!admit(ctx, jobs, settled, total, share))
      return false;
    fill(ctx, jobs, settled, total, share);
    if (!place(ctx, alloc, type, jobs, settled, share))
      return false;
    ctx.alloc() = alloc;
    _running.erase(std::remove_if(_running.begin(), _running.end(),
                                  [&](int id) { return ctx.job(id).state != JobState::running || id == target; }),
                   _running.end());
    _running.push_back(target);
    return true;
  }

  // Admission: every job's minimum satisfactory share must fit (deadlines are loose, so in admission order);
  // \p total becomes the GPUs left after the shares.
  bool admit(SchedContext &ctx, std::vector<int> const &jobs, std::vector<char> const &settled, int &total,
             std::vector<int> &share) {
    // Arena sorts by deadline; loosened deadlines equal submission + 1e9, i.e. submission order.
    std::vector<std::size_t> order(jobs.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return ctx.job(jobs[a]).submit_time < ctx.job(jobs[b]).submit_time;
    });
    for (std::size_t k : order) {
      int const m = settled[k] ? ctx.job(jobs[k]).quota_gpus : min_share(ctx, jobs[k]);
      if (m == 0 || m > total)
        return false;
      total -= m;
      share[k] = m;
    }
    return true;
  }

  // Progressive filling: double the job with the largest throughput gain while GPUs remain.
  void fill(SchedContext &ctx, std::vector<int> const &jobs, std::vector<char> const &settled, int total,
            std::vector<int> &share) {
    while (total > 0) {
      double best = kInfeasible;
      int pick = -1;
      for (std::size_t k = 0; k < jobs.size(); ++k) {
        if (settled[k] || share[k] > total || share[k] >= kMaxGpus)
          continue;
        double const g = gain(ctx, jobs[k], share[k], 2 * share[k]);
        if (g > best) {
          best = g;
          pick = static_cast<int>(k);
        }
      }
      if (pick < 0)
        break;
      total -= share[static_cast<std::size_t>(pick)];
      share[static_cast<std::size_t>(pick)] *= 2;
    }
  }

  // Re-places every job of the type that is not settled: largest first; multi-node jobs take whole nodes in node
  // order, the rest are packed into the remaining nodes in order. False when a settled job's GPUs left no room.
  bool place(SchedContext &ctx, Allocation &alloc, int type, std::vector<int> const &jobs,
             std::vector<char> const &settled, std::vector<int> const &share) {
    auto const &cluster = ctx.cluster();
    std::vector<std::size_t> order(jobs.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return share[a] > share[b]; });
    for (std::size_t k = 1; k < jobs.size(); ++k)
      if (!settled[k])
        alloc.release(jobs[k]);
    std::vector<int> nodes;
    for (int n : cluster.type_nodes(type))
      if (!alloc.node_down(n))
        nodes.push_back(n);
    int const cap = cluster.type_capacity(type);
    std::vector<char> placed(settled.begin(), settled.end());
    std::vector<char> whole(nodes.size(), 0); // taken whole by a multi-node job
    auto take = [&](int node, int job, int count) {
      int got = 0;
      for (int g = cluster.node_first_gpu(node); g < cluster.node_first_gpu(node) + cap && got < count; ++g)
        if (alloc.owner(g) == kFree) {
          alloc.assign(g, job);
          ++got;
        }
    };
    for (std::size_t k : order) {
      if (share[k] <= cap)
        break;
      if (placed[k])
        continue;
      std::vector<std::size_t> free_nodes;
      for (std::size_t ni = 0; ni < nodes.size() && static_cast<int>(free_nodes.size()) < share[k] / cap; ++ni)
        if (!whole[ni] && alloc.free_on_node(nodes[ni]) == cap)
          free_nodes.push_back(ni);
      if (static_cast<int>(free_nodes.size()) < share[k] / cap)
        continue;
      for (std::size_t ni : free_nodes) {
        whole[ni] = 1;
        take(nodes[ni], jobs[k], cap);
      }
      placed[k] = 1;
    }
    for (std::size_t ni = 0; ni < nodes.size(); ++ni) {
      if (whole[ni])
        continue;
      for (std::size_t k : order) {
        if (alloc.free_on_node(nodes[ni]) == 0)
          break;
        if (!placed[k] && share[k] <= alloc.free_on_node(nodes[ni])) {
          take(nodes[ni], jobs[k], share[k]);
          placed[k] = 1;
        }
      }
    }
    bool const any_settled = std::find(settled.begin(), settled.end(), 1) != settled.end();
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      if (!placed[k] && any_settled)
        return false; // the settled jobs' GPUs left no room of this shape: the target waits
      TESSEL_REQUIRE(placed[k], "elasticflow: buddy placement left job ", ctx.job(jobs[k]).spec->id, " unplaced");
    }
    return true;
  }

  std::vector<int> _pending;
  std::vector<int> _running; // running jobs in start order (Arena's running queue)
};

} // namespace

std::unique_ptr<Policy> make_elasticflow(PolicyOptions const &options) {
  return std::make_unique<ElasticFlow>(options);
}

} // namespace tessel::sched::Impl

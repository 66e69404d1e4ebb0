// FCFS as in Arena's baselines/fcfs_sched.py: each job runs on exactly the GPUs it requested, on its best locality
// (one node, or full nodes), scattered over the nodes with the most free GPUs; strict first-come-first-served per
// GPU type (a job waits while an earlier job of its type waits); pending jobs are retried only when a job ends.

#include "../impl/Policies.hpp"
#include "../impl/PolicyHelpers.hpp"

namespace tessel::sched::Impl {

namespace {

class Fcfs final : public Policy {
public:
  explicit Fcfs(PolicyOptions const &) {}
  std::string name() const override { return "fcfs"; }

  void schedule(SchedContext &ctx) override {
    auto &jobs = ctx.jobs();
    requeue_and_restart(ctx, _pending, [&](int id) {
      auto const &j = ctx.job(id);
      return place_scatter(ctx.alloc(), id, j.quota_type,
                           best_layout(j.quota_gpus, ctx.cluster().type_capacity(j.quota_type)));
    });
    for (int id : ctx.arrived()) {
      auto const &j = jobs[static_cast<std::size_t>(id)];
      Layout const layout = best_layout(j.quota_gpus, ctx.cluster().type_capacity(j.quota_type));
      // Arena drops a job whose requested allocation has no plan at all (it cannot be scaled).
      if (!(ctx.oracle().data_parallel(j.spec->model, j.spec->batch_size, j.quota_type, layout.hosts, layout.per_host,
                                       /*check_memory=*/false) > 0)) {
        ctx.reject(id, "no feasible plan for " + describe(ctx.cluster(), j.quota_type, j.quota_gpus) +
                           " (FCFS neither scales nor changes the GPU type)");
        continue;
      }
      bool const blocked = std::any_of(_pending.begin(), _pending.end(), [&](int p) {
        return jobs[static_cast<std::size_t>(p)].quota_type == j.quota_type;
      });
      if (!blocked && place_scatter(ctx.alloc(), id, j.quota_type, layout))
        ctx.start(id);
      else
        _pending.push_back(id);
    }
  }

private:
  std::vector<int> _pending;
};

} // namespace

std::unique_ptr<Policy> make_fcfs(PolicyOptions const &options) { return std::make_unique<Fcfs>(options); }

} // namespace tessel::sched::Impl

#ifndef TESSEL_SCHED_IMPL_POLICYHELPERS_HPP
#define TESSEL_SCHED_IMPL_POLICYHELPERS_HPP

// Helpers shared by the policies: layouts, scatter placement, and queue ordering.

#include <tessel/sched/SchedContext.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace tessel::sched::Impl {

/// A node layout: hosts x per_host GPUs.
struct Layout {
  int hosts = 1;
  int per_host = 1;
  int gpus() const { return hosts * per_host; }
  friend bool operator==(Layout a, Layout b) { return a.hosts == b.hosts && a.per_host == b.per_host; }
};

/// Arena's best locality: one node when the GPUs fit on one, else full nodes.
inline Layout best_layout(int gpus, int node_capacity) {
  if (node_capacity <= 0 || gpus <= node_capacity)
    return {1, gpus};
  return {gpus / node_capacity, node_capacity};
}

/// Places \p job on `layout` GPUs of \p type in \p alloc the way Arena's baselines do: candidate nodes (in node
/// order) with at least per_host free GPUs, sorted by free GPUs, most first (stable), the first `hosts` of them,
/// and on each node its first per_host free GPUs. Returns false (alloc unchanged) when too few nodes qualify.
bool place_scatter(Allocation &alloc, int job, int type, Layout layout);

/// Nodes of \p type with at least \p need free GPUs, most free first (stable in node order).
std::vector<int> nodes_with_free(Allocation const &alloc, int type, int need);

/// With exact accounting: \p job has not progressed since it last got new GPUs (or still owes re-tuning or restart
/// time), so moving it again would make it pay once more before earning anything; a job moved that way every round
/// or two never progresses. False under --arena-compat, whose policies move such jobs as Arena does.
inline bool still_settling(SchedContext const &ctx, JobRecord const &job) {
  return !ctx.arena_compat() && (job.stalled_rounds > 0 || job.overhead > 0);
}

/// Inserts \p job into \p queue after every job submitted no later (FIFO by submission round, then id).
void insert_by_priority(std::vector<int> &queue, std::vector<JobRecord> const &jobs, int job);

/// Starts the jobs of \p pending in queue order when \p fit(job) places them (fit allocates; it returns false and
/// changes nothing when the job does not fit); once a job of a GPU type does not fit, the later jobs of that type
/// wait too (Arena's restart rule for its FIFO baselines). The jobs left waiting stay in \p pending in order.
template <class Fit> void restart_pending_fifo(SchedContext &ctx, std::vector<int> &pending, Fit &&fit) {
  std::vector<int> blocked_types, still;
  for (int id : pending) {
    int const type = ctx.job(id).quota_type;
    if (std::find(blocked_types.begin(), blocked_types.end(), type) != blocked_types.end()) {
      still.push_back(id);
      continue;
    }
    if (fit(id)) {
      ctx.start(id);
    } else {
      blocked_types.push_back(type);
      still.push_back(id);
    }
  }
  pending.swap(still);
}

/// The start of a round of Arena's FIFO baselines: the jobs evicted this round rejoin \p pending by priority, and
/// when a job ended or was evicted the pending jobs retry through \p fit (restart_pending_fifo).
template <class Fit> void requeue_and_restart(SchedContext &ctx, std::vector<int> &pending, Fit &&fit) {
  for (int j : ctx.evicted())
    insert_by_priority(pending, ctx.jobs(), j);
  if (!ctx.ended().empty() || !ctx.evicted().empty() || !ctx.repaired().empty())
    restart_pending_fifo(ctx, pending, fit);
}

/// Each job arriving this round is rejected when \p rejection(job) gives a reason (non-empty), else started when
/// \p fit(job) places it, else queued at the end of \p pending.
template <class Rejection, class Fit>
void admit_arrivals(SchedContext &ctx, std::vector<int> &pending, Rejection &&rejection, Fit &&fit) {
  for (int id : ctx.arrived()) {
    std::string reason = rejection(id);
    if (!reason.empty())
      ctx.reject(id, std::move(reason));
    else if (fit(id))
      ctx.start(id);
    else
      pending.push_back(id);
  }
}

/// Layout of a running job from its quota.
inline Layout quota_layout(JobRecord const &j) { return {j.quota_hosts, j.quota_per_host}; }

std::string describe(Cluster const &cluster, int type, int gpus);

} // namespace tessel::sched::Impl

#endif

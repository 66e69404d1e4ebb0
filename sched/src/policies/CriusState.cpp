// Crius's search state: an indexed copy of the cluster (owner and idle status per GPU, idle count per node) and
// the facts of a job in a state, computed in one pass where Arena rescans its tables per query.

#include "../impl/Crius.hpp"

#include <tessel/core/Error.hpp>

namespace tessel::sched::Impl::crius {

Crs Crius::live() const {
  Crs c;
  auto const &alloc = _ctx->alloc();
  c.owner = alloc.owners();
  c.idle.resize(c.owner.size());
  c.bubbles.assign(static_cast<std::size_t>(_cluster->num_nodes()), 0);
  for (std::size_t g = 0; g < c.owner.size(); ++g) {
    c.idle[g] = c.owner[g] == kFree;
    if (c.idle[g])
      ++c.bubbles[static_cast<std::size_t>(_cluster->gpu_node(static_cast<int>(g)))];
  }
  return c;
}

// Writes a decision into the live allocation.
void Crius::apply(Crs const &c) {
  auto &alloc = _ctx->alloc();
  for (std::size_t g = 0; g < c.owner.size(); ++g) {
    TESSEL_REQUIRE(!is_fake(c.owner[g]) && (c.owner[g] == kDown || !c.idle[g] || c.owner[g] == kEmpty),
                   "crius: decision holds a reserved or virtual GPU");
    int const cur = alloc.owner(static_cast<int>(g));
    if (cur >= 0 && cur != c.owner[g])
      alloc.release_gpu(static_cast<int>(g));
  }
  for (std::size_t g = 0; g < c.owner.size(); ++g)
    if (c.owner[g] >= 0 && alloc.owner(static_cast<int>(g)) != c.owner[g])
      alloc.assign(static_cast<int>(g), c.owner[g]);
}

// Arena's _update_run_jobs: running jobs' quotas from the live allocation.
void Crius::update_run_jobs() {
  auto &jobs = _ctx->jobs();
  auto const &owners = _ctx->alloc().owners();
  std::vector<int> count(jobs.size(), 0), nodes(jobs.size(), 0), last(jobs.size(), -1);
  for (std::size_t g = 0; g < owners.size(); ++g) {
    int const o = owners[g];
    if (o < 0)
      continue;
    int const node = _cluster->gpu_node(static_cast<int>(g));
    auto const oi = static_cast<std::size_t>(o);
    ++count[oi];
    if (last[oi] != node) {
      last[oi] = node;
      ++nodes[oi];
    }
    jobs[oi].quota_type = _cluster->node_type(node);
  }
  for (int id : _running) {
    auto &j = jobs[static_cast<std::size_t>(id)];
    auto const i = static_cast<std::size_t>(id);
    TESSEL_REQUIRE(count[i] > 0, "crius: running job ", j.spec->id, " holds no GPU");
    j.quota_gpus = count[i];
    j.quota_hosts = nodes[i];
    j.quota_per_host = count[i] / nodes[i];
  }
}

// Arena's _get_job_rt_stat: from the state when the job holds GPUs there, else from its quota.
Stat Crius::stat(Crs const &c, int job, Quota const &q) const {
  Stat s;
  int last = -1;
  for (std::size_t g = 0; g < c.owner.size(); ++g) {
    if (c.owner[g] != job)
      continue;
    int const node = _cluster->gpu_node(static_cast<int>(g));
    if (s.type < 0)
      s.type = _cluster->node_type(node);
    ++s.num;
    if (node != last) {
      s.nodes.push_back(node);
      last = node;
    }
  }
  if (s.type < 0)
    s.type = q.type;
  if (s.num == 0)
    s.num = q.num;
  int const cap = _cluster->type_capacity(s.type);
  s.hosts = s.nodes.empty() ? std::max(1, s.num / cap) : static_cast<int>(s.nodes.size());
  s.per_host = s.num / s.hosts;
  return s;
}

bool Crius::clear_placement(Crs &c, int job) const {
  bool modified = false;
  for (std::size_t g = 0; g < c.owner.size(); ++g)
    if (c.owner[g] == job) {
      free_gpu(c, static_cast<int>(g));
      modified = true;
    }
  return modified;
}

bool Crius::sufficient(Crs const &c, int type, int num) const {
  int n = 0;
  for (int node : _cluster->type_nodes(type)) {
    n += c.bubbles[static_cast<std::size_t>(node)];
    if (n >= num)
      return true;
  }
  return false;
}

// Nodes holding `job` in a state, in node order.
std::vector<int> Crius::nodes_of(Crs const &c, int job) const {
  std::vector<int> nodes;
  for (std::size_t g = 0; g < c.owner.size(); ++g)
    if (c.owner[g] == job) {
      int const node = _cluster->gpu_node(static_cast<int>(g));
      if (nodes.empty() || nodes.back() != node)
        nodes.push_back(node);
    }
  return nodes;
}

StatIndex Crius::index_stats(Crs const &c) const {
  StatIndex idx;
  std::vector<int> &slot = _slot_scratch;
  slot.assign(_ctx->jobs().size(), -1);
  for (std::size_t g = 0; g < c.owner.size(); ++g) {
    int const o = c.owner[g];
    if (o < 0)
      continue;
    int const node = _cluster->gpu_node(static_cast<int>(g));
    int &sl = slot[static_cast<std::size_t>(o)];
    if (sl < 0) {
      sl = static_cast<int>(idx.jobs.size());
      idx.jobs.push_back(o);
      idx.stats.push_back(Stat{_cluster->node_type(node), 0, 0, 0, {}});
    }
    Stat &s = idx.stats[static_cast<std::size_t>(sl)];
    ++s.num;
    if (s.nodes.empty() || s.nodes.back() != node)
      s.nodes.push_back(node);
  }
  for (auto &s : idx.stats) {
    s.hosts = static_cast<int>(s.nodes.size());
    s.per_host = s.num / s.hosts;
  }
  return idx;
}

Stat Crius::stat_from(StatIndex const &idx, int job, Quota const &q) const {
  if (Stat const *s = idx.find(job))
    return *s;
  Stat s;
  s.type = q.type;
  s.num = q.num;
  s.hosts = std::max(1, s.num / _cluster->type_capacity(s.type));
  s.per_host = s.num / s.hosts;
  return s;
}

} // namespace tessel::sched::Impl::crius

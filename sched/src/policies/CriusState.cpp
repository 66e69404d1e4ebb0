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
namespace {

// Calls f(g) for every GPU g that \p job owns in \p c, in GPU order; blocks of GPUs without one are skipped by a
// vectorizable count.
template <class F> void for_gpus_of(Crs const &c, int job, F &&f) {
  constexpr std::size_t kBlock = 64;
  std::size_t const n = c.owner.size();
  int const *own = c.owner.data();
  for (std::size_t base = 0; base < n; base += kBlock) {
    std::size_t const end = std::min(n, base + kBlock);
    int hits = 0;
    for (std::size_t g = base; g < end; ++g)
      hits += own[g] == job;
    if (hits == 0)
      continue;
    for (std::size_t g = base; g < end; ++g)
      if (own[g] == job)
        f(static_cast<int>(g));
  }
}

} // namespace

Stat Crius::stat(Crs const &c, int job, Quota const &q) const {
  Stat s;
  int last = -1;
  for_gpus_of(c, job, [&](int g) {
    int const node = _cluster->gpu_node(g);
    if (s.type < 0)
      s.type = _cluster->node_type(node);
    ++s.num;
    if (node != last) {
      s.nodes.push_back(node);
      last = node;
    }
  });
  if (s.type < 0)
    s.type = q.type;
  if (s.num == 0)
    s.num = q.num;
  int const cap = _cluster->type_capacity(s.type);
  s.hosts = s.nodes.empty() ? std::max(1, s.num / cap) : static_cast<int>(s.nodes.size());
  s.per_host = s.num / s.hosts;
  return s;
}

// stat() of a job holding no GPU in the state.
Stat Crius::quota_stat(Quota const &q) const {
  Stat s;
  s.type = q.type;
  s.num = q.num;
  s.hosts = std::max(1, s.num / _cluster->type_capacity(s.type));
  s.per_host = s.num / s.hosts;
  return s;
}

// clear_placement() of a job all of whose GPUs lie on \p nodes.
void Crius::clear_on_nodes(Crs &c, int job, std::vector<int> const &nodes) const {
  for (int node : nodes) {
    int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
    for (int g = first; g < first + cap; ++g)
      if (c.owner[static_cast<std::size_t>(g)] == job)
        free_gpu(c, g);
  }
}

bool Crius::clear_placement(Crs &c, int job) const {
  bool modified = false;
  for_gpus_of(c, job, [&](int g) {
    free_gpu(c, g);
    modified = true;
  });
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
  for_gpus_of(c, job, [&](int g) {
    int const node = _cluster->gpu_node(g);
    if (nodes.empty() || nodes.back() != node)
      nodes.push_back(node);
  });
  return nodes;
}

// All jobs' facts in one pass over \p c; \p idx keeps its storage (no allocation once warm).
void Crius::index_stats(Crs const &c, StatIndex &idx) const {
  std::size_t const njobs = _ctx->jobs().size();
  if (idx.slot.size() != njobs)
    idx.slot.assign(njobs, -1);
  else
    for (int j : idx.jobs)
      idx.slot[static_cast<std::size_t>(j)] = -1;
  idx.jobs.clear();
  idx.running.clear();
  idx.multi_type = false;
  // Node by node, a run of GPUs of one owner at a time (the same facts and orders as GPU by GPU).
  for (int node = 0, nn = _cluster->num_nodes(); node < nn; ++node) {
    int const first = _cluster->node_first_gpu(node), last = first + _cluster->node_capacity(node);
    int const type = _cluster->node_type(node);
    for (int g = first; g < last;) {
      int const o = c.owner[static_cast<std::size_t>(g)];
      int h = g + 1;
      while (h < last && c.owner[static_cast<std::size_t>(h)] == o)
        ++h;
      if (o < 0) {
        g = h;
        continue;
      }
      int &sl = idx.slot[static_cast<std::size_t>(o)];
      if (sl < 0) {
        sl = static_cast<int>(idx.jobs.size());
        idx.jobs.push_back(o);
        if (idx.stats.size() < idx.jobs.size())
          idx.stats.emplace_back();
        if (idx.listed.size() < idx.jobs.size())
          idx.listed.push_back(0);
        Stat &s = idx.stats[static_cast<std::size_t>(sl)];
        s.type = type;
        s.num = 0;
        s.nodes.clear();
        idx.listed[static_cast<std::size_t>(sl)] = 0;
      }
      auto const si = static_cast<std::size_t>(sl);
      Stat &s = idx.stats[si];
      s.num += h - g;
      if (s.nodes.empty() || s.nodes.back() != node) {
        s.nodes.push_back(node);
        idx.multi_type = idx.multi_type || type != s.type;
      }
      if (!idx.listed[si])
        for (int k = g; k < h; ++k)
          if (!c.idle[static_cast<std::size_t>(k)]) {
            idx.listed[si] = 1;
            idx.running.push_back(o);
            break;
          }
      g = h;
    }
  }
  for (std::size_t i = 0; i < idx.jobs.size(); ++i) {
    Stat &s = idx.stats[i];
    s.hosts = static_cast<int>(s.nodes.size());
    s.per_host = s.num / s.hosts;
  }
}

// The index of \p c: a recent one when it indexed the same state, else built in the least recently used entry.
StatIndex const &Crius::indexed(Crs const &c) const {
  auto &list = _indexes.entries;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto const &e = list[i];
    if (e.valid && e.owner == c.owner && e.idle == c.idle) {
      std::rotate(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i),
                  list.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return list.front().idx;
    }
  }
  constexpr std::size_t kEntries = 8;
  if (list.size() < kEntries)
    list.emplace_back();
  std::rotate(list.begin(), list.end() - 1, list.end());
  auto &e = list.front();
  e.owner = c.owner;
  e.idle = c.idle;
  index_stats(c, e.idx);
  e.valid = true;
  return e.idx;
}

// A job's facts from the index, or from its quota (in \p fallback) when it holds no GPU in the indexed state.
Stat const &Crius::stat_from(StatIndex const &idx, int job, Quota const &q, Stat &fallback) const {
  if (Stat const *s = idx.find(job))
    return *s;
  fallback.type = q.type;
  fallback.num = q.num;
  fallback.nodes.clear();
  fallback.hosts = std::max(1, fallback.num / _cluster->type_capacity(fallback.type));
  fallback.per_host = fallback.num / fallback.hosts;
  return fallback;
}

} // namespace tessel::sched::Impl::crius

// Crius (Arena's scheduler.py, `--policy crius --sched_with_opt`): round-based, FIFO by submission with
// opportunistic start and reservations; each job is placed on its requested GPU type and count with the best
// locality, defragmenting bubbles (idle GPUs of partially used nodes) by pairwise recursive halving/doubling (RHD)
// migration, relaxing locality when the profile says the job stays feasible; when that fails (or only a relaxed
// placement exists) a bounded breadth-first search over shrink (halve a running job's GPUs) and hardware-type-change
// moves of running jobs, scored by the summed throughput gain ("structured marginal gain"), picks the best plan.
// When jobs end: introspective migration of partially cross-node jobs, a pending-jobs restart trial with the
// resources of lower-priority opportunistic jobs reserved for blockers (conflicting opportunistic jobs are
// suspended), and greedy upgrades (type change or GPU doubling) of running jobs while GPUs are free. Throughputs
// are those of the best parallel plan of each allocation (adaptive parallelism).
//
// The search state is an indexed copy of the cluster (owner and idle status per GPU, idle count per node); per-job
// facts are computed in one pass where Arena rescans its tables per query, RHD migration stops at a fixed point
// (or cycle) instead of repeating up to 256 identical passes, and the upgrade trial prunes moves whose throughput
// gain cannot beat the best found. None of these change a decision.

#include "Common.hpp"
#include "Policies.hpp"

#include <tessel/sched/Model.hpp>

#include <tessel/core/Error.hpp>

#include <cstdint>
#include <unordered_set>

namespace tessel::sched::Impl {

namespace {

constexpr int kGlobalEta = 4096; // Arena's GLOBAL_ETA
constexpr int kLocalEta = 256;   // Arena's LOCAL_ETA
constexpr int kMaxGpus = 16;     // Arena's MAX_SUPPORTED_GPU_NUM
constexpr int kEmpty = -1;
constexpr int kFakeBase = -10; // fake job of type t: kFakeBase - t (Arena's "fake_job_id_<type>")

bool is_fake(int owner) { return owner <= kFakeBase; }
int fake_of(int type) { return kFakeBase - type; }

// Arena's crs_table: per GPU the holder and whether its status is idle. A GPU may be idle and still name a holder:
// the resources of a lower-priority opportunistic job reserved for a blocker.
struct Crs {
  std::vector<int> owner;
  std::vector<char> idle;
  std::vector<int> bubbles; // idle GPUs per node
};

struct Quota {
  int type = -1;
  int num = 0;
};

struct Stat {
  int type = -1, num = 0, hosts = 0, per_host = 0;
  std::vector<int> nodes;
};

struct MigResult {
  bool feasible = false, migrated = false, relaxed = false;
  double gain = kInfeasible;
  int gm = 0;
};

enum class Mod { shrink, htc };
struct ModInfo {
  Mod kind;
  int job;
  int type;            // shrink: GPU type; htc: new type
  int hosts, per_host; // new locality
};

struct SearchPlan {
  Crs crs;
  Quota target;
  double gain = 0;
  int gm = 0;
  std::vector<ModInfo> mdf;
};

class Crius final : public Policy {
public:
  explicit Crius(PolicyOptions const &o) : _opt(o) {}
  std::string name() const override { return "crius"; }
  // Re-tuning with Crius's Cell pruning: 10 s per GPU, at most 40 s (Arena's RESCHED_OVERHEAD_WITH_PRUNE).
  ReschedCost resched_cost() const override { return {10, 40, 0, 400}; }

  void schedule(SchedContext &ctx) override {
    _ctx = &ctx;
    _cluster = &ctx.cluster();
    // Jobs that ended leave the running queue (Arena's _update_and_check_end), in running-queue order.
    std::vector<int> ended;
    for (int id : _running)
      if (ctx.job(id).state == JobState::completed)
        ended.push_back(id);
    for (int id : ctx.evicted())
      if (std::find(_running.begin(), _running.end(), id) != _running.end())
        handle_eviction(id);
    remove_not_running();
    if (!ended.empty() || !ctx.evicted().empty())
      optimize_running_jobs(ended, ctx.arrived().empty());
    if (!ctx.arrived().empty())
      fit_new_jobs(ctx.arrived());
  }

private:
  // ----------------------------------------------------------------------------------------------------------
  // Cluster state
  // ----------------------------------------------------------------------------------------------------------

  Crs live() const {
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

  void set_gpu(Crs &c, int g, int owner, bool idle) const {
    auto const gi = static_cast<std::size_t>(g);
    if (c.idle[gi] != static_cast<char>(idle))
      c.bubbles[static_cast<std::size_t>(_cluster->gpu_node(g))] += idle ? 1 : -1;
    c.idle[gi] = idle;
    c.owner[gi] = owner;
  }
  void use_gpu(Crs &c, int g, int owner) const { set_gpu(c, g, owner, false); }
  void free_gpu(Crs &c, int g) const { set_gpu(c, g, kEmpty, true); }

  // Writes a decision into the live allocation.
  void apply(Crs const &c) {
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
  void update_run_jobs() {
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

  // ----------------------------------------------------------------------------------------------------------
  // Throughput (adaptive parallelism: best plan of each allocation)
  // ----------------------------------------------------------------------------------------------------------

  double thr(int job, int type, int hosts, int per_host) const {
    auto const &j = _ctx->job(job);
    return _ctx->oracle().adaptive(j.spec->model, j.spec->batch_size, type, hosts, per_host);
  }
  bool feasible(int job, int type, int hosts, int per_host) const { return thr(job, type, hosts, per_host) > 0; }

  // Arena's _get_delta_thr.
  double delta(int job, int type, int hosts, int per_host) const {
    double const t = thr(job, type, hosts, per_host);
    return t > 0 ? t : kInfeasible;
  }
  double delta(int job, int type, int hosts, int per_host, int ptype, int phosts, int pper) const {
    double const n = thr(job, type, hosts, per_host);
    if (!(n > 0))
      return kInfeasible;
    double const p = thr(job, ptype, phosts, pper);
    if (!(p > 0))
      return n - kInfeasible;
    return n - p;
  }

  Layout best(int num, int type) const { return best_layout(num, _cluster->type_capacity(type)); }

  // ----------------------------------------------------------------------------------------------------------
  // Job facts in a state
  // ----------------------------------------------------------------------------------------------------------

  Quota registered(int job) const {
    auto const &j = _ctx->job(job);
    return {j.quota_type, j.quota_gpus};
  }

  // Arena's _get_job_rt_stat: from the state when the job holds GPUs there, else from its quota.
  Stat stat(Crs const &c, int job, Quota const &q) const {
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

  int count_of(Crs const &c, int job) const {
    int n = 0;
    for (int o : c.owner)
      n += o == job;
    return n;
  }

  bool clear_placement(Crs &c, int job) const {
    bool modified = false;
    for (std::size_t g = 0; g < c.owner.size(); ++g)
      if (c.owner[g] == job) {
        free_gpu(c, static_cast<int>(g));
        modified = true;
      }
    return modified;
  }

  bool sufficient(Crs const &c, int type, int num) const {
    int n = 0;
    for (int node : _cluster->type_nodes(type)) {
      n += c.bubbles[static_cast<std::size_t>(node)];
      if (n >= num)
        return true;
    }
    return false;
  }

  // Arena's _sort_partial_occ_nodes: partially idle nodes of the type, most bubbles first, cut at the prefix that
  // holds `num` bubbles; and the fully idle nodes in node order.
  void partial_nodes(Crs const &c, int type, int num, std::vector<std::pair<int, int>> &partial,
                     std::vector<int> &idle_nodes) const {
    partial.clear();
    idle_nodes.clear();
    int const cap = _cluster->type_capacity(type);
    for (int node : _cluster->type_nodes(type)) {
      int const b = c.bubbles[static_cast<std::size_t>(node)];
      if (b > 0 && b < cap)
        partial.emplace_back(node, b);
      else if (b == cap)
        idle_nodes.push_back(node);
    }
    std::stable_sort(partial.begin(), partial.end(), [](auto const &a, auto const &b) { return a.second > b.second; });
    int sum = 0;
    for (std::size_t i = 0; i < partial.size(); ++i) {
      sum += partial[i].second;
      if (sum >= num) {
        partial.resize(i + 1);
        break;
      }
    }
  }

  // Arena's _place_job: `num / nodes` GPUs on each node, taken from its idle GPUs or the job's own, in GPU order.
  bool place_job(Crs &c, int job, int num, std::vector<int> const &nodes) const {
    int const per = num / static_cast<int>(nodes.size());
    std::vector<std::vector<int>> blocks;
    for (int node : nodes) {
      std::vector<int> block;
      int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
      for (int g = first; g < first + cap && static_cast<int>(block.size()) < per; ++g)
        if (c.idle[static_cast<std::size_t>(g)] || c.owner[static_cast<std::size_t>(g)] == job)
          block.push_back(g);
      if (static_cast<int>(block.size()) < per)
        return false;
      blocks.push_back(std::move(block));
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      int const first = _cluster->node_first_gpu(nodes[i]), cap = _cluster->node_capacity(nodes[i]);
      for (int g = first; g < first + cap; ++g)
        if (c.owner[static_cast<std::size_t>(g)] == job)
          free_gpu(c, g);
      for (int g : blocks[i])
        use_gpu(c, g, job);
    }
    return true;
  }

  // Nodes holding `job` in a state, in node order.
  std::vector<int> nodes_of(Crs const &c, int job) const {
    std::vector<int> nodes;
    for (std::size_t g = 0; g < c.owner.size(); ++g)
      if (c.owner[g] == job) {
        int const node = _cluster->gpu_node(static_cast<int>(g));
        if (nodes.empty() || nodes.back() != node)
          nodes.push_back(node);
      }
    return nodes;
  }

  // ----------------------------------------------------------------------------------------------------------
  // RHD bubble migration
  // ----------------------------------------------------------------------------------------------------------

  // Clears the used GPUs of `nodes`; returns (job, GPUs) in first-seen order and each job's nodes among `nodes`.
  void record_and_clear(Crs &c, std::vector<int> const &nodes, std::vector<std::pair<int, int>> &counts,
                        std::vector<std::pair<int, std::vector<int>>> &job_nodes) const {
    counts.clear();
    job_nodes.clear();
    for (int node : nodes) {
      int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
      for (int g = first; g < first + cap; ++g) {
        auto const gi = static_cast<std::size_t>(g);
        if (c.idle[gi] || c.owner[gi] == kDown)
          continue;
        int const o = c.owner[gi];
        auto it = std::find_if(counts.begin(), counts.end(), [o](auto const &p) { return p.first == o; });
        if (it == counts.end()) {
          counts.emplace_back(o, 1);
          job_nodes.push_back({o, {node}});
        } else {
          ++it->second;
          auto &jn =
              std::find_if(job_nodes.begin(), job_nodes.end(), [o](auto const &p) { return p.first == o; })->second;
          if (std::find(jn.begin(), jn.end(), node) == jn.end())
            jn.push_back(node);
        }
        free_gpu(c, g);
      }
    }
  }

  // Arena's _rhd_bubble_migration_internal between two partially idle nodes of one type.
  bool rhd_pair(Crs &c, int n1, int b1, int n2, int b2, int cap) const {
    Crs const prev = c;
    std::vector<std::pair<int, int>> counts;
    std::vector<std::pair<int, std::vector<int>>> job_nodes;
    if (b1 + b2 > cap) {
      // Everything on the emptier node fits into the other's bubbles: move it all.
      int const src = b1 >= b2 ? n1 : n2, dst = b1 >= b2 ? n2 : n1;
      record_and_clear(c, {src}, counts, job_nodes);
      for (auto const &[job, n] : counts) {
        auto const prev_nodes = nodes_of(prev, job);
        if (prev_nodes.size() > 1 && !is_fake(job) &&
            std::find(prev_nodes.begin(), prev_nodes.end(), dst) != prev_nodes.end()) {
          c = prev;
          return false;
        }
        bool const placed = place_job(c, job, n, {dst});
        TESSEL_REQUIRE(placed, "crius: RHD could not move a job into the destination bubbles");
      }
      return true;
    }
    // One node ends up full: re-place the jobs of both nodes, largest first.
    record_and_clear(c, {n1, n2}, counts, job_nodes);
    std::stable_sort(counts.begin(), counts.end(), [](auto const &a, auto const &b) { return a.second > b.second; });
    auto const &largest_nodes = std::find_if(job_nodes.begin(), job_nodes.end(), [&](auto const &p) {
                                  return p.first == counts[0].first;
                                })->second;
    int first_node = largest_nodes.size() > 1 ? (b1 <= b2 ? n1 : n2) : largest_nodes[0];
    int const second_node = first_node != n1 ? n1 : n2;
    for (std::size_t idx = 0; idx < counts.size(); ++idx) {
      int const job = counts[idx].first, n = counts[idx].second;
      auto const prev_nodes = nodes_of(prev, job);
      bool const on_both = std::find(prev_nodes.begin(), prev_nodes.end(), n1) != prev_nodes.end() &&
                           std::find(prev_nodes.begin(), prev_nodes.end(), n2) != prev_nodes.end();
      if ((prev_nodes.size() > 2 && on_both && !is_fake(job)) || n > cap) {
        c = prev;
        return false;
      }
      int rest = 0;
      for (std::size_t k = idx + 1; k < counts.size(); ++k)
        rest += counts[k].second;
      int const target = rest >= c.bubbles[static_cast<std::size_t>(first_node)] ? second_node : first_node;
      int const other = target != first_node ? first_node : second_node;
      if (!place_job(c, job, n, {target})) {
        bool const placed = place_job(c, job, n, {other});
        TESSEL_REQUIRE(placed, "crius: RHD could not re-place a job on either node");
      }
    }
    return true;
  }

  void rhd(Crs &c, std::vector<std::pair<int, int>> const &partial, int cap) const {
    for (std::size_t i = 0; i < partial.size() / 2; ++i) {
      auto const &a = partial[i];
      auto const &b = partial[partial.size() - 1 - i];
      rhd_pair(c, a.first, a.second, b.first, b.second, cap);
    }
  }

  std::uint64_t type_hash(Crs const &c, int type) const {
    std::uint64_t h = 1469598103934665603ull;
    for (int node : _cluster->type_nodes(type)) {
      int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
      for (int g = first; g < first + cap; ++g) {
        h ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.owner[static_cast<std::size_t>(g)])) * 2 +
             static_cast<std::uint64_t>(c.idle[static_cast<std::size_t>(g)]);
        h *= 1099511628211ull;
      }
    }
    return h;
  }

  // ----------------------------------------------------------------------------------------------------------
  // Migration search
  // ----------------------------------------------------------------------------------------------------------

  // Arena's _place_job_with_relaxted_locality.
  bool place_relaxed(Crs &c, int job, Quota const &q, int &hosts, int &per_host, double &gain) const {
    Stat const s = stat(c, job, q);
    int const cap = _cluster->type_capacity(s.type);
    std::vector<std::pair<int, int>> partial, wide;
    std::vector<int> idle_nodes;
    partial_nodes(c, s.type, s.num, partial, idle_nodes);
    for (int n : idle_nodes)
      wide.emplace_back(n, cap);
    wide.insert(wide.end(), partial.begin(), partial.end());
    int per = s.num;
    while (per > 1) {
      per /= 2;
      if (per > cap)
        continue;
      int const h = s.num / per;
      if (!feasible(job, s.type, h, per))
        return false;
      std::vector<int> nodes;
      for (auto const &[node, b] : wide)
        if (b >= per) {
          nodes.push_back(node);
          if (static_cast<int>(nodes.size()) == h) {
            bool const placed = place_job(c, job, s.num, nodes);
            TESSEL_REQUIRE(placed, "crius: relaxed placement failed on nodes with enough bubbles");
            hosts = h;
            per_host = per;
            gain = delta(job, s.type, h, per);
            return true;
          }
        }
    }
    return false;
  }

  bool direct_place(Crs &c, int job, int num, int cap, std::vector<std::pair<int, int>> const &partial,
                    std::vector<int> const &idle_nodes) const {
    int const need = num <= cap ? 1 : num / cap;
    if (need <= static_cast<int>(idle_nodes.size())) {
      std::vector<int> nodes(idle_nodes.begin(), idle_nodes.begin() + need);
      bool const placed = place_job(c, job, num, nodes);
      TESSEL_REQUIRE(placed, "crius: placement on idle nodes failed");
      return true;
    }
    for (auto const &[node, b] : partial)
      if (num <= b) {
        bool const placed = place_job(c, job, num, {node});
        TESSEL_REQUIRE(placed, "crius: placement on a partially idle node failed");
        return true;
      }
    return false;
  }

  // Arena's _migration_search_internal.
  MigResult migration_internal(Crs &c, int job, Quota const &q, int gm, int lm) const {
    MigResult r;
    r.gm = gm;
    Stat const s = stat(c, job, q);
    int const cap = _cluster->type_capacity(s.type);
    Layout const b = best(s.num, s.type);
    std::vector<std::pair<int, int>> partial;
    std::vector<int> idle_nodes;
    partial_nodes(c, s.type, s.num, partial, idle_nodes);
    if (!feasible(job, s.type, b.hosts, b.per_host))
      return r;
    double const gain_best = delta(job, s.type, b.hosts, b.per_host);
    if (direct_place(c, job, s.num, cap, partial, idle_nodes)) {
      r.feasible = true;
      r.gain = gain_best;
      return r;
    }
    // RHD passes until the job fits with best locality, at most min(gm, lm) passes. A pass that leaves the type's
    // nodes as an earlier pass did repeats forever, so the remaining passes are skipped (same final state).
    int const bound = std::min(gm, lm);
    int cnt = 0;
    std::vector<std::uint64_t> seen;
    seen.push_back(type_hash(c, s.type));
    while (cnt < bound) {
      rhd(c, partial, cap);
      ++cnt;
      partial_nodes(c, s.type, s.num, partial, idle_nodes);
      if (direct_place(c, job, s.num, cap, partial, idle_nodes)) {
        r.feasible = true;
        r.migrated = true;
        r.gain = gain_best;
        r.gm = gm - cnt;
        return r;
      }
      std::uint64_t const h = type_hash(c, s.type);
      auto const it = std::find(seen.begin(), seen.end(), h);
      if (it != seen.end()) {
        int const period = static_cast<int>(seen.end() - it);
        for (int k = (bound - cnt) % period; k > 0; --k) {
          rhd(c, partial, cap);
          partial_nodes(c, s.type, s.num, partial, idle_nodes);
        }
        cnt = bound;
        break;
      }
      seen.push_back(h);
    }
    int hosts = 0, per = 0;
    double gain = kInfeasible;
    if (place_relaxed(c, job, q, hosts, per, gain)) {
      r.feasible = true;
      r.migrated = cnt > 0;
      r.relaxed = true;
      r.gain = gain;
      r.gm = gm - bound;
      return r;
    }
    r.migrated = cnt > 0;
    return r;
  }

  // Arena's _migration_search: the gain is relative to the job's placement in the state, if any.
  MigResult migration_search(Crs &c, int job, Quota const &q, int gm, int lm, bool clear) const {
    double prev_gain = 0;
    Stat const s = stat(c, job, q);
    if (!s.nodes.empty())
      prev_gain = delta(job, s.type, s.hosts, s.per_host);
    if (clear)
      clear_placement(c, job);
    MigResult r = migration_internal(c, job, q, gm, lm);
    r.gain -= prev_gain;
    return r;
  }

  // ----------------------------------------------------------------------------------------------------------
  // Downgrade search (shrink and hardware type change of running jobs)
  // ----------------------------------------------------------------------------------------------------------

  // Running jobs in the state (GPU order of first appearance), then the target (Arena's _get_run_job_ids).
  std::vector<int> run_job_ids(Crs const &c, int target) const {
    std::vector<int> ids;
    std::unordered_set<int> seen;
    for (std::size_t g = 0; g < c.owner.size(); ++g) {
      int const o = c.owner[g];
      if (o >= 0 && !c.idle[g] && seen.insert(o).second)
        ids.push_back(o);
    }
    ids.push_back(target);
    return ids;
  }

  struct ShrinkResult {
    bool feasible = false, shrunk = false, relaxed = false;
    Crs crs;
    double gain = 0, mgrt_gain = kInfeasible;
    int gm = 0;
    ModInfo info{Mod::shrink, -1, -1, 0, 0};
  };

  // All running jobs' facts in one pass over a state.
  struct StatIndex {
    std::vector<int> jobs;
    std::vector<Stat> stats;
    Stat const *find(int job) const {
      for (std::size_t i = 0; i < jobs.size(); ++i)
        if (jobs[i] == job)
          return &stats[i];
      return nullptr;
    }
  };
  StatIndex index_stats(Crs const &c) const {
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
  Stat stat_from(StatIndex const &idx, int job, Quota const &q) const {
    if (Stat const *s = idx.find(job))
      return *s;
    Stat s;
    s.type = q.type;
    s.num = q.num;
    s.hosts = std::max(1, s.num / _cluster->type_capacity(s.type));
    s.per_host = s.num / s.hosts;
    return s;
  }

  // Arena's _update_crs_table_after_job_shrink.
  void shrink_in_state(Crs &c, std::vector<int> nodes, int prev_hosts, int job, int new_num) const {
    if (prev_hosts == 1) {
      int cnt = 0;
      int const node = nodes[0];
      int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
      for (int g = first; g < first + cap; ++g)
        if (c.owner[static_cast<std::size_t>(g)] == job && ++cnt > new_num)
          free_gpu(c, g);
      return;
    }
    std::stable_sort(nodes.begin(), nodes.end(), [&](int a, int b) {
      return c.bubbles[static_cast<std::size_t>(a)] < c.bubbles[static_cast<std::size_t>(b)];
    });
    nodes.resize(nodes.size() / 2);
    for (int node : nodes) {
      int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
      for (int g = first; g < first + cap; ++g)
        if (c.owner[static_cast<std::size_t>(g)] == job)
          free_gpu(c, g);
    }
  }

  // Arena's _shrink_one_job_and_migration_search.
  ShrinkResult shrink_one(int target, Quota &tq, int cur_type, std::vector<int> const &cand, Crs &c, double gain,
                          int gm, int lm) const {
    ShrinkResult r;
    r.gain = gain;
    r.gm = gm;
    StatIndex const idx = index_stats(c);
    Stat const tstat = stat_from(idx, target, tq);
    int const target_type = tstat.type;
    auto stat_of = [&](int jid) {
      return jid == target ? stat_from(idx, target, tq) : stat_from(idx, jid, registered(jid));
    };
    int max_alloc = -1;
    for (int jid : cand) {
      Stat const s = stat_of(jid);
      if (s.type == cur_type)
        max_alloc = std::max(max_alloc, s.num);
    }
    double max_gain = kInfeasible - 1;
    int sid = -1, new_num = 0, new_hosts = 0, new_per = 0, prev_hosts = 0;
    std::vector<int> prev_nodes;
    Crs live_state;
    bool have_live = false;
    for (int jid : cand) {
      Stat s = stat_of(jid);
      if (s.num < max_alloc / 2)
        continue;
      if (jid != target && s.nodes.empty()) {
        // Placement cleared in this state (a reserved opportunistic job): use the cluster's.
        if (!have_live) {
          live_state = live();
          have_live = true;
        }
        s = stat(live_state, jid, registered(jid));
      }
      if (s.type != cur_type || s.num == 1)
        continue;
      int const nn = s.num / 2;
      int const nh = s.hosts > 2 ? s.hosts / 2 : 1;
      int const np = s.hosts > 2 ? s.per_host : nn;
      double const g = delta(jid, s.type, nh, np, s.type, s.hosts, s.per_host);
      if (g > max_gain) {
        max_gain = g;
        sid = jid;
        new_num = nn;
        new_hosts = nh;
        new_per = np;
        prev_hosts = s.hosts;
        prev_nodes = s.nodes;
      }
    }
    if (sid < 0)
      return r;
    r.shrunk = true;
    r.gain += max_gain;
    if (sid != target) {
      shrink_in_state(c, prev_nodes, prev_hosts, sid, new_num);
    } else {
      tq.num = new_num;
      if (!prev_nodes.empty())
        shrink_in_state(c, prev_nodes, prev_hosts, sid, new_num);
    }
    if (cur_type == target_type) {
      r.crs = c;
      MigResult const ms = migration_search(r.crs, target, tq, gm, lm, true);
      Stat const after = stat(r.crs, sid, sid == target ? tq : registered(sid));
      r.feasible = ms.feasible;
      r.mgrt_gain = ms.gain;
      r.relaxed = ms.relaxed;
      r.gm = ms.gm;
      r.info = {Mod::shrink, sid, cur_type, after.hosts, after.per_host};
    } else {
      r.info = {Mod::shrink, sid, cur_type, new_hosts, new_per};
    }
    return r;
  }

  struct HtcResult {
    bool feasible = false, htc = false, relaxed = false;
    Crs crs;
    double gain = 0, mgrt_gain = kInfeasible;
    int gm = 0, gm_with_mgrt = 0;
    ModInfo info{Mod::htc, -1, -1, 0, 0};
  };

  // Arena's _htc_one_job_and_migration_search.
  HtcResult htc_one(int target, Quota &tq, std::vector<int> const &cand, Crs &c, double gain, int gm, int lm) const {
    HtcResult r;
    r.gain = gain;
    r.gm = gm;
    r.gm_with_mgrt = gm;
    StatIndex const idx = index_stats(c);
    int const target_type = stat_from(idx, target, tq).type;
    double max_gain = kInfeasible, max_gain_mgrt = kInfeasible;
    int hid = -1, new_type = -1, prev_num = 0, new_gm = gm;
    std::vector<int> prev_nodes;
    Crs best_other; // the state after the chosen other job's migration (Arena recomputes it)
    for (int jid : cand) {
      Stat const s = stat_from(idx, jid, registered(jid));
      if (s.type != target_type)
        continue;
      for (int t = 0; t < _cluster->num_types(); ++t) {
        if (t == target_type || !sufficient(c, t, s.num))
          continue;
        Layout const b = best(s.num, t);
        double const g = delta(jid, t, b.hosts, b.per_host, s.type, s.hosts, s.per_host);
        // The candidate as a job of the new type (Arena deep-copies the registered job).
        bool const may_win = jid == target ? g > max_gain : true;
        if (!may_win)
          continue;
        Crs trial = c;
        Quota const q{t, s.num};
        MigResult const ms = migration_search(trial, jid, q, gm, lm, true);
        double const gm_total = g + ms.gain;
        if (((g > max_gain && jid == target) || (gm_total > max_gain_mgrt && jid != target)) && ms.feasible) {
          if (jid == target)
            max_gain = g;
          else
            max_gain_mgrt = gm_total;
          hid = jid;
          new_type = t;
          prev_num = s.num;
          prev_nodes = s.nodes;
          new_gm = ms.gm;
          if (jid != target)
            best_other = std::move(trial);
        }
      }
    }
    if (hid < 0)
      return r;
    r.htc = true;
    if (hid != target) {
      c = std::move(best_other);
      r.gain += max_gain_mgrt;
      r.gm = new_gm;
    } else {
      tq.type = new_type;
      tq.num = prev_num;
      if (!prev_nodes.empty())
        clear_placement(c, target);
      r.gain += max_gain;
    }
    r.crs = c;
    MigResult const ms = migration_search(r.crs, target, tq, r.gm, lm, true);
    Stat const after = stat(r.crs, hid, hid == target ? tq : registered(hid));
    r.feasible = ms.feasible;
    r.mgrt_gain = ms.gain;
    r.relaxed = ms.relaxed;
    r.gm_with_mgrt = ms.gm;
    r.info = {Mod::htc, hid, new_type, after.hosts, after.per_host};
    return r;
  }

  // Arena's _is_no_infeasible_job.
  bool no_infeasible_job(std::vector<ModInfo> const &mdf) const {
    std::vector<int> bad;
    for (auto const &m : mdf) {
      bool const ok = feasible(m.job, m.type, m.hosts, m.per_host);
      auto const it = std::find(bad.begin(), bad.end(), m.job);
      if (!ok && it == bad.end())
        bad.push_back(m.job);
      else if (it != bad.end())
        bad.erase(it);
    }
    return bad.empty();
  }

  // Arena's _job_downgrade_search: BFS of `depth` levels; each plan tries a shrink per GPU type and one HTC.
  std::vector<SearchPlan> downgrade_search(int target, Crs const &c, int depth, int gm, int lm) const {
    std::vector<SearchPlan> fsb, level;
    level.push_back(SearchPlan{c, registered(target), 0.0, gm, {}});
    for (int it = 0; it < depth && !level.empty(); ++it) {
      std::vector<SearchPlan> next;
      // Arena pops its input queue from the back.
      for (auto p = level.rbegin(); p != level.rend(); ++p) {
        for (int t = 0; t < _cluster->num_types(); ++t) {
          if (_cluster->type_nodes(t).empty())
            continue;
          Crs work = p->crs;
          Quota tq = p->target;
          auto mdf = p->mdf;
          auto const cand = run_job_ids(work, target);
          ShrinkResult sr = shrink_one(target, tq, t, cand, work, p->gain, p->gm, lm);
          if (sr.shrunk)
            mdf.push_back(sr.info);
          if (sr.feasible && no_infeasible_job(mdf))
            fsb.push_back(SearchPlan{std::move(sr.crs), tq, sr.gain + sr.mgrt_gain, sr.gm, mdf});
          if ((!sr.feasible || sr.relaxed) && sr.shrunk)
            next.push_back(SearchPlan{std::move(work), tq, sr.gain, p->gm, mdf});
        }
        Crs work = p->crs;
        Quota tq = p->target;
        auto mdf = p->mdf;
        auto const cand = run_job_ids(work, target);
        HtcResult hr = htc_one(target, tq, cand, work, p->gain, p->gm, lm);
        if (hr.htc)
          mdf.push_back(hr.info);
        if (hr.feasible && no_infeasible_job(mdf))
          fsb.push_back(SearchPlan{std::move(hr.crs), tq, hr.gain + hr.mgrt_gain, hr.gm_with_mgrt, mdf});
        if ((!hr.feasible || hr.relaxed) && hr.htc)
          next.push_back(SearchPlan{std::move(work), tq, hr.gain, hr.gm, mdf});
      }
      level = std::move(next);
    }
    return fsb;
  }

  // Arena's _fit_one_job.
  bool fit_one_job(Crs const &c, int job, int gm, int lm, Crs &decision, int &gm_out) const {
    std::vector<SearchPlan> plans;
    Crs work = c;
    MigResult const ms = migration_search(work, job, registered(job), gm, lm, true);
    if (ms.feasible)
      plans.push_back(SearchPlan{std::move(work), registered(job), ms.gain, ms.gm, {}});
    if (!ms.feasible || ms.relaxed) {
      int depth = _opt.crius_search_depth > 0 ? _opt.crius_search_depth : (_running.size() <= 150 ? 3 : 2);
      auto more = downgrade_search(job, c, depth, gm, lm);
      for (auto &p : more)
        plans.push_back(std::move(p));
      int best_idx = -1;
      double best_gain = kInfeasible;
      for (std::size_t i = 0; i < plans.size(); ++i)
        if (plans[i].gain > best_gain) {
          best_gain = plans[i].gain;
          best_idx = static_cast<int>(i);
        }
      if (best_idx < 0)
        return false;
      decision = std::move(plans[static_cast<std::size_t>(best_idx)].crs);
      gm_out = plans[static_cast<std::size_t>(best_idx)].gm;
      return true;
    }
    decision = std::move(plans[0].crs);
    gm_out = plans[0].gm;
    return true;
  }

  // ----------------------------------------------------------------------------------------------------------
  // Queues
  // ----------------------------------------------------------------------------------------------------------

  void remove_not_running() {
    _running.erase(std::remove_if(_running.begin(), _running.end(),
                                  [&](int id) { return _ctx->job(id).state != JobState::running; }),
                   _running.end());
  }

  bool in_dq(int id) const { return std::find(_dq.begin(), _dq.end(), id) != _dq.end(); }

  // Untags blockers above position `idx` up to the previous opportunistic job.
  void untag_blockers_above(std::size_t idx) {
    for (std::size_t k = idx; k-- > 0;) {
      auto &j = _ctx->job(_dq[k]);
      if (j.blocker)
        j.blocker = false;
      else
        break; // an opportunistic job (or, unexpectedly, a plain pending one) ends the walk
    }
  }

  bool opportunist_below(std::size_t idx) const {
    for (std::size_t k = idx + 1; k < _dq.size(); ++k)
      if (_ctx->job(_dq[k]).opportunism)
        return true;
    return false;
  }

  // Arena's _suspend_one_job (decision-queue part) followed by the suspension itself.
  void suspend_job(int id) {
    auto &j = _ctx->job(id);
    auto const it = std::find(_dq.begin(), _dq.end(), id);
    if (it != _dq.end()) {
      j.opportunism = false;
      std::size_t const idx = static_cast<std::size_t>(it - _dq.begin());
      if (!opportunist_below(idx)) {
        j.blocker = false;
        untag_blockers_above(idx);
      } else {
        j.blocker = true;
      }
    }
    _ctx->suspend(id);
    _running.erase(std::find(_running.begin(), _running.end(), id));
    _pending.push_back(id);
  }

  // A running job lost its node: it is pending again, at its FIFO position in the decision queue.
  void handle_eviction(int id) {
    auto &j = _ctx->job(id);
    if (!in_dq(id)) {
      auto pos = std::find_if(_dq.begin(), _dq.end(), [&](int o) {
        auto const &x = _ctx->job(o);
        return x.submit_round > j.submit_round || (x.submit_round == j.submit_round && x.id > j.id);
      });
      pos = _dq.insert(pos, id);
      j.opportunism = false;
      j.blocker = opportunist_below(static_cast<std::size_t>(pos - _dq.begin()));
    } else {
      std::size_t const idx = static_cast<std::size_t>(std::find(_dq.begin(), _dq.end(), id) - _dq.begin());
      j.opportunism = false;
      if (!opportunist_below(idx)) {
        j.blocker = false;
        untag_blockers_above(idx);
      } else {
        j.blocker = true;
      }
    }
    _pending.push_back(id);
  }

  // ----------------------------------------------------------------------------------------------------------
  // Scheduling passes
  // ----------------------------------------------------------------------------------------------------------

  void fit_new_jobs(std::vector<int> const &arrived) {
    Crs const prev = live();
    int gm = kGlobalEta;
    for (int id : arrived) {
      _dq.push_back(id);
      Crs decision;
      int gm_after = gm;
      bool const ok = fit_one_job(live(), id, gm, kLocalEta, decision, gm_after);
      if (ok) {
        apply(decision);
        gm = gm_after;
        if (_dq.size() == 1) {
          _dq.pop_back();
        } else {
          _ctx->job(id).opportunism = true;
          for (std::size_t k = 0; k + 1 < _dq.size(); ++k) {
            auto &o = _ctx->job(_dq[k]);
            if (!o.blocker && !o.opportunism)
              o.blocker = true;
          }
        }
        _ctx->start(id);
        _running.push_back(id);
        update_run_jobs();
      } else {
        _pending.push_back(id);
      }
    }
    upgrade_trial();
    eliminate_unnecessary_suspend_resume(prev);
  }

  void optimize_running_jobs(std::vector<int> const &ended, bool need_upgrade) {
    Crs const prev = live();
    // Release (already done by the simulator) and update the decision queue for ended opportunistic jobs.
    for (int id : ended) {
      auto &j = _ctx->job(id);
      auto const it = std::find(_dq.begin(), _dq.end(), id);
      if (j.opportunism && it != _dq.end()) {
        std::size_t const idx = static_cast<std::size_t>(it - _dq.begin());
        if (!opportunist_below(idx))
          untag_blockers_above(idx);
        _dq.erase(_dq.begin() + static_cast<std::ptrdiff_t>(idx));
      }
    }
    introspective_migration();
    restart_trial();
    if (need_upgrade)
      upgrade_trial();
    eliminate_unnecessary_suspend_resume(prev);
  }

  // Arena's _introspective_migration_search: consolidate partially cross-node jobs inside their own GPUs.
  void introspective_migration() {
    std::vector<int> cross;
    for (int id : _running) {
      auto const &j = _ctx->job(id);
      if (j.quota_hosts > 1 && j.quota_per_host < _cluster->type_capacity(j.quota_type))
        cross.push_back(id);
    }
    if (cross.empty())
      return;
    int gm = kGlobalEta;
    while (true) {
      double best_gain = kInfeasible;
      int best_job = -1, best_gm = gm;
      Crs best_state;
      for (int id : cross) {
        Crs c = live();
        Stat const p = stat(c, id, registered(id));
        Layout const b = best(p.num, p.type);
        if (p.hosts == b.hosts && p.per_host == b.per_host)
          continue;
        // Only the job's own GPUs are bubbles; every other idle GPU is held by a virtual job of its type.
        for (std::size_t g = 0; g < c.owner.size(); ++g) {
          int const gi = static_cast<int>(g);
          if (c.owner[g] == id)
            free_gpu(c, gi);
          else if (c.idle[g])
            use_gpu(c, gi, fake_of(_cluster->node_type(_cluster->gpu_node(gi))));
        }
        MigResult const ms = migration_search(c, id, registered(id), gm, kLocalEta, false);
        if (!ms.feasible)
          continue; // Arena asserts this cannot happen
        for (std::size_t g = 0; g < c.owner.size(); ++g)
          if (is_fake(c.owner[g]))
            free_gpu(c, static_cast<int>(g));
        Stat const n = stat(c, id, registered(id));
        double const gain = delta(id, n.type, n.hosts, n.per_host, p.type, p.hosts, p.per_host);
        if (gain > 0 && gain > best_gain) {
          best_gain = gain;
          best_job = id;
          best_state = std::move(c);
          best_gm = ms.gm;
        }
      }
      if (best_job < 0)
        break;
      apply(best_state);
      update_run_jobs();
      cross.erase(std::find(cross.begin(), cross.end(), best_job));
      gm = best_gm;
    }
  }

  // Arena's _get_reserved_resources: a blocker may use the GPUs of the opportunistic jobs below it.
  Crs reserved_for(int id) const {
    Crs c = live();
    auto const &j = _ctx->job(id);
    if (!j.blocker)
      return c;
    std::size_t const idx = static_cast<std::size_t>(std::find(_dq.begin(), _dq.end(), id) - _dq.begin());
    for (std::size_t k = idx + 1; k < _dq.size(); ++k) {
      auto const &o = _ctx->job(_dq[k]);
      if (!o.blocker && !o.opportunism)
        break;
      if (o.opportunism && o.state == JobState::running)
        for (std::size_t g = 0; g < c.owner.size(); ++g)
          if (c.owner[g] == o.id && !c.idle[g])
            set_gpu(c, static_cast<int>(g), o.id, true);
    }
    return c;
  }

  // Arena's _pending_jobs_restart_trial.
  void restart_trial() {
    if (_pending.empty())
      return;
    std::size_t restarted_idx = 0;
    bool found = true;
    for (int cnt = 0; found && cnt < _opt.crius_restart_trials; ++cnt) {
      if (_pending.empty())
        break;
      found = false;
      int gm = kGlobalEta;
      std::vector<std::pair<int, int>> infeasible_keys; // (model, batch)
      for (std::size_t i = 0; i < _dq.size(); ++i) {
        if (i < restarted_idx)
          continue;
        int const id = _dq[i];
        auto &j = _ctx->job(id);
        std::pair<int, int> const key{j.spec->model, j.spec->batch_size};
        if (std::find(infeasible_keys.begin(), infeasible_keys.end(), key) != infeasible_keys.end())
          continue;
        if (j.opportunism)
          continue;
        Crs decision;
        int gm_after = gm;
        if (!fit_one_job(reserved_for(id), id, gm, kLocalEta, decision, gm_after)) {
          infeasible_keys.push_back(key);
          continue;
        }
        found = true;
        restarted_idx = i;
        // Opportunistic jobs whose GPUs the restarted job took (even partly) are suspended.
        std::vector<int> const &owners = _ctx->alloc().owners();
        std::vector<int> prev_count(_ctx->jobs().size(), 0), cur_count(_ctx->jobs().size(), 0);
        for (std::size_t g = 0; g < owners.size(); ++g) {
          if (owners[g] >= 0)
            ++prev_count[static_cast<std::size_t>(owners[g])];
          if (decision.owner[g] >= 0)
            ++cur_count[static_cast<std::size_t>(decision.owner[g])];
        }
        std::vector<int> conflicts;
        std::unordered_set<int> seen;
        for (std::size_t g = 0; g < owners.size(); ++g) {
          int const o = owners[g];
          if (o < 0 || !seen.insert(o).second || !_ctx->job(o).opportunism)
            continue;
          if (cur_count[static_cast<std::size_t>(o)] != prev_count[static_cast<std::size_t>(o)])
            conflicts.push_back(o);
        }
        for (std::size_t g = 0; g < decision.owner.size(); ++g)
          if (decision.idle[g] && decision.owner[g] >= 0)
            set_gpu(decision, static_cast<int>(g), decision.owner[g], false);
        for (int o : conflicts)
          clear_placement(decision, o);
        // Restart the job, suspend the conflicting opportunistic jobs, untag the head of the queue.
        _pending.erase(std::find(_pending.begin(), _pending.end(), id));
        _dq.erase(std::find(_dq.begin(), _dq.end(), id));
        j.blocker = false;
        for (int o : conflicts)
          suspend_job(o);
        while (!_dq.empty() && _ctx->job(_dq.front()).opportunism &&
               _ctx->job(_dq.front()).state == JobState::running) {
          _ctx->job(_dq.front()).opportunism = false;
          _dq.erase(_dq.begin());
        }
        apply(decision);
        _ctx->start(id);
        _running.push_back(id);
        update_run_jobs();
        gm = gm_after;
        break;
      }
    }
  }

  // Arena's _job_upgrade_search for one running job; `floor` prunes moves that cannot beat it.
  bool upgrade_one(int id, int gm, int lm, double floor, double &gain_out, Crs &state_out, int &gm_out) const {
    auto const &j = _ctx->job(id);
    Crs c = live();
    bool const modified = clear_placement(c, id);
    TESSEL_REQUIRE(modified, "crius: running job ", j.spec->id, " holds no GPU");
    int const ttype = j.quota_type, tnum = j.quota_gpus, thosts = j.quota_hosts, tper = j.quota_per_host;
    double const cur = thr(id, ttype, thosts, tper);
    double max_gain = kInfeasible;
    bool found = false;
    // The best throughput any locality of (type, num) can give bounds the gain of a move.
    auto bound = [&](int type, int num) {
      double b = kInfeasible;
      int const cap = _cluster->type_capacity(type);
      for (int per = std::min(num, cap); per >= 1; per /= 2)
        b = std::max(b, thr(id, type, num / per, per));
      if (!(b > 0))
        return kInfeasible;
      return cur > 0 ? b - cur : b - kInfeasible;
    };
    for (int t = 0; t < _cluster->num_types(); ++t) {
      if (t == ttype || !sufficient(c, t, tnum))
        continue;
      double const b = bound(t, tnum);
      if (!(b > 0) || b <= std::max(floor, max_gain))
        continue;
      Crs trial = c;
      Quota const q{t, tnum};
      MigResult const ms = migration_search(trial, id, q, gm, lm, true);
      Stat const n = stat(trial, id, q);
      double const g = delta(id, t, n.hosts, n.per_host, ttype, thosts, tper);
      if (ms.feasible && g > max_gain) {
        max_gain = g;
        state_out = std::move(trial);
        gm_out = ms.gm;
        found = true;
      }
    }
    if (tnum < kMaxGpus && sufficient(c, ttype, 2 * tnum)) {
      double const b = bound(ttype, 2 * tnum);
      if (b > 0 && b > std::max(floor, max_gain)) {
        Crs trial = c;
        Quota const q{ttype, 2 * tnum};
        MigResult const ms = migration_search(trial, id, q, gm, lm, true);
        Stat const n = stat(trial, id, registered(id));
        double const g = delta(id, ttype, n.hosts, n.per_host, ttype, thosts, tper);
        if (ms.feasible && g > max_gain) {
          max_gain = g;
          state_out = std::move(trial);
          gm_out = ms.gm;
          found = true;
        }
      }
    }
    if (found && max_gain > 0) {
      gain_out = max_gain;
      return true;
    }
    return false;
  }

  // Arena's _running_jobs_upgrade_trial: up to 10 greedy steps, each applying the best single upgrade.
  void upgrade_trial() {
    if (_running.empty())
      return;
    int gm = kGlobalEta;
    for (int step = 0; step < _opt.crius_upgrade_steps; ++step) {
      double best_gain = kInfeasible;
      int best_job = -1, best_gm = gm;
      Crs best_state;
      for (int id : _running) {
        double g = 0;
        Crs state;
        int gm_after = gm;
        if (!upgrade_one(id, gm, kLocalEta, best_gain, g, state, gm_after) || !(g > best_gain))
          continue;
        Stat const n = stat(state, id, registered(id));
        if (!feasible(id, n.type, n.hosts, n.per_host))
          continue;
        best_gain = g;
        best_job = id;
        best_state = std::move(state);
        best_gm = gm_after;
      }
      if (best_job < 0)
        break;
      apply(best_state);
      update_run_jobs();
      gm = best_gm;
    }
  }

  // Arena's _eliminate_unnecessary_suspend_resume: a job that fully occupies its nodes and was only moved to other
  // nodes of the same shape gets its old nodes back (the newcomer takes the new ones).
  void eliminate_unnecessary_suspend_resume(Crs const &prev) {
    Crs c = live();
    bool changed = false;
    for (int id : _running) {
      auto const prev_nodes = nodes_of(prev, id);
      auto const new_nodes = nodes_of(c, id);
      if (prev_nodes.empty() || prev_nodes == new_nodes)
        continue;
      auto const &j = _ctx->job(id);
      if (j.quota_gpus / static_cast<int>(prev_nodes.size()) < _cluster->type_capacity(j.quota_type))
        continue;
      if (_cluster->node_type(new_nodes[0]) != _cluster->node_type(prev_nodes[0]))
        continue;
      auto on_node = [&](Crs const &state, int node) {
        int n = 0;
        for (int g = _cluster->node_first_gpu(node); g < _cluster->node_first_gpu(node) + _cluster->node_capacity(node);
             ++g)
          n += state.owner[static_cast<std::size_t>(g)] == id;
        return n;
      };
      if (prev_nodes.size() != new_nodes.size() || on_node(prev, prev_nodes[0]) != on_node(c, new_nodes[0]))
        continue;
      std::vector<int> switched;
      for (int s : new_nodes) {
        if (std::find(prev_nodes.begin(), prev_nodes.end(), s) != prev_nodes.end())
          continue;
        for (int p : prev_nodes) {
          if (std::find(new_nodes.begin(), new_nodes.end(), p) != new_nodes.end() ||
              std::find(switched.begin(), switched.end(), p) != switched.end())
            continue;
          int const cap = _cluster->node_capacity(p);
          bool all_used = true;
          for (int i = 0; i < cap; ++i) {
            int const gp = _cluster->node_first_gpu(p) + i;
            all_used = all_used && !c.idle[static_cast<std::size_t>(gp)] && c.owner[static_cast<std::size_t>(gp)] >= 0;
          }
          if (!all_used)
            break; // Arena asserts the old node is fully held by other jobs
          switched.push_back(p);
          for (int i = 0; i < cap; ++i) {
            int const gp = _cluster->node_first_gpu(p) + i, gs = _cluster->node_first_gpu(s) + i;
            int const other = c.owner[static_cast<std::size_t>(gp)];
            set_gpu(c, gs, other, other == kEmpty);
            use_gpu(c, gp, id);
          }
          changed = true;
          break;
        }
      }
    }
    if (changed) {
      apply(c);
      update_run_jobs();
    }
  }

  PolicyOptions _opt;
  SchedContext *_ctx = nullptr;
  Cluster const *_cluster = nullptr;
  std::vector<int> _running, _pending, _dq; // running queue, pending queue, decision queue (Arena's)
  mutable std::vector<int> _slot_scratch;
};

} // namespace

std::unique_ptr<Policy> make_crius(PolicyOptions const &options) { return std::make_unique<Crius>(options); }

} // namespace tessel::sched::Impl

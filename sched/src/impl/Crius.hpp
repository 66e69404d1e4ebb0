#ifndef TESSEL_SCHED_IMPL_CRIUS_HPP
#define TESSEL_SCHED_IMPL_CRIUS_HPP

// The Crius policy (Arena's scheduler.py, `--policy crius --sched_with_opt`): one class, its steps in one file
// each under src/policies/:
//   Crius.cpp                 rounds: departures, new jobs, the decision queue (blockers and opportunistic jobs)
//   CriusState.cpp            the indexed cluster state and the facts of a job in a state
//   CriusPlacement.cpp        placement with RHD defragmentation (the migration search), introspective migration,
//                             giving moved jobs their old nodes back
//   CriusDowngradeSearch.cpp  the breadth-first shrink / hardware-type-change search of a job that does not fit
//   CriusUpgrade.cpp          greedy upgrades of running jobs while GPUs are free
//   CriusRestart.cpp          the pending-jobs restart trial on reserved resources

#include "PolicyHelpers.hpp"

#include <tessel/sched/SchedContext.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessel::sched::Impl::crius {

constexpr int kGlobalEta = 4096; // Arena's GLOBAL_ETA
constexpr int kLocalEta = 256;   // Arena's LOCAL_ETA
constexpr int kMaxGpus = 16;     // Arena's MAX_SUPPORTED_GPU_NUM
constexpr int kEmpty = -1;
constexpr int kFakeBase = -10; // fake job of type t: kFakeBase - t (Arena's "fake_job_id_<type>")

inline bool is_fake(int owner) { return owner <= kFakeBase; }
inline int fake_of(int type) { return kFakeBase - type; }

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

// The job a shrink of one GPU type halves (Arena's choice in _shrink_one_job_and_migration_search).
struct ShrinkChoice {
  int sid = -1, new_num = 0, new_hosts = 0, new_per = 0, prev_hosts = 0;
  double gain = kInfeasible - 1;
  std::vector<int> prev_nodes;
};

// One shrink or hardware-type change of a running job, then the target's migration search in the state after it.
struct MoveResult {
  bool feasible = false, moved = false, relaxed = false;
  Crs crs;
  double gain = 0, mgrt_gain = kInfeasible;
  int gm = 0;           // migration budget after the move
  int gm_with_mgrt = 0; // and after the target's migration
  ModInfo info{Mod::shrink, -1, -1, 0, 0};
};

// All jobs' facts in one pass over a state (storage reused between passes).
struct StatIndex {
  std::vector<int> jobs;    // jobs holding GPUs (used or reserved), GPU order of first appearance
  std::vector<Stat> stats;  // stats[i] for jobs[i]; may hold more (unused) entries than jobs
  std::vector<int> running; // jobs holding a used GPU, GPU order of the first one (Arena's _get_run_job_ids)
  std::vector<int> slot;    // job id -> index in jobs, or -1
  std::vector<char> listed; // per index: in `running`
  bool multi_type = false;  // some job holds GPUs of more than one type
  Stat const *find(int job) const {
    if (job < 0 || static_cast<std::size_t>(job) >= slot.size())
      return nullptr;
    int const i = slot[static_cast<std::size_t>(job)];
    return i < 0 ? nullptr : &stats[static_cast<std::size_t>(i)];
  }
};

// Indexes of recent states, each with a copy of its state (owners and idle status) to recognize it: the jobs a
// restart trial tries in one pass start from the same state, and many of their first moves lead to the same states.
struct IndexCache {
  struct Entry {
    bool valid = false;
    std::vector<int> owner;
    std::vector<char> idle;
    StatIndex idx;
  };
  std::vector<Entry> entries; // most recently used first
};

// Results of migration searches (Arena's _migration_search_internal) of jobs holding no GPU of the type searched.
// In a state where every job holds GPUs of one type only, such a result depends only on the GPUs of that type
// (owners and idle status), the job's model, batch and GPU count, and the migration budgets; so it holds for every
// such state with the same GPUs of the type. Per type, the results of a few recent states, each with a copy of the
// type's GPUs to recognize the state.
struct MigMemo {
  struct Entry {
    int model, batch, num, gm, lm;
    MigResult result;
  };
  struct Snapshot {
    std::vector<int> owner;
    std::vector<char> idle;
    std::vector<Entry> entries;
  };
  std::vector<std::vector<Snapshot>> by_type; // most recently used first
};

class Crius final : public Policy {
public:
  explicit Crius(PolicyOptions const &o) : _opt(o) {}
  std::string name() const override { return "crius"; }
  // Re-tuning with Crius's Cell pruning: 10 s per GPU, at most 40 s (Arena's RESCHED_OVERHEAD_WITH_PRUNE).
  ReschedCost resched_cost() const override { return {10, 40, 0, 400}; }
  void schedule(SchedContext &ctx) override;

private:
  // Small helpers on the hot paths of the searches, kept inline.
  void set_gpu(Crs &c, int g, int owner, bool idle) const {
    auto const gi = static_cast<std::size_t>(g);
    if (c.idle[gi] != static_cast<char>(idle))
      c.bubbles[static_cast<std::size_t>(_cluster->gpu_node(g))] += idle ? 1 : -1;
    c.idle[gi] = idle;
    c.owner[gi] = owner;
  }
  void use_gpu(Crs &c, int g, int owner) const { set_gpu(c, g, owner, false); }
  void free_gpu(Crs &c, int g) const { set_gpu(c, g, kEmpty, true); }
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
  Quota registered(int job) const {
    auto const &j = _ctx->job(job);
    return {j.quota_type, j.quota_gpus};
  }
  bool in_dq(int id) const { return std::find(_dq.begin(), _dq.end(), id) != _dq.end(); }

  // Rounds and the decision queue (Crius.cpp)
  void remove_not_running();
  void untag_blockers_above(std::size_t idx);
  bool opportunist_below(std::size_t idx) const;
  void mark_pending_in_dq(std::size_t idx);
  void suspend_job(int id);
  void handle_eviction(int id);
  void fit_new_jobs(std::vector<int> const &arrived);
  void optimize_running_jobs(std::vector<int> const &ended, bool need_upgrade);

  // Cluster state and job facts (CriusState.cpp)
  Crs live() const;
  void apply(Crs const &c);
  void update_run_jobs();
  Stat stat(Crs const &c, int job, Quota const &q) const;
  Stat quota_stat(Quota const &q) const;
  bool clear_placement(Crs &c, int job) const;
  void clear_on_nodes(Crs &c, int job, std::vector<int> const &nodes) const;
  bool sufficient(Crs const &c, int type, int num) const;
  std::vector<int> nodes_of(Crs const &c, int job) const;
  void index_stats(Crs const &c, StatIndex &idx) const;
  StatIndex const &indexed(Crs const &c) const;
  Stat const &stat_from(StatIndex const &idx, int job, Quota const &q, Stat &fallback) const;

  // Placement, RHD defragmentation and migration (CriusPlacement.cpp)
  void partial_nodes(Crs const &c, int type, int num, std::vector<std::pair<int, int>> &partial,
                     std::vector<int> &idle_nodes) const;
  bool place_job(Crs &c, int job, int num, std::vector<int> const &nodes) const;
  void record_and_clear(Crs &c, std::vector<int> const &nodes, std::vector<std::pair<int, int>> &counts,
                        std::vector<std::pair<int, std::vector<int>>> &job_nodes) const;
  bool rhd_pair(Crs &c, int n1, int b1, int n2, int b2, int cap) const;
  void rhd(Crs &c, std::vector<std::pair<int, int>> const &partial, int cap) const;
  std::uint64_t type_hash(Crs const &c, int type) const;
  bool place_relaxed(Crs &c, int job, Quota const &q, bool holds_none, int &hosts, int &per_host, double &gain) const;
  bool direct_place(Crs &c, int job, int num, int cap, std::vector<std::pair<int, int>> const &partial,
                    std::vector<int> const &idle_nodes) const;
  MigResult migration_internal(Crs &c, int job, Quota const &q, int gm, int lm, bool holds_none = false) const;
  MigResult migration_search(Crs &c, int job, Quota const &q, int gm, int lm, bool clear,
                             bool holds_none = false) const;
  void introspective_migration();
  void eliminate_unnecessary_suspend_resume(Crs const &prev);

  // Shrink / hardware-type-change search (CriusDowngradeSearch.cpp)
  void shrink_in_state(Crs &c, std::vector<int> nodes, int prev_hosts, int job, int new_num) const;
  void shrink_choices(int target, Quota const &tq, std::vector<int> const &cand, StatIndex const &idx,
                      std::vector<ShrinkChoice> &out) const;
  MoveResult shrink_one(int target, Quota &tq, int cur_type, int target_type, bool target_placed,
                        ShrinkChoice const &choice, Crs const &src, Crs &c, double gain, int gm, int lm) const;
  class HtcSearch;
  MoveResult htc_one(int target, Quota &tq, std::vector<int> const &cand, StatIndex const &idx, Crs const &src, Crs &c,
                     double gain, int gm, int lm) const;
  double reachable_thr(int job, int type, int num) const;
  MigMemo::Snapshot &mig_snapshot(Crs const &c, int type) const;
  MigResult const &mig_internal_memo(MigMemo::Snapshot &snap, Crs const &c, int job, std::vector<int> const &nodes,
                                     int type, int num, int gm, int lm) const;
  void search_after_move(MoveResult &r, int target, Quota const &tq, bool target_placed, int job, Mod kind, int type,
                         int gm, int lm) const;
  bool no_infeasible_job(std::vector<ModInfo> const &mdf) const;
  std::vector<SearchPlan> downgrade_search(int target, Crs const &c, int depth, int gm, int lm) const;
  bool fit_one_job(Crs const &c, int job, int gm, int lm, Crs &decision, int &gm_out) const;

  // Upgrades of running jobs (CriusUpgrade.cpp)
  bool upgrade_one(Crs const &live_state, int id, int gm, int lm, double floor, double &gain_out, Crs &state_out,
                   int &gm_out) const;
  void upgrade_trial();

  // Restart trial (CriusRestart.cpp)
  Crs reserved_for(int id) const;
  void restart_trial();
  std::vector<int> displaced_opportunists(Crs const &decision) const;

  PolicyOptions _opt;
  SchedContext *_ctx = nullptr;
  Cluster const *_cluster = nullptr;
  std::vector<int> _running, _pending, _dq; // running queue, pending queue, decision queue (Arena's)
  // Scratch of the downgrade search (reused storage): indexes of plans' states, a trial state.
  mutable IndexCache _indexes; // invalidated every round
  mutable Crs _trial;
  mutable MigMemo _mig_memo; // cleared every round
};

} // namespace tessel::sched::Impl::crius

#endif

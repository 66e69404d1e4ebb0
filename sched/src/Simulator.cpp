#include <tessel/sched/Simulator.hpp>

#include "impl/Statistics.hpp"

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace tessel::sched {

// ---------------------------------------------------------------------------------------------------------------
// Simulator
// ---------------------------------------------------------------------------------------------------------------

namespace {

// Python's float floor division (CPython float_floor_div), which Arena's progress update uses.
double py_floordiv(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0)))
    div -= 1.0;
  if (div == 0)
    return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5)
    floordiv += 1.0;
  return floordiv;
}

// splitmix64: a small deterministic generator for failure injection.
double next_uniform(std::uint64_t &state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

double mean(std::vector<double> const &v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

} // namespace

Simulator::Simulator(Cluster const &cluster, Trace const &trace, ThroughputOracle const &oracle, Policy &policy,
                     SimOptions options)
    : _cluster(cluster), _trace(trace), _oracle(oracle), _policy(policy), _opt(std::move(options)),
      _table(cluster, this) {
  TESSEL_REQUIRE(!trace.jobs.empty(), "the trace has no jobs");
  TESSEL_REQUIRE(_opt.interval > 0, "scheduling interval must be positive, got ", _opt.interval);
  TESSEL_REQUIRE(_opt.iteration_divisor >= 1, "iteration divisor must be >= 1, got ", _opt.iteration_divisor);
  TESSEL_REQUIRE(trace.type_names.size() == static_cast<std::size_t>(cluster.num_types()),
                 "the trace was loaded for a different cluster (", trace.type_names.size(), " GPU types vs ",
                 cluster.num_types(), ")");
  for (int t = 0; t < cluster.num_types(); ++t)
    TESSEL_REQUIRE(trace.type_names[static_cast<std::size_t>(t)] == cluster.type(t).name,
                   "the trace was loaded for a different cluster (type ", t, ")");
  // The longest a job may run without progress: its re-tuning and restore after a move, and a failed job's
  // restart, paid off (a job's iteration time is below the round: longer ones are infeasible).
  ReschedCost const cost = _policy.resched_cost();
  _stall_bound = static_cast<int>(std::ceil(
                     (cost.tune_max + cost.restore_max + _opt.restart_cost + _opt.start_latency) / _opt.interval)) +
                 1;
  for (auto const &spec : trace.jobs) {
    // Arena: iter_num // ITER_NUM_SCALE_FACTOR_SIM (integer division).
    double const iters = std::max(1.0, std::floor(double(spec.iterations) / _opt.iteration_divisor));
    _table.job(_table.add(&spec, iters)).arena_iter_num = iters;
  }
  _t0 = trace.jobs.front().submit_time;
  // Rounds are counted in an int: a trace spanning more rounds than that is no trace of this interval.
  double const span_rounds = (trace.jobs.back().submit_time - _t0) / _opt.interval;
  TESSEL_REQUIRE(span_rounds <= 1e9, "the trace's submissions span ", trace.jobs.back().submit_time - _t0, " s (from ",
                 _t0, " to ", trace.jobs.back().submit_time, " s): at rounds of ", _opt.interval, " s that is ",
                 span_rounds, " rounds, more than the 1e9 a run counts");
  TESSEL_REQUIRE(_opt.no_progress_rounds >= 0, "no_progress_rounds must be >= 0, got ", _opt.no_progress_rounds);
  _node_down_until.assign(static_cast<std::size_t>(cluster.num_nodes()), -1);
  _rng_state = _opt.seed * 0x2545F4914F6CDD1Dull + 0x1234567ull;
  _result.policy = policy.name();
}

int Simulator::round_of(double submit_time) const {
  double const rel = (submit_time - _t0) / _opt.interval;
  // Arena submits a job in the round whose interval (t, t + 300] contains it, i.e. up to a round early.
  int const r = static_cast<int>(std::ceil(rel - 1e-9)) - (_opt.arena_compat ? 1 : 0);
  return std::max(0, r);
}

double Simulator::iter_time_of(JobRecord const &j) const {
  return _oracle.iter_time(j.spec->model, j.spec->batch_size, j.quota_type, j.quota_hosts, j.quota_per_host);
}

void Simulator::submit_arrivals() {
  auto &jobs = _table.jobs();
  while (_next_arrival < jobs.size() && round_of(jobs[_next_arrival].spec->submit_time) <= _table.round()) {
    auto &j = jobs[_next_arrival++];
    double const submitted = _opt.arena_compat ? _table.now() : j.spec->submit_time;
    int const avail = _cluster.type_gpus(j.spec->gpu_type);
    std::string refusal;
    if (j.spec->num_gpus > avail)
      refusal = "requests " + std::to_string(j.spec->num_gpus) + " GPUs of type " +
                _cluster.type(j.spec->gpu_type).name + "; the cluster has " + std::to_string(avail);
    else if (!is_power_of_two(j.spec->num_gpus))
      refusal =
          "requests " + std::to_string(j.spec->num_gpus) + " GPUs; placement supports power-of-two GPU counts only";
    if (refusal.empty()) {
      _table.admit(j.id, submitted);
    } else {
      _table.enter(j.id, submitted, _table.round());
      _table.reject(j.id, std::move(refusal));
    }
  }
}

void Simulator::advance() {
  double const I = _opt.interval;
  double const now = _table.now();
  for (auto &j : _table.jobs()) {
    if (j.state != JobState::running)
      continue;
    double const it = iter_time_of(j);
    bool done = false;
    double finish = now;
    double const before = j.remaining;
    if (_opt.arena_compat) {
      if (j.arena_debt > 0) {
        watch_progress(j, false);
        continue; // still re-tuning (Arena skips jobs in its time-debt table)
      }
      j.arena_exec_time += I;
      j.remaining = j.arena_iter_num - py_floordiv(j.arena_exec_time, it);
      if (j.arena_exec_time - j.arena_checkpoint_exec >= _opt.checkpoint_interval)
        j.arena_checkpoint_exec = j.arena_exec_time;
      done = j.remaining <= 0;
    } else {
      double avail = I;
      double const use = std::min(j.overhead, avail);
      j.overhead -= use;
      avail -= use;
      double const need = j.remaining * it;
      if (need <= avail) {
        done = true;
        finish = now - I + use + need;
        j.remaining = 0;
      } else {
        j.remaining -= avail / it;
        j.since_checkpoint += avail;
        if (j.since_checkpoint >= _opt.checkpoint_interval) {
          j.checkpoint_remaining = j.remaining;
          j.since_checkpoint = 0;
        }
      }
    }
    // Progress is work done at a throughput above zero (an infeasible placement's iteration time is finite, 1e9 s).
    bool const progressed = done || (j.throughput > 0 && j.remaining < before);
    _watch.progressed = _watch.progressed || progressed;
    watch_progress(j, progressed);
    if (done)
      _table.complete(j.id, finish);
  }
}

void Simulator::suspended(JobRecord &j) {
  // Arena sets iter_num to the remaining iterations but keeps the executed time.
  j.arena_debt = 0;
  j.arena_iter_num = j.remaining;
  j.arena_checkpoint_exec = j.arena_exec_time;
}

void Simulator::rolled_back(JobRecord &j) { j.arena_exec_time = j.arena_checkpoint_exec; }

void Simulator::evicted(JobRecord &j) { j.arena_debt = 0; }

void Simulator::inject_failures() {
  double const I = _opt.interval;
  if (_opt.node_mtbf_hours > 0) {
    double const p = 1.0 - std::exp(-I / (_opt.node_mtbf_hours * 3600.0));
    for (int n = 0; n < _cluster.num_nodes(); ++n) {
      double const u = next_uniform(_rng_state);
      if (_table.alloc().node_down(n) || u >= p)
        continue;
      // Every job with a GPU on the node loses its GPUs (all of them) and restarts from its checkpoint.
      int const first = _cluster.node_first_gpu(n), cap = _cluster.node_capacity(n);
      std::vector<int> victims;
      for (int g = first; g < first + cap; ++g) {
        int const o = _table.alloc().owner(g);
        if (o >= 0 && std::find(victims.begin(), victims.end(), o) == victims.end())
          victims.push_back(o);
      }
      for (int v : victims)
        _table.fail(v);
      _table.alloc().set_node_down(n, true);
      _node_down_until[static_cast<std::size_t>(n)] = _table.round() + std::max(1, _opt.node_repair_rounds);
    }
  }
  if (_opt.job_mtbf_hours > 0) {
    double const p = 1.0 - std::exp(-I / (_opt.job_mtbf_hours * 3600.0));
    for (auto &j : _table.jobs()) {
      if (j.state != JobState::running)
        continue;
      if (next_uniform(_rng_state) >= p)
        continue;
      // A crashed job restarts in place from its last checkpoint.
      _table.roll_back(j.id);
      if (!_opt.arena_compat)
        j.overhead += _opt.restart_cost;
    }
  }
}

void Simulator::account_round(std::vector<int> const &before) {
  double const I = _opt.interval;
  auto const &owners = _table.alloc().owners();
  int const T = _cluster.num_types();
  // Quotas of running jobs from the allocation, and the jobs that gained a GPU they did not hold (Arena attributes
  // every changed GPU to its new holder).
  std::vector<int> count(_table.jobs().size(), 0), nodes(_table.jobs().size(), 0), last_node(_table.jobs().size(), -1);
  std::vector<char> gained(_table.jobs().size(), 0), lost(_table.jobs().size(), 0);
  for (std::size_t g = 0; g < owners.size(); ++g)
    if (before[g] >= 0 && owners[g] != before[g])
      lost[static_cast<std::size_t>(before[g])] = 1;
  std::vector<int> used(static_cast<std::size_t>(T), 0);
  for (std::size_t g = 0; g < owners.size(); ++g) {
    int const o = owners[g];
    if (o < 0)
      continue;
    int const node = _cluster.gpu_node(static_cast<int>(g));
    auto const oi = static_cast<std::size_t>(o);
    ++count[oi];
    if (last_node[oi] != node) {
      last_node[oi] = node;
      ++nodes[oi];
    }
    _table.jobs()[oi].quota_type = _cluster.node_type(node);
    ++used[static_cast<std::size_t>(_cluster.node_type(node))];
    if (before[g] != o)
      gained[oi] = 1;
  }
  ReschedCost const cost = _policy.resched_cost();
  double thr_sum = 0;
  int running = 0, pending = 0;
  for (auto &j : _table.jobs()) {
    auto const ji = static_cast<std::size_t>(j.id);
    if (j.state == JobState::pending) {
      ++pending;
      j.queue_time += I;
      continue;
    }
    if (j.state != JobState::running)
      continue;
    ++running;
    j.quota_gpus = count[ji];
    j.quota_hosts = nodes[ji];
    j.quota_per_host = nodes[ji] > 0 ? count[ji] / nodes[ji] : 0;
    double thr = _oracle.adaptive(j.spec->model, j.spec->batch_size, j.quota_type, j.quota_hosts, j.quota_per_host);
    if (thr < 0)
      thr = 0;
    j.throughput = thr;
    j.stalled_moves += gained[ji] ? 1 : 0;
    if (gained[ji])
      ++j.reschedules;
    thr = charge_retuning(j, thr, gained[ji] ? cost.of(j.quota_gpus) : 0, gained[ji], lost[ji]);
    thr_sum += thr;
  }
  _result.round_time.push_back(_table.now());
  _result.throughput.push_back(thr_sum);
  _result.running.push_back(running);
  _result.pending.push_back(pending);
  _result.used_gpus.push_back(used);
}

// The round's throughput of a running job that is paying \p tune seconds of re-tuning for GPUs it gained.
double Simulator::charge_retuning(JobRecord &j, double thr, double tune, bool gained, bool lost) const {
  double const I = _opt.interval;
  if (!_opt.arena_compat) {
    // Every new attempt (start, move, shrink) waits for the cluster manager to launch it.
    j.overhead += tune + (gained || lost ? _opt.start_latency : 0.0);
    return thr * (std::max(0.0, I - j.overhead) / I);
  }
  // Arena's _get_cluster_perf: tuning within the round scales this round's throughput; longer tuning becomes a time
  // debt that zeroes throughput and stalls progress until paid.
  if (gained) {
    if (tune <= I) {
      thr *= (I - tune) / I;
      j.arena_debt = 0;
    } else {
      j.arena_debt = tune;
    }
  }
  if (j.arena_debt > 0) {
    if (j.arena_debt <= I) {
      thr *= (I - j.arena_debt) / I;
      j.arena_debt = 0;
    } else {
      thr = 0;
      j.arena_debt -= I;
    }
  }
  return thr;
}

std::string Simulator::stall_reason(JobRecord const &j) const {
  std::string const where = std::to_string(j.quota_gpus) + " " + _cluster.type(j.quota_type).name + " GPUs (" +
                            std::to_string(j.quota_hosts) + " hosts x " + std::to_string(j.quota_per_host) + ")";
  if (j.throughput <= 0)
    return "its throughput on " + where + " is 0: " + _policy.name() + " keeps it where it cannot progress";
  if (j.stalled_moves > 1)
    return _policy.name() + " gave it new GPUs " + std::to_string(j.stalled_moves) + " times in these rounds (now " +
           where + "), each time before its re-tuning was paid off";
  return "re-tuning and restore time still owed: " + std::to_string(j.overhead + j.arena_debt) + " s on " + where;
}

void Simulator::watch_progress(JobRecord &j, bool progressed) {
  j.stalled_rounds = progressed ? 0 : j.stalled_rounds + 1;
  j.stalled_moves = progressed ? 0 : j.stalled_moves;
  if (j.stalled_rounds != _stall_bound + 1)
    return;
  std::string const stall =
      tessel::Impl::concat("round ", _table.round(), ": running job ", j.spec->id, " made no progress in ",
                           j.stalled_rounds, " rounds (at most ", _stall_bound, " allowed): ", stall_reason(j));
  _result.stalls.push_back(stall);
  // Arena's own accounting starves jobs its policies move faster than they re-tune; --arena-compat reproduces
  // that and reports it. Anything else is a defect of the policy.
  bool const arenas = _opt.arena_compat && j.throughput > 0;
  TESSEL_REQUIRE(!_opt.check_invariants || arenas, stall);
}

void Simulator::check_invariants() const {
  std::vector<int> free_node(static_cast<std::size_t>(_cluster.num_nodes()), 0);
  std::vector<int> free_type(static_cast<std::size_t>(_cluster.num_types()), 0);
  std::vector<int> held(_table.jobs().size(), 0);
  for (int g = 0; g < _cluster.num_gpus(); ++g) {
    int const o = _table.alloc().owner(g);
    int const node = _cluster.gpu_node(g);
    if (o == kFree) {
      ++free_node[static_cast<std::size_t>(node)];
      ++free_type[static_cast<std::size_t>(_cluster.node_type(node))];
    } else if (o >= 0) {
      TESSEL_REQUIRE(o < static_cast<int>(_table.jobs().size()), "round ", _table.round(), ": GPU ", g,
                     " held by unknown job ", o);
      TESSEL_REQUIRE(_table.jobs()[static_cast<std::size_t>(o)].state == JobState::running, "round ", _table.round(),
                     ": GPU ", g, " held by job ", _table.jobs()[static_cast<std::size_t>(o)].spec->id, " in state ",
                     state_name(_table.jobs()[static_cast<std::size_t>(o)].state));
      ++held[static_cast<std::size_t>(o)];
    } else {
      TESSEL_REQUIRE(o == kDown, "round ", _table.round(), ": GPU ", g, " has invalid owner ", o);
    }
  }
  for (int n = 0; n < _cluster.num_nodes(); ++n)
    TESSEL_REQUIRE(free_node[static_cast<std::size_t>(n)] == _table.alloc().free_on_node(n), "round ", _table.round(),
                   ": free count of node ", n, " is ", _table.alloc().free_on_node(n), ", the GPUs say ",
                   free_node[static_cast<std::size_t>(n)]);
  for (int t = 0; t < _cluster.num_types(); ++t)
    TESSEL_REQUIRE(free_type[static_cast<std::size_t>(t)] == _table.alloc().free_of_type(t), "round ", _table.round(),
                   ": free count of type ", _cluster.type(t).name, " is off");
  for (auto const &j : _table.jobs()) {
    int const h = held[static_cast<std::size_t>(j.id)];
    if (j.state != JobState::running) {
      TESSEL_REQUIRE(h == 0, "round ", _table.round(), ": job ", j.spec->id, " in state ", state_name(j.state),
                     " holds ", h, " GPUs");
      continue;
    }
    Placement const p = placement_of(_table.alloc(), j.id); // throws on mixed GPU types
    TESSEL_REQUIRE(p.num_gpus > 0 && p.uniform() && is_power_of_two(p.num_gpus) && is_power_of_two(p.per_host()),
                   "round ", _table.round(), ": running job ", j.spec->id,
                   " has a non-uniform or non-power-of-two layout (", p.num_gpus, " GPUs on ", p.nodes.size(),
                   " nodes)");
    TESSEL_REQUIRE(p.num_gpus == j.quota_gpus && p.gpu_type == j.quota_type && p.hosts() == j.quota_hosts, "round ",
                   _table.round(), ": job ", j.spec->id, " quota differs from its GPUs");
  }
}

SimResult Simulator::run() {
  using clock = std::chrono::steady_clock;
  auto const wall0 = clock::now();
  SchedContext ctx(static_cast<SchedWorld &>(*this));
  for (int round = 0;; round = next_round(round)) {
    _table.begin_round(round, _t0 + round * _opt.interval);
    _watch.progressed = false;
    for (int n = 0; n < _cluster.num_nodes(); ++n)
      if (_node_down_until[static_cast<std::size_t>(n)] >= 0 &&
          _node_down_until[static_cast<std::size_t>(n)] <= round) {
        _table.alloc().set_node_down(n, false);
        _node_down_until[static_cast<std::size_t>(n)] = -1;
        _table.node_repaired(n);
      }
    submit_arrivals();
    advance();
    inject_failures();
    std::vector<int> const before = _table.alloc().owners();
    auto const t0 = clock::now();
    _policy.schedule(ctx);
    _table.events_presented();
    _result.sched_ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    account_round(before);
    if (_opt.check_invariants)
      check_invariants();
    if (_opt.observer)
      _opt.observer(round, _table.alloc(), _table.jobs());
    if (finished_or_stuck(_watch))
      break;
  }
  _result.metrics = summarize(_result);
  _result.metrics.wall_seconds = std::chrono::duration<double>(clock::now() - wall0).count();
  _result.oracle_lookups = _oracle.lookups();
  _result.oracle_computed = _oracle.computed();
  return std::move(_result);
}

// The next round to simulate: the next one, or, when no job runs or waits, the round of the next submission (the
// rounds between change nothing; with node failures injected they draw failures and are simulated).
int Simulator::next_round(int round) const {
  bool const idle = std::none_of(_table.jobs().begin(), _table.jobs().end(), [](JobRecord const &j) {
    return j.state == JobState::running || j.state == JobState::pending;
  });
  if (!idle || _next_arrival >= _table.jobs().size() || _opt.node_mtbf_hours > 0)
    return round + 1;
  int next = std::max(round + 1, round_of(_table.jobs()[_next_arrival].spec->submit_time));
  if (_opt.max_rounds > 0)
    next = std::min(next, _opt.max_rounds - 1);
  return std::max(round + 1, next);
}

// End of a round: reports progress and says whether the run is over: every job ended; the round limit; nothing can
// run again (the jobs left are rejected with why); or no job progressed for no_progress_rounds rounds (the jobs left
// are unfinished). SimResult::end_reason says which.
bool Simulator::finished_or_stuck(Watch &w) {
  int const round = _table.round();
  int running = 0, pending = 0, done = 0;
  for (auto const &j : _table.jobs()) {
    running += j.state == JobState::running;
    pending += j.state == JobState::pending;
    done += j.state == JobState::completed || j.state == JobState::rejected;
  }
  if (_opt.progress)
    _opt.progress(round, running, pending, done);
  bool const all_submitted = _next_arrival == _table.jobs().size();
  if (all_submitted && running == 0 && pending == 0) {
    _result.end_reason = "every job ended";
    return true;
  }
  if (_opt.max_rounds > 0) {
    if (round + 1 < _opt.max_rounds)
      return false;
    _result.end_reason = tessel::Impl::concat("the round limit (", _opt.max_rounds, " rounds)");
    return true;
  }
  bool any_down = false;
  for (int n = 0; n < _cluster.num_nodes() && !any_down; ++n)
    any_down = _table.alloc().node_down(n);
  // Nothing can ever run again: every remaining job is pending on an idle cluster with no node down.
  w.idle_rounds = all_submitted && running == 0 && pending > 0 && !any_down ? w.idle_rounds + 1 : 0;
  if (w.idle_rounds >= 3) {
    for (auto &j : _table.jobs())
      if (j.state == JobState::pending)
        _table.reject(j.id, "never placed: " + _policy.name() + " found no allocation for it on an idle cluster");
    _result.end_reason = tessel::Impl::concat(pending, " jobs never placed on an idle cluster (rejected)");
    return true;
  }
  // Livelock or starvation: jobs left, none of them progressing.
  int const bound = _opt.no_progress_rounds > 0 ? _opt.no_progress_rounds : _stall_bound + 3;
  w.still_rounds = all_submitted && !any_down && !w.progressed ? w.still_rounds + 1 : 0;
  if (w.still_rounds < bound)
    return false;
  _result.end_reason = tessel::Impl::concat("no job progressed in the last ", w.still_rounds, " rounds: ", running,
                                            " running and ", pending, " pending jobs left unfinished");
  return true;
}

SimMetrics Simulator::summarize(SimResult &result) const {
  SimMetrics m;
  m.rounds = _table.round() + 1;
  std::vector<double> jcts, queues;
  double first_submit = std::numeric_limits<double>::infinity(), last_finish = 0;
  for (auto const &j : _table.jobs()) {
    JobResult r;
    r.id = j.spec->id;
    r.state = j.state;
    r.reject_reason = j.reject_reason;
    r.submit_time = j.submit_round >= 0 ? j.submit_time : j.spec->submit_time;
    r.start_time = j.start_time;
    r.finish_time = j.finish_time;
    r.queue_time = j.queue_time;
    r.gpu_type = j.quota_type;
    r.num_gpus = j.quota_gpus;
    r.reschedules = std::max(0, j.reschedules - (j.start_time >= 0 ? 1 : 0));
    r.failures = j.failures;
    if (j.state != JobState::waiting)
      ++m.submitted;
    if (j.state == JobState::completed) {
      r.jct = j.finish_time - r.submit_time;
      TESSEL_REQUIRE(r.jct >= 0, "simulation: job '", r.id, "' finished at ", j.finish_time,
                     " s, before its submission at ", r.submit_time, " s");
      jcts.push_back(r.jct);
      queues.push_back(j.queue_time);
      ++m.completed;
      first_submit = std::min(first_submit, r.submit_time);
      last_finish = std::max(last_finish, j.finish_time);
    } else if (j.state == JobState::rejected) {
      ++m.rejected;
    } else if (j.state != JobState::waiting) {
      ++m.unfinished;
      queues.push_back(j.queue_time);
    }
    m.reschedules += r.reschedules;
    m.failures += r.failures;
    result.jobs.push_back(std::move(r));
  }
  m.avg_jct = mean(jcts);
  m.p50_jct = Impl::percentile(jcts, 50);
  m.p99_jct = Impl::percentile(jcts, 99);
  m.makespan = m.completed ? last_finish - first_submit : 0;
  m.avg_queue = mean(queues);
  // Arena averages the rounds whose throughput exceeds 100 samples/s; we average the rounds with a running job.
  std::vector<double> thr;
  for (std::size_t r = 0; r < result.throughput.size(); ++r) {
    bool const counted = _opt.arena_compat ? result.throughput[r] > 100 : result.running[r] > 0;
    if (counted)
      thr.push_back(result.throughput[r]);
    m.peak_throughput = std::max(m.peak_throughput, result.throughput[r]);
  }
  m.avg_throughput = mean(thr);
  int const T = _cluster.num_types();
  m.utilization.assign(static_cast<std::size_t>(T), 0);
  std::size_t active = 0;
  for (std::size_t r = 0; r < result.used_gpus.size(); ++r) {
    if (result.running[r] == 0 && result.pending[r] == 0)
      continue;
    ++active;
    for (int t = 0; t < T; ++t)
      m.utilization[static_cast<std::size_t>(t)] +=
          double(result.used_gpus[r][static_cast<std::size_t>(t)]) / _cluster.type_gpus(t);
  }
  for (auto &u : m.utilization)
    u = active ? u / double(active) : 0;
  m.sched_seconds = std::accumulate(result.sched_ms.begin(), result.sched_ms.end(), 0.0) / 1000.0;
  m.sched_ms_per_round = result.sched_ms.empty() ? 0 : m.sched_seconds * 1000.0 / double(result.sched_ms.size());
  m.sched_ms_max = result.sched_ms.empty() ? 0 : *std::max_element(result.sched_ms.begin(), result.sched_ms.end());
  return m;
}

SimResult simulate(Cluster const &cluster, Trace const &trace, ProfileTable const *table, Estimator const *estimator,
                   ThroughputSource source, std::string const &policy_name, SimOptions const &options,
                   PolicyOptions const &policy_options) {
  ThroughputOracle oracle(cluster, table, estimator, source, options.interval);
  auto policy = make_policy(policy_name, policy_options);
  Simulator sim(cluster, trace, oracle, *policy, options);
  return sim.run();
}

JctReduction jct_reduction(SimResult const &crius, SimResult const &baseline, double pad_value) {
  std::vector<double> c, b;
  for (auto const &j : crius.jobs)
    if (j.state == JobState::completed)
      c.push_back(j.jct);
  for (auto const &j : baseline.jobs)
    if (j.state == JobState::completed)
      b.push_back(j.jct);
  JctReduction r;
  double const mc = mean(c), mb = mean(b);
  r.raw = mb > 0 ? (mb - mc) / mb : 0;
  if (b.size() > c.size()) {
    r.padded_defined = false;
    return r;
  }
  b.resize(c.size(), pad_value);
  double const mp = mean(b);
  r.padded = mp > 0 ? (mp - mc) / mp : 0;
  return r;
}

} // namespace tessel::sched

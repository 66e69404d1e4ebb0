#include <tessel/sched/TypeAssignment.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <functional>
#include <limits>

namespace tessel::sched {

namespace {

struct Entry {
  double delta;
  int job;
};

// Jobs moving from type `from` to type `to` that hold `gpus` GPUs, best gain first.
struct MoveClass {
  int from, to, gpus;
  std::vector<Entry> entries;
};

class Solver {
public:
  explicit Solver(TypeAssignmentProblem const &p) : _p(p), _K(static_cast<int>(p.capacity.size())) {
    std::size_t const n = p.gpus.size();
    TESSEL_REQUIRE(p.current.size() == n && p.value.size() == n, "type assignment: jobs arrays differ in length");
    TESSEL_REQUIRE(static_cast<int>(p.new_value.size()) == _K, "type assignment: new_value needs one entry per type");
    _loads.assign(static_cast<std::size_t>(_K), 0);
    for (std::size_t i = 0; i < n; ++i) {
      int const a = p.current[i];
      TESSEL_REQUIRE(a >= 0 && a < _K && static_cast<int>(p.value[i].size()) == _K, "type assignment: job ", i,
                     " has an invalid type or value row");
      _loads[static_cast<std::size_t>(a)] += p.gpus[i];
      _base += p.value[i][static_cast<std::size_t>(a)];
      for (int b = 0; b < _K; ++b) {
        if (b == a)
          continue;
        double const d = p.value[i][static_cast<std::size_t>(b)] - p.value[i][static_cast<std::size_t>(a)];
        MoveClass *cls = nullptr;
        for (auto &c : _classes)
          if (c.from == a && c.to == b && c.gpus == p.gpus[i])
            cls = &c;
        if (!cls) {
          _classes.push_back({a, b, p.gpus[i], {}});
          cls = &_classes.back();
        }
        cls->entries.push_back({d, static_cast<int>(i)});
      }
    }
    for (auto &c : _classes)
      std::stable_sort(c.entries.begin(), c.entries.end(),
                       [](Entry const &x, Entry const &y) { return x.delta > y.delta; });
    std::stable_sort(_classes.begin(), _classes.end(), [](MoveClass const &x, MoveClass const &y) {
      return x.entries.front().delta > y.entries.front().delta;
    });
  }

  TypeAssignment solve() {
    for (int size = 0; size <= std::max(0, _p.max_moves); ++size)
      for (int t = 0; t < _K; ++t) {
        _t = t;
        std::vector<int> loads = _loads;
        loads[static_cast<std::size_t>(t)] += _p.new_gpus;
        _chosen.clear();
        enumerate(size, 0, loads, 0.0);
      }
    return _best;
  }

private:
  bool fits(std::vector<int> const &loads) const {
    for (int k = 0; k < _K; ++k)
      if (loads[static_cast<std::size_t>(k)] > _p.capacity[static_cast<std::size_t>(k)])
        return false;
    return true;
  }

  // Best distinct jobs for the chosen classes (a class chosen k times gives its k best jobs).
  bool pick(double &gain, std::vector<std::pair<int, int>> &moves) const {
    // Greedy first; a job can sit in two classes (same source, other target) only, so conflicts are rare.
    std::vector<int> used;
    gain = 0;
    moves.clear();
    bool conflict = false;
    for (std::size_t i = 0; i < _chosen.size(); ++i) {
      int const c = _chosen[i];
      std::size_t rank = 0;
      for (std::size_t k = 0; k < i; ++k)
        rank += _chosen[k] == c;
      auto const &e = _classes[static_cast<std::size_t>(c)].entries;
      if (rank >= e.size())
        return false;
      int const job = e[rank].job;
      if (std::find(used.begin(), used.end(), job) != used.end())
        conflict = true;
      used.push_back(job);
      gain += e[rank].delta;
      moves.emplace_back(job, _classes[static_cast<std::size_t>(c)].to);
    }
    if (!conflict)
      return true;
    // Exhaustive over the top candidates of each chosen class.
    double best = -std::numeric_limits<double>::infinity();
    std::vector<std::pair<int, int>> best_moves, cur;
    std::vector<int> taken;
    std::function<void(std::size_t, double)> rec = [&](std::size_t i, double sum) {
      if (i == _chosen.size()) {
        if (sum > best) {
          best = sum;
          best_moves = cur;
        }
        return;
      }
      auto const &cls = _classes[static_cast<std::size_t>(_chosen[i])];
      std::size_t const limit = std::min<std::size_t>(cls.entries.size(), _chosen.size() + 2);
      for (std::size_t r = 0; r < limit; ++r) {
        int const job = cls.entries[r].job;
        if (std::find(taken.begin(), taken.end(), job) != taken.end())
          continue;
        // Within one class keep entries in increasing rank order so each set is visited once.
        if (i > 0 && _chosen[i - 1] == _chosen[i] && !cur.empty()) {
          auto const &prev = _classes[static_cast<std::size_t>(_chosen[i])].entries;
          std::size_t prev_rank = 0;
          while (prev_rank < prev.size() && prev[prev_rank].job != cur.back().first)
            ++prev_rank;
          if (r <= prev_rank)
            continue;
        }
        taken.push_back(job);
        cur.emplace_back(job, cls.to);
        rec(i + 1, sum + cls.entries[r].delta);
        cur.pop_back();
        taken.pop_back();
      }
    };
    rec(0, 0.0);
    if (best_moves.empty())
      return false;
    gain = best;
    moves = best_moves;
    return true;
  }

  void consider(double partial_hint) {
    (void)partial_hint;
    double gain;
    std::vector<std::pair<int, int>> moves;
    if (!pick(gain, moves))
      return;
    double const obj = _base + _p.new_value[static_cast<std::size_t>(_t)] + gain;
    if (!_best.feasible || obj > _best.objective) {
      _best.feasible = true;
      _best.objective = obj;
      _best.new_type = _t;
      std::sort(moves.begin(), moves.end());
      _best.moves = moves;
    }
  }

  void enumerate(int left, std::size_t from, std::vector<int> &loads, double partial) {
    if (left == 0) {
      if (fits(loads))
        consider(partial);
      return;
    }
    for (std::size_t c = from; c < _classes.size(); ++c) {
      auto const &cls = _classes[c];
      // Upper bound: the classes are sorted by their best gain, so no later choice beats this one's best.
      double const bound =
          _base + _p.new_value[static_cast<std::size_t>(_t)] + partial + left * cls.entries.front().delta;
      if (_best.feasible && bound <= _best.objective)
        return;
      std::size_t rank = 0;
      for (int k : _chosen)
        rank += static_cast<std::size_t>(k) == c;
      if (rank >= cls.entries.size())
        continue;
      loads[static_cast<std::size_t>(cls.from)] -= cls.gpus;
      loads[static_cast<std::size_t>(cls.to)] += cls.gpus;
      _chosen.push_back(static_cast<int>(c));
      enumerate(left - 1, c, loads, partial + cls.entries[rank].delta);
      _chosen.pop_back();
      loads[static_cast<std::size_t>(cls.from)] += cls.gpus;
      loads[static_cast<std::size_t>(cls.to)] -= cls.gpus;
    }
  }

  TypeAssignmentProblem const &_p;
  int _K;
  int _t = 0;
  std::vector<int> _loads;
  double _base = 0;
  std::vector<MoveClass> _classes;
  std::vector<int> _chosen;
  TypeAssignment _best;
};

} // namespace

TypeAssignment solve_type_assignment(TypeAssignmentProblem const &problem) {
  TESSEL_REQUIRE(!problem.capacity.empty(), "type assignment: no GPU types");
  return Solver(problem).solve();
}

} // namespace tessel::sched

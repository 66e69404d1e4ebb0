#ifndef TESSEL_MOE_COMETSEARCH_HPP
#define TESSEL_MOE_COMETSEARCH_HPP

/// \file CometSearch.hpp
/// \brief The one search for comet parameters by measurement: one knob grid and one measurement protocol, shared by
/// the tools' `--tune` (no time limit; the winner goes into a registry file) and the host layer's first-use tuning
/// (a bounded budget; the winner goes into the per-user cache), so that registry and cache come from the same search.

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Communicator.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::moe {

/// \brief The values the search tries per knob, in the order it walks the knobs: the M tile first (on the host
/// every GEMM call packs the expert's weights, so the tile matters most), then the column blocks, the
/// communication workers, the token ranges, the policy and the sends in flight. A bounded search that runs out of
/// time has spent it on the knobs that matter most.
struct CometSearchGrid {
  std::vector<std::int64_t> tiles;  ///< CometParams::tile_m values
  std::vector<int> splits;          ///< CometParams::n_splits values
  std::vector<int> workers;         ///< CometParams::comm_workers values
  std::vector<int> ranges;          ///< CometParams::m_splits values
  std::vector<PlanPolicy> policies; ///< CometParams::policy values
  std::vector<int> in_flight;       ///< CometParams::in_flight values

  /// \brief The grid for \p config: M tiles doubling from min(128, half the fallback rule's tile) (at least 32) up
  /// to the rows one source sends one expert (M topk / E, next power of two; at least the rule's tile, at most
  /// 1024: larger tiles change nothing); column blocks 1, 2, 4, 8 of at least 32 columns each; 0, 1 or 2
  /// communication workers; 1, 2 or 4 token ranges; both policies; no in-flight limit or 4 sends.
  static CometSearchGrid of(MoeConfig const &config);
};

/// \brief How a search spends its time.
struct CometSearchOptions {
  /// Wall-time limit in seconds, warm-up and final run included; 0: none. A round of a stage starts only when it
  /// and the final run fit in what is left (each run estimated by the slowest run so far), so the search takes
  /// about the budget at most; a budget too small for one round of the first stage measures nothing.
  double budget = 0.0;
  /// Runs of each candidate of a stage, interleaved (one run of each per round): a change of the machine's load
  /// slows them alike. A candidate's score is the median of its runs.
  int rounds = 3;
  /// Where the search starts; unset: fallback_params(). The rule is a candidate of the first and the last stage.
  std::optional<CometParams> start;
  /// Told every candidate's score ("tune: workers=0 ... -> 41.2 ms"), on every rank.
  std::function<void(std::string const &)> progress;
};

/// \brief What a search found.
struct CometSearchResult {
  CometParams best;          ///< the winner (the start when nothing was measured)
  double best_seconds = 0.0; ///< its score (0: nothing measured)
  double rule_seconds = 0.0; ///< fallback_params()'s last score (0: not measured)
  /// Every candidate's score (seconds per forward, the slowest rank's), stage by stage.
  std::vector<std::pair<CometParams, double>> measured;
  int runs = 0;             ///< forwards run, warm-up and final run included
  double seconds = 0.0;     ///< wall time of the search (maximum over ranks)
  bool out_of_time = false; ///< the budget ended the search before its last stage
};

/// \brief Searches the comet parameters of one layer by measurement. Collective over \p comm: every rank passes the
/// same arguments and gets the same result (decisions use times reduced over the ranks).
///
/// \p run_forward(p) runs one comet forward of the layer with parameters \p p on this rank. The protocol: one
/// warm-up forward of the start (it pays for first touches; not scored); a stage of the start against
/// fallback_params() when they differ; one stage per knob of CometSearchGrid::of(\p config), in its order, each the
/// current best against the knob's other values (candidates invalid for \p config on \p backend are skipped); a
/// last stage of the winner against the rule, since the load may have changed between stages. Every forward starts
/// after a barrier and lasts until the slowest rank is done; a stage runs its candidates in CometSearchOptions::rounds
/// interleaved rounds, and the lowest median wins. The search ends with a forward of the winner, so that the layer's
/// last output is the winner's.
CometSearchResult search_comet(Communicator const &comm, MoeConfig const &config, std::string const &backend,
                               CometSearchOptions const &options,
                               std::function<void(CometParams const &)> const &run_forward);

} // namespace tessel::moe

#endif

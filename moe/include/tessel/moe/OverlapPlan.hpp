#ifndef TESSEL_MOE_OVERLAPPLAN_HPP
#define TESSEL_MOE_OVERLAPPLAN_HPP

/// \file OverlapPlan.hpp
/// \brief COMET's tile schedule of one rank, independent of the backend: which tiles exist, in which priority
/// order they run, and what each waits for. The host path executes it with one compute thread and
/// communication threads; a CUDA path maps the same tiles onto a persistent kernel's thread blocks and the
/// dependencies onto per-source, per-chunk and per-split flags.
///
/// The rows a source s sends this rank are sorted by (chunk, local expert, token), where chunks are contiguous
/// ranges of s's tokens (m_splits of them; COMET as published has one).
/// Layer0 (dispatch -> GroupGEMM0 -> activation) splits the shared tensor along M: the rows of each
/// (source, chunk, expert) are cut into tiles of at most tile_m rows, and every remote tile arrives as its own
/// message (a per-source tile request), so it can start as soon as that message has landed. Local tiles need no
/// data and come first.
/// Layer1 (GroupGEMM1 -> top-k reduce -> combine) splits along N into column blocks: tile (s, c, e, b) computes
/// column block b of expert e's rows of chunk c and adds their top-k-weighted outputs into the per-token block
/// (b) that is sent to s. It needs expert e's layer0 tiles of (s, c) and, so that every schedule adds the experts
/// of a token in the same order, tile (s, c, e', b) of the previous expert e' with rows. The tile of the last
/// such expert completes the block, which is then sent while the next is computed. Column-major across experts
/// (COMET's order) is the local_first policy's order; critical_path runs a block's experts as their rows become
/// ready, so a source's block is sent right after its last expert's slice.

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::moe {

/// \brief Priority rule of the plan.
enum class PlanPolicy : int {
  /// COMET's order as published: all local layer0 tiles, then remote layer0 tiles by source in arrival order,
  /// then layer1 blocks column-major (remote sources first), the local source's layer1 last.
  local_first,
  /// Critical path first: a (source, chunk)'s layer1 blocks as soon as its layer0 is done (they feed the
  /// combine), then landed remote layer0 tiles, with local layer0 tiles as the filler that runs first (before
  /// anything has landed) and whenever nothing remote is ready; the local source's layer1 last (it sends
  /// nothing).
  critical_path
};
/// "local_first" or "critical_path".
char const *name_of(PlanPolicy policy);
/// Parses a policy name; throws naming the accepted values.
PlanPolicy parse_plan_policy(std::string const &name);

/// \brief One unit of work.
struct PlanTile {
  /// The two GEMMs of an expert.
  enum class Kind : std::uint8_t { layer0, layer1 };
  Kind kind = Kind::layer0;     ///< which GEMM
  int source = 0;               ///< rank whose tokens the tile computes
  int chunk = 0;                ///< range of the source's tokens
  int expert = -1;              ///< local expert (0-based in the group)
  std::int64_t row_begin = 0;   ///< layer0: first row, relative to the (source, chunk, expert) rows
  std::int64_t row_end = 0;     ///< layer0: end row
  int split = -1;               ///< layer1: column block
  std::int64_t col_begin = 0;   ///< layer1: first column
  std::int64_t col_end = 0;     ///< layer1: end column
  int message = -1;             ///< layer0 from a remote source: index of the message carrying the rows
  int position = 0;             ///< layer1: index of the expert among the (source, chunk)'s experts with rows
  bool completes_block = false; ///< layer1: the last expert of its (source, chunk, block): the block is done
};

/// \brief What a plan is built from.
struct PlanShape {
  int rank = 0;            ///< the rank the plan is for
  int world = 1;           ///< ranks of the layer
  std::int64_t hidden = 0; ///< N
  int experts = 1;         ///< local experts
  int chunks = 1;          ///< token ranges per source (m_splits)
  /// [source][chunk * experts + expert]: rows this rank computes for each source's tokens.
  std::vector<std::vector<std::int64_t>> rows;
  std::int64_t tile_m = 128;                     ///< rows per layer0 tile (and per message)
  int n_splits = 1;                              ///< column blocks of layer1
  PlanPolicy policy = PlanPolicy::critical_path; ///< the order of the tiles
};

/// \brief The tiles of one rank in static priority order, with their dependencies.
class OverlapPlan {
public:
  /// The plan of \p shape.
  static OverlapPlan build(PlanShape const &shape);

  /// The tiles in priority order.
  std::vector<PlanTile> const &tiles() const { return _tiles; }
  /// What the plan was built from.
  PlanShape const &shape() const { return _shape; }
  /// Remote sources in the order their data is expected (the reverse ring: senders go in ring order).
  std::vector<int> const &source_order() const { return _source_order; }
  /// Column boundaries of the N-split (n_splits + 1 entries).
  std::vector<std::int64_t> const &split_cols() const { return _split_cols; }
  /// Number of messages (remote layer0 tiles) from \p source.
  int messages_from(int source) const { return _messages[static_cast<std::size_t>(source)]; }
  /// Index of the layer0 tile that message \p message from \p source feeds.
  int tile_of_message(int source, int message) const;
  /// Number of layer0 tiles of (\p source, \p chunk) (all experts).
  int layer0_tiles_of(int source, int chunk) const;
  /// Number of layer0 tiles of (\p source, \p chunk, \p expert) (its layer1 tiles wait for all of them).
  int layer0_tiles_of(int source, int chunk, int expert) const;
  /// Rows of \p source before its (chunk, expert) rows (a source's rows are chunk-major, then expert-major).
  std::int64_t row_offset(int source, int chunk, int expert) const;
  /// Rows of (\p source, \p chunk) for all experts; source_rows(s) for all chunks.
  std::int64_t chunk_rows(int source, int chunk) const;
  /// Rows of \p source for all chunks and experts.
  std::int64_t source_rows(int source) const;

  /// \brief A message a sender emits for one destination: rows [row_begin, row_end) of (chunk, expert).
  struct Message {
    int chunk;              ///< the source's token range
    int expert;             ///< local expert
    std::int64_t row_begin; ///< first row of the (chunk, expert) rows
    std::int64_t row_end;   ///< end row
  };
  /// \brief The messages for \p rows ([chunk * experts + expert]) cut by \p tile_m, in the order both sides
  /// number them (chunk, expert, row).
  static std::vector<Message> messages_for(std::vector<std::int64_t> const &rows, int experts, std::int64_t tile_m);
  /// Even split of \p hidden into \p n_splits column blocks (the first hidden % n_splits one column wider).
  static std::vector<std::int64_t> split_columns(std::int64_t hidden, int n_splits);

private:
  PlanShape _shape;
  std::vector<PlanTile> _tiles;
  std::vector<int> _source_order;
  std::vector<std::int64_t> _split_cols;
  std::vector<int> _messages;
  std::vector<std::vector<int>> _layer0_count; // [source][chunk * experts + expert]
  std::vector<std::vector<int>> _message_tile;
};

/// \brief Runs a plan's tiles in priority order as their inputs become ready (list scheduling). Backend
/// neutral: the caller reports landed messages and finished tiles; next() names the tile to start.
class PlanScheduler {
public:
  /// Schedules \p plan's tiles (the plan must outlive the scheduler); nothing has landed or started.
  explicit PlanScheduler(OverlapPlan const &plan);
  /// Marks message \p message from \p source as landed.
  void landed(int source, int message);
  /// \brief Batching of remote layer0 work: a remote layer0 tile is preferred only once \p rows contiguous rows
  /// of its (source, chunk, expert) have landed from it on (or all the rest of those rows); otherwise it runs
  /// only when nothing else is ready, so the executor never idles. 0 (the default) disables batching. On the
  /// host, larger runs amortize the BLAS's packing of the expert's weights; data still never waits.
  void set_min_batch_rows(std::int64_t rows) { _min_batch_rows = rows; }
  /// The first tile in priority order that has not started and whose inputs are ready, or -1 (none ready now;
  /// more may become ready when messages land or tiles finish). Marks it started.
  int next();
  /// After next() (or this function) returned \p tile, a layer0 tile: the tile right after it in priority order
  /// when that tile continues the same (source, chunk, expert) rows, has not started and is ready, marked
  /// started; otherwise -1. An executor may run such a run of tiles as one GEMM (on the host, the BLAS packs the
  /// expert's weights once per call, so larger calls amortize it) without waiting for anything that has not
  /// landed.
  int next_contiguous(int tile);
  /// Marks \p tile started when it has not started and its inputs are ready; returns whether it did. An executor
  /// whose buffers hold other tiles' rows next to a started tile's (on the host: the remote sources of one
  /// (chunk, expert) back to back) may claim them to run them in the same GEMM.
  bool claim(int tile);
  /// Marks tile \p tile finished.
  void finish(int tile);
  /// True once every tile has started.
  bool all_started() const { return _started == static_cast<int>(_state.size()); }
  /// True once every tile has finished.
  bool all_finished() const { return _finished == static_cast<int>(_state.size()); }
  /// True when tile \p tile's inputs are ready: its message landed (layer0); its expert's layer0 rows and the
  /// previous expert's slice of its block are done (layer1).
  bool ready(int tile) const;

private:
  bool same_run(PlanTile const &a, PlanTile const &b) const;
  bool batch_complete(int tile) const;

  OverlapPlan const *_plan;
  std::vector<std::uint8_t> _state; // 0 waiting, 1 started, 2 finished
  std::vector<std::vector<std::uint8_t>> _landed;
  std::vector<std::vector<int>> _layer0_done; // [source][chunk * experts + expert]
  std::vector<std::vector<int>> _layer1_done; // [source][chunk * n_splits + block]: experts added so far
  int _first_open = 0;
  int _started = 0, _finished = 0;
  std::int64_t _min_batch_rows = 0;
};

} // namespace tessel::moe

#endif

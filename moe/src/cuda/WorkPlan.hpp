#ifndef TESSEL_MOE_CUDA_WORKPLAN_HPP
#define TESSEL_MOE_CUDA_WORKPLAN_HPP

// The host half of the device layer: from every rank's DispatchPlan, the slot table each source publishes in its
// symmetric allocation and the work lists of each destination (row index space, dispatch blocks, comet's messages
// and GEMM items in the order of the host OverlapPlan, top-k reduction items). Host code only (no device calls), so
// the moe.CudaWorkPlan test checks it on any machine by executing the lists on the host.
#include "KernelApi.hpp"

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/OverlapPlan.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Tuning.hpp>

#include <cstdint>
#include <vector>

namespace tessel::moe::cuda::Impl {

constexpr int reduce_slots = 32; // slots per top-k reduction item (4 per warp)

/// Where the rows of one (source, chunk) block live for the destination's EP group.
struct Block {
  std::int64_t send_row = 0;               // first row in the source's send rows
  std::int64_t rows = 0;                   // rows of the block
  std::vector<std::int64_t> expert_offset; // [E/EP + 1] rows before each expert within the block
  std::int64_t slot_begin = 0, slots = 0;  // the block's slots in the source's numbering for the group
};

/// One expert GEMM of the baselines: rows [row, row + rows) of the rank's index space through expert `expert`.
struct ExpertGemm {
  int expert = 0;
  std::int64_t row = 0, rows = 0;
};

/// The baselines' expert GEMMs of one token chunk (every source's block): the problems of one grouped GEMM call per
/// layer. Experts with rows only, ordered by row count (then source, expert) so that problems of one shape are
/// adjacent: group i is the next group_size[i] problems, each with group_rows[i] rows.
struct ChunkGemms {
  std::vector<ExpertGemm> problems;
  std::vector<std::int64_t> group_rows;
  std::vector<int> group_size;
};

/// The work of one rank (destination) in one forward.
struct RankWork {
  std::vector<std::vector<Block>> blocks;     // [source][chunk]
  std::vector<std::vector<std::int64_t>> row; // [source][chunk]: first row in this rank's index space
  std::int64_t rows = 0;
  std::vector<std::int64_t> table_base; // [source]: first slot of this rank's group in the source's slot table
  // comet
  std::vector<Message> messages;
  std::vector<Layer0Item> items0;
  std::vector<Layer1Item> items1;
  std::vector<int> split_tiles;
  std::vector<ReduceItem> reduces;
  // baselines: reduce items per chunk (all sources), columns [0, N); expert GEMMs per chunk
  std::vector<std::vector<ReduceItem>> chunk_reduces;
  std::vector<ChunkGemms> gemms;
};

/// The backward's index lists of one rank, as the expert side (destination) and as the owner of its tokens (source).
/// Row index space, blocks and slot tables are the forward's (RankWork, slot_table()).
struct BackwardWork {
  // Expert side: every source's output gradient per slot of this rank's group lands in grad_in, source-major
  // (source s's slots from row in_off[s], in the source's slot numbering); row i of the index space, from source s,
  // takes its output gradient from grad_in row in_off[s] + row_slot[i] and has the combine weight row_weight[i]
  // (both from the source's plan: empty when backward_work is told the peers' plans hold no rows, as NcclMoeLayer's,
  // which receives them from the sources instead).
  std::vector<std::int64_t> in_off; // [world + 1]
  std::vector<std::int32_t> row_slot;
  std::vector<float> row_weight;
  // Owner side: the output gradient packed per slot, group-major (group g's slots from row out_off[g]);
  // slot_token[j] is the token of packed row j; choice_row[t topk + k] is the row of the owner's dispatch plan that
  // carried (token t, its k-th expert).
  std::vector<std::int64_t> out_off; // [groups + 1]
  std::vector<std::int32_t> slot_token;
  std::vector<std::int32_t> choice_row; // [M topk]
  // Both: the forward's per-chunk reduction items (RankWork::chunk_reduces) of each (chunk, source):
  // reduce_at[chunk][source] .. reduce_at[chunk][source + 1] in the chunk-major concatenation.
  std::vector<std::vector<std::int64_t>> reduce_at; // [chunks][world + 1]
};

/// One rank's all-to-all, per peer: counts and displacements in elements (Communicator::alltoallv's arguments
/// once multiplied by the element size).
struct Alltoall {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  /// \p peers zero counts and displacements each (the peers a rank sends nothing stay at zero).
  void zero(std::size_t peers) {
    for (auto *v : {&send_counts, &send_displs, &recv_counts, &recv_displs})
      v->assign(peers, 0);
  }
};

/// NcclMoeLayer's backward messages of one token chunk for one rank (the token gradients go back as the forward's
/// combine).
struct BackwardExchange {
  /// Floats: the owner's output gradient per slot (g_out, group-major) into the expert sides' g_in.
  Alltoall slots;
  /// Elements (int32 slots, float weights): the owner's plan rows' slots and combine weights into the expert sides'
  /// row_slot and row_weight (rows of their index space).
  Alltoall rows;
  /// Floats: the expert sides' rows' combine-weight gradients (dw) into the owners' dw_recv ([world, M topk]).
  Alltoall dw;
};

/// NcclMoeLayer's forward messages of one token chunk for one rank.
struct ForwardExchange {
  /// Rows of N elements (the device precision): this rank's send rows of each destination's group into the
  /// destinations' x_recv (their row index space).
  Alltoall rows;
  /// Rows of N floats: the reduced rows (combine_send, [world, M, N] by source) into the owners' combine regions
  /// ([world, M, N] by sender).
  Alltoall slots;
};

/// What the peers' work lists need of a rank's DispatchPlan (its block offsets, chunk and group slot counts), as
/// int64 words to exchange: plan_summary_words() of them.
std::vector<std::int64_t> plan_summary(DispatchPlan const &plan);
std::size_t plan_summary_words(MoeConfig const &config, int chunks);
/// The plan a summary stands for (no rows: row_token, row_slot, ... empty).
DispatchPlan plan_from_summary(MoeConfig const &config, int chunks, std::int64_t const *summary);

/// Builds the work lists of one forward.
class WorkPlanner {
public:
  /// \p plans: the DispatchPlan of every rank (all with the same chunk count).
  WorkPlanner(MoeConfig const &config, std::vector<DispatchPlan> const &plans, CometParams const &comet);

  /// Source \p s's slot table: for each group, each slot's rows (relative to the slot's (chunk, group) block) in
  /// plan order (by expert), padded with -1, and their combine weights ([slots][topk]); \p table_base receives the
  /// first slot of each group (groups + 1 entries).
  void slot_table(int s, std::vector<std::int32_t> &rows, std::vector<float> &weights,
                  std::vector<std::int64_t> &table_base) const;
  /// First slot of each group in source \p s's slot table (groups + 1 entries; from the plan's group slot counts).
  std::vector<std::int64_t> table_base(int s) const;
  /// Destination \p d's blocks, row index space and the baselines' reduction items (per chunk).
  RankWork work_of(int d, int chunks, std::vector<std::vector<std::int64_t>> const &table_bases) const;
  /// comet's lists of destination \p d (one token chunk), in the order of the host OverlapPlan.
  void comet_work(int d, RankWork &w) const;
  /// The backward's lists of rank \p d: \p w is its forward work (work_of), \p chosen its routing's experts [M, topk].
  /// \p row_lists: fill row_slot and row_weight (needs every source's full plan).
  BackwardWork backward_work(int d, RankWork const &w, HostIndexMatrix chosen, bool row_lists = true) const;
  /// Rank \p d's forward messages of chunk \p ch (NcclMoeLayer): \p w is its work (work_of).
  ForwardExchange forward_exchange(int d, int ch, RankWork const &w) const;
  /// Rank \p d's backward messages of chunk \p ch (NcclMoeLayer): \p w and \p lists are d's (work_of, backward_work).
  BackwardExchange backward_exchange(int d, int ch, RankWork const &w, BackwardWork const &lists) const;

private:
  // comet_work's steps: the host OverlapPlan of destination \p d; its messages into \p w (their ids per source and
  // message); its GEMM items (returns the index of each split's last layer1 item); its reduction items.
  OverlapPlan comet_plan(int d) const;
  std::vector<std::vector<int>> comet_messages(OverlapPlan const &plan, RankWork &w) const;
  std::vector<std::int64_t> comet_items(int d, OverlapPlan const &plan, std::vector<std::vector<int>> const &message_id,
                                        RankWork &w) const;
  void comet_reduces(int d, OverlapPlan const &plan, std::vector<std::int64_t> const &split_last, RankWork &w) const;

  MoeConfig const &_config;
  std::vector<DispatchPlan> const &_plans;
  CometParams const &_comet;
  int _world = 1, _groups = 1, _experts_per_group = 1;
};

} // namespace tessel::moe::cuda::Impl

#endif

#ifndef TESSEL_MOE_CUDA_KERNELAPI_HPP
#define TESSEL_MOE_CUDA_KERNELAPI_HPP

// The thin interface between the device layer's host driver (src/cuda/RankDriver.cpp, host compiler) and its
// kernels (src/cuda/*.cu, nvcc): plain structs of raw device pointers and launchers that only enqueue work on a stream
// and return the launch status. No Kokkos, no tessel containers.
//
// Addressing of peers. Every rank owns one "symmetric" allocation of the same size with the same internal layout
// (SymmetricLayout). A peer's copy of a buffer is peer_base[peer] + offset: in the one-process multi-rank mode the
// bases are W allocations on one device; with NCCL they are the LSA pointers of one symmetric window
// (ncclGetLsaPointer(window, 0, peer)). The fused kernels only ever see that table, so they are the same code in
// both modes.
//
// Index space of the rows a rank computes: sources in rank order, each source's rows chunk-major, then expert-major,
// then by token (the order of the source's DispatchPlan block for this rank's EP group). Row r of source s lives at
// row src_base[s] + r of x_recv / h / y.

#include <tessel/core/DataType.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tessel::moe::cuda::Impl {

/// Error codes a kernel leaves in Control::error (0: none); the host turns them into exceptions. They also name the
/// kinds of device wait (RankView::skip_wait).
enum KernelError : int {
  no_error = 0,
  timeout_packed = 1,
  timeout_message = 2,
  timeout_split = 3,
  timeout_combine = 4
};

/// The abort word (SymmetricLayout::abort): 0 while no wait of any rank has given up; then the first failure to
/// reach this rank, as code << abort_code_shift | origin rank << abort_rank_shift | argument (32 bits). Every spin
/// of every rank polls its own copy, which the failing rank raises on all ranks, so all stop with the same error.
constexpr int abort_code_shift = 56, abort_rank_shift = 32;

#ifdef __CUDACC__
#define TESSEL_MOE_HOST_DEVICE __host__ __device__
#else
#define TESSEL_MOE_HOST_DEVICE
#endif

/// The abort word of a failed wait of kind \p code on rank \p rank (the one encoding the kernels and the host share).
constexpr TESSEL_MOE_HOST_DEVICE std::uint64_t abort_word(int code, int rank, int arg) {
  return (static_cast<std::uint64_t>(code) << abort_code_shift) |
         (static_cast<std::uint64_t>(rank) << abort_rank_shift) |
         static_cast<std::uint64_t>(static_cast<std::uint32_t>(arg));
}

/// Per-forward control words of one rank (zeroed before each forward; never written by peers).
struct Control {
  int tickets0 = 0, next_message = 0, next_item0 = 0; // layer0
  int tickets1 = 0, next_item1 = 0, next_comm = 0;    // layer1
  int error = 0, error_arg = 0;
};

/// Byte offsets of the symmetric buffers inside each rank's symmetric allocation (identical on every rank).
struct SymmetricLayout {
  std::size_t send_rows = 0;    ///< [M topk, N] T: the rank's packed dispatch rows (all groups, plan order)
  std::size_t slot_rows = 0;    ///< [M topk, topk] int32: per slot of each group, its rows (relative to the block)
  std::size_t slot_weight = 0;  ///< [M topk, topk] float: their combine weights (0 for padding)
  std::size_t combine = 0;      ///< [W, M, N] float: region r holds rank r's top-k-reduced rows of this rank's slots
  std::size_t packed_flag = 0;  ///< [W] uint64: packed_flag[s] = epoch once source s's send rows are packed
  std::size_t combine_flag = 0; ///< [W] uint64: number of communication blocks of rank r that stored to this rank
  std::size_t abort = 0;        ///< uint64: the abort word (raised by any rank, never cleared: the layer is done)
  std::size_t bytes = 0;
};

/// A remote layer0 tile's rows: copied by a communication block from the source's send rows into x_recv.
struct Message {
  int source = 0;
  int rows = 0;
  std::int64_t src_row = 0; ///< row in the source's send rows
  std::int64_t dst_row = 0; ///< row in this rank's index space (x_recv)
};

/// One GEMM work item of the fused layer0 kernel: up to 64 rows x 64 columns of h (the plan tile's rows cut in 64).
struct Layer0Item {
  std::int64_t a_row = 0; ///< first row of A: in the own send rows (local source) or in x_recv (remote)
  std::int64_t h_row = 0; ///< first row of h (this rank's index space)
  int rows = 0;
  int expert = 0;
  int col0 = 0;     ///< first column of h (of K/TP)
  int message = -1; ///< message whose arrival the item waits for; -1: local rows
};

/// One GEMM work item of layer1: up to 64 rows x 64 columns of y, in column block (split) \p split.
struct Layer1Item {
  std::int64_t row = 0; ///< first row (this rank's index space)
  int rows = 0;
  int expert = 0;
  int col0 = 0, cols = 0; ///< columns col0 .. col0 + cols - 1 (cols <= 64)
  int split = 0;
};

/// Top-k reduction of slots [slot_begin, slot_end) of \p source over columns [col_begin, col_end): reads the rows
/// through the source's slot table, writes fp32 rows into region \p rank of the source's combine buffer.
struct ReduceItem {
  int source = 0;
  int split = 0; ///< the column block this item waits for (fused kernel)
  int slot_begin = 0, slot_end = 0;
  int col_begin = 0, col_end = 0;
  std::int64_t row_base = 0;   ///< src_base[source]: the source's first row in this rank's index space
  std::int64_t table_base = 0; ///< first slot of this rank's group in the source's slot table
};

/// What every kernel of one rank needs to address itself and its peers.
struct RankView {
  int rank = 0, world = 1;
  char *const *peer_base = nullptr; ///< device array [world]
  SymmetricLayout layout;
  std::int64_t m = 0, n = 0, ffn_per_rank = 0; ///< tokens per rank, hidden, K/TP
  int topk = 1;
  long long timeout_ns = 0; ///< spins give up (and report) after this long
  Control *control = nullptr;
  int skip_wait = no_error; ///< tests only: the kind of wait (a KernelError code) that is skipped, to prove they fail
};

struct Layer0Args {
  RankView view;
  tessel::DataType dtype = tessel::DataType::float32;
  int activation = 0; ///< 0 silu, 1 gelu
  bool gated = true;
  std::uint64_t epoch = 0;
  int messages = 0;
  Message const *message = nullptr;
  int *message_ready = nullptr; ///< [messages], zeroed before the launch
  int items = 0;
  Layer0Item const *item = nullptr;
  void *x_recv = nullptr;   ///< written by the communication blocks, read by the GEMM blocks
  void const *w0 = nullptr; ///< [E/EP, N, cols0] T
  std::int64_t cols0 = 0;
  void *h = nullptr; ///< [rows, K/TP] T
  int comm_blocks = 1;
};

struct Layer1Args {
  RankView view;
  tessel::DataType dtype = tessel::DataType::float32;
  int items = 0;
  Layer1Item const *item = nullptr;
  void const *h = nullptr;
  void const *w1 = nullptr; ///< [E/EP, K/TP, N] T
  float *y = nullptr;       ///< [rows, N]
  int splits = 1;
  int const *split_tiles = nullptr; ///< [splits] items per split
  int *split_done = nullptr;        ///< [splits] zeroed before the launch
  int reduces = 0;
  ReduceItem const *reduce = nullptr;
  int comm_blocks = 1;
};

// -------------------------------------------------------------------------------------------------------------
// Fused COMET kernels (Comet.cu). Both are persistent: blocks take a role by arrival order (a ticket), so a block
// that waits only ever waits for blocks that are already running; the grid is sized by the caller from the
// occupancy API.
// -------------------------------------------------------------------------------------------------------------

/// Blocks of the fused kernels (threads per block).
constexpr int fused_threads = 256;
/// Rows and columns of one GEMM work item (the fused kernels' tile).
constexpr int item_rows = 64, item_cols = 64;

/// Resident blocks per SM of the fused kernels for \p dtype (occupancy API).
cudaError_t layer0_occupancy(tessel::DataType dtype, bool gated, int activation, int *blocks_per_sm);
cudaError_t layer1_occupancy(tessel::DataType dtype, int *blocks_per_sm);

/// Layer0: communication blocks (the first comm_blocks tickets) pull the remote tiles' rows from their sources
/// (peer pointers) into x_recv, in message order, after the source's packed flag; GEMM blocks run the items in
/// plan order (local first), waiting on each remote item's message, and write act-gated(x W0) into h.
cudaError_t comet_layer0(cudaStream_t stream, Layer0Args const &args, int grid);

/// Layer1: GEMM blocks (the first grid - comm_blocks tickets) compute y = h W1 item by item (split-major) and count
/// finished items per split; communication blocks wait for a split's count, top-k-reduce in fp32 and store the rows
/// into the owning source's combine buffer, then signal every peer's combine_flag.
cudaError_t comet_layer1(cudaStream_t stream, Layer1Args const &args, int grid);

// -------------------------------------------------------------------------------------------------------------
// Elementwise kernels and the baselines' steps (Elementwise.cu)
// -------------------------------------------------------------------------------------------------------------

/// out[i, :] = T(tokens[row_token[i], :]) for i < rows (the rank's dispatch rows, converted to the layer's dtype).
cudaError_t pack_rows(cudaStream_t stream, tessel::DataType dtype, float const *tokens, std::int32_t const *row_token,
                      std::int64_t rows, std::int64_t n, void *out);

/// Converts \p count floats to the layer's dtype (weights).
cudaError_t convert(cudaStream_t stream, tessel::DataType dtype, float const *in, std::size_t count, void *out);

/// Stores \p epoch into packed_flag[rank] of every rank (release, system scope), after the packing on the stream.
cudaError_t signal_packed(cudaStream_t stream, RankView const &view, std::uint64_t epoch);

/// h[r, j] = act(c[r, j]) * c[r, ffn_per_rank + j] (gated) or act(c[r, j]), c fp32 [rows, cols0], h in the layer's
/// dtype.
cudaError_t activate(cudaStream_t stream, tessel::DataType dtype, int activation, bool gated, float const *c,
                     std::int64_t rows, std::int64_t ffn_per_rank, void *h);

/// The baselines' top-k reduction: items as in the fused kernel, writing to \p out + (source * M + slot) * N
/// (local) when \p out is given, else to the source's combine buffer (peer pointer).
cudaError_t topk_reduce(cudaStream_t stream, RankView const &view, float const *y, int items, ReduceItem const *item,
                        float *out);

/// out[t, :] = sum over ranks r in rank order of combine[r][token_slot[g(r), t], :] (slots < 0 add nothing), after
/// every rank's combine_flag for this rank reached \p expected (0: no wait). A grid-stride kernel of at most
/// \p max_blocks blocks: when it waits, only those spin, not one block per tile of the output.
cudaError_t final_sum(cudaStream_t stream, RankView const &view, std::int32_t const *token_slot,
                      std::int32_t const *rank_group, std::uint64_t expected, int max_blocks, float *out);

/// Blocks per SM of the kernels that may spin (final_sum): a few, so that waiting never floods the device.
constexpr int waiting_blocks_per_sm = 4;

// -------------------------------------------------------------------------------------------------------------
// The backward's kernels (Backward.cu; float32 only). Row index space and slot tables as in the forward.
// -------------------------------------------------------------------------------------------------------------

/// The expert FFN's activation backward for \p rows rows (one warp per row): with pre = x W0 (fp32 [rows, cols0],
/// gated: [gate | up]), q = g W1^T ([rows, ffn_per_rank]) and the rows' combine weights \p weight, writes aw = w
/// act(pre) (gated: times up) [rows, ffn_per_rank], dpre = dL/d pre [rows, cols0] for dL/dh = w q, and dw[i] = q_i .
/// h_i (dL/d w_i; this rank's K-shard: a partial sum when TP > 1). The host path's activation_backward (Kernels.cpp).
cudaError_t activation_backward(cudaStream_t stream, int activation, bool gated, float const *pre, float const *q,
                                float const *weight, std::int64_t rows, std::int64_t ffn_per_rank, float *aw,
                                float *dpre, float *dw);

/// The backward's sum per slot: for each item, out[(source * M + slot) * N + col] = sum of the slot's rows of
/// \p dx (through the source's slot table, in its order) with weight 1 (the combine weight is already in dx).
/// Columns [col_begin, col_end) of the items; writes every slot of every item.
cudaError_t slot_sum(cudaStream_t stream, RankView const &view, float const *dx, int items, ReduceItem const *item,
                     float *out);

/// The gate's backward of an owner's \p m tokens (one thread per token): the combine weights' gradients
/// dw[t, k] = sum over the ranks r of expert experts[t, k]'s group, in rank order, of
/// dw_recv[r * stride + choice_row[t, k]]; then dL/d logits [m, experts] through the top-k softmax (renormalized
/// over the top-k when \p normalize) plus \p aux [experts] (the load-balancing loss's dL/dp). As the host's
/// gate_backward (BackwardRun.cpp), in double per token.
struct GateBackwardArgs {
  std::int64_t m = 0;
  int experts = 1, topk = 1, world = 1, experts_per_group = 1;
  bool normalize = true;
  float const *probs = nullptr;             ///< [m, experts]
  float const *weights = nullptr;           ///< [m, topk]
  std::int32_t const *chosen = nullptr;     ///< [m, topk]
  std::int32_t const *choice_row = nullptr; ///< [m, topk] the (t, k) pair's row in the owner's dispatch plan
  float const *dw_recv = nullptr;           ///< [world, stride]
  std::int64_t stride = 0;
  std::int32_t const *rank_group = nullptr; ///< [world]
  double const *aux = nullptr;              ///< [experts]
  float *dlogits = nullptr;                 ///< [m, experts]
};
cudaError_t gate_backward(cudaStream_t stream, GateBackwardArgs const &args);

} // namespace tessel::moe::cuda::Impl

#endif

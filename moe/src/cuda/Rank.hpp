#ifndef TESSEL_MOE_CUDA_RANK_HPP
#define TESSEL_MOE_CUDA_RANK_HPP

// One rank's device state and the steps both drivers share (VirtualRanksLayer: W ranks in one process;
// NcclMoeLayer: one rank per process and GPU): buffers, weights in the device precision, the baselines' cuBLAS
// expert FFN, the comet launch (grid sizing from the occupancy API, per-forward control words, the two fused
// kernels) and the reading of the kernels' error word. Host code.
#include "KernelApi.hpp"
#include "WorkPlan.hpp"

#include <tessel/moe/ExpertFfn.hpp>
#include <tessel/moe/MoeConfig.hpp>

#include <tessel/core/Error.hpp>
#include <tessel/core/cuda/Blas.hpp>
#include <tessel/core/cuda/Cuda.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace tessel::moe::cuda::Impl {

using tessel::cuda::DeviceBuffer;
using tessel::cuda::Event;
using tessel::cuda::Stream;

/// Grow-only device buffer: forwards of the same shape reuse their memory.
template <class T> T *ensure(DeviceBuffer<T> &buffer, std::size_t count, char const *label) {
  if (buffer.size() < std::max<std::size_t>(count, 1))
    buffer = DeviceBuffer<T>(std::max<std::size_t>(count, 1), label);
  return buffer.data();
}

/// Stream-ordered upload of \p host (the caller keeps \p host alive until the stream has passed the copy).
template <class T> void upload(DeviceBuffer<T> &buffer, std::vector<T> const &host, char const *label, cudaStream_t s) {
  ensure(buffer, host.size(), label);
  if (!host.empty())
    buffer.copy_from_host(host.data(), host.size(), s);
}

/// Byte offsets of the symmetric buffers for \p config (identical on every rank; see KernelApi.hpp).
SymmetricLayout symmetric_layout(MoeConfig const &config);

struct RankState {
  Stream stream, comm;
  tessel::cuda::CublasHandle cublas{stream.get()};
  DeviceBuffer<char> sym; // the symmetric allocation (one-process mode; NCCL: the window)
  DeviceBuffer<char> w0, w1;
  DeviceBuffer<float> tokens, c0, y, combine_send, out;
  DeviceBuffer<char> x_recv, h;
  DeviceBuffer<std::int32_t> row_token, token_slot;
  DeviceBuffer<int> ready;       // comet: [messages] message_ready, then [splits] split_done (zeroed per forward)
  DeviceBuffer<int> split_tiles; // comet: [splits]
  DeviceBuffer<Control> control{1, "Tessel::moe::cuda::control"};
  DeviceBuffer<Message> messages;
  DeviceBuffer<Layer0Item> items0;
  DeviceBuffer<Layer1Item> items1;
  DeviceBuffer<ReduceItem> reduces, chunk_reduces;
  // Baselines with grouped GEMMs: per chunk, the device pointer arrays (weights, inputs, outputs) of GEMM0's
  // problems, then GEMM1's; gemm_ptr_base[chunk] is the chunk's first entry.
  DeviceBuffer<void *> gemm_ptrs;
  std::vector<std::size_t> gemm_ptr_base;
  Event packed, computed, combined;
  std::vector<Event> chunk_in, chunk_out;
};

/// Checks the shapes of rank \p rank's weights and uploads them in the device precision (synchronizes the stream).
void load_weights(RankState &rank_state, MoeConfig const &config, int rank, ExpertWeights const &weights,
                  Timeout timeout);

/// Sizes x_recv, h, y (and c0 for the baselines) for \p rows rows.
void ensure_compute(RankState &rank_state, MoeConfig const &config, std::int64_t rows, bool c0);

/// Uploads the work lists of one forward (comet's or the baselines'; for the baselines with grouped GEMMs, the GEMM
/// pointer arrays into the buffers ensure_compute sized: call it first).
void upload_work(RankState &rank_state, MoeConfig const &config, RankWork const &w, bool comet);

/// True when the baselines' expert GEMMs in \p dtype run as one cublasGemmGroupedBatchedEx per GEMM layer and
/// chunk; false: one cublasGemmEx per (source, expert) problem.
bool grouped_gemms(DataType dtype);

/// The baselines' expert FFN of token chunk \p ch (every source's block): GEMM0 over the chunk's (source, expert)
/// problems (inputs in the device precision, fp32 accumulation and output), activation per block, GEMM1 likewise.
void chunk_ffn(RankState &rank_state, MoeConfig const &config, RankWork const &w, int ch);

/// The compute side of the pipelined schedule on one rank's stream: per token chunk, once its rows have landed
/// (chunk_in recorded on the communication stream), chunk_ffn and the top-k reduce into the combine buffer, then
/// chunk_out for the chunk's combine.
void pipelined_compute(RankState &rank_state, MoeConfig const &config, RankWork const &w, RankView const &view,
                       int chunks);

/// Communication blocks and block budgets of the fused kernels when \p sharing ranks share the device.
struct CometGrid {
  int comm_blocks = 1, cap0 = 2, cap1 = 2;
};
CometGrid comet_grid(MoeConfig const &config, CometParams const &comet, int sharing);

/// Enqueues comet's fused kernels of one rank (control words zeroed first); returns the grids {layer0, layer1}.
std::pair<int, int> launch_comet(RankState &rank_state, MoeConfig const &config, RankWork const &w,
                                 RankView const &view, CometGrid const &grid, int n_splits, std::uint64_t epoch);

/// Final-sum blocks of a rank that shares the device with \p sharing - 1 others (waiting_blocks_per_sm per SM, split).
int waiting_blocks(int sharing);

/// The sentence every rank reports for a failed device wait: from the abort word \p word when it is set, else from
/// the rank's own control word (\p error, \p error_arg); \p peer (optional) receives the rank to name in the
/// TimeoutError.
std::string device_failure(std::uint64_t word, int error, int error_arg, double timeout_seconds, int *peer = nullptr);

/// Throws TimeoutError when a device wait of the last forward gave up, on this rank (its control word) or on any
/// rank (the abort word in this rank's symmetric allocation at \p sym_base): the message names the rank whose wait
/// failed and what it waited for, the same on every rank.
void check_control(RankState &rank_state, char const *sym_base, SymmetricLayout const &layout, Timeout timeout,
                   std::string const &context, double timeout_seconds);

} // namespace tessel::moe::cuda::Impl

#endif

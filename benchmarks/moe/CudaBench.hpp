#ifndef TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP
#define TESSEL_BENCHMARKS_MOE_CUDABENCH_HPP

namespace tessel::moe::bench {

/// tessel-moe-bench --backend cuda (CudaBench.cpp): the schedules on the GPU in the one-process multi-rank mode.
/// Prints a message and returns 0 where the build has no CUDA or no device is visible; 1 when a result is wrong.
int run_cuda_bench(int argc, char **argv);

} // namespace tessel::moe::bench

#endif

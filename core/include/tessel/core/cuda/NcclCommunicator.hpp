#ifndef TESSEL_CORE_CUDA_NCCLCOMMUNICATOR_HPP
#define TESSEL_CORE_CUDA_NCCLCOMMUNICATOR_HPP

/// \file cuda/NcclCommunicator.hpp
/// \brief The NCCL communicator backend: device buffers, stream-ordered operations, bootstrapped over MPI.

#include <tessel/core/Communicator.hpp>
#include <tessel/core/cuda/Cuda.hpp>

#ifndef TESSEL_ENABLE_NCCL
#error "tessel/core/cuda/NcclCommunicator.hpp needs a Tessel built with Tessel_ENABLE_NCCL=ON"
#endif

#include <nccl.h>

namespace tessel::cuda {

namespace Impl {
[[noreturn]] void throw_nccl_error(char const *file, int line, char const *call, ncclResult_t code, ncclComm_t comm);
}

/// \brief An NCCL communicator over the ranks of \p bootstrap (normally an MPI communicator), one device per rank.
///
/// \p device < 0 picks device rank % device_count(). Initialization is non-blocking and bounded by the
/// bootstrap's timeout. Operations are enqueued on the stream passed to them (nullptr: the communicator's own
/// stream) and return at once, except barrier(), which waits. A wait that times out aborts the NCCL communicator
/// (its kernels are released; later calls throw) and raises TimeoutError.
Communicator make_nccl_communicator(Communicator const &bootstrap, int device = -1);

/// \brief The ncclComm_t behind \p comm (throws for other backends).
ncclComm_t nccl_comm_of(Communicator const &comm);

/// \brief Waits for the work enqueued on \p stream (nullptr: the communicator's stream), polling NCCL's
/// asynchronous error; after comm.timeout() aborts the communicator and throws TimeoutError.
void synchronize(Communicator const &comm, cudaStream_t stream = nullptr);

} // namespace tessel::cuda

/// \brief Checks an NCCL call; on failure throws with ncclGetErrorString and ncclGetLastError.
#define TESSEL_NCCL_CHECK(call)                                                                                        \
  do {                                                                                                                 \
    ncclResult_t const tessel_nccl_rc_ = (call);                                                                       \
    if (tessel_nccl_rc_ != ncclSuccess && tessel_nccl_rc_ != ncclInProgress)                                           \
      ::tessel::cuda::Impl::throw_nccl_error(__FILE__, __LINE__, #call, tessel_nccl_rc_, nullptr);                     \
  } while (false)

#endif

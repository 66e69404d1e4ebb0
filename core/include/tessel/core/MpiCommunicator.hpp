#ifndef TESSEL_CORE_MPICOMMUNICATOR_HPP
#define TESSEL_CORE_MPICOMMUNICATOR_HPP

/// \file MpiCommunicator.hpp
/// \brief The MPI communicator backend (host memory). Only present when Tessel is built with MPI.

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>

#ifndef TESSEL_ENABLE_MPI
#error "tessel/core/MpiCommunicator.hpp needs a Tessel built with Tessel_ENABLE_MPI=ON"
#endif

#include <mpi.h>

namespace tessel {

/// \brief A Communicator over a duplicate of \p comm (so Tessel's messages never match the caller's).
/// Errors on the duplicate are returned, not fatal, and become tessel::Exception.
Communicator make_mpi_communicator(MPI_Comm comm);

/// \brief The MPI communicator a Communicator wraps, or MPI_COMM_NULL for other backends.
MPI_Comm mpi_comm_of(Communicator const &comm);

namespace Impl {
/// The shared backend on MPI_COMM_WORLD (created on first use, released by ScopeGuard before MPI_Finalize).
std::shared_ptr<CommunicatorBackend> mpi_world_backend();
void release_mpi_world_backend();
/// A duplicate of \p comm, or TimeoutError when not every rank of \p comm joins within \p timeout (MPI_Comm_dup
/// would wait for a stopped rank forever). Errors on the duplicate are returned, not fatal.
MPI_Comm duplicate_mpi_comm(MPI_Comm comm, Timeout timeout);
} // namespace Impl

} // namespace tessel

#endif

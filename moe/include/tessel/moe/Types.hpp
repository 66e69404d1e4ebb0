#ifndef TESSEL_MOE_TYPES_HPP
#define TESSEL_MOE_TYPES_HPP

/// \file Types.hpp
/// \brief View types of the host path (row-major float32 in HostSpace).

#include <tessel/core/Execution.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace tessel::moe {

/// \brief The default execution space of the host path (its operations take any enabled host space).
using HostExecSpace = Kokkos::DefaultHostExecutionSpace;
/// \brief Row-major matrix (tokens, logits, activations).
using HostMatrix = Kokkos::View<float **, Kokkos::LayoutRight, Kokkos::HostSpace>;
/// \brief Read-only HostMatrix.
using ConstHostMatrix = Kokkos::View<float const **, Kokkos::LayoutRight, Kokkos::HostSpace>;
/// \brief Row-major stack of matrices (expert weights, [expert][rows][cols]).
using HostTensor = Kokkos::View<float ***, Kokkos::LayoutRight, Kokkos::HostSpace>;
/// \brief Host vector (biases).
using HostVector = Kokkos::View<float *, Kokkos::HostSpace>;
/// \brief Read-only HostVector.
using ConstHostVector = Kokkos::View<float const *, Kokkos::HostSpace>;
/// \brief Row-major matrix of indices (each token's chosen experts).
using HostIndexMatrix = Kokkos::View<std::int32_t **, Kokkos::LayoutRight, Kokkos::HostSpace>;

} // namespace tessel::moe

#endif

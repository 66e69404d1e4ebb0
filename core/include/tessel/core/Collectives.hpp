#ifndef TESSEL_CORE_COLLECTIVES_HPP
#define TESSEL_CORE_COLLECTIVES_HPP

/// \file Collectives.hpp
/// \brief Kokkos-style collectives on Views: the execution space instance comes first and is fenced before a
/// host communicator touches the data.

#include <tessel/core/Communicator.hpp>
#include <tessel/core/KokkosCompat.hpp>

namespace tessel {

/// \brief Allreduce of two Views of equal size: fences \p space, then reduces over \p comm.
template <class ExecSpace, class SendView, class RecvView>
void allreduce(ExecSpace const &space, Communicator const &comm, SendView const &send, RecvView const &recv,
               ReduceOp op) {
  static_assert(compat::is_view_v<SendView> && compat::is_view_v<RecvView>, "tessel::allreduce takes Views");
  TESSEL_REQUIRE(send.span_is_contiguous() && recv.span_is_contiguous(), "Views must be contiguous");
  TESSEL_REQUIRE(send.size() == recv.size(), "send has ", send.size(), " elements, recv has ", recv.size());
  compat::fence(space, "Tessel::allreduce");
  comm.allreduce(send.data(), recv.data(), send.size(), data_type_of<typename SendView::non_const_value_type>, op);
}

/// \brief Allgather of \p send (same size on every rank) into \p recv (size() times larger).
template <class ExecSpace, class SendView, class RecvView>
void allgather(ExecSpace const &space, Communicator const &comm, SendView const &send, RecvView const &recv) {
  static_assert(compat::is_view_v<SendView> && compat::is_view_v<RecvView>, "tessel::allgather takes Views");
  TESSEL_REQUIRE(send.span_is_contiguous() && recv.span_is_contiguous(), "Views must be contiguous");
  TESSEL_REQUIRE(recv.size() == send.size() * static_cast<std::size_t>(comm.size()), "recv has ", recv.size(),
                 " elements, expected ", send.size(), " x ", comm.size());
  compat::fence(space, "Tessel::allgather");
  comm.allgather(send.data(), recv.data(), send.size(), data_type_of<typename SendView::non_const_value_type>);
}

} // namespace tessel

#endif

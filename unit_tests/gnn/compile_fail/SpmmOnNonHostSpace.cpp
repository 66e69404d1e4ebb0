// Must not compile: SpmmHandle (and the other host templates) refuse an execution space that is not one of the
// enabled host spaces, with a message naming them (checked by gnn.refuses_non_host_space).
#include <tessel/gnn/Reorder.hpp>
#include <tessel/gnn/Spmm.hpp>

struct NotAHostSpace {
  using memory_space = Kokkos::HostSpace;
};

#ifdef TESSEL_COMPILE_FAIL_FUNCTION
void use(tessel::gnn::Permutation const &p, tessel::gnn::ConstMatrix<Kokkos::HostSpace> const &x,
         tessel::gnn::Matrix<Kokkos::HostSpace> const &y) {
  tessel::gnn::permute_rows(NotAHostSpace{}, p, x, y);
}
#else
tessel::gnn::SpmmHandle<std::int32_t, NotAHostSpace> *handle = nullptr;
std::size_t size = sizeof(tessel::gnn::SpmmHandle<std::int32_t, NotAHostSpace>);
#endif

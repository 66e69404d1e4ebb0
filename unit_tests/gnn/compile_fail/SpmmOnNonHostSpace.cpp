// Compile-time checks of the host-space refusal (driven by unit_tests/gnn/CheckCompileFails.cmake):
// - TESSEL_CASE_CONTROL: must compile; the trait accepts every enabled host space and refuses anything else;
// - TESSEL_CASE_CLASS / TESSEL_CASE_FUNCTION: must fail, with the message naming the enabled host spaces;
// - TESSEL_CASE_LAYOUT / TESSEL_CASE_CONST_OUTPUT: must fail, with the message naming the View's requirement.
#include <tessel/gnn/Reorder.hpp>
#include <tessel/gnn/Spmm.hpp>

#include <type_traits>

struct NotAHostSpace {
  using memory_space = Kokkos::HostSpace;
};

#if defined(TESSEL_CASE_CONTROL)
static_assert(tessel::is_host_execution_space_v<Kokkos::DefaultHostExecutionSpace>);
static_assert(!tessel::is_host_execution_space_v<NotAHostSpace>);
static_assert(std::is_same_v<tessel::host_execution_space_t<Kokkos::DefaultHostExecutionSpace>,
                             Kokkos::DefaultHostExecutionSpace>);
static_assert(sizeof(tessel::gnn::SpmmHandle<std::int32_t, Kokkos::DefaultHostExecutionSpace>) > 0);
void use(tessel::gnn::Permutation const &p, tessel::gnn::ConstMatrix<Kokkos::HostSpace> const &x,
         tessel::gnn::Matrix<Kokkos::HostSpace> const &y, tessel::gnn::Matrix<Kokkos::HostSpace> const &z,
         Kokkos::View<float **> const &plain) {
  tessel::gnn::permute_rows(Kokkos::DefaultHostExecutionSpace{}, p, x, y);
  // A plain non-const Matrix and a plain Kokkos::View are feature matrices too.
  tessel::gnn::permute_rows(Kokkos::DefaultHostExecutionSpace{}, p, z, y);
  tessel::gnn::unpermute_rows(Kokkos::DefaultHostExecutionSpace{}, p, plain, plain);
}
#elif defined(TESSEL_CASE_CLASS)
std::size_t size = sizeof(tessel::gnn::SpmmHandle<std::int32_t, NotAHostSpace>);
#elif defined(TESSEL_CASE_FUNCTION)
void use(tessel::gnn::Permutation const &p, tessel::gnn::ConstMatrix<Kokkos::HostSpace> const &x,
         tessel::gnn::Matrix<Kokkos::HostSpace> const &y) {
  tessel::gnn::permute_rows(NotAHostSpace{}, p, x, y);
}
#elif defined(TESSEL_CASE_LAYOUT)
// A column-major View cannot be a feature matrix: the static_assert names the requirement.
void use(tessel::gnn::Permutation const &p, Kokkos::View<float **, Kokkos::LayoutLeft, Kokkos::HostSpace> const &x,
         tessel::gnn::Matrix<Kokkos::HostSpace> const &y) {
  tessel::gnn::permute_rows(Kokkos::DefaultHostExecutionSpace{}, p, x, y);
}
#elif defined(TESSEL_CASE_CONST_OUTPUT)
void use(tessel::gnn::Permutation const &p, tessel::gnn::Matrix<Kokkos::HostSpace> const &x,
         tessel::gnn::ConstMatrix<Kokkos::HostSpace> const &y) {
  tessel::gnn::unpermute_rows(Kokkos::DefaultHostExecutionSpace{}, p, x, y);
}
#else
#error                                                                                                                 \
    "define TESSEL_CASE_CONTROL, TESSEL_CASE_CLASS, TESSEL_CASE_FUNCTION, TESSEL_CASE_LAYOUT or TESSEL_CASE_CONST_OUTPUT"
#endif

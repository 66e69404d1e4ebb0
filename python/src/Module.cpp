// The extension module tessel._tessel: the lifetime of MPI and Kokkos, the MPI world (rank, size, a sum over the
// ranks), Tessel's exceptions as Python exceptions (same messages), and one submodule per package (gnn, moe, sched).
#include "Arrays.hpp"
#include "Bindings.hpp"
#include "Runtime.hpp"

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Version.hpp>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#ifdef TESSEL_ENABLE_MPI
#include <mpi.h>
#endif

#include <cstdlib>

namespace nb = nanobind;

namespace {

void bind_core(nb::module_ &m) {
  m.def("initialize", &tessel::python::initialize,
        "Initializes MPI (when started by an MPI launcher) and Kokkos; `import tessel` does this.");
  m.def("finalize", &tessel::python::finalize,
        "Releases every Tessel object's memory, then finalizes Kokkos and MPI (registered with atexit).");
  m.def("build_summary", &tessel::build_summary, "Version, git hash, Kokkos version and the enabled features.");
  m.def(
      "world",
      []() {
        tessel::python::require_initialized("tessel.world");
        auto const world = tessel::Communicator::world();
        return std::make_pair(world.rank(), world.size());
      },
      "(rank, size) of the MPI world (0, 1 without an MPI launcher).");
  m.def(
      "allreduce_",
      [](tessel::python::OutArray a) {
        using tessel::python::Dtype;
        tessel::python::require_initialized("tessel.allreduce_");
        bool const wide = tessel::python::has_dtype(a, Dtype::float64);
        auto *data = const_cast<void *>(tessel::python::require_array(a, "tessel.allreduce_: the array",
                                                                      wide ? Dtype::float64 : Dtype::float32, {-1}));
        auto const count = static_cast<std::size_t>(a.shape(0));
        auto const world = tessel::Communicator::world();
        nb::gil_scoped_release unlocked;
        if (wide)
          world.allreduce(static_cast<double const *>(data), static_cast<double *>(data), count, tessel::ReduceOp::sum);
        else
          world.allreduce(static_cast<float const *>(data), static_cast<float *>(data), count, tessel::ReduceOp::sum);
      },
      nb::arg("array"),
      "Sums a 1-D contiguous float32 or float64 array over the ranks of the MPI world, in place (collective).");
  m.def(
      "abort",
      [](int code) {
#ifdef TESSEL_ENABLE_MPI
        if (tessel::ScopeGuard::mpi_active())
          MPI_Abort(MPI_COMM_WORLD, code);
#endif
        std::_Exit(code);
      },
      nb::arg("code"), "Ends every rank of the job at once (MPI_Abort), or this process without MPI.");
  m.attr("__version__") = TESSEL_VERSION_STRING;
  m.attr("git_hash") = tessel::git_hash();
#ifdef TESSEL_ENABLE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
#ifdef TESSEL_ENABLE_MPI
  m.attr("has_mpi") = true;
#else
  m.attr("has_mpi") = false;
#endif
}

} // namespace

NB_MODULE(_tessel, m) {
  m.doc() = "Tessel's C++ library (core, gnn, moe, sched) on NumPy, PyTorch and any DLPack array";
  // Objects still referenced at interpreter exit (module-level caches, user globals) had their memory released by
  // finalize(); nanobind would report each as a leak.
  nb::set_leak_warnings(false);

  // tessel.Error is a RuntimeError; UsageError also a ValueError; CommunicationError and TimeoutError for the
  // failures of communication (TimeoutError is also Python's TimeoutError).
  static nb::object error = nb::borrow(PyErr_NewExceptionWithDoc(
      "tessel.Error", "An error raised by Tessel's C++ library (the message is the library's).", PyExc_RuntimeError,
      nullptr));
  nb::object usage_bases = nb::make_tuple(error, nb::handle(PyExc_ValueError));
  static nb::object usage = nb::borrow(PyErr_NewExceptionWithDoc(
      "tessel.UsageError", "An option or argument that is malformed or out of range.", usage_bases.ptr(), nullptr));
  static nb::object communication = nb::borrow(PyErr_NewExceptionWithDoc(
      "tessel.CommunicationError", "A communication failure: the job cannot go on.", error.ptr(), nullptr));
  nb::object timeout_bases = nb::make_tuple(communication, nb::handle(PyExc_TimeoutError));
  static nb::object timeout = nb::borrow(PyErr_NewExceptionWithDoc(
      "tessel.TimeoutError", "A peer did not answer within the communication timeout.", timeout_bases.ptr(), nullptr));
  m.attr("Error") = error;
  m.attr("UsageError") = usage;
  m.attr("CommunicationError") = communication;
  m.attr("TimeoutError") = timeout;
  nb::register_exception_translator([](std::exception_ptr const &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (tessel::TimeoutError const &e) {
      PyErr_SetString(timeout.ptr(), e.what());
    } catch (tessel::CommunicationError const &e) {
      PyErr_SetString(communication.ptr(), e.what());
    } catch (tessel::UsageError const &e) {
      PyErr_SetString(usage.ptr(), e.what());
    } catch (tessel::Exception const &e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  bind_core(m);
  auto gnn = m.def_submodule("gnn", "Graph aggregation (AdaptGear) and GNN training");
  tessel::python::bind_gnn(gnn);
  auto moe = m.def_submodule("moe", "Mixture-of-Experts layer (COMET)");
  tessel::python::bind_moe(moe);
  auto sched = m.def_submodule("sched", "Cluster scheduling and simulation (Crius)");
  tessel::python::bind_sched(sched);
}

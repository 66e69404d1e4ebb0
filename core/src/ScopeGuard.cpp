#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/KokkosCompat.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <Kokkos_Core.hpp>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#ifdef TESSEL_ENABLE_MPI
#include <tessel/core/MpiCommunicator.hpp>
#include <tessel/core/Version.hpp>
#endif

namespace tessel {

bool launched_by_mpi() {
  // Open MPI, MPICH/Hydra, PMIx and Slurm each export one of these to the processes they start.
  for (char const *name :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(name) != nullptr)
      return true;
  return false;
}

bool ScopeGuard::mpi_active() {
#ifdef TESSEL_ENABLE_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
#else
  return false;
#endif
}

int ScopeGuard::mpi_thread_level() {
#ifdef TESSEL_ENABLE_MPI
  if (!mpi_active())
    return -1;
  int provided = -1;
  MPI_Query_thread(&provided);
  return provided;
#else
  return -1;
#endif
}

namespace {

// Kokkos 4 ends the process (Kokkos::abort) on a malformed integer in its own options, and Kokkos 3 throws a bare
// std::invalid_argument ("stoi"): both are checked here first, as a usage error naming the option.
void check_kokkos_integer_options(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    if (arg.rfind("--kokkos-", 0) != 0)
      continue;
    auto const eq = arg.find('=');
    std::string const name = arg.substr(0, eq);
    if (name != "--kokkos-num-threads" && name != "--kokkos-threads" && name != "--kokkos-device-id" &&
        name != "--kokkos-num-devices" && name != "--kokkos-numa")
      continue;
    std::string const value = eq == std::string::npos ? std::string() : arg.substr(eq + 1);
    char *end = nullptr;
    errno = 0;
    long const v = value.empty() ? 0 : std::strtol(value.c_str(), &end, 10);
    TESSEL_REQUIRE_USAGE(!value.empty() && end && *end == '\0' && errno != ERANGE && v >= -1 && v <= 1 << 20,
                         "Kokkos option ", name, " expects an integer, got '", value, "' (see --kokkos-help)");
  }
}

#ifdef TESSEL_ENABLE_MPI
// MPI_Init and MPI_Finalize wait for every rank (a PMIx fence in Open MPI) with no timeout of their own: a rank
// stopped or wedged there would hang the whole job. The watchdog ends this process when \p what has not finished
// within the communication timeout; the launcher then ends the others.
class Watchdog {
public:
  Watchdog(char const *what, Timeout timeout)
      : _thread([this, what, timeout] {
          std::unique_lock<std::mutex> lock(_mutex);
          if (!_done_cv.wait_for(lock, timeout, [this] { return _done; })) {
            std::fprintf(stderr,
                         "tessel: error: %s did not complete within %lld ms (TESSEL_COMM_TIMEOUT): a rank "
                         "never joined; ending this rank\n",
                         what, static_cast<long long>(timeout.count()));
            std::fflush(stderr);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(_mutex);
      _done = true;
    }
    _done_cv.notify_one();
    _thread.join();
  }
  Watchdog(Watchdog const &) = delete;
  Watchdog &operator=(Watchdog const &) = delete;

private:
  std::mutex _mutex;
  std::condition_variable _done_cv;
  bool _done = false;
  std::thread _thread;
};
#endif

} // namespace

ScopeGuard::ScopeGuard(int &argc, char **&argv, bool force_mpi) {
  check_kokkos_integer_options(argc, argv);
#ifdef TESSEL_ENABLE_MPI
  if ((force_mpi || launched_by_mpi()) && !mpi_active()) {
    int provided = 0;
    {
      Watchdog const watchdog("MPI_Init", default_timeout());
      TESSEL_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    }
    _finalize_mpi = true;
  }
#else
  (void)force_mpi;
#endif
  if (!Kokkos::is_initialized()) {
    try {
      Kokkos::initialize(argc, argv); // throws on a malformed --kokkos-* option
    } catch (...) {
#ifdef TESSEL_ENABLE_MPI
      if (_finalize_mpi)
        MPI_Finalize();
#endif
      throw;
    }
    _finalize_kokkos = true;
  }
}

ScopeGuard::~ScopeGuard() {
  if (_finalize_kokkos && Kokkos::is_initialized())
    Kokkos::finalize();
#ifdef TESSEL_ENABLE_MPI
  Impl::release_mpi_world_backend();
  if (_finalize_mpi && mpi_active()) {
    Watchdog const watchdog("MPI_Finalize", default_timeout());
    MPI_Finalize();
  }
#endif
}

std::string build_summary() {
  std::string features;
  [[maybe_unused]] auto add = [&features](char const *name) {
    features += features.empty() ? name : std::string(" ") + name;
  };
#ifdef TESSEL_ENABLE_MPI
  add("mpi");
#endif
#ifdef TESSEL_ENABLE_HDF5
  add("hdf5");
#endif
#ifdef TESSEL_ENABLE_CUDA
  add("cuda");
#endif
#ifdef TESSEL_ENABLE_NCCL
  add("nccl");
#endif
  return "Tessel " + version() + " (git " + git_hash() + "), Kokkos " + compat::kokkos_version_string() + " (" +
         Kokkos::DefaultExecutionSpace::name() + "), features: " + (features.empty() ? "none" : features);
}

} // namespace tessel

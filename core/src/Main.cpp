#include <tessel/core/Communicator.hpp>
#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/core/ScopeGuard.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#ifdef TESSEL_ENABLE_MPI
#include <tessel/core/MpiCommunicator.hpp>

#include <mpi.h>
#endif

namespace tessel {

namespace {

bool debug_requested = false;

// How long a failed rank waits for the others to report before it ends the job: long enough for ranks that hit
// the same error at nearly the same time, short against any timeout a user would set.
constexpr auto failure_grace = std::chrono::seconds(5);

struct Outcome {
  int status = exit_success;
  bool fault = false; // a communication fault: MPI cannot be finalized safely
  std::string message;
};

std::string message_of(Exception const &e) {
  std::string text = e.what();
  if (debug_requested && !e.where().empty())
    text += "\n  (raised in " + e.where() + ")";
  return text;
}

// The rank the launcher gave this process, for messages written when MPI could not start.
int launcher_rank() {
  for (char const *name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (char const *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

void print_error(char const *name, std::string const &ranks, std::string const &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error%s: %s\n", name, ranks.c_str(), message.c_str());
  std::fflush(stderr);
}

#ifdef TESSEL_ENABLE_MPI

// Polls \p request until it completes or \p deadline passes.
bool complete_by(MPI_Request &request, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return false;
    if (done)
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string rank_list(std::vector<int> const &ranks) {
  std::string out;
  for (int r : ranks)
    out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

[[noreturn]] void abort_job(int status) {
  MPI_Abort(MPI_COMM_WORLD, status == exit_success ? exit_failure : status);
  std::_Exit(status == exit_success ? exit_failure : status); // MPI_Abort does not return; make sure of it
}

// Every rank reports its outcome on \p comm (a duplicate of MPI_COMM_WORLD only this file uses, so no message of
// the tool can match it); rank 0 prints each distinct message once. Returns the job's status or ends the job.
int finish_job(char const *name, MPI_Comm comm, Outcome const &outcome) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // A rank that finished cannot tell a peer still working from a stopped one. Peers doing their share of the work
  // since the last exchange should need about as long as this rank did, so it waits that long plus the timeout:
  // a job whose ranks communicate throughout waits about the timeout, one whose ranks work alone (replicas) about
  // its own run time, and a load imbalance up to that much is not mistaken for a fault.
  auto const now = std::chrono::steady_clock::now();
  auto const wait = outcome.status == exit_success
                        ? std::chrono::steady_clock::duration(default_timeout()) + (now - last_exchange())
                        : std::chrono::steady_clock::duration(failure_grace);
  auto const deadline = now + wait;
  int const mine[3] = {outcome.status, outcome.fault ? 1 : 0, static_cast<int>(outcome.message.size())};
  std::vector<int> all(3 * static_cast<std::size_t>(size));
  MPI_Request request;
  bool const reported = MPI_Iallgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, comm, &request) == MPI_SUCCESS &&
                        complete_by(request, deadline);
  if (!reported) {
    auto const seconds = std::chrono::duration_cast<std::chrono::seconds>(wait).count();
    std::string message = outcome.message;
    if (outcome.status == exit_success)
      message = "this rank finished, but not every rank did within " + std::to_string(seconds) +
                " s (the time since the ranks last communicated plus TESSEL_COMM_TIMEOUT); ending the job";
    else
      message += " (not every rank reported within " + std::to_string(seconds) + " s; ending the job)";
    print_error(name, " on rank " + std::to_string(rank) + " of " + std::to_string(size), message);
    abort_job(outcome.status);
  }
  int status = exit_success;
  bool fault = false;
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    auto const ur = static_cast<std::size_t>(r);
    status = std::max(status, all[3 * ur]);
    fault = fault || all[3 * ur + 1] != 0;
    lengths[ur] = all[3 * ur + 2];
    offsets[ur] = total;
    total += lengths[ur];
  }
  if (status == exit_success)
    return exit_success;
  std::vector<char> text(static_cast<std::size_t>(std::max(total, 1)));
  bool const gathered = MPI_Igatherv(outcome.message.data(), mine[2], MPI_CHAR, text.data(), lengths.data(),
                                     offsets.data(), MPI_CHAR, 0, comm, &request) == MPI_SUCCESS &&
                        complete_by(request, std::chrono::steady_clock::now() + failure_grace);
  if (rank == 0 && gathered) {
    // Distinct messages in order of the first rank that raised each.
    std::vector<std::pair<std::string, std::vector<int>>> distinct;
    std::map<std::string, std::size_t> index;
    std::vector<int> failed;
    for (int r = 0; r < size; ++r) {
      auto const ur = static_cast<std::size_t>(r);
      if (all[3 * ur] == exit_success)
        continue;
      failed.push_back(r);
      std::string const m(text.data() + offsets[ur], static_cast<std::size_t>(lengths[ur]));
      if (m.empty())
        continue; // the tool has said why (a failed verification)
      auto const [it, added] = index.emplace(m, distinct.size());
      if (added)
        distinct.push_back({m, {}});
      distinct[it->second].second.push_back(r);
    }
    if (distinct.size() == 1 && static_cast<int>(failed.size()) == size)
      print_error(name, "", distinct[0].first);
    else
      for (auto const &[m, ranks] : distinct)
        print_error(name,
                    (ranks.size() == 1 ? " on rank " : " on ranks ") + rank_list(ranks) + " of " + std::to_string(size),
                    m);
  } else if (!gathered && !outcome.message.empty()) {
    print_error(name, " on rank " + std::to_string(rank) + " of " + std::to_string(size), outcome.message);
  }
  if (fault) {
    // Requests of the failed operation may still be pending inside MPI, where MPI_Finalize could wait for them
    // forever. Rank 0 ends the job once it has printed; the others wait for that (they keep their messages).
    if (rank != 0)
      std::this_thread::sleep_for(failure_grace);
    abort_job(status);
  }
  return status;
}

#endif

} // namespace

bool debug_messages() { return debug_requested; }

void set_debug_messages(bool on) { debug_requested = on; }

int run_main(char const *name, int argc, char **argv, std::function<int(int argc, char **argv)> const &body) {
  if (char const *env = std::getenv("TESSEL_DEBUG"))
    debug_requested = debug_requested || std::strcmp(env, "1") == 0 || std::strcmp(env, "true") == 0;
  std::optional<ScopeGuard> guard;
  try {
    guard.emplace(argc, argv);
  } catch (UsageError const &e) {
    if (launcher_rank() == 0)
      print_error(name, "", message_of(e));
    return exit_usage;
  } catch (std::exception const &e) {
    // Kokkos parses its own --kokkos-* options here; MPI may be gone already, and every rank was given the same
    // arguments, so the first rank alone reports.
    if (launcher_rank() == 0)
      print_error(name, "", std::string("Kokkos rejected its options (") + e.what() + "); see --kokkos-help");
    return exit_usage;
  }
#ifdef TESSEL_ENABLE_MPI
  MPI_Comm job = MPI_COMM_NULL;
  if (ScopeGuard::mpi_active()) {
    // A rank stopped between MPI_Init and here would leave the others in MPI_Comm_dup for good.
    try {
      job = Impl::duplicate_mpi_comm(MPI_COMM_WORLD, default_timeout());
    } catch (Exception const &e) {
      int rank = 0, size = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      print_error(name, " on rank " + std::to_string(rank) + " of " + std::to_string(size), message_of(e));
      abort_job(exit_failure);
    }
  }
#endif
  Outcome outcome;
  try {
    outcome.status = body(argc, argv);
  } catch (UsageError const &e) {
    outcome = {exit_usage, false, message_of(e)};
  } catch (CommunicationError const &e) {
    outcome = {exit_failure, true, message_of(e)};
  } catch (Exception const &e) {
    outcome = {exit_failure, false, message_of(e)};
  } catch (std::bad_alloc const &) {
    outcome = {exit_failure, false, "out of memory"};
  } catch (std::exception const &e) {
    outcome = {exit_failure, false, e.what()};
  } catch (...) {
    outcome = {exit_failure, false, "an exception of unknown type"};
  }
#ifdef TESSEL_ENABLE_MPI
  if (job != MPI_COMM_NULL) {
    int size = 1;
    MPI_Comm_size(job, &size);
    if (size > 1) {
      int const status = finish_job(name, job, outcome);
      MPI_Comm_free(&job);
      return status;
    }
    MPI_Comm_free(&job);
  }
#endif
  if (outcome.status != exit_success && !outcome.message.empty())
    print_error(name, "", outcome.message);
  return outcome.status;
}

} // namespace tessel

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Digest.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/tools/Tool.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/stat.h>

namespace tessel {

namespace {

// Signals that end a tool by default and that a user sends on purpose (Ctrl-C, kill, a closed terminal): the
// handler removes the temporaries of the outputs being written (tessel::OutputFile, h5::File), then ends the
// process the way the signal would have.
constexpr int ending_signals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction previous_actions[std::size(ending_signals)];

extern "C" void end_on_signal(int signal) {
  remove_output_temporaries();
  for (std::size_t i = 0; i < std::size(ending_signals); ++i)
    if (ending_signals[i] == signal)
      ::sigaction(signal, &previous_actions[i], nullptr);
  ::raise(signal);
}

void remove_temporaries_on_signals() {
  for (std::size_t i = 0; i < std::size(ending_signals); ++i) {
    struct sigaction action {};
    action.sa_handler = end_on_signal;
    ::sigemptyset(&action.sa_mask);
    // A signal the caller ignores (nohup) stays ignored.
    if (::sigaction(ending_signals[i], nullptr, &previous_actions[i]) == 0 && previous_actions[i].sa_handler != SIG_IGN)
      ::sigaction(ending_signals[i], &action, nullptr);
  }
}

} // namespace

void require_same_file(Communicator const &comm, std::string const &what, std::string const &path) {
  if (comm.size() == 1)
    return;
  std::uint64_t digest = fnv1a_basis;
  // Regular files only: opening a named pipe would wait for a writer (its loader refuses it with a clear error).
  struct stat st;
  bool const regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (std::FILE *f = regular ? std::fopen(path.c_str(), "rb") : nullptr) {
    std::vector<unsigned char> buffer(1 << 20);
    std::size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0)
      digest = fnv1a(digest, buffer.data(), n);
    std::fclose(f);
  }
  comm.require_same(what + " '" + path + "' (a digest of its contents)", digest);
}

int run_tool(char const *name, int argc, char **argv, std::function<int(CommandLine &)> const &body) {
  // Kokkos prints its own 40-line option list for --help before the tool could print its help: the tool's help
  // flag is kept from Kokkos (--kokkos-help still shows Kokkos's) and handed back to the tool after Kokkos took
  // its options.
  std::vector<char *> args;
  char *help = nullptr;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0))
      help = argv[i];
    else
      args.push_back(argv[i]);
  }
  int const kokkos_argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  return run_main(name, kokkos_argc, args.data(), [&](int tool_argc, char **tool_argv) {
    // After MPI and Kokkos have started, so that their own handlers (if any) are the ones restored on a signal.
    remove_temporaries_on_signals();
    std::vector<char *> tool_args(tool_argv, tool_argv + tool_argc);
    if (help)
      tool_args.push_back(help);
    CommandLine cl(static_cast<int>(tool_args.size()) - 1, tool_args.data() + 1);
    set_debug_messages(cl.flag("debug") || debug_messages());
    std::uint64_t digest = fnv1a_basis;
    for (int i = 1; i < argc; ++i) // with the terminating NUL, so ("ab", "c") and ("a", "bc") differ
      digest = fnv1a(digest, reinterpret_cast<unsigned char const *>(argv[i]), std::strlen(argv[i]) + 1);
    try {
      Communicator::world().require_same("the command line", digest);
    } catch (CommunicationError const &) {
      throw;
    } catch (UsageError const &) {
      throw; // a bad environment variable (TESSEL_COMM_TIMEOUT), not a difference between the ranks
    } catch (Exception const &e) {
      throw UsageError(std::string(e.what()) + ": every rank must run the same command line", e.where());
    }
    return body(cl);
  });
}

} // namespace tessel

#include <tessel/core/Communicator.hpp>
#include <tessel/core/Digest.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/tools/Tool.hpp>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessel {

namespace {

// Signals that end a tool by default and that a user sends on purpose or causes (Ctrl-C, Ctrl-\, kill, a closed
// terminal, a closed pipe the tool prints to): the handler removes the temporaries of the outputs being written
// (tessel::OutputFile, h5::File), then ends the process the way the signal would have.
constexpr int ending_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
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
  // A file larger than the file size limit (ulimit -f) is a write error naming the file, as a full disk is, not a
  // SIGXFSZ that ends the tool with its temporaries left behind.
  struct sigaction previous {};
  if (::sigaction(SIGXFSZ, nullptr, &previous) == 0 && previous.sa_handler == SIG_DFL)
    ::signal(SIGXFSZ, SIG_IGN);
}

} // namespace

void require_same_file(Communicator const &comm, std::string const &what, std::string const &path) {
  if (comm.size() == 1)
    return;
  std::uint64_t digest = fnv1a_basis;
  // Regular files only, read without blocking: a named pipe would wait for a writer and some files of the kernel
  // (/proc/kmsg) for data that may never come (their loader refuses them with a clear error).
  int const fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    std::vector<unsigned char> buffer(1 << 20);
    ssize_t n = 0;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0 || (n < 0 && errno == EINTR))
      if (n > 0)
        digest = fnv1a(digest, buffer.data(), static_cast<std::size_t>(n));
  }
  if (fd >= 0)
    ::close(fd);
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

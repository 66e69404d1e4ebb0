#include <tessel/core/Communicator.hpp>
#include <tessel/core/Digest.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Main.hpp>
#include <tessel/tools/Tool.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace tessel {

void require_same_file(Communicator const &comm, std::string const &what, std::string const &path) {
  if (comm.size() == 1)
    return;
  std::uint64_t digest = fnv1a_basis;
  if (std::FILE *f = std::fopen(path.c_str(), "rb")) {
    std::vector<unsigned char> buffer(1 << 20);
    std::size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0)
      digest = fnv1a(digest, buffer.data(), n);
    std::fclose(f);
  }
  comm.require_same(what + " '" + path + "' (a digest of its contents)", digest);
}

void require_memory(std::string const &what, double bytes) {
  double const memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  TESSEL_REQUIRE_USAGE(memory <= 0 || bytes <= memory, what, " would need ", bytes / (1 << 30), " GiB, more than the ",
                       memory / (1 << 30), " GiB of memory of this machine");
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
    } catch (Exception const &e) {
      throw UsageError(std::string(e.what()) + ": every rank must run the same command line", e.where());
    }
    return body(cl);
  });
}

} // namespace tessel

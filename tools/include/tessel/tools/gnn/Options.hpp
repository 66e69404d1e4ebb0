#ifndef TESSEL_TOOLS_GNN_OPTIONS_HPP
#define TESSEL_TOOLS_GNN_OPTIONS_HPP

/// \file Options.hpp
/// \brief The aggregation options that the gnn tools (tessel-gnn, tessel-gnn-bench) read from their command line,
/// in one place so that both spell and check them alike.

#include <tessel/gnn/Spmm.hpp>
#include <tessel/tools/CommandLine.hpp>

#include <cstdint>
#include <string>

namespace tessel::gnn {

/// \brief Largest --part-size the tools accept.
inline constexpr std::int64_t max_tool_part_size = std::int64_t{1} << 30;

/// \brief An on/off option (on, 1, true / off, 0, false); absent: \p fallback. Other text is a usage error naming
/// the option.
bool get_on_off(tessel::CommandLine &args, char const *name, bool fallback);

/// \brief SpmmOptions for \p algorithm with --timing on|off, --partition P, --part-size N and --huge-pages on|off
/// from \p args (a usage error for --partition metis where METIS is not built in).
SpmmOptions spmm_options(tessel::CommandLine &args, SpmmAlgorithm algorithm);

/// \brief One line on what --huge-pages \p mode got in this process (huge_page_stats(): allocations advised, refused
/// and the OS's reason), for the tools' output.
std::string huge_pages_line(HugePages mode);
/// \brief The same as JSON: option, advised, advised_bytes, refused, collapsed, not_collapsed, last_refusal.
tessel::Json huge_pages_json(HugePages mode);

} // namespace tessel::gnn

#endif

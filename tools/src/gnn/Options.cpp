#include <tessel/core/Error.hpp>
#include <tessel/tools/gnn/Options.hpp>

#include <cstdio>
#include <string>

namespace tessel::gnn {

bool get_on_off(tessel::CommandLine &args, char const *name, bool fallback) {
  std::string const v = args.get(name, fallback ? "on" : "off");
  if (v == "on" || v == "1" || v == "true")
    return true;
  if (v == "off" || v == "0" || v == "false")
    return false;
  TESSEL_REQUIRE_USAGE(false, "option --", name, " expects on or off, got '", v, "'");
  return fallback;
}

SpmmOptions spmm_options(tessel::CommandLine &args, SpmmAlgorithm algorithm) {
  SpmmOptions o;
  o.algorithm = algorithm;
  o.timing = get_on_off(args, "timing", o.timing);
  if (args.has("partition"))
    o.partition = args.get_parsed("partition", "auto", parse_partition_method);
  TESSEL_REQUIRE_USAGE(o.partition != PartitionMethod::metis || metis_available(),
                       "option --partition metis: this Tessel was built without METIS; use lp or rcm");
  o.part_size = args.get_int<std::int64_t>("part-size", o.part_size, 2, max_tool_part_size);
  o.huge_pages = get_on_off(args, "huge-pages", o.huge_pages == HugePages::on) ? HugePages::on : HugePages::off;
  return o;
}

std::string huge_pages_line(HugePages mode) {
  auto const s = huge_page_stats();
  char line[160];
  std::snprintf(line, sizeof line, "huge pages %s: %lld allocations advised (%.1f MB), %lld refused", name_of(mode),
                static_cast<long long>(s.advised), 1e-6 * static_cast<double>(s.advised_bytes),
                static_cast<long long>(s.refused));
  return line + (s.last_refusal.empty() ? std::string() : ": " + s.last_refusal) + "\n";
}

tessel::Json huge_pages_json(HugePages mode) {
  auto const s = huge_page_stats();
  return {{"option", name_of(mode)},       {"advised", s.advised},     {"advised_bytes", s.advised_bytes},
          {"refused", s.refused},          {"collapsed", s.collapsed}, {"not_collapsed", s.not_collapsed},
          {"last_refusal", s.last_refusal}};
}

} // namespace tessel::gnn

#include <tessel/core/Error.hpp>
#include <tessel/tools/gnn/Options.hpp>

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

} // namespace tessel::gnn

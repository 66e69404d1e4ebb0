// tessel-gnn-data: writes tessel.gnn.graph HDF5 files (datasets/gnn/README.md).
//
//   tessel-gnn-data sbm  --nodes 100000 --community 128 --p-in 0.1 --inter-degree 2 --out sbm.h5
//   tessel-gnn-data rmat --scale 16 --edge-factor 8 --out rmat.h5
//   tessel-gnn-data csv  --edges facebook_edges.csv --targets facebook_target.csv --id-column id
//                        --target-column page_type --name facebook --out facebook.h5
#include <tessel/core/Csv.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/Numbers.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Files.hpp>
#include <tessel/tools/Tool.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace tessel::gnn;

char const *usage_text =
    "usage: tessel-gnn-data <sbm|rmat|csv> [options] --out FILE\n"
    "  sbm   --nodes N --community C --p-in P --inter-degree D --classes K --features F --signal S --seed S\n"
    "        [--no-shuffle]   stochastic block model (communities hidden by random ids unless --no-shuffle)\n"
    "  rmat  --scale S --edge-factor E --a A --b B --c C --classes K --features F --seed S\n"
    "  csv   --edges FILE [--directed] [--targets FILE --id-column NAME --target-column NAME]\n"
    "        [--name NAME] [--source TEXT] [--split PER_CLASS,VAL,TEST] [--seed S]\n"
    "        edge list with a header line (first two columns: source, target; undirected unless --directed);\n"
    "        targets: RFC-4180 CSV, one row per node, classes = the sorted distinct values of the target column\n";

/// Node ids must stay below this for 32-bit indices (the node count fits an int32).
constexpr std::int64_t max_node_id = (std::int64_t{1} << 31) - 1;

/// A node id: a non-negative decimal integer (tessel::parse_decimal_int: no spaces, no hexadecimal) below
/// max_node_id.
std::int64_t parse_id(std::string const &s, tessel::CsvReader const &file) {
  auto const v = tessel::parse_decimal_int(s);
  TESSEL_REQUIRE(v && *v >= 0, file.where(), ": '", s, "' is not a non-negative node id");
  TESSEL_REQUIRE(*v < max_node_id, file.where(), ": node id ", *v, " too large for 32-bit indices");
  return *v;
}

/// The edges of a CSV edge list (a header line, then "a,b" per line) and the largest node id. A file without an
/// edge (empty, or a header only) is refused: it would be a graph of no nodes.
std::vector<std::pair<std::int32_t, std::int32_t>> read_edge_list(std::string const &path, std::int64_t &max_id) {
  tessel::CsvReader in(path); // a bounded regular file (not a folder, a device or a pipe), a byte-order mark dropped
  std::vector<std::string> f;
  TESSEL_REQUIRE(in.next(f), "edge list '", path, "' is empty: expected a header line, then one edge per line");
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  max_id = -1;
  while (in.next(f)) {
    TESSEL_REQUIRE(f.size() >= 2, in.where(), ": expected two columns, got ", f.size());
    auto const a = parse_id(f[0], in), b = parse_id(f[1], in);
    max_id = std::max({max_id, a, b});
    edges.emplace_back(static_cast<std::int32_t>(a), static_cast<std::int32_t>(b));
  }
  TESSEL_REQUIRE(!edges.empty(), "edge list '", path, "' holds no edge (a header line only)");
  return edges;
}

/// The target of every node id below \p n (empty where the table has none) from a CSV table with a header; \p n
/// grows to cover the ids of the table.
std::vector<std::string> read_targets(std::string const &path, std::string const &id_column,
                                      std::string const &target_column, std::int64_t &n) {
  tessel::CsvReader in(path);
  std::vector<std::string> header;
  TESSEL_REQUIRE(in.next(header), "targets file '", path, "' is empty: expected a header line");
  auto column = [&](std::string const &name) {
    auto it = std::find(header.begin(), header.end(), name);
    TESSEL_REQUIRE(it != header.end(), "file '", path, "': no column '", name, "' in the header");
    return static_cast<std::size_t>(it - header.begin());
  };
  std::size_t const id_col = column(id_column);
  std::size_t const target_col = column(target_column);
  std::vector<std::pair<std::int64_t, std::string>> rows;
  std::vector<std::size_t> row_line; // the line of each row, for the error on a repeated id
  std::vector<std::string> f;
  while (in.next(f)) {
    TESSEL_REQUIRE(f.size() == header.size(), in.where(), ": ", f.size(), " fields, the header has ", header.size());
    auto const id = parse_id(f[id_col], in);
    rows.emplace_back(id, f[target_col]);
    row_line.push_back(static_cast<std::size_t>(in.line()));
    n = std::max(n, id + 1);
  }
  // One slot per node id up to the largest: a sparse table with a huge id must not take the machine's memory.
  tessel::require_memory("the node table of '" + path + "' (largest id " + std::to_string(n - 1) + ")",
                         static_cast<double>(n) * (sizeof(std::string) + sizeof(std::size_t)));
  std::vector<std::string> target_of(static_cast<std::size_t>(n), "");
  std::vector<std::size_t> line_of(static_cast<std::size_t>(n), 0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto const id = static_cast<std::size_t>(rows[r].first);
    TESSEL_REQUIRE(line_of[id] == 0, "file '", path, "': node id ", id, " has a row on line ", line_of[id],
                   " and again on line ", row_line[r], " (one row per node expected)");
    line_of[id] = row_line[r];
    target_of[id] = rows[r].second;
  }
  return target_of;
}

/// Labels from the targets (classes numbered in sorted order; -1 where a node has none); returns the classes.
std::vector<std::string> label_by_target(Dataset &d, std::vector<std::string> const &target_of,
                                         std::string const &path) {
  std::vector<std::string> classes;
  for (auto const &t : target_of)
    if (!t.empty())
      classes.push_back(t);
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  TESSEL_REQUIRE(classes.size() <= 1000, "file '", path, "': column has ", classes.size(),
                 " distinct values; a class column is expected (at most 1000 classes)");
  d.num_classes = static_cast<int>(classes.size());
  d.labels.assign(target_of.size(), -1);
  for (std::size_t i = 0; i < target_of.size(); ++i)
    if (!target_of[i].empty())
      d.labels[i] =
          static_cast<std::int32_t>(std::lower_bound(classes.begin(), classes.end(), target_of[i]) - classes.begin());
  return classes;
}

/// Prints the split as drawn, and says so where the data had fewer labelled nodes than asked for.
void report_split(Dataset const &d, std::vector<std::int64_t> const &asked) {
  auto const count = [](std::vector<std::uint8_t> const &m) {
    return static_cast<long long>(std::count(m.begin(), m.end(), 1));
  };
  long long const train = count(d.train_mask), val = count(d.val_mask), test = count(d.test_mask);
  std::printf("split: train %lld (up to %lld per class), val %lld, test %lld\n", train,
              static_cast<long long>(asked[0]), val, test);
  if (val < asked[1] || test < asked[2])
    std::printf("note: --split asked for %lld validation and %lld test nodes; the labelled nodes left after the "
                "training ones gave %lld and %lld\n",
                static_cast<long long>(asked[1]), static_cast<long long>(asked[2]), val, test);
}

int cmd_csv(tessel::CommandLine &v, std::string const &out) {
  std::string const edges_path = v.get("edges", "");
  TESSEL_REQUIRE_USAGE(!edges_path.empty(), "csv needs --edges FILE");
  bool const directed = v.flag("directed");
  std::string const name = v.get("name", edges_path);
  std::string const source = v.get("source", "edge list " + edges_path);
  std::string const targets = v.get("targets", "");
  std::string const id_column = v.get("id-column", "id");
  std::string const target_column = v.get("target-column", "target");
  auto const split = v.get_int_list<std::int64_t>("split", {20, 500, 1000}, 0, std::int64_t{1} << 31);
  TESSEL_REQUIRE_USAGE(split.size() == 3, "option --split expects PER_CLASS,VAL,TEST, got ", split.size(), " numbers");
  TESSEL_REQUIRE_USAGE(split[0] >= 1, "option --split: PER_CLASS = 0 leaves no training node (the file could not be "
                                      "trained on); at least 1 per class");
  auto const seed = v.get_int<std::uint64_t>("seed", 1, 0, UINT64_MAX);
  v.finish();
  tessel::require_distinct_files({{"--edges", edges_path}, {"--targets", targets}}, {{"--out", out}});
  tessel::require_writable(out);
  std::int64_t max_id = -1;
  auto const edges = read_edge_list(edges_path, max_id);
  Dataset d;
  d.name = name;
  d.source = source;
  d.directed = directed;
  std::int64_t n = max_id + 1;
  std::vector<std::string> target_of;
  if (!targets.empty())
    target_of = read_targets(targets, id_column, target_column, n);
  EdgeListOptions read;
  read.symmetrize = !directed;
  d.graph = graph_from_edges<std::int32_t>(d.name, static_cast<std::int32_t>(n), edges, read);
  d.features = Matrix<Kokkos::HostSpace>("Tessel::gnn::features", static_cast<std::size_t>(n), 0);
  if (!targets.empty()) {
    auto const classes = label_by_target(d, target_of, targets);
    make_split(d, static_cast<int>(split[0]), split[1], split[2], seed);
    report_split(d, split);
    std::printf("classes:");
    for (std::size_t k = 0; k < classes.size(); ++k)
      std::printf(" %zu=%s", k, classes[k].c_str());
    std::printf("\n");
  }
  save_dataset(out, d);
  std::printf("wrote %s: %lld nodes, %lld entries\n", out.c_str(), static_cast<long long>(n),
              static_cast<long long>(d.graph.nnz()));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-gnn-data", argc, argv, [](tessel::CommandLine &v) {
    std::string const command = v.subcommand();
    if (command.empty() || v.flag({"help", 'h'})) {
      std::printf("%s", usage_text);
      TESSEL_REQUIRE_USAGE(!command.empty() || v.has("help") || v.has("h"), "no command given");
      return 0;
    }
    std::string const out = v.get("out", "");
    TESSEL_REQUIRE_USAGE(!out.empty(), "--out FILE is required (see --help)");
    if (command == "csv")
      return cmd_csv(v, out);
    Dataset d;
    if (command == "sbm") {
      SbmOptions o;
      o.nodes = v.get_int<std::int64_t>("nodes", 10000, 1, (std::int64_t{1} << 31) - 1);
      o.community_size = v.get_int<std::int64_t>("community", 128, 1, o.nodes);
      o.p_in = v.get_double("p-in", 0.1, tessel::Range::positive(1));
      o.inter_degree = v.get_double("inter-degree", 2, tessel::Range::closed(0, 1e4));
      o.classes = v.get_int("classes", 8, 1, 1 << 16);
      o.features = v.get_int("features", 32, 0, 1 << 16);
      o.feature_signal = v.get_double("signal", 1, tessel::Range::closed(0, 1e6));
      o.seed = v.get_int<std::uint64_t>("seed", 1, 0, UINT64_MAX);
      o.shuffle = !v.flag("no-shuffle");
      v.finish();
      tessel::require_writable(out);
      double const entries =
          static_cast<double>(o.nodes) * (o.p_in * static_cast<double>(o.community_size) + o.inter_degree);
      tessel::require_memory("the graph (--nodes, --community, --p-in, --inter-degree, --features)",
                             4.0 * static_cast<double>(o.nodes) * o.features + 16.0 * entries);
      d = generate_sbm(o);
    } else if (command == "rmat") {
      RmatOptions o;
      o.scale = v.get_int("scale", 14, 1, 30);
      o.edge_factor = v.get_double("edge-factor", 8, tessel::Range::positive(1e4));
      o.a = v.get_double("a", 0.57, tessel::Range::closed(0, 1));
      o.b = v.get_double("b", 0.19, tessel::Range::closed(0, 1));
      o.c = v.get_double("c", 0.19, tessel::Range::closed(0, 1));
      TESSEL_REQUIRE_USAGE(o.a + o.b + o.c <= 1, "options --a, --b, --c are quadrant probabilities: their sum ",
                           o.a + o.b + o.c, " exceeds 1");
      o.classes = v.get_int("classes", 4, 1, 1 << 16);
      o.features = v.get_int("features", 0, 0, 1 << 16);
      o.seed = v.get_int<std::uint64_t>("seed", 1, 0, UINT64_MAX);
      v.finish();
      tessel::require_writable(out);
      double const nodes = std::ldexp(1.0, o.scale);
      tessel::require_memory("the graph (--scale, --edge-factor, --features)",
                             4.0 * nodes * o.features + 32.0 * nodes * o.edge_factor);
      d = generate_rmat(o);
    } else {
      TESSEL_REQUIRE_USAGE(false, "unknown command '", command, "' (expected sbm, rmat or csv; see --help)");
    }
    save_dataset(out, d);
    auto const st = degree_stats(d.graph);
    std::printf("wrote %s: %s, %lld nodes, %lld entries, mean degree %.2f\n", out.c_str(), d.name.c_str(),
                static_cast<long long>(st.num_rows), static_cast<long long>(st.nnz), st.mean_degree);
    return 0;
  });
}

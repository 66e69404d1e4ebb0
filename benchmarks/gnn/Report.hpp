#ifndef TESSEL_BENCHMARKS_GNN_REPORT_HPP
#define TESSEL_BENCHMARKS_GNN_REPORT_HPP

// What tessel-gnn-bench reports for one feature width, on either backend (src: Report.cpp).
#include <tessel/core/Json.hpp>
#include <tessel/gnn/Dataset.hpp>
#include <tessel/gnn/Graph.hpp>

#include <map>
#include <string>
#include <vector>

namespace tessel::gnn::bench {

/// Prints adaptive's speedup over every other kernel (\p leading first, e.g. the vendor baseline) and over the best
/// single full-graph kernel, and returns the width's JSON record. "permute_in_out" (host: moving X in and Y out) is
/// reported apart, never a kernel. \p plan: the adaptive handle's plan (null without one).
Json report_width(int f, double flops, std::map<std::string, double> const &ms,
                  std::map<std::string, double> const *errors, std::map<std::string, std::string> const &notes,
                  std::vector<std::string> const &leading, Json plan);

/// Appends what both backends record of the run: data (the file), dataset, nodes, nnz, operator, reps.
void add_run_fields(Json &doc, std::string const &data, std::string const &dataset, Graph<std::int32_t> const &op,
                    std::string const &op_name, int reps);

/// Refuses a data set without nodes (an empty edge list, a file declaring 0 nodes): there is nothing to time, and
/// its ratios would be of nothing.
void require_nodes(Dataset const &data, std::string const &path);

/// A list option naming a value twice (it would be timed twice and reported once) is a usage error.
void require_distinct(char const *option, std::vector<std::string> values);
void require_distinct(char const *option, std::vector<int> const &values);

/// The median (the upper one of an even count; NaN when empty).
double median(std::vector<double> v);

} // namespace tessel::gnn::bench

#endif

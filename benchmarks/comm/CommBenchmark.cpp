// tessel-comm-bench: allreduce and alltoallv over a Tessel communicator, reported in nccl-tests' format.
//
//   mpiexec -n 2 tessel-comm-bench -b 8 -e 64M -f 4 -w 5 -n 20 -o all -J comm.json
//
// time   median over the timed iterations of one call's wall time, then the maximum over ranks (the busiest
//        rank decides, as nccl-tests' "-a 3" and its alltoallv rule)
// algbw  S / time, S = bytes one rank contributes (GB = 1e9)
// busbw  algbw x 2(n-1)/n for allreduce, x (n-1)/n for alltoallv (nccl-tests doc/PERFORMANCE.md)
// #wrong elements that differ from the exact expected result of a checked call after the timed ones
#include <tessel/core/Communicator.hpp>
#include <tessel/core/Json.hpp>
#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Version.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Tool.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace {

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{32} << 20;
  double step = 2.0;
  int warmup = 5;
  int iters = 20;
  std::string ops = "all";
  std::string json;
  bool check = true;
};

// Bytes with an optional K/M/G suffix (powers of 1024), as nccl-tests reads -b and -e.
std::size_t parse_size(std::string const &option, std::string const &text) {
  double scale = 1;
  switch (text.empty() ? ' ' : text.back()) {
  case 'K':
  case 'k':
    scale = 1024;
    break;
  case 'M':
  case 'm':
    scale = 1024.0 * 1024;
    break;
  case 'G':
  case 'g':
    scale = 1024.0 * 1024 * 1024;
    break;
  default:
    break;
  }
  std::string const number = scale == 1 ? text : text.substr(0, text.size() - 1);
  // Sizes past 2^31 floats exceed MPI's int counts: refused here, before anything is allocated.
  double const limit = 8.0 * 1024 * 1024 * 1024;
  double const value =
      tessel::CommandLine::parse_double(option, number, tessel::Range::closed(1, limit / scale)) * scale;
  // A byte count is whole: "1.5" is not 1 byte (1.5K is 1536).
  TESSEL_REQUIRE_USAGE(value == std::floor(value), "option ", option, " expects a whole number of bytes, got '", text,
                       "' (", value, " bytes)");
  return static_cast<std::size_t>(value);
}

// \p v with every digit a user may have typed (1.0000001, not 1).
std::string exact(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.10g", v);
  return text;
}

// Most sizes one sweep measures: a factor barely above 1 would otherwise ask for millions.
constexpr std::size_t max_sweep_sizes = 1000;

// The element counts of the sweep from -b to -e by -f: each size once (a step that does not reach the next element
// count moves to it), at most max_sweep_sizes.
std::vector<std::size_t> sweep_counts(Options const &o) {
  std::vector<std::size_t> counts;
  double const last = static_cast<double>(o.max_bytes) * 1.0000001;
  for (double bytes = static_cast<double>(o.min_bytes); bytes <= last; bytes *= o.step) {
    std::size_t count = std::max<std::size_t>(1, static_cast<std::size_t>(bytes) / sizeof(float));
    if (!counts.empty() && count <= counts.back()) {
      count = counts.back() + 1;
      bytes = static_cast<double>(count * sizeof(float));
      if (bytes > last)
        break;
    }
    counts.push_back(count);
    TESSEL_REQUIRE_USAGE(counts.size() <= max_sweep_sizes, "-f/--stepfactor ", exact(o.step), " from ", o.min_bytes,
                         " to ", o.max_bytes, " bytes gives more than ", max_sweep_sizes,
                         " sizes; use a larger factor or a narrower range");
  }
  return counts;
}

void usage() {
  std::printf("usage: tessel-comm-bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-w WARMUP] [-n ITERS]\n"
              "                         [-o allreduce|alltoallv|all] [-c 0|1] [-J FILE] [--debug]\n"
              "whole byte counts in [1, 8G] take K/M/G suffixes; FACTOR in (1, 1024], at most 1000 sizes; run under\n"
              "mpiexec for more than one "
              "rank. exit status: 0 success, 1 runtime error or wrong values, 2 invalid option\n");
}

Options parse(tessel::CommandLine &cl) {
  // nccl-tests spellings (-b -e -f -w -n -o -c) so its command lines carry over.
  Options o;
  o.min_bytes = parse_size("-b/--minbytes", cl.get({"minbytes", 'b'}, std::to_string(o.min_bytes)));
  o.max_bytes = parse_size("-e/--maxbytes", cl.get({"maxbytes", 'e'}, std::to_string(o.max_bytes)));
  o.step = cl.get_double({"stepfactor", 'f'}, o.step, tessel::Range{1, 1024, true, false});
  o.warmup = cl.get_int({"warmup_iters", 'w'}, o.warmup, 0, 1000000);
  o.iters = cl.get_int({"iters", 'n'}, o.iters, 1, 1000000);
  o.ops = cl.get({"op", 'o'}, o.ops);
  o.check = cl.get_int({"check", 'c'}, o.check ? 1 : 0, 0, 1) != 0;
  o.json = cl.get({"json", 'J'}, o.json);
  cl.finish();
  TESSEL_REQUIRE_USAGE(o.min_bytes <= o.max_bytes, "-b/--minbytes (", o.min_bytes, ") exceeds -e/--maxbytes (",
                       o.max_bytes, ")");
  TESSEL_REQUIRE_USAGE(o.ops == "all" || o.ops == "allreduce" || o.ops == "alltoallv", "option -o/--op expects ",
                       "allreduce, alltoallv or all, got '", o.ops, "'");
  tessel::require_writable(o.json);
  return o;
}

struct Result {
  double time_us = 0, algbw = 0, busbw = 0;
  long wrong = 0;
  bool valid = false;
};

struct Row {
  std::string op;
  std::size_t bytes, count;
  Result oop, ip;
};

// Median per-call time on this rank, then the maximum over ranks.
template <class Call> double time_call(tessel::Communicator const &comm, Options const &o, Call &&call) {
  for (int i = 0; i < o.warmup; ++i)
    call();
  comm.barrier();
  std::vector<double> t(static_cast<std::size_t>(o.iters));
  for (auto &x : t) {
    auto const start = std::chrono::steady_clock::now();
    call();
    x = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return comm.allreduce_value(t[t.size() / 2], tessel::ReduceOp::max);
}

Result finish(tessel::Communicator const &comm, double time_us, std::size_t bytes, double factor, long wrong) {
  Result r;
  r.time_us = time_us;
  r.algbw = static_cast<double>(bytes) / (time_us * 1e-6) / 1e9;
  r.busbw = r.algbw * factor;
  r.wrong = comm.allreduce_value<std::int64_t>(wrong, tessel::ReduceOp::sum);
  r.valid = true;
  return r;
}

Row bench_allreduce(tessel::Communicator comm, Options const &o, std::size_t count) {
  int const n = comm.size(), r = comm.rank();
  double const factor = 2.0 * (n - 1) / n;
  std::vector<float> send(count), recv(count);
  auto const fill = [&] {
    for (std::size_t i = 0; i < count; ++i)
      send[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
  };
  auto const expected = [&](std::size_t i) {
    return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
  };
  Row row{"allreduce", count * sizeof(float), count, {}, {}};

  fill();
  comm.set_validation(false);
  double const t_oop =
      time_call(comm, o, [&] { comm.allreduce(send.data(), recv.data(), count, tessel::ReduceOp::sum); });
  long wrong = 0;
  if (o.check) {
    comm.set_validation(true);
    std::fill(recv.begin(), recv.end(), -1.f);
    comm.allreduce(send.data(), recv.data(), count, tessel::ReduceOp::sum);
    for (std::size_t i = 0; i < count; ++i)
      wrong += recv[i] != expected(i);
  }
  row.oop = finish(comm, t_oop, row.bytes, factor, wrong);

  comm.set_validation(false);
  // In place: the buffer is overwritten each call; timing does not depend on the values.
  double const t_ip =
      time_call(comm, o, [&] { comm.allreduce(send.data(), send.data(), count, tessel::ReduceOp::sum); });
  wrong = 0;
  if (o.check) {
    comm.set_validation(true);
    fill();
    comm.allreduce(send.data(), send.data(), count, tessel::ReduceOp::sum);
    for (std::size_t i = 0; i < count; ++i)
      wrong += send[i] != expected(i);
  }
  row.ip = finish(comm, t_ip, row.bytes, factor, wrong);
  return row;
}

// Uniform alltoallv: every rank sends count/n elements to every rank (the remainder to the last peer).
Row bench_alltoallv(tessel::Communicator comm, Options const &o, std::size_t count) {
  auto const n = static_cast<std::size_t>(comm.size());
  auto const r = static_cast<std::size_t>(comm.rank());
  std::vector<std::size_t> sc(n, count / n), sd(n), rc(n, count / n), rd(n);
  sc.back() += count % n;
  // Receive counts: what peer p sends to me is count/n, plus the remainder when I am the last rank.
  for (std::size_t p = 0; p < n; ++p)
    rc[p] = count / n + (r == n - 1 ? count % n : 0);
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), std::size_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), std::size_t{0});
  std::size_t const recv_total = rd.back() + rc.back();
  std::vector<float> send(count), recv(recv_total);
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t k = 0; k < sc[d]; ++k)
      send[sd[d] + k] = static_cast<float>(r * 4096 + (k % 4096)); // exact in float
  Row row{"alltoallv", count * sizeof(float), count, {}, {}};
  comm.set_validation(false);
  double const t = time_call(comm, o, [&] {
    comm.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), tessel::DataType::float32);
  });
  long wrong = 0;
  if (o.check) {
    comm.set_validation(true);
    std::fill(recv.begin(), recv.end(), -1.f);
    comm.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), tessel::DataType::float32);
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t k = 0; k < rc[s]; ++k)
        wrong += recv[rd[s] + k] != static_cast<float>(s * 4096 + (k % 4096));
  }
  // S is the busiest rank's traffic: every rank sends `count`; the last one receives the remainders too.
  std::size_t const busiest = std::max(count, n * (count / n + count % n)) * sizeof(float);
  row.oop = finish(comm, t, busiest, static_cast<double>(n - 1) / static_cast<double>(n), wrong);
  return row;
}

void print_header(tessel::Communicator const &comm, Options const &o) {
  std::printf("# %s\n", tessel::build_summary().c_str());
  std::printf("# tessel-comm-bench: backend %s, %d ranks, minBytes %zu maxBytes %zu step %.1f warmup %d iters %d "
              "check %d\n",
              tessel::name_of(comm.kind()), comm.size(), o.min_bytes, o.max_bytes, o.step, o.warmup, o.iters,
              o.check ? 1 : 0);
  std::printf("# time: median per call, max over ranks; algbw = S/time, busbw = algbw x 2(n-1)/n (allreduce) or "
              "(n-1)/n (alltoallv); GB = 1e9\n#\n");
  std::printf("# %10s %12s %8s %6s %6s   %24s %-6s   %24s %-6s\n", "", "", "", "", "", "out-of-place", "", "in-place",
              "");
  std::printf("# %10s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void print_row(Row const &row) {
  auto cols = [](Result const &r) {
    char buf[64];
    if (r.valid)
      std::snprintf(buf, sizeof buf, "%9.2f %8.2f %8.2f %6ld", r.time_us, r.algbw, r.busbw, r.wrong);
    else
      std::snprintf(buf, sizeof buf, "%9s %8s %8s %6s", "N/A", "N/A", "N/A", "N/A");
    return std::string(buf);
  };
  std::printf("  %10zu %12zu %8s %6s %6s %s %s   # %s\n", row.bytes, row.count, "float",
              row.op == "allreduce" ? "sum" : "none", "-1", cols(row.oop).c_str(), cols(row.ip).c_str(),
              row.op.c_str());
}

void write_results(std::string const &path, tessel::Communicator const &comm, Options const &o,
                   std::vector<Row> const &rows) {
  auto const result = [](Result const &r) -> tessel::Json {
    if (!r.valid)
      return nullptr;
    return {{"time_us", r.time_us}, {"algbw_GBps", r.algbw}, {"busbw_GBps", r.busbw}, {"wrong", r.wrong}};
  };
  tessel::Json results = tessel::Json::array();
  for (auto const &row : rows)
    results.push_back({{"op", row.op},
                       {"bytes", row.bytes},
                       {"count", row.count},
                       {"type", "float32"},
                       {"out_of_place", result(row.oop)},
                       {"in_place", result(row.ip)}});
  tessel::write_json(path, {{"tool", "tessel-comm-bench"},
                            {"version", tessel::version()},
                            {"git", tessel::git_hash()},
                            {"backend", tessel::name_of(comm.kind())},
                            {"ranks", comm.size()},
                            {"warmup", o.warmup},
                            {"iters", o.iters},
                            {"time", "median per call, max over ranks"},
                            {"results", results}});
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-comm-bench", argc, argv, [](tessel::CommandLine &cl) {
    if (cl.flag({"help", 'h'})) {
      usage();
      return 0;
    }
    Options const o = parse(cl);
    auto const counts = sweep_counts(o); // checked before any work
    auto const comm = tessel::Communicator::world();
    bool const root = comm.rank() == 0;
    if (root)
      print_header(comm, o);
    std::vector<Row> rows;
    double busbw_sum = 0;
    long wrong = 0;
    for (std::string const op : {"allreduce", "alltoallv"}) {
      if (o.ops != "all" && o.ops != op)
        continue;
      for (std::size_t const count : counts) {
        Row const row =
            op == std::string("allreduce") ? bench_allreduce(comm, o, count) : bench_alltoallv(comm, o, count);
        if (root)
          print_row(row);
        rows.push_back(row);
        busbw_sum += row.oop.busbw;
        wrong += row.oop.wrong + (row.ip.valid ? row.ip.wrong : 0);
      }
    }
    if (root) {
      std::printf("# Out of bounds values : %ld %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
      std::printf("# Avg bus bandwidth    : %.4f\n#\n",
                  rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
      if (!o.json.empty()) {
        write_results(o.json, comm, o, rows);
        std::printf("# wrote %s\n", o.json.c_str());
      }
    }
    return wrong == 0 ? 0 : 1;
  });
}

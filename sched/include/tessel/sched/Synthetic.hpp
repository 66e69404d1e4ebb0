#ifndef TESSEL_SCHED_SYNTHETIC_HPP
#define TESSEL_SCHED_SYNTHETIC_HPP

/// \file Synthetic.hpp
/// \brief Synthetic traces and Arena-style job regeneration. Jobs are drawn with the mix of Crius's
/// `traces/regenerate_sim_trace.py`: family Wide-ResNet 15 % / BERT 25 % / MoE 60 %; sizes 10/15/25/20/15/10 % over
/// the family's first six sizes; batch the family's first / second / third size with 50/10/5 odds; GPU count
/// 1/2/4/8/16 with cumulative odds 10/25/45/65/80, capped by the size (size rank + 2 steps); GPU type A100 15 % /
/// V100 15 % / A40 30 % / A10 30 % (restricted to the cluster's types); redrawn until the best plan is feasible.
/// Deterministic for a seed (own generator, no std:: distributions).

#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Throughput.hpp>
#include <tessel/sched/Trace.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessel::sched {

/// \brief A synthetic trace with Crius's job mix: how many jobs, how they arrive and how long they run.
struct SyntheticOptions {
  int jobs = 100;            ///< jobs in the trace
  double jobs_per_hour = 10; ///< Poisson arrivals
  double start_time = 0;     ///< submission time of the first arrival process step
  std::uint64_t seed = 1;    ///< the trace is deterministic in the seed
  double median_hours = 1.0; ///< median job duration on its requested allocation (log-normal)
  double sigma = 1.0;        ///< log-normal sigma of the duration
  double max_hours = 48;     ///< durations are clipped to [1 min, max_hours]
  double gpt_share = 0;      ///< fraction of jobs drawn as GPT (taken from the MoE share)
  /// GPU type mix by name; empty: Arena's (a100 15, v100 15, a40 30, a10 30). Types missing in the cluster are
  /// dropped and the rest renormalized; if none remain, types are drawn uniformly.
  std::vector<std::pair<std::string, double>> type_mix;
};

/// \brief A synthetic trace on \p cluster whose jobs are feasible under \p oracle (adaptive plans).
Trace generate_trace(Cluster const &cluster, ThroughputOracle const &oracle, SyntheticOptions const &options);

/// \brief Arena's regeneration of a trace's jobs (how the Crius philly trace was made from ElasticFlow's
/// cluster08): keeps id, submission time and deadline; redraws model, size, batch, GPU count (unless
/// \p keep_gpus, then rounded up to a power of two no larger than 16) and type until feasible; scales iterations by
/// old batch / new batch. \p old_batch holds each job's original batch size.
void regenerate_jobs(Trace &trace, std::vector<int> const &old_batch, Cluster const &cluster,
                     ThroughputOracle const &oracle, std::uint64_t seed, bool keep_gpus);

/// \brief Reads an ElasticFlow trace CSV (`job_id,submission_time,num_iteration,model_name,deadline,batch_size,
/// num_gpu[,duration]`, microsoft/elasticflow-traces), keeps every \p sample-th row (counted over the whole file,
/// as Arena's script; the Crius philly trace used 3) among those submitted at or after \p from_time, and regenerates
/// their models, batches, GPU counts (unless \p keep_gpus) and types as Arena did (regenerate_jobs). Malformed rows
/// raise tessel::Exception naming the file and line.
Trace convert_elasticflow_trace(std::string const &path, Cluster const &cluster, ThroughputOracle const &oracle,
                                std::uint64_t seed, bool keep_gpus, double from_time, int sample = 1);

} // namespace tessel::sched

#endif

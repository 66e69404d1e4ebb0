// Example 2 (sched): Crius's view of a heterogeneous GPU cluster.
//   - a cluster described in code (and one of the cluster files Tessel installs);
//   - the best Cell for one job: GPU type, node layout, pipeline stages and the per-stage parallel plan;
//   - a short simulation of Crius and FCFS on a synthetic trace, and reading its results.
// Run: ./tessel_example_sched
#include <tessel/core/Main.hpp>
#include <tessel/core/ShareDirectory.hpp>
#include <tessel/sched/Cell.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/Model.hpp>
#include <tessel/sched/Simulator.hpp>
#include <tessel/sched/Synthetic.hpp>
#include <tessel/sched/Throughput.hpp>

#include <cmath>
#include <cstdio>
#include <string>

namespace {

namespace sched = tessel::sched;

int run(int /*argc*/, char ** /*argv*/) {
  int failures = 0;
  auto check = [&](bool ok, char const *what) {
    if (!ok) {
      std::fprintf(stderr, "check failed: %s\n", what);
      ++failures;
    }
  };

  // [snippet:sched-cluster]
  // 4 nodes of 4 A100s and 2 nodes of 8 V100s; the GPUs' specs (memory, peak FLOP/s, bandwidths) are the known
  // ones, or fill in a tessel::sched::GpuSpec of your own.
  sched::Cluster const cluster({sched::Cluster::known_gpu("a100"), sched::Cluster::known_gpu("v100")},
                               {sched::NodeGroup{/*gpu_type=*/0, /*num_nodes=*/4, /*gpus_per_node=*/4},
                                sched::NodeGroup{/*gpu_type=*/1, /*num_nodes=*/2, /*gpus_per_node=*/8}});
  // [snippet:sched-cluster]
  std::printf("cluster: %d GPUs on %d nodes of %d types\n", cluster.num_gpus(), cluster.num_nodes(),
              cluster.num_types());
  check(cluster.num_gpus() == 32 && cluster.type_gpus(0) == 16, "the cluster holds the GPUs described");

  // The cluster files Tessel installs are found from the library's own location.
  sched::Cluster const installed = sched::load_cluster(tessel::share_file("sched/clusters/hetero_64.csv"));
  std::printf("installed cluster hetero_64: %d GPUs of %d types\n", installed.num_gpus(), installed.num_types());
  check(installed.num_gpus() == 64, "the installed hetero_64 cluster has 64 GPUs");

  // The best Cell for one job: BERT 1.3B, global batch 128, on 8 GPUs of either type. A Cell fixes the GPU type,
  // the layout (hosts x GPUs per host) and the pipeline stages; the estimator finds each stage's dp x tp shape.
  // The scheduler takes the better of the greedy and uniform plan searches; so does this loop.
  // [snippet:sched-best-cell]
  sched::Estimator const estimator(cluster); // analytic model (calibrate() on profile tables when you have them)
  int const model = sched::ModelCatalog::builtin().find("bert__1.3B");
  int const batch = 128, gpus = 8;
  sched::Estimator::Best best;
  for (int type = 0; type < cluster.num_types(); ++type)
    for (int per_host = 1; per_host <= std::min(gpus, cluster.type_capacity(type)); per_host *= 2)
      for (auto strategy : {sched::PlanStrategy::greedy, sched::PlanStrategy::uniform}) {
        auto const candidate = estimator.best(model, batch, type, gpus / per_host, per_host, strategy);
        if (candidate.feasible && (!best.feasible || candidate.estimate.e2e < best.estimate.e2e))
          best = candidate;
      }
  // [snippet:sched-best-cell]
  check(model >= 0 && best.feasible, "the job fits somewhere");
  std::string stages;
  for (auto const &stage : best.plan.stages)
    stages += (stages.empty() ? "" : ", ") + std::to_string(stage.dp) + "x" + std::to_string(stage.tp);
  std::printf("best Cell for %s, batch %d, %d GPUs: %s, %d x %d, %d stage(s) [dp x tp: %s], %d micro-batches, "
              "%.3f s per iteration (%.1f samples/s), %.1f GB per GPU\n",
              sched::ModelCatalog::builtin()[model].name().c_str(), batch, gpus,
              cluster.type(best.cell.gpu_type).name.c_str(), best.cell.hosts, best.cell.per_host, best.cell.stages,
              stages.c_str(), best.plan.micro_batches, best.estimate.e2e, batch / best.estimate.e2e,
              best.estimate.memory_gb);

  // The reference: every Cell and every plan of every strategy, estimated one by one; none may beat the choice.
  double fastest = 1e300;
  for (int type = 0; type < cluster.num_types(); ++type)
    for (auto const &cell : sched::enumerate_cells(model, batch, type, gpus, cluster.type_capacity(type)))
      for (auto strategy : {sched::PlanStrategy::minimal, sched::PlanStrategy::uniform, sched::PlanStrategy::greedy})
        for (auto const &plan : estimator.enumerate_plans(cell, strategy)) {
          auto const estimate = estimator.estimate(cell, plan);
          if (estimate.valid && estimate.fits)
            fastest = std::min(fastest, estimate.e2e);
        }
  check(std::abs(best.estimate.e2e - estimator.estimate(best.cell, best.plan).e2e) < 1e-12,
        "the chosen plan's estimate is the estimator's");
  check(best.estimate.e2e <= fastest * (1 + 1e-9), "no Cell and plan of any strategy is faster than the choice");

  // A short simulation: 30 jobs of Crius's mix arriving over about 3 hours, with the estimator as the throughput
  // source (profile tables, where you have them, give measured throughputs instead).
  // [snippet:sched-simulate]
  sched::ThroughputOracle const oracle(cluster, nullptr, &estimator, sched::ThroughputSource::estimator);
  sched::SyntheticOptions synthetic;
  synthetic.jobs = 30;
  synthetic.jobs_per_hour = 10;
  synthetic.median_hours = 0.5;
  sched::Trace const trace = sched::generate_trace(cluster, oracle, synthetic);
  sched::SimOptions options; // rounds of 300 s until every job completed or was rejected
  sched::SimResult const crius =
      sched::simulate(cluster, trace, nullptr, &estimator, sched::ThroughputSource::estimator, "crius", options);
  sched::SimResult const fcfs =
      sched::simulate(cluster, trace, nullptr, &estimator, sched::ThroughputSource::estimator, "fcfs", options);
  // [snippet:sched-simulate]

  // [snippet:sched-results]
  for (auto const *result : {&crius, &fcfs}) {
    auto const &m = result->metrics;
    std::printf("%-5s: %d of %d jobs completed, %d rejected; average JCT %.0f s (p99 %.0f s), makespan %.0f s, "
                "%lld reschedules\n",
                result->policy.c_str(), m.completed, m.submitted, m.rejected, m.avg_jct, m.p99_jct, m.makespan,
                m.reschedules);
    for (auto const &job : result->jobs)
      if (job.state == sched::JobState::rejected)
        std::printf("  %s rejected: %s\n", job.id.c_str(), job.reject_reason.c_str());
  }
  // [snippet:sched-results]

  // Every job ends completed or rejected with a reason, and a completed job's JCT is its finish less its
  // submission.
  for (auto const *result : {&crius, &fcfs}) {
    auto const &m = result->metrics;
    check(m.submitted == 30 && m.completed + m.rejected == m.submitted && m.unfinished == 0,
          "every job completed or was rejected");
    double jct_sum = 0;
    for (auto const &job : result->jobs) {
      if (job.state == sched::JobState::rejected)
        check(!job.reject_reason.empty(), "a rejected job says why");
      if (job.state == sched::JobState::completed) {
        check(job.finish_time >= job.start_time && job.start_time >= job.submit_time, "a job starts and then ends");
        check(std::abs(job.jct - (job.finish_time - job.submit_time)) < 1e-6, "JCT = finish - submission");
        jct_sum += job.jct;
      }
    }
    check(m.completed == 0 || std::abs(jct_sum / m.completed - m.avg_jct) < 1e-6 * m.avg_jct,
          "the average JCT is the mean of the jobs' JCTs");
  }

  if (failures == 0)
    std::printf("sched example: all checks passed\n");
  return failures == 0 ? tessel::exit_success : tessel::exit_failure;
}

} // namespace

int main(int argc, char **argv) { return tessel::run_main("tessel_example_sched", argc, argv, run); }

// tessel-sched-trainer: a synthetic training job for the Slurm backend. It reads its Cell and plan through
// JobContext, pays the plan's re-tuning / restore time, then "trains" at the plan's throughput (iterations take
// batch / throughput seconds of model time, divided by the plan's time scale), checkpoints every checkpoint_s of
// model time and when the controller asks (SIGUSR1), and resumes from its checkpoint.
//
//   tessel-sched-trainer [--fail-after S]   (S: exit with status 3 after S wall-clock seconds, for failure tests)

#include <tessel/core/Error.hpp>
#include <tessel/sched/JobContext.hpp>
#include <tessel/tools/Tool.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-sched-trainer", argc, argv, [](tessel::CommandLine &args) {
    if (args.flag("help")) {
      std::printf("usage: tessel-sched-trainer [--fail-after S]   (runs as a job of tessel-sched serve)\n");
      return 0;
    }
    double const fail_after = args.get_double("fail-after", -1, tessel::Range::at_least(0, 1e9));
    args.finish();
    using clock = std::chrono::steady_clock;
    auto const t_start = clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t_start).count(); };
    auto const ctx = tessel::sched::JobContext::from_environment();
    auto const &plan = ctx.plan();
    long long const resumed = ctx.resume_from();
    std::printf("job %s attempt %d: %lld of %lld iterations done; %d x %d %s GPUs on", plan.job.c_str(), plan.attempt,
                resumed, plan.iterations, static_cast<int>(plan.nodes.size()), plan.gpus_per_node,
                plan.gpu_type.c_str());
    for (auto const &n : plan.nodes)
      std::printf(" %s", n.c_str());
    double const started = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("; plan %s x %d micro-batches; %.2f samples/s; started at %.3f\n", plan.plan.key().c_str(),
                plan.plan.micro_batches, plan.throughput, started);
    std::fflush(stdout);
    double const iter_wall = plan.batch_size / plan.throughput / plan.time_scale;
    double const startup_wall = plan.startup_s / plan.time_scale;
    double const checkpoint_wall = plan.checkpoint_s / plan.time_scale;
    ctx.report(resumed);
    double done = static_cast<double>(resumed);
    double last_report = 0, last_checkpoint = startup_wall;
    auto const tick = std::chrono::milliseconds(50);
    while (true) {
      double const t = elapsed();
      if (fail_after >= 0 && t >= fail_after) {
        std::fprintf(stderr, "tessel-sched-trainer: failing on purpose after %.1f s (--fail-after)\n", t);
        return 3;
      }
      if (t > startup_wall)
        done = std::min(static_cast<double>(plan.iterations),
                        static_cast<double>(resumed) + (t - startup_wall) / iter_wall);
      auto const whole = static_cast<long long>(done);
      if (whole >= plan.iterations) {
        ctx.finish();
        std::printf("job %s finished after %.1f s\n", plan.job.c_str(), t);
        return 0;
      }
      if (tessel::sched::JobContext::stop_requested()) {
        ctx.checkpoint(whole);
        std::printf("job %s checkpointed at iteration %lld on request\n", plan.job.c_str(), whole);
        return 0;
      }
      if (t - last_checkpoint >= checkpoint_wall) {
        ctx.checkpoint(whole);
        last_checkpoint = t;
      } else if (t - last_report >= 0.25) {
        ctx.report(whole);
        last_report = t;
      }
      std::this_thread::sleep_for(tick);
    }
  });
}

// Each policy on tiny traces whose placements and completion times are worked out by hand in the comments.
//
// Cluster: one a100 node (GPUs 0-3) and one v100 node (GPUs 4-7). Model moe__690M, batch 256: per iteration
// 2 / 1 / 0.5 s on 1 / 2 / 4 a100 GPUs (128 / 256 / 512 samples/s) and twice as long on v100; DP fits everywhere.
// Rounds of 300 s. Baselines pay 150 s of re-tuning per GPU (at most 600 s) when they (re)start a job, Crius 10 s.

#include "SchedTestUtil.hpp"

namespace {

using namespace sched_test;

constexpr int kA100 = 0, kV100 = 1;
std::vector<int> gpus(std::initializer_list<int> g) { return g; }

SimResult run(std::string const &policy, std::vector<JobSpec> jobs, SimOptions opt, Recorder *rec = nullptr) {
  static Cluster const cluster = two_type_cluster();
  static ProfileTable const table = simple_profile();
  Trace const trace = make_trace(cluster, std::move(jobs));
  opt.check_invariants = true;
  if (rec)
    rec->attach(opt, trace.jobs.size());
  return simulate(cluster, trace, &table, nullptr, ThroughputSource::table, policy, opt);
}

TEST(SchedPolicies, fcfs_exact_accounting) {
  // J1 (t=0, 4 x a100, 1200 it = 600 s of work) starts at round 0 and first pays 600 s of re-tuning: rounds 1-2
  // re-tune, rounds 3-4 compute -> done at 1200 s. J2 (t=100, 2 x a100) and J3 (t=200, 1 x v100) are seen at
  // round 1 (t=300). J3 starts on GPU 4: 150 s re-tuning, then 150 iterations x 4 s = 600 s -> done at
  // 300 + 150 + 600 = 1050 s. J2 waits for J1 and starts at round 4 (t=1200) on GPUs 0-1: 300 s re-tuning, then
  // 300 it x 1 s -> done at 1800 s.
  Recorder rec;
  auto const r = run("fcfs",
                     {job("J1", 0, 1200, "moe__690M", 256, 4, kA100), job("J2", 100, 300, "moe__690M", 256, 2, kA100),
                      job("J3", 200, 150, "moe__690M", 256, 1, kV100)},
                     SimOptions{}, &rec);
  EXPECT_EQ(rec.gpus(0, 0), gpus({0, 1, 2, 3}));
  EXPECT_EQ(rec.gpus(1, 2), gpus({4}));
  EXPECT_TRUE(rec.gpus(1, 1).empty());
  EXPECT_EQ(rec.gpus(4, 1), gpus({0, 1}));
  EXPECT_DOUBLE_EQ(result_of(r, "J1").jct, 1200);
  EXPECT_DOUBLE_EQ(result_of(r, "J3").jct, 1050 - 200);
  EXPECT_DOUBLE_EQ(result_of(r, "J2").jct, 1800 - 100);
  EXPECT_DOUBLE_EQ(result_of(r, "J2").queue_time, 900); // pending after rounds 1, 2, 3
  EXPECT_EQ(r.metrics.completed, 3);
  EXPECT_DOUBLE_EQ(r.metrics.avg_jct, (1200 + 850 + 1700) / 3.0);
}

TEST(SchedPolicies, fcfs_arena_accounting) {
  // Arena: all three jobs enter at round 0 (their submissions fall in (0, 300]); J1's 600 s re-tuning is a time
  // debt that stalls it for round 1, J3 (1 GPU, 150 s <= 300 s) is not stalled. Progress = iterations -
  // floor(executed / iteration time): J3 ends at round 2 (600 s), J1 at round 3 (900 s); J2 then starts and ends
  // at round 4 (1,200 s). JCTs count from the round the job entered (0).
  SimOptions opt;
  opt.arena_compat = true;
  auto const r = run("fcfs",
                     {job("J1", 0, 1200, "moe__690M", 256, 4, kA100), job("J2", 100, 300, "moe__690M", 256, 2, kA100),
                      job("J3", 200, 150, "moe__690M", 256, 1, kV100)},
                     opt);
  EXPECT_DOUBLE_EQ(result_of(r, "J1").jct, 900);
  EXPECT_DOUBLE_EQ(result_of(r, "J3").jct, 600);
  EXPECT_DOUBLE_EQ(result_of(r, "J2").jct, 1200);
  EXPECT_DOUBLE_EQ(result_of(r, "J2").queue_time, 900);
}

TEST(SchedPolicies, fcfs_is_strict_per_gpu_type) {
  // K1 holds 2 of 4 a100 GPUs; K2 (4 GPUs) must wait, and K3 (1 GPU) waits behind K2 although 2 GPUs are free.
  // K1 ends at round 3 (300 s re-tuning + 600 s of work): K2 gets the node, K3 still waits (blocked type).
  Recorder rec;
  auto const r = run("fcfs",
                     {job("K1", 0, 600, "moe__690M", 256, 2, kA100), job("K2", 10, 600, "moe__690M", 256, 4, kA100),
                      job("K3", 20, 150, "moe__690M", 256, 1, kA100)},
                     SimOptions{}, &rec);
  EXPECT_EQ(rec.gpus(1, 0), gpus({0, 1}));
  EXPECT_TRUE(rec.gpus(1, 1).empty());
  EXPECT_TRUE(rec.gpus(1, 2).empty());
  EXPECT_EQ(rec.gpus(3, 1), gpus({0, 1, 2, 3}));
  EXPECT_TRUE(rec.gpus(3, 2).empty());
  EXPECT_EQ(r.metrics.completed, 3);
  // K3 runs only after K2: K2 re-tunes 600 s and computes 300 s (rounds 4-6, done 1,800 s); K3 starts at round 6.
  EXPECT_GT(result_of(r, "K3").finish_time, result_of(r, "K2").finish_time);
}

TEST(SchedPolicies, crius_changes_gpu_type_then_upgrades) {
  // Arena accounting. A (t=0, 4 x a100, 1200 it) takes the a100 node. B (t=301, 4 x a100, 600 it) finds it full;
  // the downgrade search finds: shrinking A (gain -256, B still does not fit), and changing B's type to v100
  // (gain 256 - 512 = -256 for the type change + 256 for placing B = 0). The type change wins: B runs on GPUs
  // 4-7. A ends at round 2 (600 s); the upgrade trial then moves B back to a100 (gain 512 - 256). With Arena's
  // accounting B's 600 s of execution are re-priced at the a100 speed (0.5 s) and B ends at round 3 (900 s).
  SimOptions opt;
  opt.arena_compat = true;
  Recorder rec;
  auto const r =
      run("crius", {job("A", 0, 1200, "moe__690M", 256, 4, kA100), job("B", 301, 600, "moe__690M", 256, 4, kA100)}, opt,
          &rec);
  EXPECT_EQ(rec.gpus(0, 0), gpus({0, 1, 2, 3}));
  EXPECT_EQ(rec.gpus(1, 0), gpus({0, 1, 2, 3}));
  EXPECT_EQ(rec.gpus(1, 1), gpus({4, 5, 6, 7}));
  EXPECT_EQ(rec.gpus(2, 1), gpus({0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(result_of(r, "A").jct, 600);
  EXPECT_DOUBLE_EQ(result_of(r, "B").jct, 900 - 300);
  EXPECT_EQ(result_of(r, "B").reschedules, 1);
}

TEST(SchedPolicies, crius_grows_a_job_into_idle_gpus) {
  // Exact accounting. One job asks for 1 a100 GPU; the upgrade trial doubles it while GPUs are free: 1 -> 2 -> 4
  // (type change to v100 never gains). On 4 GPUs 600 iterations take 300 s after 40 s of re-tuning.
  Recorder rec;
  auto const r = run("crius", {job("G", 0, 600, "moe__690M", 256, 1, kA100)}, SimOptions{}, &rec);
  EXPECT_EQ(rec.gpus(0, 0), gpus({0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(result_of(r, "G").jct, 40 + 300);
}

TEST(SchedPolicies, gavel_assigns_types_by_throughput_and_migrates_at_admission) {
  // Arena accounting. G1 asks for 2 v100 but a100 gives 256 vs 128 samples/s: it is placed on a100 GPUs 0-1.
  // G2 (4 GPUs) then maximizes the sum: G2 on a100 (512) + G1 moved to v100 (128) = 640 beats G2 on v100 (256) +
  // G1 on a100 (256) = 512, so G1 migrates to GPUs 4-5 in the same round. G2's 600 s re-tuning stalls it one round:
  // it ends at round 2 (600 s); G1 runs 600 it at 2 s on v100 and ends at round 4 (1,200 s).
  SimOptions opt;
  opt.arena_compat = true;
  Recorder rec;
  auto const r =
      run("gavel", {job("G1", 0, 600, "moe__690M", 256, 2, kV100), job("G2", 0, 600, "moe__690M", 256, 4, kA100)}, opt,
          &rec);
  EXPECT_EQ(rec.gpus(0, 0), gpus({4, 5}));
  EXPECT_EQ(rec.gpus(0, 1), gpus({0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(result_of(r, "G2").jct, 600);
  EXPECT_DOUBLE_EQ(result_of(r, "G1").jct, 1200);
}

TEST(SchedPolicies, gavel_single_job_goes_to_the_faster_type) {
  SimOptions opt;
  opt.arena_compat = true;
  Recorder rec;
  auto const r = run("gavel", {job("G1", 0, 600, "moe__690M", 256, 2, kV100)}, opt, &rec);
  EXPECT_EQ(rec.gpus(0, 0), gpus({0, 1}));
  EXPECT_DOUBLE_EQ(result_of(r, "G1").jct, 600); // 600 it x 1 s, 300 s re-tuning absorbed in round 0
}

TEST(SchedPolicies, elasticflow_minimum_share_then_progressive_filling) {
  // Arena accounting, one a100 node only. E1 (1 GPU requested) is admitted with its minimum share (1 GPU) and
  // progressive filling doubles it to 4. E2 arrives at round 1: shares 1 + 1, then doubling ties (gain 128 each)
  // go to the first job (E2: 1 -> 2), then E1 (1 -> 2). Buddy placement: E2 on GPUs 0-1, E1 keeps GPUs 2-3 (no
  // new GPU, so no re-tuning). E1: 600 s re-tuning debt (round 1 stalled), then 300 it in round 2 at 1 s/it...
  Cluster const single({Cluster::known_gpu("a100")}, {{0, 1, 4}});
  ProfileTable const table = simple_profile();
  Trace const trace =
      make_trace(single, {job("E1", 0, 1200, "moe__690M", 256, 1, 0), job("E2", 301, 300, "moe__690M", 256, 1, 0)});
  SimOptions opt;
  opt.arena_compat = true;
  opt.check_invariants = true;
  Recorder rec;
  rec.attach(opt, 2);
  auto const r = simulate(single, trace, &table, nullptr, ThroughputSource::table, "elasticflow", opt);
  EXPECT_EQ(rec.gpus(0, 0), gpus({0, 1, 2, 3}));
  EXPECT_EQ(rec.gpus(1, 1), gpus({0, 1}));
  EXPECT_EQ(rec.gpus(1, 0), gpus({2, 3}));
  // ... so E1 has 1200 - 300/1 = 900 left after round 2 and ends at round 5 (1,500 s); E2 (300 it at 1 s) ends at
  // round 2 (600 s), 300 s after it entered.
  EXPECT_DOUBLE_EQ(result_of(r, "E2").jct, 300);
  EXPECT_DOUBLE_EQ(result_of(r, "E1").jct, 1500);
  EXPECT_EQ(result_of(r, "E1").reschedules, 0);
}

TEST(SchedPolicies, sia_water_fills_by_normalized_goodput) {
  // Exact accounting. DP goodput normalized by the job's minimum (1 GPU on v100: 64 samples/s) with fairness 0.5:
  // a100 1/2/4 GPUs -> sqrt(2), 2, sqrt(8); v100 -> 1, sqrt(2), 2. S1 alone: 1 a100 GPU, then doublings gain
  // (2 - 1.41) / 1 and (2.83 - 2) / 2 per added GPU: it ends with the whole a100 node. With S2 in the same round,
  // each gets 1 a100 GPU, then each is doubled once (the node is then full).
  Recorder one;
  run("sia", {job("S1", 0, 600, "moe__690M", 256, 1, kV100)}, SimOptions{}, &one);
  EXPECT_EQ(one.gpus(0, 0), gpus({0, 1, 2, 3}));
  Recorder two;
  auto const r =
      run("sia", {job("S1", 0, 600, "moe__690M", 256, 1, kV100), job("S2", 0, 600, "moe__690M", 256, 1, kV100)},
          SimOptions{}, &two);
  EXPECT_EQ(two.gpus(0, 0), gpus({0, 2}));
  EXPECT_EQ(two.gpus(0, 1), gpus({1, 3}));
  EXPECT_EQ(r.metrics.completed, 2);
}

} // namespace

// Models, clusters, traces and profile files: loading, round trips, and clear errors on malformed input.

#include "SchedTestUtil.hpp"

#include <tessel/sched/Synthetic.hpp>
#include <tessel/sched/Throughput.hpp>

namespace {

using namespace sched_test;

TEST(SchedModel, catalog_names_sizes_and_fallback_order) {
  auto const &cat = ModelCatalog::builtin();
  int const moe = cat.find("moe__2.4B");
  ASSERT_GE(moe, 0);
  EXPECT_EQ(cat[moe].name(), "moe__2.4B");
  EXPECT_EQ(cat.find("moe_2.4B"), moe);
  EXPECT_EQ(cat.find("wide_resnet__6.8B"), cat.find("wide_resnet", "6.8B"));
  EXPECT_EQ(cat.find("gpt__1.3B"), cat.find("gpt", "1.3B"));
  EXPECT_EQ(cat.find("resnet__50"), -1);
  EXPECT_EQ(cat.find("moe__3B"), -1);
  EXPECT_EQ(cat[cat.next_larger(moe)].size, "10B");
  EXPECT_EQ(cat.next_larger(cat.find("moe__70B")), -1);
  EXPECT_EQ(cat.rank_in_family(cat.find("bert__760M")), 0);
  // Parameter counts follow the Alpa configurations and grow with the size label within a family.
  EXPECT_NEAR(cat[cat.find("bert__760M")].params / 1e9, 0.76, 0.03);
  EXPECT_NEAR(cat[cat.find("moe__10B")].params / 1e9, 10, 0.5);
  for (int i = 0; i < cat.size(); ++i) {
    int const n = cat.next_larger(i);
    if (n >= 0) {
      EXPECT_GT(cat[n].params, cat[i].params) << cat[i].name();
      EXPECT_GT(cat[n].fwd_flops, cat[i].fwd_flops) << cat[i].name();
    }
  }
}

TEST(SchedCluster, crius_cluster_has_1280_gpus_320_per_type) {
  Cluster const c = Cluster::crius_simulated();
  EXPECT_EQ(c.num_gpus(), 1280);
  EXPECT_EQ(c.num_nodes(), 80 + 20 + 160 + 160);
  for (char const *t : {"a100", "v100", "a40", "a10"})
    EXPECT_EQ(c.type_gpus(c.find_type(t)), 320) << t;
  EXPECT_EQ(c.type_capacity(c.find_type("v100")), 16);
  EXPECT_EQ(c.type_capacity(c.find_type("a100")), 4);
  EXPECT_EQ(c.type(c.find_type("a100")).memory_gb, 40);
  // Node and GPU numbering: groups in order, GPUs node by node.
  EXPECT_EQ(c.node_type(0), c.find_type("a100"));
  EXPECT_EQ(c.node_first_gpu(80), 320);
  EXPECT_EQ(c.gpu_node(321), 80);
  EXPECT_EQ(c.type_nodes(c.find_type("a10")).size(), 160u);
}

TEST(SchedCluster, csv_and_hdf5_round_trip) {
  TempDir dir;
  auto const csv = dir.write("c.csv", "gpu_type,num_nodes,gpus_per_node,memory_gb,peak_tflops,mem_bandwidth_gbps,"
                                      "intra_node_gbps,inter_node_gbps\n"
                                      "h100,2,8,80,989,3350,450,50\nh200,1,8,141,989,4800,450,50\na10,3,2,,,,,\n");
  Cluster const c = load_cluster(csv);
  EXPECT_EQ(c.num_gpus(), 2 * 8 + 8 + 3 * 2);
  EXPECT_EQ(c.type(c.find_type("h200")).memory_gb, 141);
  EXPECT_EQ(c.type(c.find_type("a10")).memory_gb, 24); // known spec filled in
  save_cluster(c, dir.path("c.h5"), "test");
  Cluster const d = load_cluster(dir.path("c.h5"));
  ASSERT_EQ(d.num_types(), c.num_types());
  for (int t = 0; t < c.num_types(); ++t) {
    EXPECT_EQ(d.type(t).name, c.type(t).name);
    EXPECT_EQ(d.type(t).peak_tflops, c.type(t).peak_tflops);
    EXPECT_EQ(d.type_gpus(t), c.type_gpus(t));
  }
  EXPECT_EQ(load_cluster("crius").num_gpus(), 1280);
}

TEST(SchedCluster, malformed_specs_name_the_problem) {
  TempDir dir;
  expect_error([&] { load_cluster(dir.write("a.csv", "gpu_type,num_nodes\na100,4\n")); },
               {"a.csv", "missing column 'gpus_per_node'"});
  expect_error([&] { load_cluster(dir.write("b.csv", "gpu_type,num_nodes,gpus_per_node\na100,4,3\n")); },
               {"b.csv:2", "gpus_per_node", "power of two"});
  expect_error([&] { load_cluster(dir.write("c.csv", "gpu_type,num_nodes,gpus_per_node\nxpu9,4,4\n")); },
               {"c.csv:2", "unknown GPU type 'xpu9'"});
  expect_error([&] { load_cluster(dir.write("d.csv", "gpu_type,num_nodes,gpus_per_node\na100,2,4\na100,1,8\n")); },
               {"same GPU count"});
  expect_error([&] { load_cluster(dir.write("e.csv", "gpu_type,num_nodes,gpus_per_node\na100,0,4\n")); },
               {"e.csv:2", "num_nodes", ">= 1"});
  // A cluster too large to track is refused with its size, not "out of memory" (3 x 1e6 nodes x 1024 GPUs).
  expect_error(
      [&] {
        load_cluster(dir.write("f.csv", "gpu_type,num_nodes,gpus_per_node\na100,1000000,1024\nv100,1000000,1024\n"
                                        "a40,1000000,1024\n"));
      },
      {"f.csv", "a cluster of 3072000000 GPUs", "larger than the 1048576 GPUs"});
  // Hexadecimal numbers are not read as numbers.
  expect_error([&] { load_cluster(dir.write("g.csv", "gpu_type,num_nodes,gpus_per_node\na100,0x10,4\n")); },
               {"g.csv:2", "num_nodes", "'0x10' is not an integer"});
}

std::string const kHeader = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n";

TEST(SchedTrace, csv_loads_sorted_and_round_trips_through_hdf5) {
  TempDir dir;
  Cluster const c = Cluster::crius_simulated();
  auto const p = dir.write("t.csv", kHeader + "b,200,1000,bert__1.3B,900,256,4,a40\n"
                                              "a,100,500,moe__2.4B,-1,512,8,v100\n"
                                              "c,200,10,wide_resnet__500M,-1,256,1,a10\n");
  Trace const t = load_trace(p, c);
  ASSERT_EQ(t.jobs.size(), 3u);
  EXPECT_EQ(t.jobs[0].id, "a"); // sorted by submission, ties in file order
  EXPECT_EQ(t.jobs[1].id, "b");
  EXPECT_EQ(t.jobs[2].id, "c");
  EXPECT_EQ(t.jobs[1].deadline, 900);
  EXPECT_EQ(t.jobs[0].gpu_type, c.find_type("v100"));
  save_trace(t, dir.path("t.h5"));
  Trace const u = load_trace(dir.path("t.h5"), c);
  ASSERT_EQ(u.jobs.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(u.jobs[i].id, t.jobs[i].id);
    EXPECT_EQ(u.jobs[i].model, t.jobs[i].model);
    EXPECT_EQ(u.jobs[i].iterations, t.jobs[i].iterations);
    EXPECT_EQ(u.jobs[i].num_gpus, t.jobs[i].num_gpus);
    EXPECT_EQ(u.jobs[i].gpu_type, t.jobs[i].gpu_type);
    EXPECT_EQ(u.jobs[i].deadline, t.jobs[i].deadline);
  }
}

TEST(SchedTrace, malformed_rows_are_errors_naming_file_row_and_field) {
  TempDir dir;
  Cluster const c = Cluster::crius_simulated();
  expect_error(
      [&] {
        load_trace(dir.write("a.csv", "job_id,submission_time,num_iteration,model_name,batch_size,"
                                      "num_gpu\nj,1,2,moe__2.4B,256,4\n"),
                   c);
      },
      {"a.csv", "missing column 'gpu_type'"});
  expect_error(
      [&] {
        load_trace(dir.write("b.csv", kHeader + "j1,5,10,moe__2.4B,-1,256,4,a40\n"
                                                "j2,-5,10,moe__2.4B,-1,256,4,a40\n"),
                   c);
      },
      {"b.csv:3", "job j2", "submission_time", "in [0, 1e12]"});
  expect_error([&] { load_trace(dir.write("c.csv", kHeader + "j1,5,10,llama__7B,-1,256,4,a40\n"), c); },
               {"c.csv:2", "unknown model 'llama__7B'"});
  expect_error([&] { load_trace(dir.write("d.csv", kHeader + "j1,5,10,moe__2.4B,-1,256,4,h100\n"), c); },
               {"d.csv:2", "unknown GPU type 'h100'", "a100"});
  expect_error([&] { load_trace(dir.write("e.csv", kHeader + "j1,5,ten,moe__2.4B,-1,256,4,a40\n"), c); },
               {"e.csv:2", "num_iteration", "not an integer"});
  expect_error([&] { load_trace(dir.write("f.csv", kHeader + "j1,5,10,moe__2.4B,-1,256,0,a40\n"), c); },
               {"f.csv:2", "num_gpu must be > 0"});
  expect_error(
      [&] {
        load_trace(dir.write("g.csv", kHeader + "j1,5,10,moe__2.4B,-1,256,4,a40\n"
                                                "j1,6,10,moe__2.4B,-1,256,4,a40\n"),
                   c);
      },
      {"g.csv:3", "duplicate job_id 'j1'"});
  expect_error([&] { load_trace(dir.write("h.csv", kHeader + "j1,5,10,moe__2.4B,-1,256,4\n"), c); },
               {"h.csv:2", "expected 8"});
  expect_error([&] { load_trace(dir.write("i.csv", kHeader), c); }, {"i.csv", "no jobs"});
}

TEST(SchedTrace, numbers_are_decimal_and_times_may_be_unix_seconds) {
  TempDir dir;
  Cluster const c = Cluster::crius_simulated();
  // Hexadecimal integers and floats, and non-finite words, are refused where strtod would take them.
  expect_error([&] { load_trace(dir.write("a.csv", kHeader + "j1,0x10,10,moe__2.4B,-1,256,4,a40\n"), c); },
               {"a.csv:2", "submission_time", "'0x10' is not a number"});
  expect_error([&] { load_trace(dir.write("b.csv", kHeader + "j1,0x1p4,10,moe__2.4B,-1,256,4,a40\n"), c); },
               {"b.csv:2", "'0x1p4' is not a number"});
  expect_error([&] { load_trace(dir.write("c.csv", kHeader + "j1,5,0x1F,moe__2.4B,-1,256,4,a40\n"), c); },
               {"c.csv:2", "num_iteration", "'0x1F' is not an integer"});
  expect_error([&] { load_trace(dir.write("d.csv", kHeader + "j1,inf,10,moe__2.4B,-1,256,4,a40\n"), c); },
               {"d.csv:2", "submission_time", "got inf"});
  expect_error([&] { load_trace(dir.write("e.csv", kHeader + "j1,nan,10,moe__2.4B,-1,256,4,a40\n"), c); },
               {"e.csv:2", "submission_time"});
  expect_error([&] { load_trace(dir.write("f.csv", kHeader + "j1,1e13,10,moe__2.4B,-1,256,4,a40\n"), c); },
               {"f.csv:2", "in [0, 1e12]"});
  // A deadline before the submission is nonsense (deadlines are absolute).
  expect_error([&] { load_trace(dir.write("g.csv", kHeader + "j1,500,10,moe__2.4B,400,256,4,a40\n"), c); },
               {"g.csv:2", "deadline 400 s is before the job's submission at 500 s"});
  // Unix epoch seconds (Slurm's accounting, the Helios traces) load as they are, and a byte-order mark before the
  // header is not part of its first column.
  Trace const t = load_trace(dir.write("h.csv", "\xEF\xBB\xBF" + kHeader +
                                                    "j2,1591030600.5,10,moe__2.4B,,256,4,a40\n"
                                                    "j1,1.59103e+09,10,moe__2.4B,1591040000,256,4,a40\n"),
                             c);
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].id, "j1");
  EXPECT_DOUBLE_EQ(t.jobs[0].submit_time, 1.59103e9);
  EXPECT_DOUBLE_EQ(t.jobs[0].deadline, 1591040000);
  EXPECT_DOUBLE_EQ(t.jobs[1].submit_time, 1591030600.5);
}

TEST(SchedTrace, impossible_jobs_are_rejected_with_a_reason_not_a_crash) {
  TempDir dir;
  Cluster const c = two_type_cluster(); // 4 a100, 4 v100
  auto const p = dir.write("t.csv", kHeader + "big,0,100,moe__690M,-1,256,8,a100\n"
                                              "odd,0,100,moe__690M,-1,256,3,v100\n"
                                              "ok,0,100,moe__690M,-1,256,2,a100\n");
  Trace const t = load_trace(p, c);
  ProfileTable const table = simple_profile();
  for (auto const &policy : policy_names()) {
    SimOptions opt;
    opt.check_invariants = true;
    SimResult const r = simulate(c, t, &table, nullptr, ThroughputSource::table, policy, opt);
    EXPECT_EQ(result_of(r, "big").state, JobState::rejected) << policy;
    EXPECT_NE(result_of(r, "big").reject_reason.find("requests 8 GPUs of type a100; the cluster has 4"),
              std::string::npos)
        << result_of(r, "big").reject_reason;
    EXPECT_EQ(result_of(r, "odd").state, JobState::rejected) << policy;
    EXPECT_NE(result_of(r, "odd").reject_reason.find("power-of-two"), std::string::npos);
    EXPECT_EQ(result_of(r, "ok").state, JobState::completed) << policy;
  }
}

TEST(SchedProfile, hdf5_round_trip_and_malformed_files) {
  TempDir dir;
  ProfileTable t = simple_profile();
  t.add(PlanRecord{model("moe__690M"), 256, "a100", 1, 4, 2, 2, 1, 0.3, 0.1, 0.05, 0.45});
  save_profile(t, dir.path("p.h5"), "test");
  ProfileTable const u = load_profile(dir.path("p.h5"));
  EXPECT_EQ(u.entries().size(), t.entries().size());
  EXPECT_EQ(u.plans().size(), 1u);
  EXPECT_EQ(u.plans()[0].pp, 2);
  EXPECT_EQ(u.plans()[0].e2e, 0.45);
  ASSERT_TRUE(u.iter_time(model("moe__690M"), 256, "v100", 1, 2).has_value());
  EXPECT_EQ(*u.iter_time(model("moe__690M"), 256, "v100", 1, 2), 2.0);
  ASSERT_NE(u.dp_memory(model("moe__690M"), 256), nullptr);
  EXPECT_EQ(u.dp_memory(model("moe__690M"), 256)->gb[3], 10);
  // A trace file is not a profile file.
  Trace const tr = make_trace(two_type_cluster(), {job("a", 0, 1, "moe__690M", 256, 1, 0)});
  save_trace(tr, dir.path("t.h5"));
  expect_error([&] { load_profile(dir.path("t.h5")); }, {"t.h5", "tessel.sched.profile"});
  // Crius CSV with a bad row.
  auto const bad = dir.write("prof.csv", "model_name,param_num,batch_size,gpu_type,num_hosts,num_devices_per_host,"
                                         "optimal_iter_time\nmoe,690M,256,a100,1,two,1.0\n");
  expect_error([&] { load_crius_profile(bad, "", ""); }, {"prof.csv:2", "num_devices_per_host"});
}

TEST(SchedProfile, crius_json_files_and_their_errors) {
  TempDir dir;
  auto const prof = dir.write("prof.csv", "model_name,param_num,batch_size,gpu_type,num_hosts,num_devices_per_host,"
                                          "optimal_iter_time\nmoe,690M,256,a100,1,2,1.0\n");
  // dp_mem.json as Crius writes it: a one-element list holding {<model>_<size>_<batch>: [5 GB figures]}.
  auto const mem = dir.write("dp_mem.json", "[{\"moe_690M_256\": [23.9, 12.9, 8.4, 6.25, -1]}]");
  ProfileTable const t = load_crius_profile(prof, "", mem);
  ASSERT_NE(t.dp_memory(model("moe__690M"), 256), nullptr);
  EXPECT_EQ(t.dp_memory(model("moe__690M"), 256)->gb[3], 6.25);
  EXPECT_EQ(t.dp_memory(model("moe__690M"), 256)->gb[4], -1);
  expect_error([&] { load_crius_profile(prof, "", dir.write("m1.json", "[{\"moe_690M_256\": [1, 2, \"x\", 4, 5]}]")); },
               {"m1.json", "moe_690M_256", "entry 2"});
  expect_error([&] { load_crius_profile(prof, "", dir.write("m2.json", "{\"moe_690M_256\": [1, 2]}")); },
               {"m2.json", "moe_690M_256", "5 numbers"});
  expect_error([&] { load_crius_profile(prof, "", dir.write("m3.json", "[{\"moe_690M_256\": [1,")); },
               {"m3.json", "JSON"});
  // sim_cluster_spec.json and device_infos.json.
  auto const spec = dir.write("spec.json", "[{\"a100\": {\"node_num\": 2}, \"a40\": {\"node_num\": 3}}]");
  auto const infos = dir.write("infos.json", "[{\"gpu_type\": \"a40\", \"mem_bandwidth_gb\": 700}, 7]");
  Cluster const c = load_crius_cluster_spec(spec, infos);
  EXPECT_EQ(c.num_gpus(), 2 * 4 + 3 * 2);
  EXPECT_EQ(c.type(c.find_type("a40")).mem_bandwidth_gbps, 700);
  EXPECT_EQ(c.type(c.find_type("a100")).mem_bandwidth_gbps, Cluster::known_gpu("a100").mem_bandwidth_gbps);
  expect_error([&] { load_crius_cluster_spec(dir.write("s1.json", "[{\"a100\": {\"nodes\": 2}}]"), ""); },
               {"s1.json", "a100", "node_num"});
  expect_error([&] { load_crius_cluster_spec(dir.write("s2.json", "[{\"xpu\": {\"node_num\": 2}}]"), ""); },
               {"s2.json", "xpu"});
  expect_error([&] { load_crius_cluster_spec(dir.write("s3.json", "[1, 2]"), ""); }, {"s3.json", "one-element list"});
}

TEST(SchedSynthetic, generator_is_deterministic_and_feasible) {
  Cluster const c = Cluster::crius_simulated();
  Estimator est(c);
  ThroughputOracle const oracle(c, nullptr, &est, ThroughputSource::estimator);
  SyntheticOptions o;
  o.jobs = 300;
  o.seed = 11;
  Trace const a = generate_trace(c, oracle, o);
  Trace const b = generate_trace(c, oracle, o);
  ASSERT_EQ(a.jobs.size(), 300u);
  int moe = 0;
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].model, b.jobs[i].model);
    EXPECT_EQ(a.jobs[i].submit_time, b.jobs[i].submit_time);
    EXPECT_EQ(a.jobs[i].iterations, b.jobs[i].iterations);
    auto const &j = a.jobs[i];
    int const per = std::min(j.num_gpus, c.type_capacity(j.gpu_type));
    EXPECT_GT(oracle.adaptive(j.model, j.batch_size, j.gpu_type, j.num_gpus / per, per), 0);
    EXPECT_TRUE(j.num_gpus == 1 || j.num_gpus == 2 || j.num_gpus == 4 || j.num_gpus == 8 || j.num_gpus == 16);
    if (i) {
      EXPECT_GE(j.submit_time, a.jobs[i - 1].submit_time);
    }
    moe += ModelCatalog::builtin()[j.model].family == ModelFamily::moe;
  }
  // Arena's mix draws MoE 60 % of the time (before feasibility redraws).
  EXPECT_GT(moe, 120);
  o.seed = 12;
  Trace const d = generate_trace(c, oracle, o);
  int same = 0;
  for (std::size_t i = 0; i < d.jobs.size(); ++i)
    same += d.jobs[i].model == a.jobs[i].model && d.jobs[i].num_gpus == a.jobs[i].num_gpus;
  EXPECT_LT(same, 150);
}

} // namespace

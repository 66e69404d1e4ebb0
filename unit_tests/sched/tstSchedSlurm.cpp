// The Slurm backend's pieces that need no running Slurm: parsing the CLIs' JSON (sinfo / squeue of Slurm 22.05),
// the sbatch request of a Cell, the job-side plan and checkpoint contract, and the durable intake of job specs.
// The controller itself is tested against a real Slurm (slurm_test.py).

#include "SchedTestUtil.hpp"

#include "../TesselTestError.hpp"
#include "impl/Files.hpp"
#include "impl/Journal.hpp"

#include <tessel/core/Json.hpp>
#include <tessel/sched/JobContext.hpp>
#include <tessel/sched/Slurm.hpp>
#include <tessel/sched/SlurmController.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using namespace sched_test;
using tessel::Json;
using tessel::test::error_of;

// The shape of `sinfo --json` (data parser v0.0.38), trimmed to the fields read.
std::string sinfo_text() {
  return R"js({"meta": {}, "errors": [], "nodes": [
    {"name": "a1", "gres": "gpu:a100:4(S:0-1)", "state": "mixed", "state_flags": [], "reason": ""},
    {"name": "a2", "gres": "gpu:a100:4", "state": "down", "state_flags": ["NOT_RESPONDING"], "reason": "Not responding"},
    {"name": "v1", "gres": "gpu:v100:4,license:x:1", "state": "idle", "state_flags": ["DRAIN"], "reason": "maint"},
    {"name": "c1", "gres": "", "state": "idle", "state_flags": []},
    {"name": "v2", "gres": "gpu:v100:2", "state": "idle", "state_flags": ["NOT_RESPONDING"]}]})js";
}

TEST(SchedSlurm, sinfo_json_gives_typed_gpus_and_usable_or_failed_nodes) {
  auto const nodes = parse_sinfo_json(sinfo_text(), "sinfo");
  ASSERT_EQ(nodes.size(), 5u);
  EXPECT_EQ(nodes[0].gpu_type, "a100");
  EXPECT_EQ(nodes[0].gpus, 4);
  EXPECT_TRUE(nodes[0].usable);
  EXPECT_FALSE(nodes[0].failed);
  EXPECT_FALSE(nodes[1].usable); // down: its jobs are lost
  EXPECT_TRUE(nodes[1].failed);
  EXPECT_FALSE(nodes[2].usable); // draining: no new job, the running ones stay
  EXPECT_FALSE(nodes[2].failed);
  EXPECT_EQ(nodes[2].gpu_type, "v100");
  EXPECT_EQ(nodes[3].gpus, 0);
  EXPECT_FALSE(nodes[4].usable); // not responding for a moment: no new job, not failed
  EXPECT_FALSE(nodes[4].failed);
}

TEST(SchedSlurm, sinfo_json_errors_name_the_node_and_the_gres) {
  EXPECT_NE(error_of([] {
              parse_sinfo_json(R"js({"nodes": [{"name": "m1", "gres": "gpu:a100:2,gpu:v100:2", "state": "idle"}]})js",
                               "sinfo");
            }).find("node m1 has GPUs of two types (a100 and v100)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_sinfo_json(R"js({"nodes": [{"name": "m2", "gres": "gpu:4", "state": "idle"}]})js", "sinfo");
            }).find("GRES 'gpu:4' has no GPU type"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sinfo_json(R"js({"nodes": 3})js", "sinfo"); }).find("sinfo"), std::string::npos);
  EXPECT_NE(error_of([] {
              parse_sinfo_json(R"js({"errors": [{"error": "down"}], "nodes": []})js", "sinfo");
            }).find("reported errors"),
            std::string::npos);
}

TEST(SchedSlurm, squeue_json_keeps_our_jobs_with_states_nodes_and_exit_codes) {
  std::string const text = R"js({"errors": [], "jobs": [
    {"job_id": 7, "name": "tessel.j1", "comment": "attempt=2", "job_state": "RUNNING", "state_reason": "None", "exit_code": 0,
     "restart_cnt": 0, "job_resources": {"allocated_nodes": [{"nodename": "a1"}, {"nodename": "a2"}]}},
    {"job_id": 8, "name": "other", "job_state": "RUNNING"},
    {"job_id": 9, "name": "tessel.j2.1", "job_state": "FAILED", "state_reason": "NonZeroExitCode",
     "exit_code": 768, "restart_cnt": 0, "job_resources": {"allocated_nodes": [{"nodename": "v1"}]}},
    {"job_id": 10, "name": "tessel.j3.1", "job_state": "PENDING", "state_reason": "BeginTime", "restart_cnt": 1}]})js";
  auto const jobs = parse_squeue_json(text, "squeue", "tessel.");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, 7);
  EXPECT_EQ(jobs[0].nodes, (std::vector<std::string>{"a1", "a2"}));
  EXPECT_EQ(jobs[0].comment, "attempt=2");
  EXPECT_EQ(jobs[1].state, "FAILED");
  EXPECT_EQ(jobs[1].exit_code, 3); // the raw wait status 768 is exit status 3
  EXPECT_EQ(jobs[2].restarts, 1);
  EXPECT_TRUE(jobs[2].nodes.empty());
}

TEST(SchedSlurm, sbatch_asks_for_the_cells_nodes_gres_and_tasks) {
  SbatchRequest r;
  r.name = "tessel.j1";
  r.comment = "attempt=3";
  r.partition = "main";
  r.nodes = {"a1", "a2"};
  r.gpu_type = "a100";
  r.gpus_per_node = 4;
  r.script_file = "/s/jobs/j1/attempt.3.sh";
  r.singleton = true;
  r.env = {{"TESSEL_SCHED_PLAN", "/s/jobs/j1/plan.3.json"}};
  auto const argv = SlurmClient::sbatch_command(r);
  auto has = [&](std::string const &a) { return std::find(argv.begin(), argv.end(), a) != argv.end(); };
  EXPECT_EQ(argv[0], "sbatch");
  EXPECT_TRUE(has("--nodes=2"));
  EXPECT_TRUE(has("--nodelist=a1,a2"));
  EXPECT_TRUE(has("--gres=gpu:a100:4"));
  EXPECT_TRUE(has("--ntasks-per-node=4"));
  EXPECT_TRUE(has("--requeue"));
  EXPECT_TRUE(has("--dependency=singleton"));
  EXPECT_TRUE(has("--comment=attempt=3"));
  EXPECT_TRUE(has("--export=ALL,TESSEL_SCHED_PLAN=/s/jobs/j1/plan.3.json"));
  EXPECT_EQ(argv.back(), "/s/jobs/j1/attempt.3.sh");
  r.env = {{"X", "a,b"}};
  EXPECT_NE(error_of([&] { SlurmClient::sbatch_command(r); }).find("contains a comma"), std::string::npos);
}

TEST(SchedSlurm, a_job_resumes_from_its_checkpoint_and_reports_progress) {
  TempDir dir;
  JobPlan plan;
  plan.job = "j1";
  plan.attempt = 2;
  plan.model = "moe__2.4B";
  plan.batch_size = 256;
  plan.iterations = 100;
  plan.gpu_type = "a100";
  plan.nodes = {"a1"};
  plan.gpus_per_node = 4;
  plan.plan.stages = {{4, 1}};
  plan.throughput = 50;
  plan.dir = dir.path("");
  JobContext const ctx(plan);
  EXPECT_EQ(ctx.resume_from(), 0);
  ctx.report(10);
  EXPECT_EQ(ctx.resume_from(), 0) << "progress is not a checkpoint";
  ctx.checkpoint(40);
  EXPECT_EQ(ctx.resume_from(), 40);
  Json const progress = tessel::read_json(dir.path("progress.json"));
  EXPECT_EQ(progress["state"], "checkpointed");
  EXPECT_EQ(progress["done"], 40);
  ctx.finish();
  EXPECT_EQ(tessel::read_json(dir.path("progress.json"))["state"], "done");
  EXPECT_EQ(ctx.resume_from(), 100);
  // A plan file missing a field is refused, naming it.
  dir.write("plan.json", R"js({"job": "j1", "attempt": 1})js");
  EXPECT_NE(error_of([&] { read_job_plan(dir.path("plan.json")); }).find("model"), std::string::npos);
}

// A state folder as a controller leaves it (config.json), without Slurm: submit judges specs against its cluster.
std::string state_folder(TempDir const &dir) {
  dir.write("state/config.json", R"js({"partition": "main", "t0": 0, "round_seconds": 30, "time_scale": 10,
    "policy": "fcfs", "source": "estimator", "profile": "",
    "nodes": [{"name": "a1", "gpu_type": "a100", "gpus": 4}, {"name": "a2", "gpu_type": "a100", "gpus": 4},
              {"name": "v1", "gpu_type": "v100", "gpus": 4}]})js");
  return dir.path("state");
}

Json job(std::string const &name) {
  return {{"name", name},      {"model", "bert"}, {"size", "1.3B"},    {"batch_size", 128},
          {"iterations", 500}, {"gpus", 4},       {"gpu_type", "a100"}};
}

TEST(SchedSlurm, submit_journals_valid_specs_once_and_refuses_bad_fields) {
  TempDir dir;
  std::filesystem::create_directories(dir.path("state"));
  std::string const state = state_folder(dir);
  EXPECT_EQ(submit_job(state, job("j1"), "j1.json"), "j1");
  EXPECT_EQ(submit_job(state, job("j2"), "j2.json"), "j2");
  EXPECT_NE(error_of([&] { submit_job(state, job("j1"), "again.json"); }).find("already submitted"), std::string::npos);
  struct Bad {
    char const *field;
    Json value;
    char const *message;
  };
  std::vector<Bad> const bad = {
      {"gpus", 16, "field 'gpus': 16 a100 GPUs requested; the cluster has 8"},
      {"gpus", 6, "field 'gpus': 6 is not a power of two"},
      {"gpu_type", "h100", "field 'gpu_type': the cluster has no 'h100' GPUs (it has a100, v100)"},
      {"size", "99B", "field 'model': unknown model 'bert__99B'"},
      {"batch_size", 0, "field 'batch_size' must be in [1,"},
      {"iterations", 2.5, "field 'iterations' must be an integer"},
      {"name", "a b", "field 'name' may hold letters"},
      {"color", "red", "field 'color' is not a job spec field"},
  };
  for (auto const &b : bad) {
    Json spec = job("x");
    spec[b.field] = b.value;
    std::string const error = error_of([&] { submit_job(state, spec, "x.json"); });
    EXPECT_NE(error.find(std::string("x.json: ") + b.message), std::string::npos) << b.field << ": " << error;
  }
  Json missing = job("y");
  missing.erase("gpu_type");
  EXPECT_NE(error_of([&] { submit_job(state, missing, "y.json"); }).find("field 'gpu_type' is missing"),
            std::string::npos);
  // Only the two good jobs are in the journal, as whole lines.
  std::ifstream in(dir.path("state/jobs.journal"));
  std::string line;
  std::vector<std::string> names;
  while (std::getline(in, line))
    names.push_back(tessel::parse_json(line, "journal")["spec"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::vector<std::string>{"j1", "j2"}));
  // Without a controller's state there is nothing to submit to.
  EXPECT_NE(error_of([&] { submit_job(dir.path("nowhere"), job("z"), "z.json"); }).find("no controller state"),
            std::string::npos);
}

TEST(SchedSlurm, submit_that_cannot_write_fails_and_records_nothing) {
  TempDir dir;
  std::filesystem::create_directories(dir.path("state"));
  std::string const state = state_folder(dir);
  submit_job(state, job("j1"), "j1.json");
  auto const before = std::filesystem::file_size(dir.path("state/jobs.journal"));
  // The file-size limit stands in for a full disk: the record's write fails part-way (EFBIG instead of ENOSPC).
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old_action);
  rlimit old_limit{};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  rlimit limit = old_limit;
  limit.rlim_cur = static_cast<rlim_t>(before + 10);
  setrlimit(RLIMIT_FSIZE, &limit);
  std::string const error = error_of([&] { submit_job(state, job("j2"), "j2.json"); });
  setrlimit(RLIMIT_FSIZE, &old_limit);
  sigaction(SIGXFSZ, &old_action, nullptr);
  EXPECT_NE(error.find("cannot append to journal"), std::string::npos) << error;
  EXPECT_NE(error.find("nothing was recorded"), std::string::npos) << error;
  // No partial record is left: the journal is as it was, and j2 can be submitted once there is room.
  EXPECT_EQ(std::filesystem::file_size(dir.path("state/jobs.journal")), before);
  EXPECT_EQ(submit_job(state, job("j2"), "j2.json"), "j2");
}

TEST(SchedSlurm, status_lists_jobs_the_controller_has_not_seen_yet) {
  TempDir dir;
  std::filesystem::create_directories(dir.path("state"));
  std::string const state = state_folder(dir);
  EXPECT_NE(error_of([&] { read_status(state); }).find("no status"), std::string::npos);
  submit_job(state, job("seen"), "s.json");
  submit_job(state, job("new"), "n.json");
  dir.write("state/status.json", R"js({"jobs": [{"name": "seen"}]})js");
  Json const s = read_status(state);
  EXPECT_EQ(s["submitted_not_seen"], Json::array({"new"}));
}

TEST(SchedSlurm, a_bad_journal_line_is_skipped_and_reported_never_blocking_the_rest) {
  TempDir dir;
  tessel::sched::Impl::Journal const journal(dir.path("j.journal"));
  journal.append({{"op", "submit"}, {"n", 1}});
  // A line that is not a record, one that is a record of the wrong shape, then a good one.
  std::ofstream(dir.path("j.journal"), std::ios::app) << "{not json\n[1, 2]\n";
  journal.append({{"op", "submit"}, {"n", 2}});
  std::uint64_t offset = 0;
  auto const r = journal.read(offset);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1]["n"], 2);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_NE(r.errors[0].find("j.journal at byte"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[1].find("a record is a JSON object, got array"), std::string::npos) << r.errors[1];
  EXPECT_EQ(offset, std::filesystem::file_size(dir.path("j.journal")));
}

TEST(SchedSlurm, a_record_cut_by_a_killed_writer_does_not_swallow_the_next_one) {
  TempDir dir;
  tessel::sched::Impl::Journal const journal(dir.path("j.journal"));
  journal.append({{"op", "submit"}, {"n", 1}});
  // A writer killed in the middle of its record: no line end.
  std::ofstream(dir.path("j.journal"), std::ios::app) << R"js({"op": "submit", "spec": {"na)js";
  std::uint64_t offset = 0;
  EXPECT_EQ(journal.read(offset).records.size(), 1u); // the cut record is not read yet: it may still be written
  journal.append({{"op", "submit"}, {"n", 3}});
  auto const r = journal.read(offset);
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0]["n"], 3);
  ASSERT_EQ(r.errors.size(), 1u); // the cut record, on a line of its own
}

TEST(SchedSlurm, a_journal_that_is_a_link_or_fifo_is_refused_not_followed_or_waited_on) {
  TempDir dir;
  std::ofstream(dir.path("elsewhere")) << "";
  ASSERT_EQ(::symlink(dir.path("elsewhere").c_str(), dir.path("link.journal").c_str()), 0);
  tessel::sched::Impl::Journal const link(dir.path("link.journal"));
  EXPECT_NE(error_of([&] { link.append({{"op", "x"}}); }).find("is a symbolic link"), std::string::npos);
  EXPECT_EQ(std::filesystem::file_size(dir.path("elsewhere")), 0u);
  ASSERT_EQ(::mkfifo(dir.path("fifo.journal").c_str(), 0644), 0);
  tessel::sched::Impl::Journal const fifo(dir.path("fifo.journal"));
  std::uint64_t offset = 0;
  EXPECT_NE(error_of([&] { fifo.read(offset); }).find("is not a regular file"), std::string::npos);
}

TEST(SchedSlurm, state_files_are_bounded_regular_files_and_writes_replace_links) {
  TempDir dir;
  namespace impl = tessel::sched::Impl;
  std::ofstream(dir.path("target")) << "secret";
  ASSERT_EQ(::symlink(dir.path("target").c_str(), dir.path("progress.json").c_str()), 0);
  EXPECT_NE(error_of([&] { impl::read_state_file(dir.path("progress.json"), 100); }).find("is a symbolic link"),
            std::string::npos);
  ASSERT_EQ(::mkfifo(dir.path("fifo").c_str(), 0644), 0);
  EXPECT_NE(error_of([&] { impl::read_state_file(dir.path("fifo"), 100); }).find("is a FIFO"), std::string::npos);
  std::ofstream(dir.path("big")) << std::string(200, 'x');
  EXPECT_NE(error_of([&] { impl::read_state_file(dir.path("big"), 100); }).find("has 200 bytes"), std::string::npos);
  EXPECT_FALSE(impl::read_state_file(dir.path("absent"), 100).exists);
  // A write where a link was planted replaces the link; the file it pointed to is untouched.
  impl::write_state_json(dir.path("progress.json"), Json{{"done", 1}});
  EXPECT_EQ(tessel::read_json(dir.path("progress.json"))["done"], 1);
  std::ifstream in(dir.path("target"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "secret");
  // A job folder replaced by a link is not written through.
  std::filesystem::create_directories(dir.path("outside"));
  std::filesystem::create_directories(dir.path("jobs"));
  ASSERT_EQ(::symlink(dir.path("outside").c_str(), dir.path("jobs/j1").c_str()), 0);
  EXPECT_NE(error_of([&] { impl::make_state_dir(dir.path("jobs"), "j1"); }).find("is a symbolic link"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { impl::write_state_json(dir.path("jobs/j1/plan.json"), Json::object()); }).find("not a folder"),
      std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path("outside")));
}

TEST(SchedSlurm, specs_slurm_would_refuse_are_refused_at_submit) {
  TempDir dir;
  std::filesystem::create_directories(dir.path("state"));
  std::string const state = state_folder(dir);
  EXPECT_NE(error_of([&] {
              submit_job(state, job(std::string(129, 'n')), "x.json");
            }).find("x.json: field 'name' has 129 characters, at most 128"),
            std::string::npos);
  EXPECT_EQ(submit_job(state, job(std::string(128, 'n')), "x.json"), std::string(128, 'n'));
  Json big = job("big");
  big["command"] = std::string((1u << 20) + 1, 'x');
  EXPECT_NE(error_of([&] { submit_job(state, big, "big.json"); }).find("field 'command' has 1048577 bytes"),
            std::string::npos);
  Json nul = job("nul");
  nul["command"] = std::string("echo a\0b", 8);
  EXPECT_NE(error_of([&] { submit_job(state, nul, "nul.json"); }).find("NUL"), std::string::npos);
  Json blank = job("blank");
  blank["command"] = "  \n";
  EXPECT_NE(error_of([&] { submit_job(state, blank, "b.json"); }).find("field 'command' is blank"), std::string::npos);
  // A field given twice has no one value: refused, naming it.
  EXPECT_NE(error_of([&] {
              parse_job_spec(R"js({"name": "d", "gpus": 4, "model": "bert__1.3B", "gpus": 1})js", "d.json");
            }).find("d.json: duplicate key 'gpus' at the top level"),
            std::string::npos);
  EXPECT_EQ(parse_job_spec(R"js({"name": "d", "x": {"gpus": 1}, "gpus": 4})js", "d.json")["gpus"], 4);
  EXPECT_NE(error_of([&] { parse_job_spec("{\"name\": ", "e.json"); }).find("e.json"), std::string::npos);
}

TEST(SchedSlurm, controller_options_without_meaning_are_refused_before_slurm_is_asked) {
  TempDir dir;
  auto error = [&](auto &&change) {
    ControllerOptions o;
    o.state_dir = dir.path("state");
    change(o);
    return error_of([&] { SlurmController c(o, nullptr, ThroughputSource::estimator); });
  };
  EXPECT_NE(error([](ControllerOptions &o) { o.round_seconds = 1e-300; }).find("the round must be in [0.1, 86400]"),
            std::string::npos);
  EXPECT_NE(error([](ControllerOptions &o) { o.time_scale = 1e-9; }).find("it must be in [1, 1e7] s"),
            std::string::npos);
  EXPECT_NE(error([&](ControllerOptions &o) { o.state_dir = dir.path("50%"); }).find("'%' or '\\'"), std::string::npos);
  EXPECT_NE(error([](ControllerOptions &o) { o.job_prefix = "a b"; }).find("the job prefix must be"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.path("state"))); // nothing was made
}

TEST(SchedSlurm, a_damaged_status_is_an_error_naming_it) {
  TempDir dir;
  std::filesystem::create_directories(dir.path("state"));
  std::string const state = state_folder(dir);
  dir.write("state/status.json", R"js({"jobs": [{"state": "running"}]})js");
  EXPECT_NE(error_of([&] { read_status(state); }).find("every entry of 'jobs' is an object with a 'name'"),
            std::string::npos);
  dir.write("state/status.json", R"js([1])js");
  EXPECT_NE(error_of([&] { read_status(state); }).find("the status is a JSON object"), std::string::npos);
}

// Runs \p f with \p dir first on PATH.
template <class F> void with_path_first(std::string const &dir, F &&f) {
  std::string const old = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir + ":" + old).c_str(), 1);
  try {
    f();
  } catch (...) {
    ::setenv("PATH", old.c_str(), 1);
    throw;
  }
  ::setenv("PATH", old.c_str(), 1);
}

TEST(SchedSlurm, the_client_counts_the_time_it_waits_for_slurms_commands) {
  TempDir dir;
  std::filesystem::create_directories(dir.path("bin"));
  // A sinfo that takes 0.3 s and a scancel that takes 0.2 s.
  dir.write("bin/sinfo", "#!/bin/sh\nsleep 0.3\necho '{\"errors\": [], \"nodes\": []}'\n");
  dir.write("bin/scancel", "#!/bin/sh\nsleep 0.2\n");
  for (char const *f : {"bin/sinfo", "bin/scancel"})
    std::filesystem::permissions(dir.path(f), std::filesystem::perms::owner_all);
  SlurmClient const client;
  EXPECT_EQ(client.waited_seconds(), 0);
  with_path_first(dir.path("bin"), [&] {
    try {
      client.nodes("");
    } catch (tessel::Exception const &) {
      // An empty partition may be refused: the wait counts all the same.
    }
    double const after_sinfo = client.waited_seconds();
    EXPECT_GE(after_sinfo, 0.3);
    EXPECT_LT(after_sinfo, 5);
    client.cancel(42);
    EXPECT_GE(client.waited_seconds() - after_sinfo, 0.2);
  });
}

} // namespace

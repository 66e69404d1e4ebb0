#ifndef TESSEL_SCHED_IMPL_CONTROLLER_HPP
#define TESSEL_SCHED_IMPL_CONTROLLER_HPP

// The Slurm controller (SlurmController::State): one class, its steps in one file each under src/slurm/:
//   SlurmController.cpp      the round: read Slurm, bring the jobs up to date, decide, enact, publish; the loop
//   JobIntake.cpp            the cluster and throughput source of a state folder (Judge), job specs, submit_job
//   ControllerRecovery.cpp   start-up: the state folder's config, the journals, the attempts still in Slurm
//   ControllerReconcile.cpp  every round: stray attempts, progress, completions, failures, node states
//   ControllerEnact.cpp      the policy's decisions as sbatch / scancel: launches, moves, suspensions
//   ControllerStatus.cpp     status.json, read_status

#include "Files.hpp"
#include "Journal.hpp"

#include <tessel/core/Json.hpp>
#include <tessel/sched/Estimator.hpp>
#include <tessel/sched/JobTable.hpp>
#include <tessel/sched/SlurmController.hpp>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tessel::sched::Impl {

double wall_seconds();
bool file_exists(std::string const &path);
void make_dirs(std::string const &path);
/// Slurm job states in which a job still holds or waits for resources.
bool alive_state(std::string const &state);
bool is_power_of_two(int n);

/// Where a job runs in Slurm: cluster node indices and the GPUs on each.
struct Enacted {
  std::vector<int> nodes, counts;
  friend bool operator==(Enacted const &a, Enacted const &b) { return a.nodes == b.nodes && a.counts == b.counts; }
};

/// True when \p after holds more GPUs than \p before on some node.
bool gained(Enacted const &before, Enacted const &after);

/// What the policies and submit use to judge a job: the cluster and the throughput source of a state folder.
struct Judge {
  Cluster cluster;
  std::vector<std::string> node_names;
  std::unique_ptr<Estimator> estimator;
  std::unique_ptr<ThroughputOracle> oracle;

  /// \p nodes as config.json holds them ([{name, gpu_type, gpus}]); \p where names them in errors.
  Judge(Json const &nodes, std::string const &where, ProfileTable const *table, ThroughputSource source,
        double interval);
};

/// The Slurm nodes as config.json records them.
Json nodes_json(std::vector<SlurmNode> const &nodes);

/// A job spec from its JSON, judged against \p judge; every error names \p source and the field. \p command gets
/// the job's command.
JobSpec parse_spec(Json const &spec, std::string const &source, Judge const &judge, std::string &command);

/// Limits of what a job spec and a state folder may hold: what Slurm and the file system can take.
constexpr std::size_t kMaxJobName = 128;       ///< a job's name is a folder name and part of a Slurm job name
constexpr std::size_t kMaxCommand = 1u << 20;  ///< bytes of a command (Slurm takes batch scripts up to 4 MiB)
constexpr std::size_t kMaxStatePath = 3000;    ///< a state folder's path (file paths under it stay below 4,096)
constexpr std::size_t kMaxJobFile = 64u << 10; ///< a job's progress or checkpoint file
constexpr std::size_t kMaxConfig = 64u << 20;  ///< config.json (the nodes of a cluster of 10,000s of nodes)
constexpr std::size_t kMaxStatus = 256u << 20; ///< status.json

/// Field 'done' of a job's progress or checkpoint record: an integer in [0, \p iterations]; an error naming \p path
/// otherwise.
long long done_field(Json const &doc, std::string const &path, long long iterations);

/// Why \p state_dir cannot hold a controller's state (empty when it can): Slurm reads '%' and '\\' in a path
/// as filename patterns, and a path too long leaves no room for its files.
std::string state_dir_problem(std::string const &state_dir);

/// The records of \p journal from \p offset on, every whole journal read; each skipped line is passed to \p bad.
template <class Bad> std::vector<Json> journal_records(Journal const &journal, std::uint64_t &offset, Bad &&bad) {
  std::vector<Json> records;
  for (;;) {
    std::uint64_t const before = offset;
    Journal::Read r = journal.read(offset);
    for (auto &e : r.errors)
      bad(e);
    for (auto &rec : r.records)
      records.push_back(std::move(rec));
    if (offset == before)
      return records;
  }
}

} // namespace tessel::sched::Impl

namespace tessel::sched {

struct SlurmController::State final : SchedWorld {
  using Enacted = Impl::Enacted;

  /// What the controller knows of a job beyond its JobRecord: its attempts in Slurm.
  struct Live {
    std::string command;
    int attempt = 0;
    long slurm_id = 0;    ///< the current attempt's Slurm job while running
    Enacted enacted;      ///< where it runs in Slurm
    Enacted last;         ///< where it ran last (kept after it ended)
    long stopping_id = 0; ///< an earlier attempt asked to checkpoint and exit
    int stopping_round = 0;
    bool restore = false; ///< the next start restores from a checkpoint after a failure
    std::string last_failure;
    int bad_progress = 0; ///< consecutive rounds its progress report was unusable
  };

  /// What progress.json of a job says: iterations done, the job's state and when it wrote that (model time); or why
  /// it is unusable (then done is the last known).
  struct Progress {
    long long done = 0;
    std::string state;
    double now = -1;
    std::string error;
  };
  /// Iterations done at a job's checkpoint, or why it is unusable (then done is 0).
  struct Checkpoint {
    long long done = 0;
    std::string error;
  };

  ControllerOptions opt;
  SlurmClient slurm;
  ProfileTable const *profile;
  ThroughputSource source;
  std::unique_ptr<Impl::Judge> judge;
  std::unique_ptr<Policy> policy;
  JobTable job_table;
  std::deque<JobSpec> specs; ///< the jobs' specs (a deque: JobRecord::spec points into it)
  std::vector<Live> live;    ///< by job id
  std::map<std::string, int> by_name;
  Impl::Journal submits, journal;
  std::uint64_t submit_offset = 0;
  std::string controller_id; ///< this controller and state folder: every attempt it submits carries it
  double t0 = 0;
  int rounds_run = 0;
  std::string slurm_error;
  double slurm_error_since = 0;
  std::string round_error;               ///< why the last round failed other than by Slurm (empty when it did not)
  std::vector<std::string> input_errors; ///< the latest bad inputs: journal lines, refused submissions
  long input_error_count = 0;
  std::map<std::string, SlurmNode> node_state;
  std::map<long, std::string> slurm_states; ///< this round's squeue: Slurm job id -> state
  double last_round_ms = 0, last_decide_ms = 0;
  std::vector<double> round_ms, decide_ms;         ///< every round of this process (the controller's own cost)
  std::vector<double> own_ms;                      ///< every round less the time it waited for Slurm's commands
  std::vector<int> decide_running, decide_pending; ///< the jobs each of those decisions saw

  State(ControllerOptions o, ProfileTable const *table, ThroughputSource s);

  // SchedWorld
  Cluster const &cluster() const override { return judge->cluster; }
  ThroughputOracle const &oracle() const override { return *judge->oracle; }
  JobTable &table() override { return job_table; }
  double interval() const override { return opt.round_seconds * opt.time_scale; }
  bool arena_compat() const override { return false; }

  std::vector<JobRecord> &records() { return job_table.jobs(); }
  std::vector<JobRecord> const &records() const { return job_table.jobs(); }
  JobRecord &record(int id) { return job_table.job(id); }
  Live &live_of(int id) { return live.at(static_cast<std::size_t>(id)); }
  Live const &live_of(int id) const { return live.at(static_cast<std::size_t>(id)); }
  int round() const { return job_table.round(); }
  double now() const { return job_table.now(); }
  void log(std::string const &line) const;
  std::string dir_of(JobRecord const &j) const { return opt.state_dir + "/jobs/" + j.spec->id; }
  /// A bad input that stops nothing: logged, counted and listed in the status.
  void note_input_error(std::string const &what);
  std::string node_name(int node) const { return judge->node_names.at(static_cast<std::size_t>(node)); }
  std::vector<std::string> node_names(Enacted const &e) const;
  // Every attempt of a job has the job's name with this controller's identity (Slurm's singleton dependency
  // serializes them, and never across controllers) and, in its comment, the identity and its number: an attempt is
  // this controller's only when its comment says so, whatever its name.
  std::string name_prefix() const { return opt.job_prefix + controller_id.substr(0, 8) + "."; }
  std::string slurm_name(JobRecord const &j) const { return name_prefix() + j.spec->id; }
  std::string attempt_comment(int attempt) const {
    return "tessel-sched:" + controller_id + ":" + std::to_string(attempt);
  }
  /// The attempt number of a Slurm job this controller submitted, or -1 for any other job.
  int attempt_of(SlurmJob const &s) const;
  /// The job a Slurm job of this controller is an attempt of, or -1 (not ours, or no job of ours).
  int job_of(SlurmJob const &s) const;

  // The round (SlurmController.cpp).
  bool step();
  void decide(bool first);
  void account(bool end_of_round);
  bool all_done() const;

  // Intake and recovery (ControllerRecovery.cpp).
  void recover();
  Json load_config();
  void replay_journal(std::map<int, Json> &last_launch);
  void replay(int id, std::string const &op, Json const &rec, std::map<int, Json> &last_launch);
  void adopt(std::map<int, Json> const &last_launch, std::vector<SlurmJob> const &in_slurm);
  int add_job(JobSpec spec, std::string command, double submit_time, int submit_round);
  void read_submissions(bool at_start);
  Enacted enacted_from(Json const &rec, std::string const &where) const;
  void place(int job, Enacted const &e);
  template <class F> auto read_slurm_until_reachable(F &&read);

  // Reconciliation with Slurm (ControllerReconcile.cpp).
  void reconcile(std::vector<SlurmNode> const &nodes, std::vector<SlurmJob> const &in_slurm);
  void cancel_strays(std::vector<SlurmJob> const &in_slurm);
  void follow_stopping(JobRecord const &j, std::map<long, SlurmJob const *> const &by_id);
  void update_running(JobRecord &j, std::map<long, SlurmJob const *> const &by_id);
  std::string failure_of(JobRecord const &j, SlurmJob const *s) const;
  void update_nodes();
  void fail(int id, std::string const &reason);
  Progress progress(JobRecord const &j) const;
  Checkpoint checkpointed(JobRecord const &j) const;
  SlurmNode const *slurm_node(int node) const;

  // Enactment (ControllerEnact.cpp).
  void enact(std::vector<JobState> const &before_state, std::vector<Enacted> const &before);
  void enact_running(JobRecord &j, bool was_running, Enacted const &before);
  void launch(int id, Enacted const &e, bool moved);
  SbatchRequest attempt_request(JobRecord const &j, Enacted const &e, int attempt, double startup) const;
  std::string write_plan(JobRecord const &j, Enacted const &e, int attempt, double startup) const;
  std::string write_script(JobRecord const &j, int attempt, std::string const &plan) const;
  void not_started(int id, std::string const &why, bool slurm_down);
  void ask_to_stop(int id, long slurm_id);
  Enacted enacted_of(int job) const;

  // Status (ControllerStatus.cpp).
  Json status() const;
  Json job_status(JobRecord const &j) const;
  Json cell_json(Enacted const &e) const;
  Json cost_json() const;
  void publish() const;
};

} // namespace tessel::sched

#endif

#ifndef TESSEL_SCHED_JOBTABLE_HPP
#define TESSEL_SCHED_JOBTABLE_HPP

/// \file JobTable.hpp
/// \brief The jobs of a world and their one life cycle — arrival, start, suspension, rejection, completion, failure —
/// over the world's GPU allocation. The simulator and the Slurm controller both keep their jobs in a JobTable; what
/// a world adds to a transition (the simulator's Arena accounting) is a JobTable::Hooks.

#include <tessel/sched/Allocation.hpp>
#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Trace.hpp>

#include <string>
#include <vector>

namespace tessel::sched {

/// \brief Life of a job.
enum class JobState {
  waiting,   ///< in the trace, not yet submitted
  pending,   ///< submitted, holding no GPUs
  running,   ///< holding GPUs and making progress
  completed, ///< all its iterations done
  rejected   ///< ended without completing, with a reason
};
/// The lower-case name of \p state ("waiting", "pending", ...).
char const *state_name(JobState state);

/// \brief A job as the policies see it: its spec, where it stands and what it has accumulated.
struct JobRecord {
  JobSpec const *spec = nullptr; ///< the job's spec (owned by the trace or the world)
  int id = 0;                    ///< index in the table (the trace order in the simulator, the submission order live)
  JobState state = JobState::waiting; ///< where the job stands
  int submit_round = -1;              ///< round of its submission (-1: not yet submitted)
  double submit_time = 0;             ///< time the scheduler saw the job (Arena: the round's start)
  /// \name Resource quota
  /// The allocation while running; the request (or last allocation) while pending.
  //@{
  int quota_type = -1;    ///< GPU type
  int quota_gpus = 0;     ///< GPUs
  int quota_hosts = 0;    ///< nodes
  int quota_per_host = 0; ///< GPUs per node
  //@}
  /// \name Progress
  /// Exact accounting: remaining iterations; Arena accounting: iter_num and exec_time as in Arena.
  //@{
  double remaining = 0;             ///< iterations still to run
  double checkpoint_remaining = 0;  ///< iterations remaining at the last checkpoint (a failure rolls back to it)
  double since_checkpoint = 0;      ///< seconds of execution since the last checkpoint
  double arena_iter_num = 0;        ///< Arena's iteration count
  double arena_exec_time = 0;       ///< Arena's total execution time (s)
  double arena_checkpoint_exec = 0; ///< Arena's execution time at the last checkpoint (s)
  double overhead = 0;              ///< re-tuning / restore seconds still to pay before making progress
  double arena_debt = 0;            ///< Arena's reschedule time debt (> interval skips progress)
  //@}
  /// \name Accounting
  //@{
  double start_time = -1;  ///< first start (s; -1: never started)
  double finish_time = -1; ///< completion or rejection (s; -1: not ended)
  double queue_time = 0;   ///< seconds spent pending
  int reschedules = 0;     ///< starts on a new set of GPUs, the first included
  int failures = 0;        ///< node and job failures that hit the job
  int suspensions = 0;     ///< suspensions by its policy
  //@}
  /// \name Starvation watch
  //@{
  int stalled_rounds = 0; ///< rounds run since the job last progressed
  int stalled_moves = 0;  ///< times it was given new GPUs (and re-tuned) in those rounds
  double throughput = 0;  ///< samples/s on its current allocation
  //@}
  std::string reject_reason; ///< why a rejected job was rejected (empty otherwise)
  /// \name Flags for policies (Crius's decision queue)
  //@{
  bool blocker = false;     ///< a pending job that may take the GPUs of the opportunistic jobs below it
  bool opportunism = false; ///< a running job placed ahead of a blocker above it, which may take its GPUs back
  //@}
};

/// \brief The jobs of a world, its GPU allocation, the round's clock and the events a policy sees, and every
/// transition of a job's life. Transitions check the state they leave and name the job and round when it is wrong.
class JobTable {
public:
  /// \brief What a world adds to the common transitions; each hook runs after the common part.
  class Hooks {
  public:
    virtual ~Hooks() = default;
    /// A running job was suspended by its policy (it is pending, and checkpointed at its progress).
    virtual void suspended(JobRecord &) {}
    /// A job lost its progress since its last checkpoint (a failure).
    virtual void rolled_back(JobRecord &) {}
    /// A running job was sent back to pending by the world (a failed node or job).
    virtual void evicted(JobRecord &) {}
  };

  JobTable() = default;
  /// An empty table on \p cluster (which must outlive it); \p hooks may be null.
  explicit JobTable(Cluster const &cluster, Hooks *hooks = nullptr);

  /// Starts a round: sets the clock and clears the events the policy has seen.
  void begin_round(int round, double now) {
    set_clock(round, now);
    clear_events();
  }
  /// Sets the round and its time without clearing the events.
  void set_clock(int round, double now) {
    _round = round;
    _now = now;
  }
  /// Removes the events the policy was shown (events_presented); events raised since (a world's own failures while
  /// carrying out the policy's decisions) are kept for the next round.
  void clear_events();
  /// The policy has seen this round's events.
  void events_presented();
  /// This round's number.
  int round() const { return _round; }
  /// This round's time (s).
  double now() const { return _now; }

  /// Adds a waiting job of \p iterations iterations; its quota is its request (one node when the GPUs fit on one,
  /// else full nodes). \p spec must outlive the table. Returns its id.
  int add(JobSpec const *spec, double iterations);
  /// Waiting -> pending, submitted at \p submit_time in round \p submit_round; not yet announced to the policy.
  void enter(int job, double submit_time, int submit_round);
  /// Appends a pending job to this round's arrivals (a new submission, or a restarted world's queue).
  void announce(int job);
  /// Waiting -> pending and announced: a job submitted in this round.
  void admit(int job, double submit_time);

  // The policy's transitions (SchedContext).
  /// Pending -> running; the job must already hold its GPUs.
  void start(int job);
  /// Running -> pending, checkpointed at its progress; frees its GPUs.
  void suspend(int job);
  /// Pending -> rejected with \p reason; the job must hold no GPUs.
  void reject(int job, std::string reason);

  // The world's transitions.
  /// Running -> completed at \p finish_time; frees its GPUs and announces it in ended().
  void complete(int job, double finish_time);
  /// Running -> pending after a failure of its node or of itself: counts the failure, rolls the job back to its
  /// last checkpoint, frees its GPUs and announces it in evicted().
  void fail(int job);
  /// A running job restarts where it is after a failure: counts it and rolls back to the last checkpoint.
  void roll_back(int job);
  /// Running -> rejected after its last failure (counted): frees its GPUs, announces it in ended().
  void give_up(int job, std::string reason);
  /// Running -> pending without a policy's decision or a checkpoint (a restarted world re-deciding its jobs).
  void unplace(int job);
  /// Running -> pending because the world could not carry out its start (no failure counted): announced in
  /// evicted(), so that its policy places it again.
  void bounce(int job);
  /// A restarted world's records say the job ended: waiting or pending -> \p state (completed or rejected) at
  /// \p finish_time, with \p reason for a rejection; no event.
  void restore_end(int job, JobState state, double finish_time, std::string reason = {});
  /// A node came back: announced in repaired().
  void node_repaired(int node) { _repaired.push_back(node); }

  /// The jobs (index = id).
  std::vector<JobRecord> &jobs() { return _jobs; }
  /// The jobs (index = id).
  std::vector<JobRecord> const &jobs() const { return _jobs; }
  /// The job of id \p job; an id out of range is an error naming it.
  JobRecord &job(int job);
  /// The job of id \p job; an id out of range is an error naming it.
  JobRecord const &job(int job) const;
  /// Who holds which GPU.
  Allocation &alloc() { return _alloc; }
  /// Who holds which GPU.
  Allocation const &alloc() const { return _alloc; }

  /// Jobs announced this round (see SchedContext::arrived()).
  std::vector<int> const &arrived() const { return _arrived; }
  /// Running jobs that ended since the last round.
  std::vector<int> const &ended() const { return _ended; }
  /// Running jobs sent back to pending since the last round.
  std::vector<int> const &evicted() const { return _evicted; }
  /// Nodes that came back this round.
  std::vector<int> const &repaired() const { return _repaired; }

private:
  JobRecord &in_state(int job, JobState state, char const *action);
  void release(JobRecord &j);

  Cluster const *_cluster = nullptr;
  Hooks *_hooks = nullptr;
  Allocation _alloc;
  std::vector<JobRecord> _jobs;
  std::vector<int> _arrived, _ended, _evicted, _repaired;
  std::size_t _shown[4] = {0, 0, 0, 0}; ///< events of the four lists the policy has seen
  int _round = 0;
  double _now = 0;
};

} // namespace tessel::sched

#endif

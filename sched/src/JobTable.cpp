#include <tessel/sched/JobTable.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>

namespace tessel::sched {

char const *state_name(JobState state) {
  switch (state) {
  case JobState::waiting:
    return "waiting";
  case JobState::pending:
    return "pending";
  case JobState::running:
    return "running";
  case JobState::completed:
    return "completed";
  case JobState::rejected:
    return "rejected";
  }
  return "?";
}

JobTable::JobTable(Cluster const &cluster, Hooks *hooks) : _cluster(&cluster), _hooks(hooks), _alloc(cluster) {}

void JobTable::clear_events() {
  std::vector<int> *lists[] = {&_arrived, &_ended, &_evicted, &_repaired};
  for (int k = 0; k < 4; ++k) {
    lists[k]->erase(lists[k]->begin(), lists[k]->begin() + static_cast<std::ptrdiff_t>(_shown[k]));
    _shown[k] = 0;
  }
}

void JobTable::events_presented() {
  std::vector<int> const *lists[] = {&_arrived, &_ended, &_evicted, &_repaired};
  for (int k = 0; k < 4; ++k)
    _shown[k] = lists[k]->size();
}

JobRecord &JobTable::job(int job) {
  TESSEL_REQUIRE(job >= 0 && job < static_cast<int>(_jobs.size()), "job id ", job, " is not in the table (",
                 _jobs.size(), " jobs)");
  return _jobs[static_cast<std::size_t>(job)];
}

JobRecord const &JobTable::job(int job) const { return const_cast<JobTable *>(this)->job(job); }

JobRecord &JobTable::in_state(int job, JobState state, char const *action) {
  JobRecord &j = this->job(job);
  TESSEL_REQUIRE(j.state == state, "round ", _round, ": cannot ", action, " job ", j.spec->id, " in state ",
                 state_name(j.state), " (it must be ", state_name(state), ")");
  return j;
}

void JobTable::release(JobRecord &j) {
  _alloc.release(j.id);
  j.stalled_rounds = j.stalled_moves = 0;
}

int JobTable::add(JobSpec const *spec, double iterations) {
  TESSEL_REQUIRE(_cluster != nullptr, "a job table without a cluster takes no jobs");
  JobRecord j;
  j.spec = spec;
  j.id = static_cast<int>(_jobs.size());
  j.quota_type = spec->gpu_type;
  j.quota_gpus = spec->num_gpus;
  int const cap = _cluster->type_capacity(j.quota_type);
  j.quota_per_host = cap > 0 ? std::min(j.quota_gpus, cap) : j.quota_gpus;
  j.quota_hosts = std::max(1, j.quota_gpus / std::max(1, j.quota_per_host));
  j.remaining = iterations;
  j.checkpoint_remaining = iterations;
  _jobs.push_back(std::move(j));
  return _jobs.back().id;
}

void JobTable::enter(int job, double submit_time, int submit_round) {
  JobRecord &j = in_state(job, JobState::waiting, "submit");
  j.state = JobState::pending;
  j.submit_round = submit_round;
  j.submit_time = submit_time;
}

void JobTable::announce(int job) {
  in_state(job, JobState::pending, "announce");
  _arrived.push_back(job);
}

void JobTable::admit(int job, double submit_time) {
  enter(job, submit_time, _round);
  _arrived.push_back(job);
}

void JobTable::start(int job) {
  JobRecord &j = in_state(job, JobState::pending, "start");
  TESSEL_REQUIRE(placement_of(_alloc, job).num_gpus > 0, "round ", _round, ": job ", j.spec->id,
                 " started without GPUs");
  j.state = JobState::running;
  if (j.start_time < 0)
    j.start_time = _now;
}

void JobTable::suspend(int job) {
  JobRecord &j = in_state(job, JobState::running, "suspend");
  release(j);
  j.state = JobState::pending;
  ++j.suspensions;
  // Suspension checkpoints the job where it is.
  j.checkpoint_remaining = j.remaining;
  j.since_checkpoint = 0;
  if (_hooks)
    _hooks->suspended(j);
}

void JobTable::reject(int job, std::string reason) {
  JobRecord &j = in_state(job, JobState::pending, "reject");
  TESSEL_REQUIRE(placement_of(_alloc, job).num_gpus == 0, "round ", _round, ": rejected job ", j.spec->id,
                 " still holds GPUs");
  j.state = JobState::rejected;
  j.reject_reason = std::move(reason);
}

void JobTable::complete(int job, double finish_time) {
  JobRecord &j = in_state(job, JobState::running, "complete");
  release(j);
  j.state = JobState::completed;
  j.finish_time = finish_time;
  _ended.push_back(job);
}

void JobTable::roll_back(int job) {
  JobRecord &j = this->job(job);
  ++j.failures;
  j.remaining = j.checkpoint_remaining;
  j.since_checkpoint = 0;
  if (_hooks)
    _hooks->rolled_back(j);
}

void JobTable::fail(int job) {
  JobRecord &j = in_state(job, JobState::running, "fail");
  release(j);
  j.state = JobState::pending;
  roll_back(job);
  j.overhead = 0;
  _evicted.push_back(job);
  if (_hooks)
    _hooks->evicted(j);
}

void JobTable::give_up(int job, std::string reason) {
  JobRecord &j = in_state(job, JobState::running, "give up");
  release(j);
  ++j.failures;
  j.state = JobState::rejected;
  j.reject_reason = std::move(reason);
  _ended.push_back(job);
}

void JobTable::unplace(int job) {
  JobRecord &j = in_state(job, JobState::running, "re-decide");
  release(j);
  j.state = JobState::pending;
}

void JobTable::bounce(int job) {
  unplace(job);
  _evicted.push_back(job);
}

void JobTable::restore_end(int job, JobState state, double finish_time, std::string reason) {
  JobRecord &j = this->job(job);
  TESSEL_REQUIRE(state == JobState::completed || state == JobState::rejected, "job ", j.spec->id, " cannot end as ",
                 state_name(state));
  TESSEL_REQUIRE(j.state == JobState::waiting || j.state == JobState::pending, "round ", _round, ": job ", j.spec->id,
                 " cannot end as ", state_name(state), " in state ", state_name(j.state));
  j.state = state;
  j.finish_time = state == JobState::completed ? finish_time : j.finish_time;
  j.reject_reason = std::move(reason);
}

} // namespace tessel::sched

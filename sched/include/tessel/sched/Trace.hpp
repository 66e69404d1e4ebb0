#ifndef TESSEL_SCHED_TRACE_HPP
#define TESSEL_SCHED_TRACE_HPP

/// \file Trace.hpp
/// \brief Training jobs as submitted (model, global batch, iterations, requested GPUs and type, submission time,
/// optional deadline) and their CSV / HDF5 trace files.

#include <tessel/sched/Cluster.hpp>
#include <tessel/sched/Model.hpp>

#include <string>
#include <vector>

namespace tessel::sched {

/// \brief One job of a trace.
struct JobSpec {
  std::string id;           ///< job id from the trace (unique)
  double submit_time = 0;   ///< seconds on the trace clock (>= 0)
  long long iterations = 0; ///< training iterations (global batches) to run
  int model = -1;           ///< index into ModelCatalog::builtin()
  int batch_size = 0;       ///< global batch size (samples per iteration)
  int num_gpus = 0;         ///< requested GPU count
  int gpu_type = -1;        ///< requested GPU type (index into the cluster's types)
  double deadline = -1;     ///< absolute deadline on the trace clock, or < 0 for none
};

/// \brief Jobs sorted by submission time (ties keep file order).
struct Trace {
  std::vector<JobSpec> jobs;           ///< the jobs
  std::vector<std::string> type_names; ///< GPU type names the jobs' gpu_type indices refer to
  std::string source;                  ///< where the trace came from
};

/// \brief Loads a trace in Crius's CSV format (`job_id,submission_time,num_iteration,model_name,deadline,
/// batch_size,num_gpu,gpu_type`; deadline optional) or HDF5 (schema `tessel.sched.trace`). GPU types are
/// resolved against \p cluster. Malformed rows (missing columns, unparsable or negative numbers, unknown models or
/// GPU types, duplicate ids) raise tessel::Exception naming the file, the row and the field. Jobs that are well
/// formed but cannot run on \p cluster (more GPUs than it has) are kept; the simulator rejects them with a reason.
Trace load_trace(std::string const &path, Cluster const &cluster);

/// \brief Writes \p trace as HDF5 (schema `tessel.sched.trace`).
void save_trace(Trace const &trace, std::string const &path);
/// \brief Writes \p trace in Crius's CSV format.
void save_trace_csv(Trace const &trace, std::string const &path);

} // namespace tessel::sched

#endif

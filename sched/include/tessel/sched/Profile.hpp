#ifndef TESSEL_SCHED_PROFILE_HPP
#define TESSEL_SCHED_PROFILE_HPP

/// \file Profile.hpp
/// \brief Measured iteration times: the profile tables of Crius/Arena (best-plan iteration times per model,
/// batch and GPU allocation; per-GPU memory of pure data parallelism; per-plan compute / communication breakdowns).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessel::sched {

/// \brief Best-plan (Alpa-searched) iteration time of a model on `hosts x per_host` GPUs of one type.
struct ProfileEntry {
  int model = -1;       ///< index in the model catalog
  int batch_size = 0;   ///< global batch
  std::string gpu;      ///< GPU type name
  int hosts = 0;        ///< nodes
  int per_host = 0;     ///< GPUs per node
  double iter_time = 0; ///< seconds; the source's infeasible marker -1 is kept
};

/// \brief Measured breakdown of one parallel plan (pp, dp, tp) on `hosts x per_host` GPUs.
struct PlanRecord {
  int model = -1;     ///< index in the model catalog
  int batch_size = 0; ///< global batch
  std::string gpu;    ///< GPU type name
  int hosts = 0;      ///< nodes
  int per_host = 0;   ///< GPUs per node
  int pp = 1;         ///< pipeline stages
  int dp = 1;         ///< data-parallel degree
  int tp = 1;         ///< tensor-parallel degree
  double comp = 0;    ///< pipelined compute (s)
  double intra = 0;   ///< intra-stage communication (s)
  double inter = 0;   ///< cross-stage transfers (s)
  double e2e = 0;     ///< the whole iteration (s)
};

/// \brief GB per GPU that pure data parallelism needs on 1, 2, 4, 8, 16 GPUs (-1: infeasible, 0: unknown).
struct DpMemory {
  int model = -1;             ///< index in the model catalog
  int batch_size = 0;         ///< global batch
  std::array<double, 5> gb{}; ///< GB per GPU on 1, 2, 4, 8, 16 GPUs
};

/// \brief Profile tables, indexed for constant-time lookup.
class ProfileTable {
public:
  /// \name Adding rows
  //@{
  /// Adds a best-plan time, a measured plan or a data-parallel memory row (indexed for lookup).
  void add(ProfileEntry entry);
  void add(PlanRecord record) { _plans.push_back(std::move(record)); }
  void add(DpMemory memory);
  //@}

  /// True when the table holds nothing.
  bool empty() const { return _entries.empty() && _plans.empty() && _dp.empty(); }
  /// The best-plan times.
  std::vector<ProfileEntry> const &entries() const { return _entries; }
  /// The measured plans.
  std::vector<PlanRecord> const &plans() const { return _plans; }
  /// The data-parallel memory rows.
  std::vector<DpMemory> const &dp_memory() const { return _dp; }

  /// Best-plan iteration time (may be the -1 marker), or nothing when the table has no such entry.
  std::optional<double> iter_time(int model, int batch_size, std::string const &gpu, int hosts, int per_host) const;
  /// Data-parallel memory of (model, batch), or nullptr.
  DpMemory const *dp_memory(int model, int batch_size) const;

  /// Rows skipped while loading (e.g. device keys Arena's querier can never build), with reasons.
  std::vector<std::string> skipped;

private:
  std::uint64_t key(int model, int batch, std::string const &gpu, int hosts, int per_host) const;
  int gpu_index(std::string const &gpu, bool insert);

  std::vector<ProfileEntry> _entries;
  std::vector<PlanRecord> _plans;
  std::vector<DpMemory> _dp;
  std::vector<std::string> _gpus;
  std::unordered_map<std::uint64_t, std::size_t> _entry_index;
  std::unordered_map<std::uint64_t, std::size_t> _dp_index;
};

/// \brief Loads profile tables from HDF5 (schema `tessel.sched.profile`) or from a folder holding Crius's files
/// (`prof_database.csv`, optional `prof_database_est.csv` and `dp_mem.json`, as converted in shared/datasets).
ProfileTable load_profile(std::string const &path);

/// \brief Reads the Crius files directly: \p optimal_csv (prof_database.csv), \p plans_csv
/// (prof_database_est.csv, may be empty) and \p dp_mem_json (dp_mem.json, may be empty).
ProfileTable load_crius_profile(std::string const &optimal_csv, std::string const &plans_csv,
                                std::string const &dp_mem_json);

/// \brief Writes \p table as HDF5 (schema `tessel.sched.profile`).
void save_profile(ProfileTable const &table, std::string const &path, std::string const &source);

} // namespace tessel::sched

#endif

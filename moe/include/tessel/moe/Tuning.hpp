#ifndef TESSEL_MOE_TUNING_HPP
#define TESSEL_MOE_TUNING_HPP

/// \file Tuning.hpp
/// \brief Adaptive workload assignment of the comet schedule: the split of workers between communication and
/// computation (host: communication threads and requests in flight; CUDA: communication thread blocks), the
/// N-split count and the M tile, looked up in a registry of measured settings keyed by the layer's shape.
///
/// Lookup: the exact key (M bucket, N, K, E, topk, EP, TP, backend); else an entry with the same key except
/// the M bucket, the nearest bucket in log scale (ties: the larger); else fallback_params(), a rule that never
/// fails. `tessel-moe --tune` and `tessel-moe-bench --tune` measure the candidates and write the registry
/// file; the committed file moe/tuning/host.registry is compiled in, and TESSEL_MOE_TUNING=FILE adds entries
/// that take precedence. Where the registry has no entry, the host layer tunes on its first comet forward and
/// keeps the result in a per-user cache (the registry format, entries keyed also by the MachineKey).

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/OverlapPlan.hpp>

#include <tessel/core/Communicator.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessel::moe {

/// \brief The knobs of the comet schedule.
struct CometParams {
  int comm_workers = 1;      ///< communication threads (host; 0: the compute thread progresses) / blocks (CUDA)
  int in_flight = 0;         ///< sends each communication worker keeps outstanding; 0: no limit
  int n_splits = 4;          ///< column blocks of layer1 (N-split)
  int m_splits = 1;          ///< token ranges per source, each with its own layer1 and combine (1: COMET)
  std::int64_t tile_m = 128; ///< rows of a layer0 tile and of a dispatch message
  PlanPolicy policy = PlanPolicy::critical_path; ///< the order of the tiles (OverlapPlan)

  /// "workers=1 in_flight=0 n_splits=4 m_splits=1 tile_m=128 policy=critical_path"
  std::string describe() const;
  /// Throws naming the parameter that does not fit \p config on \p backend ("cuda": comm_workers in [1, 1024]
  /// blocks and m_splits = 1; "host": comm_workers in [0, 8] threads).
  void validate(MoeConfig const &config, std::string const &backend = "host") const;
  /// Order-independent hash (for checking that all ranks use the same parameters).
  std::uint64_t hash() const;
  /// True when every knob is the same.
  bool operator==(CometParams const &o) const {
    return comm_workers == o.comm_workers && in_flight == o.in_flight && n_splits == o.n_splits &&
           m_splits == o.m_splits && tile_m == o.tile_m && policy == o.policy;
  }
};

/// \brief Smallest power of two >= m (1 for m <= 1): the M bucket of the registry.
std::int64_t m_bucket(std::int64_t m);

/// \brief Registry key.
struct TuningKey {
  std::string backend = "host"; ///< "host" or "cuda"
  std::int64_t m_bucket = 1;    ///< m_bucket() of the tokens per rank
  std::int64_t n = 0;           ///< N
  std::int64_t k = 0;           ///< K
  int e = 0;                    ///< experts
  int topk = 0;                 ///< experts per token
  int ep = 1;                   ///< expert-parallel groups
  int tp = 1;                   ///< tensor-parallel size
  /// MachineKey::token() of the machine the entry was measured on; empty (committed registries): any machine.
  /// A measurement on one machine says little about another, so entries of a machine match only its own key.
  std::string machine;
  /// The key of \p config on \p backend (no machine).
  static TuningKey of(MoeConfig const &config, std::string backend = "host");
  /// True when everything but the M bucket is equal.
  bool same_shape(TuningKey const &o) const {
    return backend == o.backend && n == o.n && k == o.k && e == o.e && topk == o.topk && ep == o.ep && tp == o.tp &&
           machine == o.machine;
  }
  /// True when every field is equal.
  bool operator==(TuningKey const &o) const { return same_shape(o) && m_bucket == o.m_bucket; }
  /// The key as written in a registry line.
  std::string describe() const;
};

/// \brief The documented rule for shapes the registry does not know (never an error).
///
/// Backend "host": tile_m = half the rows one source sends one expert (M topk / E / 2), rounded down to a power of
/// two and clamped to [128, 1024]; n_splits = 2 when N >= 256, else 1; m_splits = 1; no communication thread (the
/// compute thread progresses the messages between tiles: with a rank on every core, a communication thread only
/// takes time slices from computation); no in-flight limit; critical_path. (On the host, every GEMM call packs
/// the expert's weights: fewer, larger calls win.)
///
/// Backend "cuda" (comm_workers = n_c, the communication thread blocks of each fused kernel): n_c = 28, Flux's
/// release default for BF16 on 132-SM Hopper parts (COMET reports 18 to 46 as the tuned range); the device layer
/// caps it at half the co-resident blocks a rank gets (smaller GPUs, several virtual ranks on one GPU).
/// n_splits = N / 512 clamped to [1, 8] (Flux splits N = 4096 into 8 column blocks of 512; smaller N keeps
/// column blocks of at least 512 columns, so a split still spans several 64-column GEMM tiles); tile_m = 128;
/// m_splits = 1; critical_path.
CometParams fallback_params(MoeConfig const &config, std::string const &backend = "host");

/// \brief What a tuned setting depends on besides the shape: the machine and the link its ranks talk over.
///
/// The token ("cpu=Intel(R)_Xeon(R)_CPU_@_2.20GHz;cores=2;ranks=2;transport=mpi+paced;link=61.6MB/s;latency=10us")
/// is the ninth key field of a cache entry; blanks become '_' so that it stays one field.
struct MachineKey {
  std::string cpu;             ///< /proc/cpuinfo "model name" ("unknown" where there is none)
  int cores = 0;               ///< hardware threads of the machine (std::thread::hardware_concurrency)
  int ranks = 1;               ///< ranks of the layer's communicator
  std::string transport;       ///< the communicator's backend ("self", "mpi", "nccl"), "+paced" on an emulated link
  double link_bandwidth = 0.0; ///< emulated link, bytes per second (0: none or unlimited)
  double link_latency = 0.0;   ///< emulated link, seconds per message

  /// The key of this machine for a layer on \p comm (its emulated link as set now).
  static MachineKey of(Communicator const &comm);
  /// Parses token(); throws naming the field that does not parse.
  static MachineKey parse(std::string const &token);
  /// The key as one field (see above).
  std::string token() const;
  /// \brief Same machine, rank count, transport and latency, and link bandwidths within a factor (1 +
  /// \p tolerance): a link calibrated to a share of the computation lands apart from run to run as the load of
  /// the machine changes (25% on a shared 2-core machine), and an exact match would then rarely find its own entry.
  bool matches(MachineKey const &o, double tolerance = 0.5) const;
};

/// \brief One line of a registry: a shape and its tuned parameters.
struct TuningEntry {
  TuningKey key;      ///< the shape (and machine)
  CometParams params; ///< the parameters measured best
  std::string note;   ///< what was measured (free text)
};

/// \brief A set of tuned entries, read from and written to a line-based text file.
///
/// Format, one entry per line ('#' starts a comment):
///   backend m_bucket N K E topk EP TP [machine] | workers in_flight n_splits m_splits tile_m policy | note
/// The machine field (MachineKey::token()) is written by the per-user cache of first-use tuning only.
class TuningRegistry {
public:
  /// The committed registry (moe/tuning/host.registry), plus TESSEL_MOE_TUNING's entries when set.
  static TuningRegistry const &builtin();
  /// Parses registry text; errors name \p origin, the line and the field.
  static TuningRegistry parse(std::string const &text, std::string const &origin);
  /// Reads a registry file: a regular file of at most max_registry_bytes (a FIFO, device or directory is refused
  /// before it is opened), parsed in linear-logarithmic time.
  static TuningRegistry load(std::string const &path);
  /// The largest registry file load() reads (64 MiB: about a million entries).
  static constexpr std::size_t max_registry_bytes = std::size_t{64} << 20;
  /// Writes the registry (entries sorted by key), with a header naming the format.
  void save(std::string const &path) const;
  /// The registry as save() writes it.
  std::string to_string() const;

  /// Adds or replaces the entry of \p key.
  void set(TuningKey const &key, CometParams const &params, std::string note = {});
  /// Entries of \p other replace entries of this registry with equal keys.
  void merge(TuningRegistry const &other);
  /// The entries, sorted by key.
  std::vector<TuningEntry> const &entries() const { return _entries; }

  /// \brief The parameters for \p config: exact entry, nearest M bucket, or fallback_params(). \p how (when
  /// given) receives "registry", "registry (M bucket 4096 for 2048)" or "fallback rule".
  CometParams lookup(MoeConfig const &config, std::string const &backend = "host", std::string *how = nullptr) const;
  /// \brief The entry of exactly \p key's shape and M bucket measured on a machine that matches \p machine (the
  /// closest link bandwidth when several do), or nullptr.
  TuningEntry const *find(TuningKey const &key, MachineKey const &machine) const;

private:
  /// Adds \p entries (sorted once; of equal keys the last one stays).
  void add(std::vector<TuningEntry> entries);

  std::vector<TuningEntry> _entries; ///< sorted by key
};

/// \brief The comet parameters a layer runs with (host and device layers alike): \p given when set, else the
/// lookup in \p registry (nullptr: TuningRegistry::builtin()) under \p backend; validated for \p config.
/// \p source receives "given" or how the lookup found them.
CometParams resolve_comet_params(MoeConfig const &config, std::optional<CometParams> const &given,
                                 TuningRegistry const *registry, std::string const &backend, std::string *source);

/// \brief The per-user cache of first-use tuning: TESSEL_CACHE_DIR, else $XDG_CACHE_HOME/tessel, else
/// $HOME/.cache/tessel, then /moe-tuning.registry ("" when none of the variables is set).
std::string default_tuning_cache_path();

/// \brief Reads the cache at \p path; never throws, since a cache must not stop a job. A missing file is an
/// empty cache; an unreadable or corrupt one too, with \p warning (when given) naming the file, line and field.
TuningRegistry load_tuning_cache(std::string const &path, std::string *warning = nullptr);

/// \brief Adds \p entry to the cache at \p path (creating its directory) and writes it atomically (a temporary
/// file renamed into place: readers see the old or the new file, never a part). A corrupt cache is replaced.
/// Never throws: returns false with \p warning (when given) saying why it could not write.
bool store_tuning_cache(std::string const &path, TuningEntry const &entry, std::string *warning = nullptr);

} // namespace tessel::moe

#endif

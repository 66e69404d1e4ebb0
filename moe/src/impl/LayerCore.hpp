#ifndef TESSEL_MOE_SRC_IMPL_LAYERCORE_HPP
#define TESSEL_MOE_SRC_IMPL_LAYERCORE_HPP

// What the three layers (the host MoeLayer, the device VirtualRanksLayer and NcclMoeLayer) keep alike: the checked
// configuration, the layer's name in messages, the comet parameters and where they came from, the pipelined
// schedule's chunk count, and when every rank was last found to use the same settings. LayerControls (the public
// accessors) works on it; each layer's heap state derives from it, so its address survives moves of the layer.

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Communicator.hpp>

#include <optional>
#include <string>

namespace tessel::moe::Impl {

struct LayerCore {
  MoeConfig config;
  std::string name;    // the layer in messages ("tessel::moe::cuda::VirtualRanksLayer")
  std::string backend; // whose limits set_comet_params checks ("host" or "cuda")
  int max_chunks = 0;  // bound of pipeline_chunks (0: none)
  CometParams comet;
  std::string comet_source;
  // The fallback rule stands in until the first comet forward looks in the cache or tunes (host layer only).
  bool tune_pending = false;
  int pipeline_chunks = 4;
  // Set: set_comet_params checks at once that every rank passes the same; unset: the layer calls
  // check_settings_once() before a forward.
  Communicator const *collective = nullptr;
  bool comet_checked = false, chunks_checked = false;

  LayerCore(MoeConfig const &c, std::string layer_name, std::string limits_backend, int chunk_bound = 0);

  // The name without its namespaces ("VirtualRanksLayer").
  std::string short_name() const { return name.substr(name.rfind(':') + 1); }
  // The comet parameters: \p given, else looked up for \p key (config as the registry sees it) under \p lookup_backend.
  void resolve_comet(MoeConfig const &key, std::optional<CometParams> const &given, TuningRegistry const *registry,
                     std::string const &lookup_backend);
  void set_comet_params(CometParams const &params);
  void set_pipeline_chunks(int chunks);
  // Once per setting, for a forward of \p schedule: every rank must cut the work the same way (collective).
  void check_settings_once(Communicator const &comm, Schedule schedule);
};

} // namespace tessel::moe::Impl

#endif

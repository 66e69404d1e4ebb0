#ifndef TESSEL_MOE_LAYERCONTROLS_HPP
#define TESSEL_MOE_LAYERCONTROLS_HPP

/// \file LayerControls.hpp
/// \brief The settings every MoE layer shares (host MoeLayer, device VirtualRanksLayer and NcclMoeLayer): its
/// configuration, the comet parameters and the pipelined schedule's chunk count.

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Tuning.hpp>

#include <string>

namespace tessel::moe {

namespace Impl {
struct LayerCore;
} // namespace Impl

/// \brief Base of the MoE layers: the accessors of the settings they share, on the layer's own state.
class LayerControls {
public:
  /// The configuration, as validated at construction.
  MoeConfig const &config() const;
  /// The comet schedule's parameters (tiles, splits, communication workers) the layer uses.
  CometParams const &comet_params() const;
  /// Where the comet parameters came from ("given", "registry", "registry (M bucket ...)", "fallback rule"; the host
  /// layer after its first comet forward also "cache" or "tuned on first use", see LayerOptions::tune_on_first_use).
  std::string const &comet_params_source() const;
  /// \brief Changes the comet parameters; every rank must pass the same (the host layer checks at the next comet
  /// forward, NcclMoeLayer at once, collectively).
  void set_comet_params(CometParams const &params);
  /// Token chunks of the pipelined schedule.
  int pipeline_chunks() const;
  /// Changes pipeline_chunks() (every rank the same).
  void set_pipeline_chunks(int chunks);

protected:
  LayerControls() = default;
  ~LayerControls() = default;
  /// \name Moved with the layer
  //@{
  /// Moved with the layer (the state it points to moves with it).
  LayerControls(LayerControls &&other) noexcept;
  LayerControls &operator=(LayerControls &&other) noexcept;
  //@}
  LayerControls(LayerControls const &) = delete;
  LayerControls &operator=(LayerControls const &) = delete;

  /// Points the accessors at \p core, which lives in the layer's heap state (its address survives moves).
  void attach(Impl::LayerCore &core) noexcept { _core = &core; }

private:
  Impl::LayerCore *_core = nullptr;
};

} // namespace tessel::moe

#endif

#include <tessel/moe/LayerControls.hpp>

#include "impl/LayerCore.hpp"

#include <utility>

namespace tessel::moe {

LayerControls::LayerControls(LayerControls &&other) noexcept : _core(std::exchange(other._core, nullptr)) {}

LayerControls &LayerControls::operator=(LayerControls &&other) noexcept {
  _core = std::exchange(other._core, nullptr);
  return *this;
}

MoeConfig const &LayerControls::config() const { return _core->config; }
CometParams const &LayerControls::comet_params() const { return _core->comet; }
std::string const &LayerControls::comet_params_source() const { return _core->comet_source; }
void LayerControls::set_comet_params(CometParams const &params) { _core->set_comet_params(params); }
int LayerControls::pipeline_chunks() const { return _core->pipeline_chunks; }
void LayerControls::set_pipeline_chunks(int chunks) { _core->set_pipeline_chunks(chunks); }

} // namespace tessel::moe

#include "impl/LayerCore.hpp"

#include <tessel/core/Error.hpp>

#include <cstdint>
#include <utility>

namespace tessel::moe::Impl {

LayerCore::LayerCore(MoeConfig const &c, std::string layer_name, std::string limits_backend, int chunk_bound)
    : config(c), name(std::move(layer_name)), backend(std::move(limits_backend)), max_chunks(chunk_bound) {}

void LayerCore::resolve_comet(MoeConfig const &key, std::optional<CometParams> const &given,
                              TuningRegistry const *registry, std::string const &lookup_backend) {
  comet = resolve_comet_params(key, given, registry, lookup_backend, &comet_source);
  comet_checked = false;
  tune_pending = false;
}

void LayerCore::set_comet_params(CometParams const &params) {
  params.validate(config, backend);
  if (collective != nullptr)
    collective->require_same("CometParams", params.hash());
  comet = params;
  comet_source = "given";
  tune_pending = false; // parameters set by hand are never replaced
  comet_checked = collective != nullptr;
}

void LayerCore::set_pipeline_chunks(int chunks) {
  // The host layer's message tags number at most max_chunks chunks; the device layers have no such bound.
  if (max_chunks > 0)
    TESSEL_REQUIRE(chunks >= 1 && chunks <= max_chunks, short_name(), ": pipeline_chunks must be in [1, ", max_chunks,
                   "], got ", chunks);
  else
    TESSEL_REQUIRE(chunks >= 1, short_name(), "::set_pipeline_chunks: chunks must be >= 1, got ", chunks);
  pipeline_chunks = chunks;
  chunks_checked = false;
}

void LayerCore::check_settings_once(Communicator const &comm, Schedule schedule) {
  if (schedule == Schedule::comet && !comet_checked) {
    comm.require_same("comet parameters (" + comet.describe() + ")", comet.hash());
    comet_checked = true;
  }
  if (schedule == Schedule::pipelined && !chunks_checked) {
    comm.require_same("pipeline chunk count", static_cast<std::uint64_t>(pipeline_chunks));
    chunks_checked = true;
  }
}

} // namespace tessel::moe::Impl

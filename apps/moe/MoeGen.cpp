// tessel-moe-gen: writes an MoE layer file (schema tessel.moe.layer, see datasets/moe/README.md) for one of
// COMET's model shapes (Table 2) with N and K divided by --scale, random tokens and experts, and a gate whose
// Zipf bias skews routing to a target imbalance (std of the per-expert token fractions).
//
//   tessel-moe-gen --model mixtral --scale 8 --tokens 8192 --imbalance 0.04 --out mixtral.h5
#include <tessel/moe/MoeFile.hpp>
#include <tessel/moe/Synthetic.hpp>

#include <tessel/core/OutputFile.hpp>
#include <tessel/core/ScopeGuard.hpp>
#include <tessel/core/Version.hpp>
#include <tessel/tools/CommandLine.hpp>
#include <tessel/tools/Tool.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace {

void usage() {
  std::printf("usage: tessel-moe-gen --model NAME --tokens T --out FILE [options]\n"
              "  --model NAME       mixtral (Mixtral-8x7B: E=8 topk=2), qwen2 (Qwen2-MoE: E=64 topk=4),\n"
              "                     phi35 (Phi-3.5-MoE: E=16 topk=2)\n"
              "  --scale F          divide the model's N and K by F (default 8)\n"
              "  --tokens T         tokens in the file (all ranks together; a run on W ranks needs T %% W == 0)\n"
              "  --imbalance STD    target routing imbalance: std of the per-expert token fractions (default 0.04)\n"
              "  --zipf-alpha A     use this Zipf exponent instead of searching one for --imbalance\n"
              "  --logits           store gate logits [T, E] instead of the gate weight [N, E] and bias [E]\n"
              "  --activation NAME  silu (default) or gelu\n"
              "  --seed S           random seed (default 1)\n"
              "  --nan-token R,C    put a NaN at token R, column C (to exercise error reports)\n"
              "  --out FILE         output HDF5 file\n");
}

} // namespace

int main(int argc, char **argv) {
  return tessel::run_tool("tessel-moe-gen", argc, argv, [](tessel::CommandLine &cl) {
    if (cl.flag({"help", 'h'})) {
      usage();
      return 0;
    }
    std::string const model = cl.get("model", "mixtral");
    double const scale = cl.get_double("scale", 8.0, tessel::Range::closed(1, 4096));
    std::int64_t const tokens = cl.require_int<std::int64_t>("tokens", 1, std::int64_t{1} << 30);
    TESSEL_REQUIRE_USAGE(!(cl.has("imbalance") && cl.has("zipf-alpha")),
                         "--zipf-alpha fixes the routing skew and --imbalance derives it: give one of them");
    double const imbalance = cl.get_double("imbalance", 0.04, tessel::Range::closed(0, 1));
    double alpha = cl.has("zipf-alpha") ? cl.get_double("zipf-alpha", 0, tessel::Range::closed(0, 100)) : -1.0;
    bool const logits = cl.flag("logits");
    std::string const activation = cl.get("activation", "silu");
    auto const seed = cl.get_int<std::uint64_t>("seed", 1, 0, UINT64_MAX / 1000 - 4);
    std::string const out = cl.get("out", "");
    bool const with_nan = cl.has("nan-token");
    auto const nan_token = cl.get_int_list<std::int64_t>("nan-token", {0, 0}, 0, std::int64_t{1} << 30);
    TESSEL_REQUIRE_USAGE(nan_token.size() == 2, "option --nan-token expects ROW,COL, got ", nan_token.size(),
                         " numbers");
    std::int64_t const nan_row = nan_token[0], nan_col = nan_token[1];
    cl.finish();
    TESSEL_REQUIRE_USAGE(!out.empty(), "--out FILE is required (see --help)");
    auto const &shape = tessel::CommandLine::parse_value("--model", model, tessel::moe::find_model);
    auto config = tessel::moe::scaled_config(shape, scale, tokens);
    config.activation = tessel::CommandLine::parse_value("--activation", activation, tessel::moe::parse_activation);
    tessel::require_memory("the layer (--tokens, --scale)",
                           4.0 * static_cast<double>(tokens) * static_cast<double>(config.hidden) * 2 +
                               4.0 * config.experts * 3.0 * static_cast<double>(config.hidden) *
                                   static_cast<double>(config.ffn));
    tessel::require_writable(out);
    std::printf("tessel-moe-gen (%s): %s, N and K divided by %g: %s\n", tessel::build_summary().c_str(),
                shape.name.c_str(), scale, config.describe().c_str());

    auto const all_tokens = tessel::moe::make_tokens(config, tokens, seed * 1000 + 1);
    if (alpha < 0) {
      auto const sample = tessel::moe::make_tokens(config, std::min<std::int64_t>(tokens, 8192), seed * 1000 + 2);
      alpha = tessel::moe::zipf_alpha_for(config, sample, seed * 1000 + 3, imbalance);
    }
    auto const gate = tessel::moe::make_gate(config, alpha, seed * 1000 + 3);
    tessel::moe::GateData data;
    tessel::moe::GateInput const input = tessel::moe::GateInput::from_weight(gate.weight, gate.bias);
    if (logits) {
      tessel::moe::Routing routing;
      auto c = config;
      c.ep = c.tp = 1;
      tessel::moe::route(tessel::moe::HostExecSpace(), c, all_tokens, input, routing);
      data.logits = routing.logits;
    } else {
      data.weight = gate.weight;
      data.bias = gate.bias;
    }
    double const achieved = tessel::moe::routing_imbalance(config, all_tokens, input);
    tessel::moe::MoeFileInfo info;
    info.config = config;
    info.total_tokens = tokens;
    info.model = shape.name;
    info.scale = scale;
    std::ostringstream source;
    source << "tessel-moe-gen " << tessel::version() << " (" << tessel::git_hash() << "): --model " << model
           << " --scale " << scale << " --tokens " << tokens << " --zipf-alpha " << alpha << " --seed " << seed
           << (logits ? " --logits" : "");
    info.source = source.str();
    auto const weights = tessel::moe::make_weights(config, seed * 1000 + 4);
    if (with_nan) {
      TESSEL_REQUIRE_USAGE(nan_row < tokens && nan_col >= 0 && nan_col < config.hidden, "--nan-token ", nan_row, ",",
                           nan_col, " is outside the ", tokens, " x ", config.hidden, " tokens");
      all_tokens(nan_row, nan_col) = std::nanf("");
    }
    tessel::moe::MoeFile::write(out, info, all_tokens, data, weights);
    std::printf("wrote %s: %lld tokens, gate %s, Zipf alpha %.4f, routing imbalance std %.4f (target %.4f)\n",
                out.c_str(), static_cast<long long>(tokens), logits ? "logits" : "weight + bias", alpha, achieved,
                imbalance);
    return 0;
  });
}

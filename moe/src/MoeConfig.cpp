#include <tessel/moe/MoeConfig.hpp>

#include <sstream>

namespace tessel::moe {

char const *name_of(Activation activation) {
  switch (activation) {
  case Activation::silu:
    return "silu";
  case Activation::gelu:
    return "gelu";
  }
  return "invalid";
}

Activation parse_activation(std::string const &name) {
  if (name == "silu")
    return Activation::silu;
  if (name == "gelu")
    return Activation::gelu;
  TESSEL_THROW("unknown activation '", name, "' (expected silu or gelu)");
}

char const *name_of(Schedule schedule) {
  switch (schedule) {
  case Schedule::sequential:
    return "sequential";
  case Schedule::pipelined:
    return "pipelined";
  case Schedule::comet:
    return "comet";
  }
  return "invalid";
}

Schedule parse_schedule(std::string const &name) {
  if (name == "sequential")
    return Schedule::sequential;
  if (name == "pipelined")
    return Schedule::pipelined;
  if (name == "comet")
    return Schedule::comet;
  TESSEL_THROW("unknown schedule '", name, "' (expected sequential, pipelined or comet)");
}

void MoeConfig::validate() const {
  TESSEL_REQUIRE(tokens >= 0, "MoeConfig: tokens per rank (M) must be >= 0, got ", tokens);
  TESSEL_REQUIRE(hidden > 0, "MoeConfig: hidden size (N) must be positive, got ", hidden);
  TESSEL_REQUIRE(ffn > 0, "MoeConfig: FFN size (K) must be positive, got ", ffn);
  TESSEL_REQUIRE(experts > 0, "MoeConfig: experts (E) must be positive, got ", experts);
  TESSEL_REQUIRE(topk >= 1 && topk <= experts, "MoeConfig: topk must be in [1, E=", experts, "], got ", topk);
  TESSEL_REQUIRE(ep >= 1 && tp >= 1, "MoeConfig: EP and TP must be >= 1, got EP=", ep, " TP=", tp);
  TESSEL_REQUIRE(experts % ep == 0, "MoeConfig: E=", experts, " is not divisible by EP=", ep);
  TESSEL_REQUIRE(ffn % tp == 0, "MoeConfig: K=", ffn, " is not divisible by TP=", tp);
  TESSEL_REQUIRE(activation == Activation::silu || activation == Activation::gelu, "MoeConfig: invalid activation ",
                 static_cast<int>(activation));
  TESSEL_REQUIRE(dtype == DataType::float32, "MoeConfig: the host path computes in float32, got ", name_of(dtype),
                 " (16-bit and 8-bit types come with the CUDA path)");
  // Messages carry int32 row and slot indices.
  TESSEL_REQUIRE(tokens * topk < (std::int64_t{1} << 31), "MoeConfig: M x topk = ", tokens * topk,
                 " exceeds the int32 index range");
}

void MoeConfig::validate(int world_size) const {
  validate();
  TESSEL_REQUIRE(ep * tp == world_size, "MoeConfig: EP x TP = ", ep, " x ", tp, " = ", ep * tp,
                 " does not match the communicator's ", world_size, " ranks");
}

void MoeConfig::require_consistent(Communicator const &comm) const {
  auto const u = [](auto v) { return static_cast<std::uint64_t>(v); };
  comm.require_same("MoeConfig.tokens (M)", u(tokens));
  comm.require_same("MoeConfig.hidden (N)", u(hidden));
  comm.require_same("MoeConfig.ffn (K)", u(ffn));
  comm.require_same("MoeConfig.experts (E)", u(experts));
  comm.require_same("MoeConfig.topk", u(topk));
  comm.require_same("MoeConfig.ep", u(ep));
  comm.require_same("MoeConfig.tp", u(tp));
  comm.require_same("MoeConfig.activation", u(activation));
  comm.require_same("MoeConfig.gated", u(gated));
  comm.require_same("MoeConfig.normalize_topk", u(normalize_topk));
  comm.require_same("MoeConfig.dtype", u(dtype));
}

std::string MoeConfig::describe() const {
  std::ostringstream os;
  os << "M=" << tokens << " N=" << hidden << " K=" << ffn << " E=" << experts << " topk=" << topk << " EP=" << ep
     << " TP=" << tp << " " << name_of(activation) << (gated ? " gated" : "") << " " << name_of(dtype);
  return os.str();
}

} // namespace tessel::moe

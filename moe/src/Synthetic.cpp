#include <tessel/moe/Synthetic.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace tessel::moe {

std::vector<ModelShape> const &paper_models() {
  static std::vector<ModelShape> const models{
      {"mixtral-8x7b", 4096, 14336, 8, 2, true},
      {"qwen2-moe", 2048, 1408, 64, 4, false},
      {"phi-3.5-moe", 4096, 6400, 16, 2, true},
  };
  return models;
}

ModelShape const &find_model(std::string const &name) {
  auto const &models = paper_models();
  std::string const alias = name == "mixtral"                     ? "mixtral-8x7b"
                            : name == "qwen2"                     ? "qwen2-moe"
                            : name == "phi35" || name == "phi3.5" ? "phi-3.5-moe"
                                                                  : name;
  for (auto const &m : models)
    if (m.name == alias)
      return m;
  TESSEL_THROW("unknown model '", name, "' (known: mixtral-8x7b, qwen2-moe, phi-3.5-moe, or mixtral, qwen2, phi35)");
}

MoeConfig scaled_config(ModelShape const &model, double scale, std::int64_t tokens) {
  TESSEL_REQUIRE(scale >= 1.0, "scale must be >= 1, got ", scale);
  MoeConfig c;
  c.tokens = tokens;
  c.hidden =
      std::max<std::int64_t>(8, static_cast<std::int64_t>(std::llround(static_cast<double>(model.hidden) / scale)));
  std::int64_t const k = static_cast<std::int64_t>(std::llround(static_cast<double>(model.ffn) / scale));
  c.ffn = std::max<std::int64_t>(8, (k + 7) / 8 * 8);
  c.experts = model.experts;
  c.topk = model.topk;
  c.normalize_topk = model.normalize_topk;
  c.activation = Activation::silu;
  c.gated = true;
  return c;
}

namespace {
void fill_normal(float *data, std::size_t count, std::uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::size_t i = 0; i < count; ++i)
    data[i] = dist(rng);
}
} // namespace

SyntheticGate make_gate(MoeConfig const &config, double alpha, std::uint64_t seed) {
  auto const n = static_cast<std::size_t>(config.hidden), e = static_cast<std::size_t>(config.experts);
  SyntheticGate g;
  g.alpha = alpha;
  g.weight = HostMatrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::gate_weight"), n, e);
  fill_normal(g.weight.data(), n * e, seed, 1.0f / std::sqrt(static_cast<float>(n)));
  g.bias = HostVector(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::gate_bias"), e);
  std::vector<int> popularity(e);
  std::iota(popularity.begin(), popularity.end(), 1);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::shuffle(popularity.begin(), popularity.end(), rng);
  for (std::size_t j = 0; j < e; ++j)
    g.bias(j) = static_cast<float>(-alpha * std::log(static_cast<double>(popularity[j])));
  return g;
}

HostMatrix make_tokens(MoeConfig const &config, std::int64_t rows, std::uint64_t seed) {
  HostMatrix t(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::tokens"), static_cast<std::size_t>(rows),
               static_cast<std::size_t>(config.hidden));
  fill_normal(t.data(), t.size(), seed, 1.0f);
  return t;
}

DenseWeights make_weights(MoeConfig const &config, std::uint64_t seed) {
  auto w = allocate_dense_weights(config);
  fill_normal(w.w0.data(), w.w0.size(), seed * 2 + 1, 1.0f / std::sqrt(static_cast<float>(config.hidden)));
  fill_normal(w.w1.data(), w.w1.size(), seed * 2 + 2, 1.0f / std::sqrt(static_cast<float>(config.ffn)));
  return w;
}

double routing_imbalance(MoeConfig const &config, ConstHostMatrix tokens, GateInput const &gate) {
  auto c = config;
  c.tokens = static_cast<std::int64_t>(tokens.extent(0));
  c.ep = c.tp = 1;
  Routing r;
  route(HostExecSpace(), c, tokens, gate, r);
  return r.imbalance_std(Communicator::self());
}

double zipf_alpha_for(MoeConfig const &config, ConstHostMatrix sample, std::uint64_t gate_seed, double target) {
  auto const at = [&](double alpha) {
    auto const g = make_gate(config, alpha, gate_seed);
    return routing_imbalance(config, sample, GateInput::from_weight(g.weight, g.bias));
  };
  if (target <= at(0.0))
    return 0.0;
  double lo = 0.0, hi = 1.0;
  while (at(hi) < target && hi < 64.0)
    hi *= 2.0;
  for (int i = 0; i < 40; ++i) {
    double const mid = 0.5 * (lo + hi);
    (at(mid) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

} // namespace tessel::moe

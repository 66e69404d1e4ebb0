#ifndef TESSEL_UNIT_TESTS_MOE_TEST_UTILS_HPP
#define TESSEL_UNIT_TESTS_MOE_TEST_UTILS_HPP

// Random inputs for the moe tests: dense weights identical on every rank (same seed), tokens and logits that
// differ per rank. The seed is fresh per run, agreed on by rank 0, and printed with every failure.
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Router.hpp>
#include <tessel/moe/Tuning.hpp>

#include <tessel/core/Communicator.hpp>

#include <chrono>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>

namespace tessel::moe::test {

inline std::uint64_t fresh_seed(Communicator const &comm) {
  std::uint64_t seed = static_cast<std::uint64_t>(std::random_device{}()) ^
                       static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  comm.broadcast(&seed, 1, DataType::uint64, 0);
  return seed;
}

inline void fill_normal(float *data, std::size_t count, std::uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::size_t i = 0; i < count; ++i)
    data[i] = dist(rng);
}

inline DenseWeights random_weights(MoeConfig const &config, std::uint64_t seed) {
  auto w = allocate_dense_weights(config);
  // Scaled so that activations stay O(1): 1/sqrt(fan_in).
  fill_normal(w.w0.data(), w.w0.size(), seed * 3 + 1, 1.0f / std::sqrt(static_cast<float>(config.hidden)));
  fill_normal(w.w1.data(), w.w1.size(), seed * 3 + 2, 1.0f / std::sqrt(static_cast<float>(config.ffn)));
  return w;
}

inline HostMatrix random_matrix(char const *label, std::size_t rows, std::size_t cols, std::uint64_t seed,
                                float stddev = 1.0f) {
  HostMatrix m(std::string(label), rows, cols);
  fill_normal(m.data(), m.size(), seed, stddev);
  return m;
}

/// One schedule with its parameters, as the schedule tests run it (host and device).
struct Variant {
  Schedule schedule;
  CometParams comet;
  int chunks = 3;
  int pipeline_workers = 0; ///< communication threads of the pipelined schedule
  std::string describe() const {
    std::ostringstream os;
    os << name_of(schedule);
    if (schedule == Schedule::comet)
      os << " [" << comet.describe() << "]";
    if (schedule == Schedule::pipelined)
      os << " [chunks=" << chunks << " workers=" << pipeline_workers << "]";
    return os.str();
  }
};

} // namespace tessel::moe::test

#endif

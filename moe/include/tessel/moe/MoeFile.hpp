#ifndef TESSEL_MOE_MOEFILE_HPP
#define TESSEL_MOE_MOEFILE_HPP

/// \file MoeFile.hpp
/// \brief The MoE layer HDF5 file (schema tessel.moe.layer, datasets/moe/README.md): configuration attributes,
/// tokens, gate weight or logits, expert weights. Only present with Tessel_ENABLE_HDF5.

#include <tessel/moe/MoeConfig.hpp>
#include <tessel/moe/Reference.hpp>
#include <tessel/moe/Router.hpp>

#include <tessel/core/Config.hpp>

#ifndef TESSEL_ENABLE_HDF5
#error "tessel/moe/MoeFile.hpp needs a Tessel built with Tessel_ENABLE_HDF5=ON"
#endif

#include <cstdint>
#include <memory>
#include <string>

namespace tessel::moe {

/// \brief What the file describes: the layer's shape (tokens = all tokens of the file; EP = TP = 1) and its
/// provenance.
struct MoeFileInfo {
  MoeConfig config;              ///< the layer's shape (tokens = all tokens of the file, EP = TP = 1)
  std::int64_t total_tokens = 0; ///< rows of /tokens
  std::string model;             ///< "mixtral-8x7b", "qwen2-moe", "phi-3.5-moe" or free text
  double scale = 1.0;            ///< factor N and K were divided by
  std::string source;            ///< what wrote the file
  bool has_logits = false;       ///< /gate/logits present (else /gate/weight)
  bool has_bias = false;         ///< /gate/bias present
};

/// \brief The gate's data as read from a file (owns its Views).
struct GateData {
  HostMatrix logits; ///< [tokens, E] precomputed logits, when the file has them
  HostMatrix weight; ///< [N, E] gate weight, when the file has it
  HostVector bias;   ///< [E] gate bias, when the file has one
  /// The gate as a layer takes it: the weight (and bias) when present, else the logits.
  GateInput input() const {
    return weight.data() ? GateInput::from_weight(weight, bias) : GateInput::from_logits(logits);
  }
};

/// \brief A validated MoE layer file, opened read-only.
class MoeFile {
public:
  static constexpr char const *schema = "tessel.moe.layer"; ///< the file's schema attribute
  static constexpr int schema_version = 1;                  ///< the schema version read and written

  /// Opens \p path and validates the schema and configuration attributes (errors name the file and field).
  explicit MoeFile(std::string const &path);
  ~MoeFile();
  /// \name Move-only
  //@{
  /// Move-only.
  MoeFile(MoeFile &&) noexcept;
  MoeFile &operator=(MoeFile &&) noexcept;
  //@}

  /// What the file describes.
  MoeFileInfo const &info() const { return _info; }
  /// The path the file was opened with.
  std::string const &path() const;

  /// Rows [first, first + count) of /tokens; a NaN or infinity is an error naming the file, row and column.
  HostMatrix tokens(std::int64_t first, std::int64_t count) const;
  /// The gate for tokens [first, first + count): those rows of /gate/logits, or /gate/weight (and bias).
  GateData gate(std::int64_t first, std::int64_t count) const;
  /// All experts at full size.
  DenseWeights dense_weights() const;
  /// Only the experts (and K-slices) rank \p rank holds under \p layer (same N, K, E as the file).
  ExpertWeights shard(MoeConfig const &layer, int rank) const;

  /// \brief Writes a file (replacing \p path). \p gate holds logits [T, E] or weight [N, E] (+ bias [E]).
  static void write(std::string const &path, MoeFileInfo const &info, ConstHostMatrix tokens, GateData const &gate,
                    DenseWeights const &weights);

private:
  struct Impl;
  std::unique_ptr<Impl> _impl;
  MoeFileInfo _info;
};

} // namespace tessel::moe

#endif

#ifndef TESSEL_SCHED_MODEL_HPP
#define TESSEL_SCHED_MODEL_HPP

/// \file Model.hpp
/// \brief The training workloads the scheduler knows: model families and sizes of the Alpa benchmark suite
/// that Crius/Arena uses (Wide-ResNet, BERT, MoE) plus GPT, with the architecture numbers the estimator needs.

#include <string>
#include <string_view>
#include <vector>

namespace tessel::sched {

/// \brief Model family of a training job.
enum class ModelFamily { wide_resnet, bert, moe, gpt };

/// Lower-case family name as written in traces ("wide_resnet", "bert", "moe", "gpt").
std::string_view family_name(ModelFamily family);

/// \brief Architecture of one model size (Alpa benchmark configurations, as in Arena's `configs.py`).
struct ModelSpec {
  ModelFamily family;        ///< Wide-ResNet, BERT, MoE or GPT
  std::string size;          ///< size label, e.g. "2.4B"
  double params = 0;         ///< parameter count (from the architecture, not the label)
  double active_params = 0;  ///< parameters touched per sample/token (MoE: top-2 experts)
  int layers = 0;            ///< transformer layers, or ResNet depth (50 / 101)
  int hidden = 0;            ///< hidden size; for Wide-ResNet the base channel count
  int heads = 0;             ///< attention heads (transformers), 0 for Wide-ResNet
  int seq_len = 0;           ///< tokens per sample (transformers), 0 for Wide-ResNet
  int vocab = 0;             ///< vocabulary size (transformers)
  int experts = 0;           ///< experts per MoE layer (MoE only)
  int width_factor = 0;      ///< Wide-ResNet width factor
  double fwd_flops = 0;      ///< forward FLOPs per sample
  double act_bytes = 0;      ///< activation bytes per sample kept for the backward pass (whole model, 2-byte types)
  double boundary_bytes = 0; ///< bytes per sample crossing a pipeline stage boundary

  /// Canonical name "<family>__<size>", the form used in traces ("moe__2.4B").
  std::string name() const;
};

/// \brief The set of known models. Sizes within a family are ordered smallest first; Arena's profile lookup
/// falls back to the next larger size of the same family when a size is missing.
class ModelCatalog {
public:
  /// The built-in catalog: Wide-ResNet {500M, 1B, 2B, 4B, 6.8B, 13B}, BERT {760M, 1.3B, 2.6B, 6.7B, 15B, 39B},
  /// MoE {690M, 1.3B, 2.4B, 10B, 27B, 70B}, GPT {350M, 760M, 1.3B, 2.6B, 6.7B, 15B, 39B}.
  static ModelCatalog const &builtin();

  /// Number of models.
  int size() const { return static_cast<int>(_models.size()); }
  /// The model at \p index; outside [0, size()) throws std::out_of_range naming the index and the range.
  ModelSpec const &operator[](int index) const;

  /// Index of the model named "<family>__<size>" (also accepted: "<family>_<size>"; letters in either case:
  /// "BERT__1.3b"), or -1 when unknown.
  int find(std::string_view name) const;
  /// Index of (family, size label), either in any case, or -1.
  int find(std::string_view family, std::string_view size) const;
  /// The next larger size of the same family, or -1 for the largest.
  int next_larger(int index) const;
  /// Position of the model within its family (0 = smallest).
  int rank_in_family(int index) const;

private:
  std::vector<ModelSpec> _models;
};

/// \brief Parses a family name ("wide_resnet", "bert", "moe", "gpt"; also "wresnet", "wide-resnet").
/// Returns false when the name is not a family.
bool parse_family(std::string_view text, ModelFamily &family);

} // namespace tessel::sched

#endif

#include <tessel/sched/Model.hpp>

#include <tessel/core/Error.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

namespace tessel::sched {

std::string_view family_name(ModelFamily family) {
  switch (family) {
  case ModelFamily::wide_resnet:
    return "wide_resnet";
  case ModelFamily::bert:
    return "bert";
  case ModelFamily::moe:
    return "moe";
  case ModelFamily::gpt:
    return "gpt";
  }
  return "?";
}

bool parse_family(std::string_view text, ModelFamily &family) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::replace(lower.begin(), lower.end(), '-', '_');
  if (lower == "wide_resnet" || lower == "wresnet" || lower == "wideresnet")
    family = ModelFamily::wide_resnet;
  else if (lower == "bert")
    family = ModelFamily::bert;
  else if (lower == "moe")
    family = ModelFamily::moe;
  else if (lower == "gpt")
    family = ModelFamily::gpt;
  else
    return false;
  return true;
}

std::string ModelSpec::name() const { return std::string(family_name(family)) + "__" + size; }

namespace {

// Parameter count written in a size label ("690M", "6.8B").
double label_params(std::string const &label) {
  double const value = std::stod(label.substr(0, label.size() - 1));
  return label.back() == 'B' ? value * 1e9 : value * 1e6;
}

// Transformers (GPT-3 style dense blocks, 12 h^2 per layer). Activations: bytes kept per sample per (h x layer),
// fitted to the per-GPU memory of pure data parallelism that Arena measured (database/dp_mem.json), which shows
// Alpa's memory grows far less than the no-recompute Megatron formula would give.
ModelSpec transformer(ModelFamily family, std::string size, int hidden, int layers, int heads) {
  ModelSpec m{family, std::move(size)};
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.seq_len = 1024;
  m.vocab = 51200;
  double const h = hidden, s = m.seq_len, L = layers;
  m.params = 12.0 * L * h * h + (m.vocab + s) * h;
  m.active_params = m.params;
  m.fwd_flops = 2.0 * s * 12.0 * L * h * h + 4.0 * L * s * s * h + 2.0 * s * h * m.vocab;
  m.act_bytes = 3000.0 * h * L;
  m.boundary_bytes = 2.0 * s * h;
  return m;
}

// GShard-style MoE as in Alpa's benchmark: every layer is attention (4 h^2) plus E experts of 8 h^2; each token is
// routed to 2 experts.
ModelSpec moe(std::string size, int hidden, int layers, int heads, int experts) {
  ModelSpec m{ModelFamily::moe, std::move(size)};
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.seq_len = 1024;
  m.vocab = 32000;
  m.experts = experts;
  double const h = hidden, s = m.seq_len, L = layers;
  m.params = L * (4.0 + 8.0 * experts) * h * h + (m.vocab + s) * h;
  m.active_params = L * (4.0 + 16.0) * h * h + (m.vocab + s) * h;
  m.fwd_flops = 2.0 * s * L * 20.0 * h * h + 4.0 * L * s * s * h + 2.0 * s * h * m.vocab;
  m.act_bytes = 4000.0 * h * L;
  m.boundary_bytes = 2.0 * s * h;
  return m;
}

// Wide-ResNet: the parameter count is the label's (Alpa's width/channel scaling), forward FLOPs per sample follow
// the FLOPs-per-parameter ratio of WRN-50-2 at 224x224 (11.4 GFLOPs / 68.9 M), activations fitted to dp_mem.json.
ModelSpec wide_resnet(std::string size, int layers, int width_factor, int channels) {
  ModelSpec m{ModelFamily::wide_resnet, std::move(size)};
  m.layers = layers;
  m.hidden = channels;
  m.width_factor = width_factor;
  m.params = label_params(m.size);
  m.active_params = m.params;
  m.fwd_flops = 165.0 * m.params;
  m.act_bytes = 6500.0 * channels * layers * (width_factor > 2 ? 2.0 : 1.0);
  // Feature map at a stage boundary: 56x56 spatial, 4 x channels x width channels, fp32.
  m.boundary_bytes = 4.0 * 56 * 56 * 4.0 * channels;
  return m;
}

// The sizes that BERT and GPT share (GPT also has 350M): label, hidden width, layers, attention heads.
struct TransformerSize {
  char const *size;
  int hidden, layers, heads;
};
constexpr TransformerSize kTransformerSizes[] = {{"760M", 1536, 24, 16}, {"1.3B", 2048, 24, 32}, {"2.6B", 2560, 32, 32},
                                                 {"6.7B", 4096, 32, 32}, {"15B", 5120, 48, 40},  {"39B", 8192, 48, 64}};

} // namespace

ModelCatalog const &ModelCatalog::builtin() {
  static ModelCatalog const catalog = [] {
    ModelCatalog c;
    auto &v = c._models;
    v.push_back(wide_resnet("500M", 50, 2, 224));
    v.push_back(wide_resnet("1B", 50, 2, 320));
    v.push_back(wide_resnet("2B", 50, 2, 448));
    v.push_back(wide_resnet("4B", 50, 2, 640));
    v.push_back(wide_resnet("6.8B", 50, 16, 320));
    v.push_back(wide_resnet("13B", 101, 16, 320));
    for (auto const &t : kTransformerSizes)
      v.push_back(transformer(ModelFamily::bert, t.size, t.hidden, t.layers, t.heads));
    v.push_back(moe("690M", 768, 8, 16, 16));
    v.push_back(moe("1.3B", 768, 16, 16, 16));
    v.push_back(moe("2.4B", 1024, 16, 16, 16));
    v.push_back(moe("10B", 1536, 16, 16, 32));
    v.push_back(moe("27B", 2048, 16, 16, 48));
    v.push_back(moe("70B", 2048, 32, 16, 64));
    v.push_back(transformer(ModelFamily::gpt, "350M", 1024, 24, 16));
    for (auto const &t : kTransformerSizes)
      v.push_back(transformer(ModelFamily::gpt, t.size, t.hidden, t.layers, t.heads));
    return c;
  }();
  return catalog;
}

ModelSpec const &ModelCatalog::operator[](int index) const {
  // An index is often find()'s answer: -1 for an unknown name would otherwise read as 18446744073709551615.
  if (index < 0 || index >= size())
    throw std::out_of_range("model index " + std::to_string(index) + " is not in the catalog's [0, " +
                            std::to_string(size()) + ")" +
                            (index == -1 ? " (ModelCatalog::find returns -1 for a name it does not know)" : ""));
  return _models[static_cast<std::size_t>(index)];
}

int ModelCatalog::find(std::string_view family, std::string_view size) const {
  ModelFamily f;
  if (!parse_family(family, f))
    return -1;
  auto const same_label = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
             return std::tolower(x) == std::tolower(y);
           });
  };
  for (int i = 0; i < this->size(); ++i)
    if (_models[static_cast<std::size_t>(i)].family == f && same_label(_models[static_cast<std::size_t>(i)].size, size))
      return i;
  return -1;
}

int ModelCatalog::find(std::string_view name) const {
  auto const sep = name.rfind('_');
  if (sep == std::string_view::npos || sep == 0)
    return -1;
  std::string_view family = name.substr(0, sep);
  if (!family.empty() && family.back() == '_')
    family.remove_suffix(1);
  return find(family, name.substr(sep + 1));
}

int ModelCatalog::next_larger(int index) const {
  auto const &m = (*this)[index];
  for (int i = index + 1; i < size(); ++i)
    if (_models[static_cast<std::size_t>(i)].family == m.family)
      return i;
  return -1;
}

int ModelCatalog::rank_in_family(int index) const {
  auto const &m = (*this)[index];
  int rank = 0;
  for (int i = 0; i < index; ++i)
    if (_models[static_cast<std::size_t>(i)].family == m.family)
      ++rank;
  return rank;
}

} // namespace tessel::sched

#include <tessel/moe/MoeFile.hpp>

#include <tessel/core/H5File.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace tessel::moe {

struct MoeFile::Impl {
  h5::File file;
  explicit Impl(std::string const &path) : file(path, h5::Mode::read) {}
};

namespace {

std::string expert_path(int e, char const *name) { return "experts/" + std::to_string(e) + "/" + name; }

void check_finite(std::string const &path, std::string const &dataset, float const *data, std::size_t rows,
                  std::size_t cols, std::int64_t first_row) {
  auto const bad = first_non_finite(data, rows * cols);
  TESSEL_REQUIRE(bad == rows * cols, path, ": dataset '", dataset, "' holds ", data[bad < rows * cols ? bad : 0],
                 " at row ", first_row + static_cast<std::int64_t>(bad / std::max<std::size_t>(cols, 1)), ", column ",
                 bad % std::max<std::size_t>(cols, 1), " (values must be finite)");
}

HostMatrix to_matrix(char const *label, std::vector<float> const &data, std::size_t first, std::size_t rows,
                     std::size_t cols) {
  HostMatrix m(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), rows, cols);
  if (rows * cols > 0)
    std::memcpy(m.data(), data.data() + first * cols, rows * cols * sizeof(float));
  return m;
}

// An integer attribute of config/ within [lo, hi] (an int64 beyond an int's range must not wrap).
std::int64_t read_count(h5::File const &f, char const *name, std::int64_t lo, std::int64_t hi) {
  auto const value = f.read_attribute<std::int64_t>("config", name);
  TESSEL_REQUIRE(value >= lo && value <= hi, f.path(), ": attribute 'config/", name, "' is ", value,
                 ", expected an integer in [", lo, ", ", hi, "]");
  return value;
}

// A flag attribute of config/: 0 or 1 (2 or -1 is not "true").
bool read_flag(h5::File const &f, char const *name) {
  auto const value = f.read_attribute<std::int64_t>("config", name);
  TESSEL_REQUIRE(value == 0 || value == 1, f.path(), ": attribute 'config/", name, "' is ", value, ", expected 0 or 1");
  return value == 1;
}

// The layer's configuration attributes (config/), each checked on its own.
void read_config(h5::File const &f, MoeFileInfo &info) {
  auto const &path = f.path();
  for (char const *name : {"hidden", "ffn", "experts", "topk", "activation", "gated", "normalize_topk"})
    TESSEL_REQUIRE(f.has_attribute("config", name), path, ": attribute 'config/", name, "' missing");
  auto &c = info.config;
  std::int64_t const int_max = std::numeric_limits<int>::max();
  c.hidden = read_count(f, "hidden", 1, int_max);
  c.ffn = read_count(f, "ffn", 1, int_max);
  c.experts = static_cast<int>(read_count(f, "experts", 1, int_max));
  c.topk = static_cast<int>(read_count(f, "topk", 1, int_max)); // at most E: MoeConfig::validate says so
  try {
    c.activation = parse_activation(f.read_string_attribute("config", "activation"));
  } catch (Exception const &e) {
    TESSEL_THROW(path, ": attribute 'config/activation': ", e.what());
  }
  c.gated = read_flag(f, "gated");
  c.normalize_topk = read_flag(f, "normalize_topk");
  info.model = f.has_attribute("config", "model") ? f.read_string_attribute("config", "model") : std::string();
  info.scale = f.has_attribute("config", "scale") ? f.read_attribute<double>("config", "scale") : 1.0;
  TESSEL_REQUIRE(std::isfinite(info.scale) && info.scale > 0.0, path, ": attribute 'config/scale' is ", info.scale,
                 ", expected a positive number (the factor N and K were divided by)");
}

// Every dataset the layer reads has the shape the configuration gives it, so that what is allocated for it is what
// the file holds.
void check_shapes(h5::File const &f, MoeFileInfo const &info) {
  auto const &c = info.config;
  auto const &path = f.path();
  auto const expect = [&](std::string const &dataset, std::vector<std::size_t> const &shape, char const *what) {
    TESSEL_REQUIRE(f.has(dataset), path, ": dataset '", dataset, "' not found (", what, ")");
    auto const found = f.shape(dataset);
    TESSEL_REQUIRE(found == shape, path, ": dataset '", dataset, "' has shape ", h5::to_string(found), ", expected ",
                   h5::to_string(shape), " (", what, ")");
  };
  auto const n = static_cast<std::size_t>(c.hidden), k = static_cast<std::size_t>(c.ffn),
             e = static_cast<std::size_t>(c.experts), t = static_cast<std::size_t>(info.total_tokens);
  if (info.has_logits)
    expect("gate/logits", {t, e}, "tokens x config/experts");
  else
    expect("gate/weight", {n, e}, "config/hidden x config/experts");
  if (info.has_bias)
    expect("gate/bias", {e}, "config/experts");
  for (int x = 0; x < c.experts; ++x) {
    expect(expert_path(x, "w0"), {n, (c.gated ? 2 : 1) * k},
           c.gated ? "config/hidden x 2 config/ffn: [gate | up]" : "config/hidden x config/ffn");
    expect(expert_path(x, "w1"), {k, n}, "config/ffn x config/hidden");
  }
}

} // namespace

MoeFile::MoeFile(std::string const &path) : _impl(std::make_unique<Impl>(path)) {
  auto const &f = _impl->file;
  TESSEL_REQUIRE(f.has_attribute("/", "schema"), path, ": root attribute 'schema' missing (expected '", schema, "')");
  auto const found = f.read_string_attribute("/", "schema");
  TESSEL_REQUIRE(found == schema, path, ": root attribute 'schema' is '", found, "', expected '", schema, "'");
  auto const version = f.read_attribute<std::int64_t>("/", "schema_version");
  TESSEL_REQUIRE(version == schema_version, path, ": schema_version ", version, " is not supported (expected ",
                 schema_version, ")");
  _info.source = f.has_attribute("/", "source") ? f.read_string_attribute("/", "source") : std::string();
  TESSEL_REQUIRE(f.has("config"), path, ": group 'config' missing (it carries the layer's attributes)");
  read_config(f, _info);
  auto &c = _info.config;
  TESSEL_REQUIRE(f.has("tokens"), path, ": dataset 'tokens' not found (tokens x config/hidden)");
  auto const tshape = f.shape("tokens");
  TESSEL_REQUIRE(tshape.size() == 2 && static_cast<std::int64_t>(tshape[1]) == c.hidden, path,
                 ": dataset 'tokens' has shape ", h5::to_string(tshape), ", expected (*, ", c.hidden,
                 ") (tokens x config/hidden)");
  _info.total_tokens = static_cast<std::int64_t>(tshape[0]);
  TESSEL_REQUIRE(_info.total_tokens > 0, path, ": dataset 'tokens' holds no token (shape ", h5::to_string(tshape),
                 "): there is nothing to run");
  c.tokens = _info.total_tokens;
  try {
    c.validate();
  } catch (Exception const &e) {
    TESSEL_THROW(path, ": the configuration attributes are invalid: ", e.what());
  }
  _info.has_logits = f.has("gate/logits");
  TESSEL_REQUIRE(_info.has_logits || f.has("gate/weight"), path,
                 ": neither dataset 'gate/weight' (hidden x experts) nor 'gate/logits' (tokens x experts) found");
  TESSEL_REQUIRE(!(_info.has_logits && f.has("gate/weight")), path,
                 ": both 'gate/logits' and 'gate/weight' found; a layer file holds one gate");
  _info.has_bias = f.has("gate/bias");
  TESSEL_REQUIRE(!(_info.has_logits && _info.has_bias), path,
                 ": 'gate/bias' found beside 'gate/logits'; a bias belongs to a gate weight");
  check_shapes(f, _info);
}

MoeFile::~MoeFile() = default;
MoeFile::MoeFile(MoeFile &&) noexcept = default;
MoeFile &MoeFile::operator=(MoeFile &&) noexcept = default;

std::string const &MoeFile::path() const { return _impl->file.path(); }

HostMatrix MoeFile::tokens(std::int64_t first, std::int64_t count) const {
  auto const n = static_cast<std::size_t>(_info.config.hidden);
  TESSEL_REQUIRE(first >= 0 && count >= 0 && first + count <= _info.total_tokens, path(), ": tokens [", first, ", ",
                 first + count, ") requested, the file has ", _info.total_tokens);
  auto const rows =
      _impl->file.read_rows<float>("tokens", static_cast<std::size_t>(first), static_cast<std::size_t>(count));
  auto m = to_matrix("Tessel::moe::file_tokens", rows.data, 0, static_cast<std::size_t>(count), n);
  check_finite(path(), "tokens", m.data(), m.extent(0), n, first);
  return m;
}

GateData MoeFile::gate(std::int64_t first, std::int64_t count) const {
  auto const e = static_cast<std::size_t>(_info.config.experts), n = static_cast<std::size_t>(_info.config.hidden);
  GateData g;
  if (_info.has_logits) {
    TESSEL_REQUIRE(first >= 0 && count >= 0 && first + count <= _info.total_tokens, path(), ": gate logits [", first,
                   ", ", first + count, ") requested, the file has ", _info.total_tokens, " tokens");
    auto const rows =
        _impl->file.read_rows<float>("gate/logits", static_cast<std::size_t>(first), static_cast<std::size_t>(count));
    g.logits = to_matrix("Tessel::moe::file_logits", rows.data, 0, static_cast<std::size_t>(count), e);
    check_finite(path(), "gate/logits", g.logits.data(), g.logits.extent(0), e, first);
    return g;
  }
  auto const w = _impl->file.read<float>("gate/weight", {n, e});
  g.weight = to_matrix("Tessel::moe::file_gate_weight", w.data, 0, n, e);
  check_finite(path(), "gate/weight", g.weight.data(), n, e, 0);
  if (_info.has_bias) {
    auto const b = _impl->file.read<float>("gate/bias", {e});
    g.bias = HostVector(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::moe::file_gate_bias"), e);
    std::memcpy(g.bias.data(), b.data.data(), e * sizeof(float));
    check_finite(path(), "gate/bias", g.bias.data(), 1, e, 0);
  }
  return g;
}

DenseWeights MoeFile::dense_weights() const {
  auto const &c = _info.config;
  auto dense = allocate_dense_weights(c);
  auto const n = static_cast<std::size_t>(c.hidden), k = static_cast<std::size_t>(c.ffn), k0 = (c.gated ? 2 : 1) * k;
  for (int e = 0; e < c.experts; ++e) {
    auto const w0 = _impl->file.read<float>(expert_path(e, "w0"), {n, k0});
    auto const w1 = _impl->file.read<float>(expert_path(e, "w1"), {k, n});
    check_finite(path(), expert_path(e, "w0"), w0.data.data(), n, k0, 0);
    check_finite(path(), expert_path(e, "w1"), w1.data.data(), k, n, 0);
    std::memcpy(&dense.w0(e, 0, 0), w0.data.data(), n * k0 * sizeof(float));
    std::memcpy(&dense.w1(e, 0, 0), w1.data.data(), k * n * sizeof(float));
  }
  return dense;
}

ExpertWeights MoeFile::shard(MoeConfig const &layer, int rank) const {
  auto const &c = _info.config;
  TESSEL_REQUIRE(layer.hidden == c.hidden && layer.ffn == c.ffn && layer.experts == c.experts && layer.gated == c.gated,
                 path(), ": the layer (", layer.describe(), ") does not match the file (", c.describe(), ")");
  auto weights = allocate_expert_weights(layer);
  auto const n = static_cast<std::size_t>(c.hidden), k = static_cast<std::size_t>(c.ffn), k0 = (c.gated ? 2 : 1) * k;
  int const first = layer.first_expert_of_rank(rank);
  for (int e = first; e < first + layer.experts_per_group(); ++e) {
    auto const w0 = _impl->file.read<float>(expert_path(e, "w0"), {n, k0});
    auto const w1 = _impl->file.read<float>(expert_path(e, "w1"), {k, n});
    check_finite(path(), expert_path(e, "w0"), w0.data.data(), n, k0, 0);
    check_finite(path(), expert_path(e, "w1"), w1.data.data(), k, n, 0);
    set_expert_weights(layer, rank, e, w0.data.data(), w1.data.data(), weights);
  }
  return weights;
}

void MoeFile::write(std::string const &path, MoeFileInfo const &info, ConstHostMatrix tokens, GateData const &gate,
                    DenseWeights const &weights) {
  auto const &c = info.config;
  c.validate();
  h5::File f(path, h5::Mode::truncate);
  f.write_attribute("/", "schema", schema);
  f.write_attribute("/", "schema_version", static_cast<std::int64_t>(schema_version));
  f.write_attribute("/", "source", info.source);
  f.create_group("config");
  f.write_attribute("config", "hidden", static_cast<std::int64_t>(c.hidden));
  f.write_attribute("config", "ffn", static_cast<std::int64_t>(c.ffn));
  f.write_attribute("config", "experts", static_cast<std::int64_t>(c.experts));
  f.write_attribute("config", "topk", static_cast<std::int64_t>(c.topk));
  f.write_attribute("config", "activation", name_of(c.activation));
  f.write_attribute("config", "gated", static_cast<std::int64_t>(c.gated));
  f.write_attribute("config", "normalize_topk", static_cast<std::int64_t>(c.normalize_topk));
  f.write_attribute("config", "model", info.model);
  f.write_attribute("config", "scale", info.scale);
  TESSEL_REQUIRE(static_cast<std::int64_t>(tokens.extent(1)) == c.hidden, "MoeFile::write: tokens have ",
                 tokens.extent(1), " columns, N=", c.hidden);
  f.write("tokens", tokens);
  if (gate.weight.data()) {
    f.write("gate/weight", gate.weight);
    if (gate.bias.data())
      f.write("gate/bias", gate.bias);
  } else {
    f.write("gate/logits", gate.logits);
  }
  auto const n = static_cast<std::size_t>(c.hidden), k = static_cast<std::size_t>(c.ffn), k0 = (c.gated ? 2 : 1) * k;
  for (int e = 0; e < c.experts; ++e) {
    f.write(expert_path(e, "w0"), &weights.w0(e, 0, 0), {n, k0});
    f.write(expert_path(e, "w1"), &weights.w1(e, 0, 0), {k, n});
  }
  f.close();
}

} // namespace tessel::moe

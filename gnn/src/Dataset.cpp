#include <tessel/core/H5File.hpp>
#include <tessel/core/Memory.hpp>
#include <tessel/gnn/Dataset.hpp>

#include "impl/HostCsr.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

namespace tessel::gnn {

namespace {

constexpr char const *schema_name = "tessel.gnn.graph";
/// Bounds of the file's declared sizes (far above any real data set; what they allocate is checked against memory).
constexpr std::int64_t max_classes = std::int64_t{1} << 20;
constexpr std::int64_t max_feature_width = std::int64_t{1} << 31;
constexpr int schema_version = 1;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Reads an integer index dataset (int32 or int64 in the file) as int64.
std::vector<std::int64_t> read_index(h5::File const &file, std::string const &name) {
  return file.read<std::int64_t>(name).data;
}

} // namespace

void validate(Dataset const &d) {
  std::string const &name = d.name;
  validate(d.graph);
  TESSEL_REQUIRE(d.graph.num_rows() == d.graph.num_cols(), "dataset '", name, "': adjacency is ", d.graph.num_rows(),
                 " x ", d.graph.num_cols(), ", not square");
  auto const n = static_cast<std::size_t>(d.graph.num_rows());
  if (d.features.extent(1) > 0) {
    TESSEL_REQUIRE(d.features.extent(0) == n, "dataset '", name, "': features has ", d.features.extent(0),
                   " rows but the graph has ", n, " nodes");
    std::size_t const bad = first_non_finite(d.features.data(), d.features.size());
    if (bad != d.features.size())
      TESSEL_THROW("dataset '", name, "': features[", bad / d.features.extent(1), ", ", bad % d.features.extent(1),
                   "] = ", d.features.data()[bad], " is not finite");
  }
  if (!d.labels.empty()) {
    TESSEL_REQUIRE(d.labels.size() == n, "dataset '", name, "': labels has ", d.labels.size(),
                   " entries but the graph has ", n, " nodes");
    TESSEL_REQUIRE(d.num_classes >= 1, "dataset '", name, "': num_classes = ", d.num_classes, " with labels present");
    for (std::size_t i = 0; i < n; ++i)
      TESSEL_REQUIRE(d.labels[i] >= -1 && d.labels[i] < d.num_classes, "dataset '", name, "': labels[", i,
                     "] = ", d.labels[i], " is out of range [-1, ", d.num_classes, ") (-1 = unlabelled)");
  }
  char const *mask_names[] = {"train", "val", "test"};
  std::vector<std::uint8_t> const *masks[] = {&d.train_mask, &d.val_mask, &d.test_mask};
  for (int m = 0; m < 3; ++m) {
    auto const &mask = *masks[m];
    if (mask.empty())
      continue;
    TESSEL_REQUIRE(mask.size() == n, "dataset '", name, "': masks/", mask_names[m], " has ", mask.size(),
                   " entries but the graph has ", n, " nodes");
    TESSEL_REQUIRE(!d.labels.empty(), "dataset '", name, "': masks/", mask_names[m], " without labels");
    for (std::size_t i = 0; i < n; ++i) {
      TESSEL_REQUIRE(mask[i] <= 1, "dataset '", name, "': masks/", mask_names[m], "[", i, "] = ", int(mask[i]),
                     ", expected 0 or 1");
      TESSEL_REQUIRE(mask[i] == 0 || d.labels[i] >= 0, "dataset '", name, "': node ", i, " is in masks/", mask_names[m],
                     " but has no label (-1)");
    }
  }
}

namespace {
/// The root attributes: schema, version, name, source, classes, directedness.
void read_header(h5::File const &file, std::string const &path, Dataset &d) {
  TESSEL_REQUIRE(file.has_attribute("/", "schema"), "root attribute 'schema' is missing (expected '", schema_name,
                 "')");
  auto const schema = file.read_string_attribute("/", "schema");
  TESSEL_REQUIRE(schema == schema_name, "root attribute schema = '", schema, "', expected '", schema_name, "'");
  auto const version = file.read_attribute<int>("/", "schema_version");
  TESSEL_REQUIRE(version == schema_version, "schema_version = ", version, ", this Tessel reads version ",
                 schema_version);
  d.name = file.has_attribute("/", "name") ? file.read_string_attribute("/", "name") : "";
  if (d.name.empty()) // errors name the data set: a nameless one by its file
    d.name = path;
  d.source = file.has_attribute("/", "source") ? file.read_string_attribute("/", "source") : "";
  auto const classes =
      file.has_attribute("/", "num_classes") ? file.read_attribute<std::int64_t>("/", "num_classes") : 0;
  TESSEL_REQUIRE(classes >= 0 && classes <= max_classes, "root attribute num_classes = ", classes,
                 ", expected an integer in [0, ", max_classes, "]");
  d.num_classes = static_cast<int>(classes);
  // 0/1 flags: any other value is a damaged or foreign file, not a yes.
  auto const flag = [&](char const *name) {
    if (!file.has_attribute("/", name))
      return false;
    auto const v = file.read_attribute<std::int64_t>("/", name);
    TESSEL_REQUIRE(v == 0 || v == 1, "root attribute ", name, " = ", v, ", expected 0 or 1");
    return v == 1;
  };
  d.directed = flag("directed");
  d.features_random = flag("features_random");
}

/// The graph (CSR), checked before anything indexes with it; returns the number of nodes.
std::int64_t read_graph(h5::File const &file, Dataset &d) {
  auto const indptr = read_index(file, "graph/indptr");
  auto const indices = read_index(file, "graph/indices");
  TESSEL_REQUIRE(!indptr.empty(), "dataset '", d.name, "': graph/indptr is empty (expected num_nodes + 1 entries)");
  std::int64_t const n = file.has_attribute("/graph", "num_nodes")
                             ? file.read_attribute<std::int64_t>("/graph", "num_nodes")
                             : static_cast<std::int64_t>(indptr.size()) - 1;
  TESSEL_REQUIRE(n >= 0 && n < std::numeric_limits<std::int32_t>::max(), "dataset '", d.name, "': num_nodes = ", n,
                 " does not fit 32-bit indices");
  TESSEL_REQUIRE(static_cast<std::int64_t>(indptr.size()) == n + 1, "dataset '", d.name, "': graph/indptr has ",
                 indptr.size(), " entries, expected num_nodes + 1 = ", n + 1);
  std::vector<std::int32_t> cols(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] < 0 || indices[k] >= n) {
      auto const row =
          std::upper_bound(indptr.begin(), indptr.end(), static_cast<std::int64_t>(k)) - indptr.begin() - 1;
      TESSEL_THROW("dataset '", d.name, "': graph/indices[", k, "] = ", indices[k], " (row ", row,
                   ") is out of range [0, ", n, ")");
    }
    cols[k] = static_cast<std::int32_t>(indices[k]);
  }
  Impl::HostCsr<std::int32_t> csr;
  csr.row_map.assign(indptr.begin(), indptr.end());
  csr.entries = std::move(cols);
  if (file.has("graph/values"))
    csr.values = file.read<float>("graph/values", {indices.size()}).data;
  // Sizes first, so that a short indptr or indices is reported before anything indexes with them.
  d.graph = Graph<std::int32_t>(d.name, static_cast<std::int32_t>(n), static_cast<std::int32_t>(n), {}, {}, {});
  {
    for (std::size_t i = 0; i + 1 < csr.row_map.size(); ++i)
      TESSEL_REQUIRE(csr.row_map[i + 1] >= csr.row_map[i], "dataset '", d.name,
                     "': graph/indptr is not monotone at row ", i, ": indptr[", i, "] = ", csr.row_map[i], " > indptr[",
                     i + 1, "] = ", csr.row_map[i + 1]);
    TESSEL_REQUIRE(csr.row_map.front() == 0, "dataset '", d.name, "': graph/indptr[0] = ", csr.row_map.front(),
                   ", expected 0");
    TESSEL_REQUIRE(csr.row_map.back() == static_cast<std::int64_t>(csr.entries.size()), "dataset '", d.name,
                   "': graph/indptr[", n, "] = ", csr.row_map.back(), " but graph/indices has ", csr.entries.size(),
                   " entries");
  }
  d.graph = Impl::to_graph(d.name, static_cast<std::int32_t>(n), static_cast<std::int32_t>(n), std::move(csr));
  return n;
}

/// The features, dense or CSR (none: zero columns).
void read_features(h5::File const &file, Dataset &d, std::int64_t n) {
  auto const un = static_cast<std::size_t>(n);
  if (file.has("features/dense")) {
    auto const shape = file.shape("features/dense");
    TESSEL_REQUIRE(shape.size() == 2, "dataset '", d.name, "': features/dense has rank ", shape.size(),
                   ", expected 2 (num_nodes x num_features)");
    TESSEL_REQUIRE(shape[0] == un, "dataset '", d.name, "': features/dense has ", shape[0], " rows but the graph has ",
                   n, " nodes");
    d.features = Matrix<Kokkos::HostSpace>("Tessel::gnn::Dataset::features", shape[0], shape[1]);
    file.read("features/dense", d.features);
  } else if (file.has("features/indptr")) {
    auto const fptr = read_index(file, "features/indptr");
    auto const fidx = read_index(file, "features/indices");
    auto const fval = file.read<float>("features/data", {fidx.size()}).data;
    auto const width = file.read_attribute<std::int64_t>("/features", "num_features");
    TESSEL_REQUIRE(width >= 0 && width <= max_feature_width, "dataset '", d.name,
                   "': attribute /features num_features = ", width, ", expected an integer in [0, ", max_feature_width,
                   "]");
    tessel::require_memory("dataset '" + d.name + "': its dense features (" + std::to_string(n) + " x " +
                               std::to_string(width) + " floats, from the sparse form in the file)",
                           4.0 * static_cast<double>(n) * static_cast<double>(width), tessel::SizeSource::input);
    TESSEL_REQUIRE(fptr.size() == un + 1, "dataset '", d.name, "': features/indptr has ", fptr.size(),
                   " entries; feature rows (", fptr.size() == 0 ? 0 : fptr.size() - 1, ") != nodes (", n, ")");
    TESSEL_REQUIRE(fptr.front() == 0 && fptr.back() == static_cast<std::int64_t>(fidx.size()), "dataset '", d.name,
                   "': features/indptr must run from 0 to the ", fidx.size(), " entries of features/indices");
    d.features = Matrix<Kokkos::HostSpace>("Tessel::gnn::Dataset::features", un, static_cast<std::size_t>(width));
    for (std::size_t i = 0; i < un; ++i) {
      TESSEL_REQUIRE(fptr[i + 1] >= fptr[i], "dataset '", d.name, "': features/indptr is not monotone at row ", i);
      for (auto k = fptr[i]; k < fptr[i + 1]; ++k) {
        auto const c = fidx[static_cast<std::size_t>(k)];
        TESSEL_REQUIRE(c >= 0 && c < width, "dataset '", d.name, "': features/indices[", k, "] = ", c, " (row ", i,
                       ") is out of range [0, ", width, ")");
        d.features(i, static_cast<std::size_t>(c)) += fval[static_cast<std::size_t>(k)];
      }
    }
  } else {
    d.features = Matrix<Kokkos::HostSpace>("Tessel::gnn::Dataset::features", un, 0);
  }
}

/// The labels and the train / val / test masks.
void read_labels(h5::File const &file, Dataset &d, std::int64_t n) {
  auto const un = static_cast<std::size_t>(n);
  if (file.has("labels")) {
    auto const labels = file.read<std::int64_t>("labels").data;
    TESSEL_REQUIRE(labels.size() == un, "dataset '", d.name, "': labels has ", labels.size(),
                   " entries but the graph has ", n, " nodes");
    d.labels.resize(un);
    for (std::size_t i = 0; i < un; ++i) {
      TESSEL_REQUIRE(labels[i] >= -1 && labels[i] < d.num_classes, "dataset '", d.name, "': labels[", i,
                     "] = ", labels[i], " is out of range [-1, ", d.num_classes, ") (num_classes = ", d.num_classes,
                     ")");
      d.labels[i] = static_cast<std::int32_t>(labels[i]);
    }
  }
  char const *mask_names[] = {"train", "val", "test"};
  std::vector<std::uint8_t> *masks[] = {&d.train_mask, &d.val_mask, &d.test_mask};
  for (int m = 0; m < 3; ++m) {
    std::string const ds = std::string("masks/") + mask_names[m];
    if (file.has(ds)) {
      auto const v = file.read<std::int64_t>(ds).data;
      masks[m]->assign(v.size(), 0);
      for (std::size_t i = 0; i < v.size(); ++i) {
        TESSEL_REQUIRE(v[i] == 0 || v[i] == 1, "dataset '", d.name, "': ", ds, "[", i, "] = ", v[i],
                       ", expected 0 or 1");
        (*masks[m])[i] = static_cast<std::uint8_t>(v[i]);
      }
    }
  }
}
} // namespace

Dataset make_dataset(std::string name, Graph<std::int32_t> graph, Matrix<Kokkos::HostSpace> features,
                     std::vector<std::int32_t> labels, int num_classes) {
  TESSEL_REQUIRE(num_classes >= 0, "make_dataset '", name, "': num_classes = ", num_classes, " is negative");
  Dataset d;
  d.name = std::move(name);
  d.source = "in memory";
  d.graph = std::move(graph);
  d.graph.set_name(d.name);
  d.features =
      features.extent(0) == 0 && features.extent(1) == 0
          ? Matrix<Kokkos::HostSpace>("Tessel::gnn::Dataset::features", static_cast<std::size_t>(d.num_nodes()), 0)
          : features;
  d.labels = std::move(labels);
  d.num_classes = num_classes;
  if (num_classes == 0 && !d.labels.empty())
    d.num_classes = 1 + *std::max_element(d.labels.begin(), d.labels.end());
  d.directed = !is_symmetric(d.graph);
  validate(d);
  return d;
}

Dataset load_dataset(std::string const &path) {
  h5::File file(path, h5::Mode::read);
  Dataset d;
  try {
    read_header(file, path, d);
    std::int64_t const n = read_graph(file, d);
    read_features(file, d, n);
    read_labels(file, d, n);
    validate(d);
  } catch (Exception const &e) {
    throw Exception("file '" + path + "': " + e.what());
  }
  return d;
}

void save_dataset(std::string const &path, Dataset const &d) {
  validate(d);
  h5::File file(path, h5::Mode::truncate);
  file.write_attribute("/", "schema", schema_name);
  file.write_attribute("/", "schema_version", schema_version);
  file.write_attribute("/", "name", d.name);
  file.write_attribute("/", "source", d.source);
  file.write_attribute("/", "num_classes", d.num_classes);
  file.write_attribute("/", "directed", d.directed ? 1 : 0);
  file.write_attribute("/", "features_random", d.features_random ? 1 : 0);
  file.write("graph/indptr", d.graph.row_map());
  file.write("graph/indices", d.graph.entries());
  bool all_ones = true;
  for (std::size_t k = 0; k < d.graph.values().extent(0); ++k)
    all_ones = all_ones && d.graph.values()(k) == 1.0f;
  if (!all_ones)
    file.write("graph/values", d.graph.values());
  file.write_attribute("/graph", "num_nodes", static_cast<std::int64_t>(d.graph.num_rows()));
  if (d.features.extent(1) > 0)
    file.write("features/dense", d.features);
  if (!d.labels.empty())
    file.write("labels", d.labels);
  if (!d.train_mask.empty())
    file.write("masks/train", d.train_mask);
  if (!d.val_mask.empty())
    file.write("masks/val", d.val_mask);
  if (!d.test_mask.empty())
    file.write("masks/test", d.test_mask);
  file.close();
}

namespace {
/// Word-wise multiply-rotate hash (8 bytes per step; a tail byte-wise), for digests of large arrays.
std::uint64_t hash_words(std::uint64_t h, void const *data, std::size_t bytes) {
  auto const *p = static_cast<unsigned char const *>(data);
  std::size_t k = 0;
  for (; k + 8 <= bytes; k += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + k, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  }
  for (; k < bytes; ++k)
    h = (h ^ p[k]) * 0x100000001b3ULL;
  return splitmix64(h ^ bytes);
}
} // namespace

std::uint64_t content_digest(Dataset const &d) {
  std::uint64_t h = 0x6a09e667f3bcc908ULL;
  std::int64_t const shape[4] = {d.graph.num_rows(), d.graph.nnz(), static_cast<std::int64_t>(d.features.extent(1)),
                                 d.num_classes};
  h = hash_words(h, shape, sizeof(shape));
  h = hash_words(h, d.graph.row_map().data(), d.graph.row_map().size() * sizeof(offset_type));
  h = hash_words(h, d.graph.entries().data(), d.graph.entries().size() * sizeof(std::int32_t));
  h = hash_words(h, d.graph.values().data(), d.graph.values().size() * sizeof(float));
  h = hash_words(h, d.features.data(), d.features.size() * sizeof(float));
  return hash_words(h, d.labels.data(), d.labels.size() * sizeof(std::int32_t));
}

void normalize_rows(Matrix<Kokkos::HostSpace> const &x) {
  for (std::size_t i = 0; i < x.extent(0); ++i) {
    double sum = 0;
    for (std::size_t j = 0; j < x.extent(1); ++j)
      sum += x(i, j);
    if (sum != 0)
      for (std::size_t j = 0; j < x.extent(1); ++j)
        x(i, j) = static_cast<float>(x(i, j) / sum);
  }
}

Matrix<Kokkos::HostSpace> random_features(std::int64_t num_nodes, int width, std::uint64_t seed) {
  Matrix<Kokkos::HostSpace> x(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::random_features"),
                              static_cast<std::size_t>(num_nodes), static_cast<std::size_t>(width));
  for (std::size_t k = 0; k < x.size(); ++k)
    x.data()[k] = static_cast<float>(splitmix64(seed * 0x100000001b3ULL + k) >> 40) / static_cast<float>(1 << 24);
  return x;
}

void make_split(Dataset &d, int per_class, std::int64_t val, std::int64_t test, std::uint64_t seed) {
  auto const n = static_cast<std::size_t>(d.num_nodes());
  TESSEL_REQUIRE(d.labels.size() == n, "make_split: dataset '", d.name, "' has no labels");
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  d.train_mask.assign(n, 0);
  d.val_mask.assign(n, 0);
  d.test_mask.assign(n, 0);
  std::vector<int> taken(static_cast<std::size_t>(std::max(d.num_classes, 1)), 0);
  std::vector<std::size_t> rest;
  for (auto i : order) {
    if (d.labels[i] < 0)
      continue;
    if (taken[static_cast<std::size_t>(d.labels[i])] < per_class) {
      ++taken[static_cast<std::size_t>(d.labels[i])];
      d.train_mask[i] = 1;
    } else {
      rest.push_back(i);
    }
  }
  std::size_t k = 0;
  for (; k < rest.size() && static_cast<std::int64_t>(k) < val; ++k)
    d.val_mask[rest[k]] = 1;
  for (std::int64_t t = 0; k < rest.size() && t < test; ++k, ++t)
    d.test_mask[rest[k]] = 1;
}

} // namespace tessel::gnn

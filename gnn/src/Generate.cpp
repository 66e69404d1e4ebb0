#include <tessel/gnn/Dataset.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

namespace tessel::gnn {

namespace {

/// Community boundaries: sizes uniform in [size/2, 3 size/2].
std::vector<std::int64_t> community_starts(SbmOptions const &o, std::mt19937_64 &rng) {
  std::vector<std::int64_t> start{0};
  std::uniform_int_distribution<std::int64_t> size_dist(std::max<std::int64_t>(1, o.community_size / 2),
                                                        std::max<std::int64_t>(1, 3 * o.community_size / 2));
  while (start.back() < o.nodes)
    start.push_back(std::min(o.nodes, start.back() + size_dist(rng)));
  return start;
}

/// Intra edges: every pair (i < j) of each community with probability p_in, by geometric skips over the pair list.
void intra_edges(SbmOptions const &o, std::vector<std::int64_t> const &start, std::mt19937_64 &rng,
                 std::vector<std::pair<std::int32_t, std::int32_t>> &edges) {
  if (o.p_in <= 0)
    return;
  double const log_q = std::log1p(-std::min(o.p_in, 1.0 - 1e-12));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (std::size_t c = 0; c + 1 < start.size(); ++c) {
    std::int64_t const s = start[c + 1] - start[c];
    std::int64_t const pairs = s * (s - 1) / 2;
    auto row_start = [s](std::int64_t r) { return r * (2 * s - r - 1) / 2; };
    std::int64_t k = -1;
    while (true) {
      // The skip in double first: at a tiny p_in it exceeds any integer (and the pairs left).
      double const skip = o.p_in >= 1.0 ? 1.0 : 1.0 + std::floor(std::log(1.0 - u01(rng)) / log_q);
      if (!(skip < static_cast<double>(pairs - k)))
        break;
      k += static_cast<std::int64_t>(skip);
      if (k >= pairs)
        break;
      // Pair index k -> (i, j), i < j, in row-major order of the strict upper triangle.
      auto const i = static_cast<std::int64_t>(
          std::floor((2.0 * s - 1 - std::sqrt((2.0 * s - 1) * (2.0 * s - 1) - 8.0 * static_cast<double>(k))) / 2));
      std::int64_t ii = std::max<std::int64_t>(0, std::min(i, s - 2));
      while (ii > 0 && row_start(ii) > k)
        --ii;
      while (ii + 1 < s - 1 && row_start(ii + 1) <= k)
        ++ii;
      std::int64_t const j = ii + 1 + (k - row_start(ii));
      edges.emplace_back(static_cast<std::int32_t>(start[c] + ii), static_cast<std::int32_t>(start[c] + j));
    }
  }
}

/// Inter edges: uniform pairs in different communities, inter_degree per node on average.
void inter_edges(SbmOptions const &o, std::vector<std::int64_t> const &community, std::size_t communities,
                 std::mt19937_64 &rng, std::vector<std::pair<std::int32_t, std::int32_t>> &edges) {
  auto const inter = static_cast<std::int64_t>(std::llround(static_cast<double>(o.nodes) * o.inter_degree / 2));
  if (communities <= 1)
    return;
  std::uniform_int_distribution<std::int64_t> node(0, o.nodes - 1);
  for (std::int64_t e = 0; e < inter;) {
    auto const a = node(rng), b = node(rng);
    if (community[static_cast<std::size_t>(a)] == community[static_cast<std::size_t>(b)])
      continue;
    edges.emplace_back(static_cast<std::int32_t>(a), static_cast<std::int32_t>(b));
    ++e;
  }
}

/// Class centroids plus unit Gaussian noise, clipped at 0 so that the features are nonnegative like the
/// bag-of-words of citation graphs (row normalization assumes it): informative, but the graph still helps.
void sbm_features(SbmOptions const &o, std::mt19937_64 &rng, Dataset &d) {
  d.features = Matrix<Kokkos::HostSpace>("Tessel::gnn::Dataset::features", static_cast<std::size_t>(o.nodes),
                                         static_cast<std::size_t>(o.features));
  if (o.features == 0)
    return;
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> centroid(static_cast<std::size_t>(o.classes * o.features));
  for (auto &c : centroid)
    c = gauss(rng) * static_cast<float>(o.feature_signal);
  for (std::size_t v = 0; v < static_cast<std::size_t>(o.nodes); ++v)
    for (int j = 0; j < o.features; ++j)
      d.features(v, static_cast<std::size_t>(j)) =
          std::max(0.0f, centroid[static_cast<std::size_t>(d.labels[v] * o.features + j)] + gauss(rng));
}

} // namespace

Dataset generate_sbm(SbmOptions const &o) {
  TESSEL_REQUIRE(o.nodes >= 1 && o.nodes < (std::int64_t{1} << 31), "sbm: nodes = ", o.nodes, " must be in [1, 2^31)");
  TESSEL_REQUIRE(o.community_size >= 1, "sbm: community_size must be positive, got ", o.community_size);
  TESSEL_REQUIRE(o.p_in >= 0 && o.p_in <= 1, "sbm: p_in = ", o.p_in, " is not a probability");
  TESSEL_REQUIRE(o.inter_degree >= 0, "sbm: inter_degree must be >= 0, got ", o.inter_degree);
  TESSEL_REQUIRE(o.classes >= 1 && o.features >= 0, "sbm: classes = ", o.classes, ", features = ", o.features);
  std::mt19937_64 rng(o.seed);
  auto const start = community_starts(o, rng);
  std::size_t const communities = start.size() - 1;
  std::vector<std::int64_t> community(static_cast<std::size_t>(o.nodes));
  for (std::size_t c = 0; c < communities; ++c)
    for (auto v = start[c]; v < start[c + 1]; ++v)
      community[static_cast<std::size_t>(v)] = static_cast<std::int64_t>(c);
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  intra_edges(o, start, rng, edges);
  inter_edges(o, community, communities, rng, edges);
  // Random vertex ids hide the communities from the order.
  std::vector<std::int32_t> id(static_cast<std::size_t>(o.nodes));
  std::iota(id.begin(), id.end(), 0);
  if (o.shuffle)
    std::shuffle(id.begin(), id.end(), rng);
  for (auto &[a, b] : edges) {
    a = id[static_cast<std::size_t>(a)];
    b = id[static_cast<std::size_t>(b)];
  }
  std::ostringstream name;
  name << "sbm-n" << o.nodes << "-c" << o.community_size << "-p" << o.p_in << "-d" << o.inter_degree;
  Dataset d;
  d.name = name.str();
  std::ostringstream source;
  source << "tessel generate_sbm(nodes=" << o.nodes << ", community_size=" << o.community_size << ", p_in=" << o.p_in
         << ", inter_degree=" << o.inter_degree << ", classes=" << o.classes << ", features=" << o.features
         << ", shuffle=" << o.shuffle << ", seed=" << o.seed << ")";
  d.source = source.str();
  d.graph = graph_from_edges<std::int32_t>(d.name, static_cast<std::int32_t>(o.nodes), edges,
                                           EdgeListOptions{true, true, true});
  d.num_classes = o.classes;
  d.labels.resize(static_cast<std::size_t>(o.nodes));
  for (std::size_t v = 0; v < community.size(); ++v)
    d.labels[static_cast<std::size_t>(id[v])] = static_cast<std::int32_t>(community[v] % o.classes);
  sbm_features(o, rng, d);
  make_split(d, 20, 500, 1000, o.seed + 1);
  validate(d);
  return d;
}

Dataset generate_rmat(RmatOptions const &o) {
  TESSEL_REQUIRE(o.scale >= 1 && o.scale <= 30, "rmat: scale = ", o.scale, " must be in [1, 30]");
  TESSEL_REQUIRE(o.a >= 0 && o.b >= 0 && o.c >= 0 && o.a + o.b + o.c <= 1, "rmat: a, b, c = ", o.a, ", ", o.b, ", ",
                 o.c, " must be probabilities with a + b + c <= 1");
  TESSEL_REQUIRE(o.edge_factor > 0 && o.classes >= 1 && o.features >= 0, "rmat: edge_factor = ", o.edge_factor,
                 ", classes = ", o.classes, ", features = ", o.features);
  std::int64_t const n = std::int64_t{1} << o.scale;
  auto const m = static_cast<std::int64_t>(o.edge_factor * static_cast<double>(n));
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<std::pair<std::int32_t, std::int32_t>> edges;
  edges.reserve(static_cast<std::size_t>(m));
  for (std::int64_t e = 0; e < m; ++e) {
    std::int64_t r = 0, c = 0;
    for (int level = 0; level < o.scale; ++level) {
      double const x = u01(rng);
      int const quadrant = x < o.a ? 0 : x < o.a + o.b ? 1 : x < o.a + o.b + o.c ? 2 : 3;
      r = 2 * r + (quadrant >= 2);
      c = 2 * c + (quadrant % 2);
    }
    edges.emplace_back(static_cast<std::int32_t>(r), static_cast<std::int32_t>(c));
  }
  // R-MAT concentrates edges on low ids; a random relabelling removes that accidental locality.
  std::vector<std::int32_t> id(static_cast<std::size_t>(n));
  std::iota(id.begin(), id.end(), 0);
  std::shuffle(id.begin(), id.end(), rng);
  for (auto &[a, b] : edges) {
    a = id[static_cast<std::size_t>(a)];
    b = id[static_cast<std::size_t>(b)];
  }
  Dataset d;
  std::ostringstream name;
  name << "rmat-s" << o.scale << "-e" << o.edge_factor;
  d.name = name.str();
  std::ostringstream source;
  source << "tessel generate_rmat(scale=" << o.scale << ", edge_factor=" << o.edge_factor << ", a=" << o.a
         << ", b=" << o.b << ", c=" << o.c << ", seed=" << o.seed << "); labels and features random";
  d.source = source.str();
  d.graph =
      graph_from_edges<std::int32_t>(d.name, static_cast<std::int32_t>(n), edges, EdgeListOptions{true, true, true});
  d.num_classes = o.classes;
  d.labels.resize(static_cast<std::size_t>(n));
  std::uniform_int_distribution<int> label(0, o.classes - 1);
  for (auto &l : d.labels)
    l = label(rng);
  d.features = o.features > 0
                   ? random_features(n, o.features, o.seed)
                   : Matrix<Kokkos::HostSpace>("Tessel::gnn::Dataset::features", static_cast<std::size_t>(n), 0);
  d.features_random = true;
  make_split(d, 20, 500, 1000, o.seed + 1);
  validate(d);
  return d;
}

} // namespace tessel::gnn

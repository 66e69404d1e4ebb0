#include <tessel/core/Execution.hpp>
#include <tessel/core/H5File.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "impl/AdaptiveDriver.hpp"
#include "impl/Builders.hpp"
#include "impl/HostCsr.hpp"
#include "impl/Kernels.hpp"
#include "impl/KkSpmv.hpp"
#include "impl/MatrixRef.hpp"
#include "impl/Selection.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <sstream>

namespace tessel::gnn {

char const *name_of(SpmmAlgorithm algorithm) {
  switch (algorithm) {
  case SpmmAlgorithm::csr:
    return "csr";
  case SpmmAlgorithm::csr_feature_tiled:
    return "csr_feature_tiled";
  case SpmmAlgorithm::coo:
    return "coo";
  case SpmmAlgorithm::coo_atomic:
    return "coo_atomic";
  case SpmmAlgorithm::tiles:
    return "tiles";
  case SpmmAlgorithm::dense:
    return "dense";
  case SpmmAlgorithm::kk:
    return "kk";
  case SpmmAlgorithm::cusparse:
    return "cusparse";
  case SpmmAlgorithm::adaptive:
    return "adaptive";
  }
  return "?";
}

SpmmAlgorithm parse_spmm_algorithm(std::string const &text) {
  for (auto a : {SpmmAlgorithm::csr, SpmmAlgorithm::csr_feature_tiled, SpmmAlgorithm::coo, SpmmAlgorithm::coo_atomic,
                 SpmmAlgorithm::tiles, SpmmAlgorithm::dense, SpmmAlgorithm::kk, SpmmAlgorithm::cusparse,
                 SpmmAlgorithm::adaptive})
    if (text == name_of(a))
      return a;
  TESSEL_THROW("unknown kernel '", text,
               "' (expected csr, csr_feature_tiled, coo, coo_atomic, tiles, dense, kk, cusparse or adaptive)");
}

char const *name_of(BlockKernel kernel) {
  switch (kernel) {
  case BlockKernel::csr:
    return "csr";
  case BlockKernel::tiles:
    return "tiles";
  case BlockKernel::dense:
    return "dense";
  }
  return "?";
}

double CostModel::seconds(BlockKernel kernel, double elements, int features) const {
  double const rate = kernel == BlockKernel::csr     ? csr_gflops
                      : kernel == BlockKernel::tiles ? tiles_gflops
                                                     : dense_gflops;
  return 2.0 * elements * features / (rate * 1e9);
}

namespace Impl {

/// Host vectors that views of the handle point into: where the handle's memory space is the host's, the built
/// structures are used in place (no second allocation and copy, which cost as much as building them).
using HostStorage = std::vector<std::shared_ptr<void>>;

namespace {
template <class T, class M> Kokkos::View<T *, M> to_device(std::string const &label, std::vector<T> const &v) {
  Kokkos::View<T *, M> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), v.size());
  auto h = Kokkos::create_mirror_view(d);
  std::copy(v.begin(), v.end(), h.data());
  Kokkos::deep_copy(d, h);
  return d;
}

template <class T, class M>
Kokkos::View<T *, M> to_device(std::string const &label, std::vector<T> &&v, HostStorage &keep) {
  if constexpr (std::is_same_v<M, Kokkos::HostSpace>) {
    auto held = std::make_shared<std::vector<T>>(std::move(v));
    keep.push_back(held);
    return Kokkos::View<T *, M>(held->data(), held->size());
  } else {
    (void)keep;
    return to_device<T, M>(label, v);
  }
}
} // namespace

/// A CSR over all rows (row_ids empty) or over a list of rows (compressed).
template <class Index, class M> struct CsrPiece {
  Kokkos::View<offset_type *, M> row_map;
  Kokkos::View<Index *, M> entries;
  Kokkos::View<float *, M> values;
  Kokkos::View<Index *, M> row_ids;
  std::int64_t nnz = 0;
};

template <class Index, class M> struct DenseBlock {
  std::int64_t row0, rows, col0, cols;
  Matrix<M> values;
};

template <class Index, class M> CsrPiece<Index, M> to_memory(HostCsrPiece<Index> &&h, HostStorage &keep) {
  CsrPiece<Index, M> piece;
  piece.nnz = h.nnz;
  piece.row_map = to_device<offset_type, M>("Tessel::gnn::Spmm::row_map", std::move(h.row_map), keep);
  piece.entries = to_device<Index, M>("Tessel::gnn::Spmm::entries", std::move(h.entries), keep);
  piece.values = to_device<float, M>("Tessel::gnn::Spmm::values", std::move(h.values), keep);
  piece.row_ids = to_device<Index, M>("Tessel::gnn::Spmm::row_ids", std::move(h.row_ids), keep);
  return piece;
}

template <class Index, class M> TileSet<Index, M> to_memory(HostTileSet<Index> &&h, HostStorage &keep) {
  TileSet<Index, M> t;
  t.row0 = to_device<std::int64_t, M>("Tessel::gnn::Spmm::tile_row0", std::move(h.row0), keep);
  t.nrows = to_device<int, M>("Tessel::gnn::Spmm::tile_nrows", std::move(h.nrows), keep);
  t.tile_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::tile_begin", std::move(h.tile_begin), keep);
  t.tile_col = to_device<Index, M>("Tessel::gnn::Spmm::tile_col", std::move(h.tile_col), keep);
  t.tile_val = to_device<float, M>("Tessel::gnn::Spmm::tile_val", std::move(h.tile_val), keep);
  return t;
}

template <class Index, class M>
std::vector<DenseBlock<Index, M>> to_memory(std::vector<HostDenseBlock> &&h, HostStorage &keep) {
  std::vector<DenseBlock<Index, M>> out;
  for (auto &b : h) {
    DenseBlock<Index, M> d{b.row0, b.rows, b.col0, b.cols, {}};
    auto const rows = static_cast<std::size_t>(b.rows), cols = static_cast<std::size_t>(b.cols);
    if constexpr (std::is_same_v<M, Kokkos::HostSpace>) {
      auto held = std::make_shared<std::vector<float>>(std::move(b.values));
      keep.push_back(held);
      d.values = Matrix<M>(held->data(), rows, cols);
    } else {
      d.values =
          Matrix<M>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "Tessel::gnn::Spmm::dense_block"), rows, cols);
      auto hv = Kokkos::create_mirror_view(d.values);
      std::copy(b.values.begin(), b.values.end(), hv.data());
      Kokkos::deep_copy(d.values, hv);
    }
    out.push_back(d);
  }
  return out;
}

/// The reordering probe on the host handle's execution space.
template <class Index, class ExecSpace> class HostCsrProbe final : public CsrProbe<Index> {
public:
  using M = typename ExecSpace::memory_space;
  explicit HostCsrProbe(ExecSpace const &space) : _space(space) {}
  void prepare(Graph<Index> const &original, Graph<Index> const &reordered) override {
    _graphs[0] = original.to(_space);
    _graphs[1] = reordered.to(_space);
  }
  double seconds(int which, int f, int kernel) override {
    auto const rows = static_cast<std::size_t>(_graphs[0].num_rows());
    if (_x.extent(1) != static_cast<std::size_t>(f)) {
      _x = Matrix<M>(Kokkos::view_alloc(_space, "Tessel::gnn::Spmm::probe_x"), rows, static_cast<std::size_t>(f));
      _y = Matrix<M>(Kokkos::view_alloc(_space, "Tessel::gnn::Spmm::probe_y"), rows, static_cast<std::size_t>(f));
      Kokkos::deep_copy(_space, _x, 1.0f);
    }
    auto const &a = _graphs[which];
    Timer<ExecSpace> timer(_space, "Tessel::gnn::Spmm::probe");
    if (kernel == 1)
      spmm_csr_feature_tiled<ExecSpace, Index, M>(_space, a.row_map(), a.entries(), a.values(), _x, _y, false);
    else
      spmm_csr<ExecSpace, Index, M>(_space, a.row_map(), a.entries(), a.values(), {}, _x, _y, false);
    return timer.seconds();
  }

private:
  ExecSpace _space;
  Graph<Index, M> _graphs[2];
  Matrix<M> _x, _y;
};

/// The structure of a final plan: the CSR remainder (all rows), then the tile sets and the dense blocks of the
/// classes that run those kernels (the classes' own structures, shared with tuning).
template <class Index, class M> struct HostFinal {
  CsrPiece<Index, M> rest;
  std::vector<TileSet<Index, M>> tiles;
  std::vector<DenseBlock<Index, M>> dense;
};

/// What the host executor keeps per feature width.
template <class Index, class M> struct HostWidth : HostFinal<Index, M> {
  bool rest_feature_tiled = false;
  std::vector<std::chrono::steady_clock::time_point> stamps;
};

/// The host handle: the whole-graph algorithms, and the executor of the adaptive driver on a host execution space.
template <class Index, class ExecSpace> struct SpmmState {
  using M = typename ExecSpace::memory_space;
  using HostGraph = Graph<Index>;
  using Final = HostFinal<Index, M>;
  using Driver = AdaptiveDriver<Index, HostWidth<Index, M>>;
  using Width = typename Driver::Width;

  // The executor's interface (AdaptiveDriver.hpp).
  using instance_type = ExecSpace;
  using input_type = ConstMatrix<M>;
  using output_type = Matrix<M>;
  static constexpr bool synchronous_timing = true;
  static constexpr bool warm_up = false;
  static constexpr bool time_frozen = true;
  static constexpr bool time_single_variant = false;

  SpmmState(ExecSpace const &s, HostGraph const &g, SpmmOptions const &o)
      : space(s), options(o), name(g.name()), rows(g.num_rows()), cols(g.num_cols()), nnz(g.nnz()),
        driver(g, o, "host") {
    validate(g);
  }
  /// The instance given at construction: preprocessing, probing and the structures of plan() run on it.
  ExecSpace space;

  SpmmOptions options;
  std::string name;
  Index rows = 0, cols = 0;
  offset_type nnz = 0;

  // Whole-graph algorithms (original order).
  Graph<Index, M> graph;
  CooChunks<Index, M> coo;
  TileSet<Index, M> tiles;
  Matrix<M> dense;

  // Adaptive.
  Driver driver;
  bool structures_ready = false;
  CsrPiece<Index, M> tuning_rest; // entries of single-candidate classes, all rows
  CsrPiece<Index, M> all_csr;     // the whole reordered graph (the final check's reference)
  bool all_csr_ready = false;
  std::vector<CsrPiece<Index, M>> class_csr;
  std::vector<TileSet<Index, M>> class_tiles;
  std::vector<std::vector<DenseBlock<Index, M>>> class_dense;
  std::vector<char> class_tiles_ready, class_dense_ready;
  HostStorage storage; // host vectors behind the views above (host memory space only)
  /// Final structures already built, by class choice: widths that choose alike share one.
  std::vector<std::pair<std::vector<BlockKernel>, Final>> finals;

  Width &width(int f) { return driver.width(*this, f, &space); }

  // ---------------------------------------------------------------------------------------------------------
  // Setup

  void setup_fixed(HostGraph const &g) {
    graph = g.to(space);
    switch (options.algorithm) {
    case SpmmAlgorithm::coo:
    case SpmmAlgorithm::coo_atomic:
      setup_coo(g);
      break;
    case SpmmAlgorithm::tiles:
      tiles = to_memory<Index, M>(
          make_tiles(g, nullptr, {0, static_cast<std::int64_t>(rows)}, /*keep_empty_windows=*/true), storage);
      break;
    case SpmmAlgorithm::dense: {
      require_dense_fits(name, rows, cols, options.dense_max_bytes);
      dense = Matrix<M>(Kokkos::view_alloc(space, "Tessel::gnn::Spmm::dense"), rows, cols);
      auto h = Kokkos::create_mirror_view(dense);
      Kokkos::deep_copy(space, h, 0.0f);
      space.fence();
      for (Index i = 0; i < rows; ++i)
        for (offset_type k = g.row_map()(i); k < g.row_map()(i + 1); ++k)
          h(i, g.entries()(k)) += g.values()(k);
      Kokkos::deep_copy(space, dense, h);
      break;
    }
    case SpmmAlgorithm::cusparse:
      TESSEL_THROW("SpmmHandle: the cusparse algorithm runs on the device handle tessel::gnn::cuda::SpmmHandle "
                   "(tessel/gnn/cuda/Spmm.hpp), not on the host");
    default:
      break;
    }
  }

  void setup_coo(HostGraph const &g) {
    std::vector<Index> const edge_rows = entry_rows(g);
    coo.rows = to_device<Index, M>("Tessel::gnn::Spmm::coo_rows", edge_rows);
    TESSEL_REQUIRE(options.coo_chunk >= 1, "coo: chunk size must be positive, got ", options.coo_chunk);
    std::vector<std::int64_t> edge_begin, own_begin, carry_row;
    std::int64_t const chunks = std::max<std::int64_t>(1, (nnz + options.coo_chunk - 1) / options.coo_chunk);
    for (std::int64_t c = 0; c <= chunks; ++c)
      edge_begin.push_back(std::min<std::int64_t>(nnz, c * options.coo_chunk));
    // Chunk c owns the rows whose first edge lies in it (empty rows: whose offset lies in it; the last chunk also
    // owns the trailing empty rows).
    Index r = 0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      own_begin.push_back(r);
      while (r < rows && (g.row_map()(r) < edge_begin[c + 1] || c + 1 == chunks))
        ++r;
      std::int64_t const e0 = edge_begin[c];
      std::int64_t carry = -1;
      if (e0 < edge_begin[c + 1] && edge_rows[static_cast<std::size_t>(e0)] < own_begin[c])
        carry = edge_rows[static_cast<std::size_t>(e0)];
      carry_row.push_back(carry);
    }
    own_begin.push_back(rows);
    coo.edge_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::coo_edge_begin", edge_begin);
    coo.own_begin = to_device<std::int64_t, M>("Tessel::gnn::Spmm::coo_own_begin", own_begin);
    coo.carry_row = to_device<std::int64_t, M>("Tessel::gnn::Spmm::coo_carry_row", carry_row);
  }

  void setup_adaptive(HostGraph const &g, Partition const *given) {
    HostCsrProbe<Index, ExecSpace> probe(space);
    driver.decompose(g, given, &probe);
    auto const classes = static_cast<std::size_t>(driver.decomposition().num_classes);
    class_csr.assign(classes, {});
    class_tiles.assign(classes, {});
    class_dense.assign(classes, {});
    class_tiles_ready.assign(classes, 0);
    class_dense_ready.assign(classes, 0);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Structures of the adaptive executor

  void build_tuning(ExecSpace const &) {
    if (structures_ready)
      return;
    auto const &d = driver.decomposition();
    // One pass over the entries for every CSR piece (group 0: the classes without a choice, all rows; then one
    // compressed piece per class timed apart), one for every tile set.
    std::vector<int> csr_group(static_cast<std::size_t>(d.num_classes), -1), tile_group = csr_group;
    std::vector<char> compressed{0};
    int tile_groups = 0;
    for (int c = 0; c < d.num_classes; ++c) {
      auto const cc = static_cast<std::size_t>(c);
      if (!d.separate(c)) {
        csr_group[cc] = 0;
        continue;
      }
      for (auto kernel : d.candidates[cc]) {
        if (kernel == BlockKernel::csr) {
          csr_group[cc] = static_cast<int>(compressed.size());
          compressed.push_back(1);
        } else if (kernel == BlockKernel::tiles && !class_tiles_ready[cc]) {
          tile_group[cc] = tile_groups++;
        }
      }
    }
    auto pieces = csr_groups(d, csr_group, compressed);
    auto tile_sets = tiles_groups(d, tile_group, tile_groups);
    tuning_rest = to_memory<Index, M>(std::move(pieces[0]), storage);
    for (int c = 0; c < d.num_classes; ++c) {
      if (!d.separate(c))
        continue;
      auto const cc = static_cast<std::size_t>(c);
      if (csr_group[cc] > 0)
        class_csr[cc] = to_memory<Index, M>(std::move(pieces[static_cast<std::size_t>(csr_group[cc])]), storage);
      if (tile_group[cc] >= 0) {
        class_tiles[cc] = to_memory<Index, M>(std::move(tile_sets[static_cast<std::size_t>(tile_group[cc])]), storage);
        class_tiles_ready[cc] = 1;
      }
      auto const &cand = d.candidates[cc];
      if (std::find(cand.begin(), cand.end(), BlockKernel::dense) != cand.end())
        ensure_class(c, BlockKernel::dense);
    }
    structures_ready = true;
  }

  /// The tile set or the dense blocks of class \p c, built once (for tuning, or for a plan decided without it).
  void ensure_class(int c, BlockKernel kernel) {
    auto const &d = driver.decomposition();
    auto const cc = static_cast<std::size_t>(c);
    if (kernel == BlockKernel::tiles && !class_tiles_ready[cc]) {
      std::vector<int> group(static_cast<std::size_t>(d.num_classes), -1);
      group[cc] = 0;
      class_tiles[cc] = to_memory<Index, M>(std::move(tiles_groups(d, group, 1)[0]), storage);
      class_tiles_ready[cc] = 1;
    } else if (kernel == BlockKernel::dense && !class_dense_ready[cc]) {
      class_dense[cc] = to_memory<Index, M>(dense_blocks(d, d.class_blocks(c)), storage);
      class_dense_ready[cc] = 1;
    }
  }

  void build_final(ExecSpace const &in, Width &w) {
    auto const &d = driver.decomposition();
    auto const &choice = w.sel.choice;
    if (!driver.selector().mixed(w.sel)) { // csr everywhere: the whole reordered graph as it is
      build_all_csr(in);
      static_cast<Final &>(w) = Final{all_csr, {}, {}};
      return;
    }
    for (auto const &[c, f] : finals)
      if (c == choice) {
        static_cast<Final &>(w) = f;
        return;
      }
    // Only the remainder is new: one CSR over all rows with the entries of every csr class.
    std::vector<int> csr_group(static_cast<std::size_t>(d.num_classes), -1);
    Final f;
    for (int c = 0; c < d.num_classes; ++c) {
      auto const k = choice[static_cast<std::size_t>(c)];
      if (k == BlockKernel::csr) {
        csr_group[static_cast<std::size_t>(c)] = 0;
      } else if (d.classes[static_cast<std::size_t>(c)].nnz > 0) {
        ensure_class(c, k);
        if (k == BlockKernel::tiles)
          f.tiles.push_back(class_tiles[static_cast<std::size_t>(c)]);
        else
          for (auto const &block : class_dense[static_cast<std::size_t>(c)])
            f.dense.push_back(block);
      }
    }
    f.rest = to_memory<Index, M>(std::move(csr_groups(d, csr_group, {0})[0]), storage);
    finals.emplace_back(choice, f);
    static_cast<Final &>(w) = f;
  }

  void build_all_csr(ExecSpace const &in) {
    if (all_csr_ready)
      return;
    // The reordered graph itself (no copy where the handle's memory space is the host's).
    auto const g = driver.decomposition().permuted.to(in);
    all_csr.row_map = g.row_map();
    all_csr.entries = g.entries();
    all_csr.values = g.values();
    all_csr.nnz = g.nnz();
    all_csr_ready = true;
  }

  /// The feature-tiled remainder is a variant only where it differs from row-parallel CSR (F > its slice width).
  std::vector<std::string> final_variants(Width const &w, bool with_all_csr) const {
    bool const tiled = w.sel.plan.features > feature_tile_width;
    std::vector<std::string> names;
    if (with_all_csr) {
      names.push_back("all_csr");
      if (tiled)
        names.push_back("all_csr+feature_tiled");
    }
    names.push_back("plan");
    if (tiled)
      names.push_back("plan+feature_tiled_rest");
    return names;
  }

  /// The remainder kernel of the decided plan, and the structures of an all-csr winner.
  void frozen(Width &w) {
    auto const &winner = w.sel.winner;
    w.rest_feature_tiled = winner.find("feature_tiled") != std::string::npos;
    w.sel.plan.rest_kernel = w.rest_feature_tiled ? SpmmAlgorithm::csr_feature_tiled : SpmmAlgorithm::csr;
    if (winner.rfind("all_csr", 0) == 0)
      static_cast<Final &>(w) = Final{all_csr, {}, {}};
  }

  // ---------------------------------------------------------------------------------------------------------
  // Execution

  void run_csr(ExecSpace const &in, CsrPiece<Index, M> const &piece, ConstMatrix<M> const &x, Matrix<M> const &y,
               bool accumulate, bool feature_tiled) const {
    if (feature_tiled)
      spmm_csr_feature_tiled<ExecSpace, Index, M>(in, piece.row_map, piece.entries, piece.values, x, y, accumulate);
    else
      spmm_csr<ExecSpace, Index, M>(in, piece.row_map, piece.entries, piece.values, piece.row_ids, x, y, accumulate);
  }

  void run_dense(ExecSpace const &in, std::vector<DenseBlock<Index, M>> const &list, ConstMatrix<M> const &x,
                 Matrix<M> const &y) const {
    for (auto const &d : list) {
      auto xs = Kokkos::subview(x, std::make_pair(d.col0, d.col0 + d.cols), Kokkos::ALL());
      auto ys = Kokkos::subview(y, std::make_pair(d.row0, d.row0 + d.rows), Kokkos::ALL());
      tessel::gemm(in, Op::none, Op::none, 1.0f, matrix_ref(ConstMatrix<M>(d.values)), matrix_ref(ConstMatrix<M>(xs)),
                   1.0f, matrix_ref(Matrix<M>(ys)));
    }
  }

  void run_rest(ExecSpace const &in, ConstMatrix<M> const &x, Matrix<M> const &y) const {
    run_csr(in, tuning_rest, x, y, /*accumulate=*/false, false);
  }

  void run_class(ExecSpace const &in, int c, BlockKernel kernel, ConstMatrix<M> const &x, Matrix<M> const &y) const {
    auto const cc = static_cast<std::size_t>(c);
    if (kernel == BlockKernel::csr)
      run_csr(in, class_csr[cc], x, y, /*accumulate=*/true, false);
    else if (kernel == BlockKernel::tiles)
      spmm_tiles<ExecSpace, Index, M>(in, class_tiles[cc], x, y, /*accumulate=*/true);
    else
      run_dense(in, class_dense[cc], x, y);
  }

  void run_final(ExecSpace const &in, Final const &w, ConstMatrix<M> const &x, Matrix<M> const &y,
                 bool feature_tiled) const {
    run_csr(in, w.rest, x, y, /*accumulate=*/false, feature_tiled);
    for (auto const &t : w.tiles)
      spmm_tiles<ExecSpace, Index, M>(in, t, x, y, /*accumulate=*/true);
    run_dense(in, w.dense, x, y);
  }

  void run_variant(ExecSpace const &in, Width const &w, std::string const &variant, ConstMatrix<M> const &x,
                   Matrix<M> const &y) const {
    bool const tiled = variant.find("feature_tiled") != std::string::npos;
    if (variant.rfind("all_csr", 0) == 0)
      run_csr(in, all_csr, x, y, /*accumulate=*/false, tiled);
    else
      run_final(in, w, x, y, tiled);
  }

  void run_frozen(ExecSpace const &in, Width const &w, ConstMatrix<M> const &x, Matrix<M> const &y) const {
    run_final(in, w, x, y, w.rest_feature_tiled);
  }

  // Timing marks: the work so far has completed (fence), then the clock.
  std::size_t stamp(ExecSpace const &in, Width &w) const {
    compat::fence(in, "Tessel::gnn::Spmm::tuning");
    w.stamps.push_back(std::chrono::steady_clock::now());
    return w.stamps.size() - 1;
  }
  double seconds(Width const &w, std::size_t a, std::size_t b) const {
    return std::chrono::duration<double>(w.stamps[b] - w.stamps[a]).count();
  }
  void wait(Width const &, std::size_t) const {}
  void reset(Width &w) const { w.stamps.clear(); }

  // ---------------------------------------------------------------------------------------------------------

  void apply(ExecSpace const &in, ConstMatrix<M> const &x, Matrix<M> const &y) {
    TESSEL_REQUIRE(x.extent(0) == static_cast<std::size_t>(cols) && y.extent(0) == static_cast<std::size_t>(rows) &&
                       x.extent(1) == y.extent(1),
                   "SpmmHandle::apply on graph '", name, "' (", rows, " x ", cols, "): X is ", x.extent(0), " x ",
                   x.extent(1), ", Y is ", y.extent(0), " x ", y.extent(1));
    int const f = static_cast<int>(x.extent(1));
    if (f == 0 || rows == 0)
      return;
    if (options.algorithm == SpmmAlgorithm::adaptive) {
      driver.apply(*this, in, x, y, f);
      return;
    }
    width(f); // records the (fixed) plan of this width for plans()
    apply_fixed(in, x, y);
  }

  void apply_fixed(ExecSpace const &in, ConstMatrix<M> const &x, Matrix<M> const &y) {
    switch (options.algorithm) {
    case SpmmAlgorithm::csr:
      spmm_csr<ExecSpace, Index, M>(in, graph.row_map(), graph.entries(), graph.values(), {}, x, y, false);
      return;
    case SpmmAlgorithm::csr_feature_tiled:
      spmm_csr_feature_tiled<ExecSpace, Index, M>(in, graph.row_map(), graph.entries(), graph.values(), x, y, false);
      return;
    case SpmmAlgorithm::coo:
      if (coo.carry.extent(1) != x.extent(1))
        coo.carry = decltype(coo.carry)(Kokkos::view_alloc(in, "Tessel::gnn::Spmm::coo_carry"),
                                        coo.edge_begin.extent(0) - 1, x.extent(1));
      if (nnz == 0) {
        Kokkos::deep_copy(in, y, 0.0f);
        return;
      }
      spmm_coo<ExecSpace, Index, M>(in, coo, graph.entries(), graph.values(), x, y, false);
      return;
    case SpmmAlgorithm::coo_atomic:
      spmm_coo_atomic<ExecSpace, Index, M>(in, coo.rows, graph.entries(), graph.values(), x, y, false);
      return;
    case SpmmAlgorithm::tiles:
      spmm_tiles<ExecSpace, Index, M>(in, tiles, x, y, false);
      return;
    case SpmmAlgorithm::dense:
      tessel::gemm(in, Op::none, Op::none, 1.0f, matrix_ref(ConstMatrix<M>(dense)), matrix_ref(x), 0.0f, matrix_ref(y));
      return;
    case SpmmAlgorithm::kk:
      kk_spmv<Index, ExecSpace>(in, graph, x, y);
      return;
    case SpmmAlgorithm::cusparse: // refused at construction
    case SpmmAlgorithm::adaptive:
      return;
    }
  }
};

} // namespace Impl

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>(space, graph, options)) {
  if (options.algorithm == SpmmAlgorithm::adaptive)
    _state->setup_adaptive(graph, nullptr);
  else
    _state->setup_fixed(graph);
}

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
                                         Partition const &partition) {
  TESSEL_REQUIRE(options.algorithm == SpmmAlgorithm::adaptive,
                 "SpmmHandle: a given partition needs the adaptive algorithm, got ", name_of(options.algorithm));
  _state = std::make_unique<Impl::SpmmState<Index, ExecSpace>>(space, graph, options);
  _state->setup_adaptive(graph, &partition);
}

namespace {
SpmmOptions adaptive(SpmmOptions options) {
  options.algorithm = SpmmAlgorithm::adaptive;
  return options;
}
} // namespace

template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace>::SpmmHandle(ExecSpace const &space, Graph<Index> const &graph, SpmmOptions const &options,
                                         std::string const &plan_path)
    : _state(std::make_unique<Impl::SpmmState<Index, ExecSpace>>(space, graph, adaptive(options))) {
  auto &s = *_state;
  h5::File file(plan_path, h5::Mode::read);
  TESSEL_REQUIRE(file.has_attribute("/", "schema") &&
                     file.read_string_attribute("/", "schema") == "tessel.gnn.spmm_plan",
                 "plan file '", plan_path, "': root attribute schema is not 'tessel.gnn.spmm_plan'");
  auto const rows = file.read_attribute<std::int64_t>("/", "rows");
  auto const nnz = file.read_attribute<std::int64_t>("/", "nnz");
  TESSEL_REQUIRE(rows == static_cast<std::int64_t>(s.rows) && nnz == s.nnz, "plan file '", plan_path,
                 "' was saved for a graph with ", rows, " rows and ", nnz, " entries; graph '", s.name, "' has ",
                 s.rows, " rows and ", s.nnz, " entries");
  auto const bounds = file.read<double>("class_bounds").data;
  TESSEL_REQUIRE(bounds == options.class_bounds, "plan file '", plan_path,
                 "': its density class bounds differ from the handle's options");
  Partition partition;
  partition.method = parse_partition_method(file.read_string_attribute("/partition", "method"));
  partition.permutation =
      Permutation::from_order(file.read<std::int64_t>("partition/old_of_new", {static_cast<std::size_t>(rows)}).data);
  partition.part_offsets = file.read<std::int64_t>("partition/part_offsets").data;
  TESSEL_REQUIRE(partition.part_offsets.size() >= 2 && partition.part_offsets.front() == 0 &&
                     partition.part_offsets.back() == rows &&
                     std::is_sorted(partition.part_offsets.begin(), partition.part_offsets.end()),
                 "plan file '", plan_path, "': partition/part_offsets must rise from 0 to ", rows);
  partition.intra_fraction = file.read_attribute<double>("/partition", "intra_fraction");
  s.setup_adaptive(graph, &partition);
  auto const &d = s.driver.decomposition();
  auto const &selector = s.driver.selector();
  for (auto const &entry : file.list("plans")) {
    std::string const group = "plans/" + entry;
    int const f = file.read_attribute<int>(group, "features");
    auto const kernels = file.read<int>(group + "/class_kernel", {static_cast<std::size_t>(d.num_classes)}).data;
    auto &w = s.driver.widths[f];
    auto &sel = w.sel;
    sel.plan = selector.base_plan(f);
    sel.plan.timed = false;
    selector.predict(sel, f);
    for (int c = 0; c < d.num_classes; ++c) {
      int const k = kernels[static_cast<std::size_t>(c)];
      TESSEL_REQUIRE(k >= 0 && k < Impl::num_block_kernels, "plan file '", plan_path, "': ", group, "/class_kernel[", c,
                     "] = ", k, " is not a kernel id (0 csr, 1 tiles, 2 dense)");
      sel.choice[static_cast<std::size_t>(c)] = static_cast<BlockKernel>(k);
      sel.plan.classes[static_cast<std::size_t>(c)].kernel = static_cast<BlockKernel>(k);
      sel.plan.classes[static_cast<std::size_t>(c)].reason = "loaded from " + plan_path;
    }
    sel.plan.rest_kernel = parse_spmm_algorithm(file.read_string_attribute(group, "rest_kernel"));
    w.rest_feature_tiled = sel.plan.rest_kernel == SpmmAlgorithm::csr_feature_tiled;
    sel.plan.reason = "loaded from " + plan_path;
    sel.plan.frozen = true;
    sel.stage = 2;
    sel.winner = "plan";
  }
}

template <class Index, class ExecSpace> SpmmHandle<Index, ExecSpace>::~SpmmHandle() = default;
template <class Index, class ExecSpace> SpmmHandle<Index, ExecSpace>::SpmmHandle(SpmmHandle &&) noexcept = default;
template <class Index, class ExecSpace>
SpmmHandle<Index, ExecSpace> &SpmmHandle<Index, ExecSpace>::operator=(SpmmHandle &&) noexcept = default;

template <class Index, class ExecSpace>
void SpmmHandle<Index, ExecSpace>::apply(ExecSpace const &space, ConstMatrix<memory_space> const &x,
                                         Matrix<memory_space> const &y) {
  _state->apply(space, x, y);
}

template <class Index, class ExecSpace> SpmmAlgorithm SpmmHandle<Index, ExecSpace>::algorithm() const {
  return _state->options.algorithm;
}

template <class Index, class ExecSpace> Permutation const &SpmmHandle<Index, ExecSpace>::permutation() const {
  return _state->driver.partition().permutation;
}

template <class Index, class ExecSpace> Partition const &SpmmHandle<Index, ExecSpace>::partition() const {
  return _state->driver.partition();
}

template <class Index, class ExecSpace> bool SpmmHandle<Index, ExecSpace>::tuned(int features) const {
  return _state->driver.tuned(features);
}

template <class Index, class ExecSpace> SpmmPlan SpmmHandle<Index, ExecSpace>::plan(int features) const {
  return _state->width(features).sel.plan;
}

template <class Index, class ExecSpace> std::vector<SpmmPlan> SpmmHandle<Index, ExecSpace>::plans() const {
  return _state->driver.plans();
}

template <class Index, class ExecSpace> double SpmmHandle<Index, ExecSpace>::overhead_seconds() const {
  return _state->driver.overhead_seconds();
}

template <class Index, class ExecSpace> void SpmmHandle<Index, ExecSpace>::save_plans(std::string const &path) const {
  auto const &s = *_state;
  TESSEL_REQUIRE(s.options.algorithm == SpmmAlgorithm::adaptive, "save_plans: only adaptive handles have plans, this ",
                 "one runs ", name_of(s.options.algorithm));
  h5::File file(path, h5::Mode::truncate);
  file.write_attribute("/", "schema", "tessel.gnn.spmm_plan");
  file.write_attribute("/", "schema_version", 1);
  file.write_attribute("/", "graph", s.name);
  file.write_attribute("/", "rows", static_cast<std::int64_t>(s.rows));
  file.write_attribute("/", "nnz", static_cast<std::int64_t>(s.nnz));
  file.write("class_bounds", s.options.class_bounds);
  auto const &partition = s.driver.partition();
  file.write("partition/old_of_new", partition.permutation.old_of_new);
  file.write("partition/part_offsets", partition.part_offsets);
  file.write_attribute("/partition", "method", name_of(partition.method));
  file.write_attribute("/partition", "intra_fraction", partition.intra_fraction);
  file.create_group("plans");
  for (auto const &[f, w] : s.driver.widths) {
    if (w.sel.stage != 2)
      continue;
    std::string const group = "plans/F" + std::to_string(f);
    std::vector<int> kernels;
    for (auto k : w.sel.choice)
      kernels.push_back(static_cast<int>(k));
    file.write(group + "/class_kernel", kernels);
    file.write_attribute(group, "features", f);
    file.write_attribute(group, "rest_kernel", name_of(w.sel.plan.rest_kernel));
    file.write_attribute(group, "json", w.sel.plan.to_json());
  }
  file.close();
}

#define TESSEL_GNN_INSTANTIATE_SPMM(SPACE)                                                                             \
  template class SpmmHandle<std::int32_t, SPACE>;                                                                      \
  template class SpmmHandle<std::int64_t, SPACE>;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_SPMM)

} // namespace tessel::gnn

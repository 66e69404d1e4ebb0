#ifndef TESSEL_GNN_IMPL_HOSTSPMMSTATE_HPP
#define TESSEL_GNN_IMPL_HOSTSPMMSTATE_HPP

// The host SpmmHandle's state: the whole-graph algorithms, and the executor of the adaptive driver
// (AdaptiveDriver.hpp) on a host execution space.
#include <tessel/core/Execution.hpp>
#include <tessel/gnn/Spmm.hpp>

#include "AdaptiveDriver.hpp"
#include "Builders.hpp"
#include "HostCsr.hpp"
#include "HostPieces.hpp"
#include "Kernels.hpp"
#include "KkSpmv.hpp"
#include "MatrixRef.hpp"
#include "Selection.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tessel::gnn::Impl {

/// The reordering probe on the host handle's execution space.
template <class Index, class ExecSpace> class HostCsrProbe final : public CsrProbe<Index> {
public:
  using M = typename ExecSpace::memory_space;
  /// The probe times the kernels on memory like the handle's (huge pages or not), so that its decision holds there.
  HostCsrProbe(ExecSpace const &space, HugePages huge) : _space(space), _huge(huge) {}
  void prepare(Graph<Index> const &original, Graph<Index> const &reordered) override {
    _graphs[0] = graph_in(_space, original, _huge);
    _graphs[1] = graph_in(_space, reordered, _huge);
  }
  double seconds(int which, int f, int kernel) override {
    auto const rows = static_cast<std::size_t>(_graphs[0].num_rows());
    if (_x.extent(1) != static_cast<std::size_t>(f)) {
      _x = Matrix<M>();
      _y = Matrix<M>();
      _x = make_matrix(_space, "Tessel::gnn::Spmm::probe_x", rows, static_cast<std::size_t>(f), _huge);
      _y = make_matrix(_space, "Tessel::gnn::Spmm::probe_y", rows, static_cast<std::size_t>(f), _huge);
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
  HugePages _huge;
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
  HostFinal<Index, M> mixed; ///< the mixed plan's structure, kept when a whole-graph variant is frozen
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
    storage.huge = o.huge_pages;
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
  CsrPiece<Index, M> other_csr; // the same graph with its rows visited in the other candidate order
  bool other_csr_ready = false;
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
    graph = graph_in(space, g, options.huge_pages);
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
    HostCsrProbe<Index, ExecSpace> probe(space, options.huge_pages);
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
      w.mixed = w;
      return;
    }
    for (auto const &[c, f] : finals)
      if (c == choice) {
        static_cast<Final &>(w) = f;
        w.mixed = f;
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
    w.mixed = f;
  }

  /// The graph in the handle's order with its rows visited in the other candidate order (Decomposition::other_order):
  /// the single whole-graph kernel of that order on the handle's X and Y (every row written once).
  void build_other_order() {
    auto const &d = driver.decomposition();
    if (other_csr_ready || d.other_order.empty())
      return;
    auto const &g = d.permuted;
    HostCsrPiece<Index> h; // row_map starts at {0}
    for (auto const r : d.other_order) {
      for (offset_type k = g.row_map()(r); k < g.row_map()(r + 1); ++k) {
        h.entries.push_back(g.entries()(k));
        h.values.push_back(g.values()(k));
      }
      h.row_map.push_back(static_cast<offset_type>(h.entries.size()));
      h.row_ids.push_back(static_cast<Index>(r));
    }
    h.nnz = static_cast<std::int64_t>(h.entries.size());
    other_csr = to_memory<Index, M>(std::move(h), storage);
    other_csr_ready = true;
  }

  void build_all_csr(ExecSpace const &in) {
    if (all_csr_ready)
      return;
    // The reordered graph itself (no copy where the handle's memory space is the host's).
    auto const g = graph_in(in, driver.decomposition().permuted, options.huge_pages);
    all_csr.row_map = g.row_map();
    all_csr.entries = g.entries();
    all_csr.values = g.values();
    all_csr.nnz = g.nnz();
    all_csr_ready = true;
  }

  /// The feature-tiled remainder is a variant only where it differs from row-parallel CSR (F > its slice width).
  std::vector<WholeVariant> final_variants(Width const &w, bool with_all_csr) const {
    bool const tiled = w.sel.plan.features > feature_tile_width;
    std::vector<WholeVariant> variants;
    if (with_all_csr) {
      variants.push_back(WholeVariant::all_csr);
      if (tiled)
        variants.push_back(WholeVariant::all_csr_feature_tiled);
    }
    variants.push_back(WholeVariant::plan);
    if (tiled)
      variants.push_back(WholeVariant::plan_feature_tiled_rest);
    // The other order's single whole-graph kernel is always a candidate (the reordering probe's choice re-checked).
    if (!driver.decomposition().other_order.empty()) {
      const_cast<SpmmState *>(this)->build_other_order();
      variants.push_back(WholeVariant::other_order_csr);
    }
    return variants;
  }

  /// The remainder kernel of the decided plan, and the structures of an all-csr winner.
  void frozen(Width &w) {
    w.rest_feature_tiled = feature_tiled(w.sel.winner);
    w.sel.plan.rest_kernel = w.rest_feature_tiled ? SpmmAlgorithm::csr_feature_tiled : SpmmAlgorithm::csr;
    if (w.sel.winner == WholeVariant::other_order_csr)
      static_cast<Final &>(w) = Final{other_csr, {}, {}};
    else if (whole_graph_csr(w.sel.winner))
      static_cast<Final &>(w) = Final{all_csr, {}, {}};
    else if (w.built) // a re-check gave the win back to the mixed plan
      static_cast<Final &>(w) = w.mixed;
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

  void run_variant(ExecSpace const &in, Width const &w, WholeVariant variant, ConstMatrix<M> const &x,
                   Matrix<M> const &y) const {
    bool const tiled = feature_tiled(variant);
    if (variant == WholeVariant::other_order_csr)
      run_csr(in, other_csr, x, y, /*accumulate=*/false, false);
    else if (whole_graph_csr(variant))
      run_csr(in, all_csr, x, y, /*accumulate=*/false, tiled);
    else
      run_final(in, w.mixed, x, y, tiled);
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

} // namespace tessel::gnn::Impl

#endif

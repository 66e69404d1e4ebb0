#include <tessel/core/Error.hpp>
#include <tessel/gnn/DistSpmm.hpp>

#include "impl/DistSlices.hpp"
#include "impl/MatrixRef.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tessel::gnn {

char const *name_of(DistSchedule schedule) {
  return schedule == DistSchedule::overlapped ? "overlapped" : "sequential";
}

DistSchedule parse_dist_schedule(std::string const &text) {
  if (text == "overlapped")
    return DistSchedule::overlapped;
  if (text == "sequential")
    return DistSchedule::sequential;
  TESSEL_THROW("unknown distributed schedule '", text, "' (expected overlapped or sequential)");
}

using Impl::message_bounds;
using Impl::message_part;
using Impl::rows_slice;
using Impl::tile_slice;
using Impl::TilePart;

namespace {
/// Tag of the halo messages; MPI keeps the order of messages with one tag between two ranks, so consecutive applies
/// cannot mix.
constexpr int halo_tag = 0x6a10;

/// Most row tiles of the local block.
constexpr std::int64_t max_tiles = 8;

SpmmOptions csr_options() {
  SpmmOptions o;
  o.algorithm = SpmmAlgorithm::csr;
  return o;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace

template <class ExecSpace> struct DistSpmm<ExecSpace>::State {
  using M = memory_space;
  using Handle = SpmmHandle<std::int32_t, ExecSpace>;

  Communicator comm;
  DistGraph<std::int32_t> const &graph;
  /// The local block in row tiles (each its own handle), so that the pending messages can be progressed between
  /// them: a large message (rendezvous protocol) moves only while its ranks are inside MPI calls.
  /// An adaptive handle reorders within a square block: its tiles are the diagonal ones, and the entries outside
  /// them go to a csr handle per tile (rest) whose result is added with the halos'.
  std::vector<Handle> local, rest;
  std::vector<std::int64_t> tile_rows; // tile t is local rows [tile_rows[t], tile_rows[t + 1])
  Matrix<M> rest_y;
  /// Per DistGraph::halos() entry and message (empty where nothing is received): the part of the peer's block that
  /// reads the message's rows, over the rows with any halo entries (boundary), so that its result and the sum touch
  /// those rows only.
  std::vector<std::vector<Handle>> halo;
  std::vector<std::vector<std::int64_t>> send_bounds, recv_bounds; // per halo: message_bounds of its rows
  /// Per halo and message (peers with several messages): the rows of the peer's term that the message's part
  /// writes (numbered as the boundary rows).
  std::vector<std::vector<Kokkos::View<std::int32_t *, Kokkos::HostSpace>>> part_rows;
  std::size_t max_part_rows = 0;
  Matrix<M> message_y; // a message's part, before it is added to its peer's term
  int width = -1;
  DistSchedule schedule = DistSchedule::overlapped;
  std::set<int> checked; // widths whose agreement across ranks has been checked
  std::vector<Matrix<M>> send_buf, recv_buf, halo_y;
  DistSpmmTimings last;

  State(ExecSpace const &space, Communicator c, DistGraph<std::int32_t> const &g, SpmmOptions const &options)
      : comm(std::move(c)), graph(g) {
    TESSEL_REQUIRE(comm.rank() == g.rank() && comm.size() == g.size(), "DistSpmm: the communicator (rank ", comm.rank(),
                   " of ", comm.size(), ") is not the one graph '", g.name(), "' was built on (rank ", g.rank(), " of ",
                   g.size(), ")");
    if (g.local_rows() > 0) {
      auto o = options;
      // The local block keeps its order: X and Y are this rank's rows as DistGraph numbers them.
      if (o.algorithm == SpmmAlgorithm::adaptive)
        o.partition = PartitionMethod::none;
      auto const &a = g.local_block();
      auto const rows = static_cast<std::int64_t>(a.num_rows());
      // Up to 8 tiles of at least 64 rows.
      std::int64_t const tiles = std::clamp<std::int64_t>(rows / 64, 1, max_tiles);
      for (std::int64_t t = 0; t <= tiles; ++t)
        tile_rows.push_back(rows * t / tiles);
      bool const square = o.algorithm == SpmmAlgorithm::adaptive && tiles > 1;
      for (std::size_t t = 0; t < static_cast<std::size_t>(tiles); ++t) {
        auto const r0 = tile_rows[t], r1 = tile_rows[t + 1];
        if (!square) {
          local.emplace_back(space, tile_slice(a, r0, r1, TilePart::all), o);
          continue;
        }
        auto const inside = tile_slice(a, r0, r1, TilePart::inside);
        local.emplace_back(space, inside, inside.nnz() > 0 ? o : csr_options());
        rest.emplace_back(space, tile_slice(a, r0, r1, TilePart::outside), csr_options());
      }
    }
    auto const csr = csr_options();
    std::vector<char> has_halo(static_cast<std::size_t>(g.local_rows()), 0);
    for (auto const &h : g.halos())
      for (std::int64_t r = 0; r < static_cast<std::int64_t>(h.block.num_rows()); ++r)
        if (h.block.row_map()(r + 1) > h.block.row_map()(r))
          has_halo[static_cast<std::size_t>(r)] = 1;
    for (std::size_t r = 0; r < has_halo.size(); ++r)
      if (has_halo[r])
        boundary.push_back(static_cast<std::int32_t>(r));
    // A graph that partitions badly (R-MAT: most rows are someone's halo) would compute most of the product twice.
    std::vector<char> sent(has_halo.size(), 0);
    for (auto const &h : g.halos())
      for (auto const r : h.send_rows)
        sent[static_cast<std::size_t>(r)] = 1;
    auto const rows = static_cast<std::size_t>(g.local_rows());
    split_product = 4 * static_cast<std::size_t>(std::count(sent.begin(), sent.end(), 1)) <= rows;
    split_reduce = 4 * boundary.size() <= rows;
    for (auto const &h : g.halos()) {
      halo.emplace_back();
      part_rows.emplace_back();
      send_bounds.push_back(message_bounds(h.send_rows.size()));
      recv_bounds.push_back(message_bounds(h.recv_rows.size()));
      if (g.local_rows() == 0 || h.recv_rows.empty())
        continue;
      auto const block = rows_slice(h.block, boundary);
      auto const &b = recv_bounds.back();
      if (b.size() == 2) { // one message: the whole block writes the peer's term
        halo.back().emplace_back(space, block, csr);
        continue;
      }
      std::vector<std::int32_t> rows_of_part;
      for (std::size_t j = 0; j + 1 < b.size(); ++j) {
        halo.back().emplace_back(space, message_part(block, b[j], b[j + 1], rows_of_part), csr);
        Kokkos::View<std::int32_t *, Kokkos::HostSpace> v("Tessel::gnn::DistSpmm::part_rows", rows_of_part.size());
        std::copy(rows_of_part.begin(), rows_of_part.end(), v.data());
        part_rows.back().push_back(v);
        max_part_rows = std::max(max_part_rows, rows_of_part.size());
      }
    }
  }

  std::vector<Matrix<M>> gather_buf;  // apply_product: the peers' rows of x, per halo
  std::vector<std::int32_t> boundary; // local rows with halo entries, increasing
  // Whether apply_product computes the peers' rows apart (they are few: otherwise the product is computed once,
  // before the exchange) and whether apply_reduce adds the boundary rows apart (likewise).
  bool split_product = false, split_reduce = false;
  Matrix<M> boundary_bufs[2]; // apply_reduce: z and the halo terms on those rows

  Matrix<M> boundary_buf(int which, std::size_t rows, std::size_t cols) {
    auto &b = boundary_bufs[which];
    if (b.extent(0) != rows || b.extent(1) != cols)
      b = Matrix<M>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("Tessel::gnn::DistSpmm::boundary")),
                    rows, cols);
    return b;
  }

  /// A buffer for the rows of x (width \p cols) that halo \p k's peer needs.
  Matrix<M> gathered(std::size_t k, std::size_t cols) {
    gather_buf.resize(graph.halos().size());
    auto &b = gather_buf[k];
    auto const rows = graph.halos()[k].send_rows.size();
    if (b.extent(0) != rows || b.extent(1) != cols)
      b = Matrix<M>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("Tessel::gnn::DistSpmm::gathered")),
                    rows, cols);
    return b;
  }

  void resize(int f) {
    if (f == width)
      return;
    auto const uf = static_cast<std::size_t>(f);
    send_buf.clear();
    recv_buf.clear();
    halo_y.clear();
    auto const rows = static_cast<std::size_t>(graph.local_rows());
    rest_y = Matrix<M>(Kokkos::view_alloc(std::string("Tessel::gnn::DistSpmm::rest_y")), rest.empty() ? 0 : rows, uf);
    for (auto const &h : graph.halos()) {
      send_buf.emplace_back(Kokkos::view_alloc(std::string("Tessel::gnn::DistSpmm::send")), h.send_rows.size(), uf);
      recv_buf.emplace_back(Kokkos::view_alloc(std::string("Tessel::gnn::DistSpmm::recv")), h.recv_rows.size(), uf);
      halo_y.emplace_back(Kokkos::view_alloc(std::string("Tessel::gnn::DistSpmm::halo_y")),
                          h.recv_rows.empty() ? 0 : boundary.size(), uf);
    }
    message_y = Matrix<M>(Kokkos::view_alloc(std::string("Tessel::gnn::DistSpmm::message_y")), max_part_rows, uf);
    width = f;
  }
};

template <class ExecSpace>
DistSpmm<ExecSpace>::DistSpmm(ExecSpace const &space, Communicator comm, DistGraph<std::int32_t> const &graph,
                              SpmmOptions const &options)
    : _s(std::make_unique<State>(space, std::move(comm), graph, options)) {}

template <class ExecSpace> DistSpmm<ExecSpace>::~DistSpmm() = default;
template <class ExecSpace> DistSpmm<ExecSpace>::DistSpmm(DistSpmm &&) noexcept = default;
template <class ExecSpace> DistSpmm<ExecSpace> &DistSpmm<ExecSpace>::operator=(DistSpmm &&) noexcept = default;

/// apply_product's operands: t = x op(w).
template <class ExecSpace> struct DistSpmm<ExecSpace>::Product {
  ConstMatrix<memory_space> x, w;
  Op op_w;
  Matrix<memory_space> t;
};

template <class ExecSpace>
void DistSpmm<ExecSpace>::apply(ExecSpace const &space, ConstMatrix<memory_space> const &x,
                                Matrix<memory_space> const &y) {
  run(space, x, y, nullptr, nullptr);
}

/// apply_reduce's operands: g = z^T y.
template <class ExecSpace> struct DistSpmm<ExecSpace>::Reduction {
  ConstMatrix<memory_space> z;
  Matrix<memory_space> g;
};

template <class ExecSpace>
void DistSpmm<ExecSpace>::apply_reduce(ExecSpace const &space, ConstMatrix<memory_space> const &x,
                                       Matrix<memory_space> const &y, ConstMatrix<memory_space> const &z,
                                       Matrix<memory_space> const &g) {
  TESSEL_REQUIRE(z.extent(0) == y.extent(0) && g.extent(0) == z.extent(1) && g.extent(1) == y.extent(1),
                 "DistSpmm::apply_reduce on '", _s->graph.name(), "': y is ", y.extent(0), " x ", y.extent(1), ", z ",
                 z.extent(0), " x ", z.extent(1), " and g ", g.extent(0), " x ", g.extent(1));
  Reduction const reduction{z, g};
  run(space, x, y, nullptr, &reduction);
}

template <class ExecSpace>
void DistSpmm<ExecSpace>::apply_product(ExecSpace const &space, ConstMatrix<memory_space> const &x,
                                        ConstMatrix<memory_space> const &w, Op op_w, Matrix<memory_space> const &t,
                                        Matrix<memory_space> const &y) {
  auto const k = op_w == Op::none ? w.extent(0) : w.extent(1), f = op_w == Op::none ? w.extent(1) : w.extent(0);
  TESSEL_REQUIRE(x.extent(1) == k && t.extent(0) == x.extent(0) && t.extent(1) == f, "DistSpmm::apply_product on '",
                 _s->graph.name(), "': x is ", x.extent(0), " x ", x.extent(1), ", op(w) ", k, " x ", f, " and t ",
                 t.extent(0), " x ", t.extent(1));
  Product const product{x, w, op_w, t};
  run(space, t, y, &product, nullptr);
}

/// One apply, phase by phase: the receives are posted and the peers' rows packed and sent; the local block runs in
/// row tiles, between which the messages progress and the halos that have landed run; the rest land in arrival
/// order; the terms are summed in a fixed order. apply_product and apply_reduce add their dense product beside the
/// local block.
template <class ExecSpace> class DistSpmm<ExecSpace>::Apply {
public:
  using M = memory_space;
  using BoundaryRows = Kokkos::View<std::int32_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  Apply(State &s, ExecSpace const &space, ConstMatrix<M> const &x, Matrix<M> const &y, Product const *product,
        Reduction const *reduction)
      : s(s), g(s.graph), halos(g.halos()), space(space), x(x), y(y), product(product), reduction(reduction),
        rows(static_cast<std::size_t>(g.local_rows())), overlapped(s.schedule == DistSchedule::overlapped),
        split_product(product && s.split_product), split_reduce(reduction && overlapped && s.split_reduce) {}

  void run() {
    check_width();
    t0 = std::chrono::steady_clock::now();
    if (product && !split_product) // many of the rows go to peers: the whole product once, before the exchange
      compute_product();
    post_receives();
    pack_and_send();
    if (!overlapped) { // every halo row first: nothing (not even the rest of the product) overlaps the messages
      auto const w0 = std::chrono::steady_clock::now();
      Request::wait_all(recvs, s.comm.timeout());
      t.wait_seconds += since(w0);
    }
    if (split_product) { // the rest of the product (overlapped: while the peers' rows move)
      compute_product();
      for (auto &r : sends)
        r.test();
    }
    run_local();
    if (!overlapped)
      for (std::size_t m = 0; m < recvs.size(); ++m)
        run_halo(m);
    if (split_reduce)
      reduce_early();
    while (left > 0) { // the rest in arrival order
      auto const w0 = std::chrono::steady_clock::now();
      std::size_t const m = Request::wait_any(recvs, s.comm.timeout());
      t.wait_seconds += since(w0);
      run_halo(m);
    }
    sum_terms();
    if (reduction && !split_reduce) // the baseline (and a badly partitioned graph's way): one product after all
      reduce("Tessel::gnn::DistSpmm::reduce");
    auto const w1 = std::chrono::steady_clock::now();
    Request::wait_all(sends, s.comm.timeout());
    t.wait_seconds += since(w1);
    t.total_seconds = since(t0);
    s.last = t;
  }

private:
  /// A width that differs between ranks would post messages of different sizes: one clear error on every rank
  /// instead, checked collectively at the first apply of each width (later applies then need no collective, so a
  /// silent peer shows as a timeout of the messages from that peer, naming it).
  void check_width() {
    TESSEL_REQUIRE(x.extent(0) == rows && y.extent(0) == rows && x.extent(1) == y.extent(1), "DistSpmm on '", g.name(),
                   "', rank ", g.rank(), ": x is ", x.extent(0), " x ", x.extent(1), " and y ", y.extent(0), " x ",
                   y.extent(1), ", expected ", rows, " rows (this rank's) and equal widths");
    f = static_cast<int>(x.extent(1));
    uf = static_cast<std::size_t>(f);
    if (s.checked.insert(f).second)
      s.comm.require_same("DistSpmm on '" + g.name() + "': the feature width", static_cast<std::uint64_t>(f));
    s.resize(f);
  }

  void compute_product() {
    auto const p0 = std::chrono::steady_clock::now();
    tessel::gemm(space, Op::none, product->op_w, 1.0f, Impl::matrix_ref(product->x), Impl::matrix_ref(product->w), 0.0f,
                 Impl::matrix_ref(product->t));
    compat::fence(space, "Tessel::gnn::DistSpmm::product");
    t.product_seconds += since(p0);
  }

  /// One receive per message: msg_k[m], msg_j[m] are message m's peer (halo index) and number; first_msg[k] is
  /// peer k's first message.
  void post_receives() {
    for (std::size_t k = 0; k < halos.size(); ++k) {
      auto const &buf = s.recv_buf[k];
      auto const &b = s.recv_bounds[k];
      first_msg.push_back(recvs.size());
      for (std::size_t j = 0; j + 1 < b.size(); ++j) {
        auto const r0 = static_cast<std::size_t>(b[j]), r1 = static_cast<std::size_t>(b[j + 1]);
        recvs.push_back(s.comm.irecv(buf.data() + r0 * uf, (r1 - r0) * uf, DataType::float32, halos[k].peer, halo_tag));
        msg_k.push_back(k);
        msg_j.push_back(j);
      }
      t.bytes_received += static_cast<std::int64_t>(buf.size() * sizeof(float));
    }
    done.assign(recvs.size(), 0);
    next.assign(halos.size(), 0);
    left = recvs.size();
  }

  /// The rows each peer needs: of x, or (apply_product, split) of x op(w), computed here from the gathered rows of x.
  void pack_and_send() {
    for (std::size_t k = 0; k < halos.size(); ++k) {
      auto const &buf = s.send_buf[k];
      if (buf.size() == 0)
        continue;
      auto const p0 = std::chrono::steady_clock::now();
      Kokkos::View<std::int32_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> const idx(
          halos[k].send_rows.data(), halos[k].send_rows.size());
      auto const source = split_product ? product->x : x;
      auto const gathered = split_product ? s.gathered(k, source.extent(1)) : buf;
      Kokkos::parallel_for(
          "Tessel::gnn::DistSpmm::pack",
          Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(space, {0, 0}, {gathered.extent(0), gathered.extent(1)}),
          KOKKOS_LAMBDA(std::size_t r, std::size_t c) {
            gathered(r, c) = source(static_cast<std::size_t>(idx(r)), c);
          });
      if (split_product)
        tessel::gemm(space, Op::none, product->op_w, 1.0f, Impl::matrix_ref(ConstMatrix<M>(gathered)),
                     Impl::matrix_ref(product->w), 0.0f, Impl::matrix_ref(buf));
      compat::fence(space, "Tessel::gnn::DistSpmm::pack");
      t.pack_seconds += since(p0);
      auto const &b = s.send_bounds[k];
      for (std::size_t j = 0; j + 1 < b.size(); ++j) {
        auto const r0 = static_cast<std::size_t>(b[j]), r1 = static_cast<std::size_t>(b[j + 1]);
        sends.push_back(s.comm.isend(buf.data() + r0 * uf, (r1 - r0) * uf, DataType::float32, halos[k].peer, halo_tag));
      }
      t.bytes_sent += static_cast<std::int64_t>(buf.size() * sizeof(float));
    }
  }

  /// Message \p m has landed: a peer's halo block runs into its own buffer message by message, the part that reads
  /// message j once messages 0 .. j have landed, added to the peer's term in message order (a fixed order).
  void run_halo(std::size_t m) {
    done[m] = 1;
    --left;
    auto const k = msg_k[m];
    auto const h0 = std::chrono::steady_clock::now();
    while (next[k] < s.halo[k].size() && done[first_msg[k] + next[k]]) {
      auto const j = next[k]++;
      auto const &b = s.recv_bounds[k];
      auto const rows_of_msg = std::make_pair(static_cast<std::size_t>(b[j]), static_cast<std::size_t>(b[j + 1]));
      auto const xj = Kokkos::subview(s.recv_buf[k], rows_of_msg, Kokkos::ALL());
      if (s.part_rows[k].empty()) { // one message: its part is the whole block
        s.halo[k][j].apply(space, xj, s.halo_y[k]);
        continue;
      }
      auto const hy = s.halo_y[k];
      if (j == 0)
        Kokkos::deep_copy(space, hy, 0.0f);
      auto const into = s.part_rows[k][j];
      auto const my = Kokkos::subview(s.message_y, std::make_pair(std::size_t{0}, into.extent(0)), Kokkos::ALL());
      s.halo[k][j].apply(space, xj, my);
      Kokkos::parallel_for(
          "Tessel::gnn::DistSpmm::add_message", Kokkos::RangePolicy<ExecSpace>(space, 0, into.extent(0)),
          KOKKOS_LAMBDA(std::size_t i) {
            auto const r = static_cast<std::size_t>(into(i));
            for (std::size_t c = 0; c < hy.extent(1); ++c)
              hy(r, c) += my(i, c);
          });
    }
    compat::fence(space, "Tessel::gnn::DistSpmm::halo");
    t.halo_seconds += since(h0);
  }

  /// The pending messages progress, and the halos that have landed are computed (COMET's order: whatever is ready,
  /// as soon as it is).
  void progress() {
    for (auto &r : sends)
      r.test();
    for (std::size_t m = 0; m < recvs.size(); ++m)
      if (!done[m] && recvs[m].test())
        run_halo(m);
  }

  /// The local block, tile by tile, the messages progressing between tiles (overlapped schedule).
  void run_local() {
    for (std::size_t tile = 0; tile < s.local.size(); ++tile) {
      auto const l0 = std::chrono::steady_clock::now();
      auto const rows_of_tile =
          std::make_pair(static_cast<std::size_t>(s.tile_rows[tile]), static_cast<std::size_t>(s.tile_rows[tile + 1]));
      auto const y_tile = Kokkos::subview(y, rows_of_tile, Kokkos::ALL());
      if (s.rest.empty()) {
        s.local[tile].apply(space, x, y_tile);
      } else { // the diagonal tile reads its own rows of X; the rest of the row goes to rest_y
        s.local[tile].apply(space, Kokkos::subview(x, rows_of_tile, Kokkos::ALL()), y_tile);
        s.rest[tile].apply(space, x, Kokkos::subview(s.rest_y, rows_of_tile, Kokkos::ALL()));
      }
      compat::fence(space, "Tessel::gnn::DistSpmm::local");
      t.local_seconds += since(l0);
      if (overlapped)
        progress();
    }
  }

  /// The adaptive remainder, the first term of the fixed-order sum after the local block (once).
  void add_rest() {
    if (s.rest_y.extent(0) == 0 || rest_added)
      return;
    auto const rest = s.rest_y;
    auto const yy = y;
    auto const cols = uf;
    Kokkos::parallel_for(
        "Tessel::gnn::DistSpmm::sum_rest", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
        KOKKOS_LAMBDA(std::size_t r) {
          for (std::size_t c = 0; c < cols; ++c)
            yy(r, c) += rest(r, c);
        });
    rest_added = true;
  }

  /// g = z^T y (split: y's terms so far; the halo terms follow in reduce_boundary).
  void reduce(char const *label) {
    auto const p0 = std::chrono::steady_clock::now();
    tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(reduction->z),
                 Impl::matrix_ref(ConstMatrix<M>(y)), 0.0f, Impl::matrix_ref(reduction->g));
    compat::fence(space, label);
    t.product_seconds += since(p0);
  }

  /// g = z^T (local + rest) while the messages move: y's first terms of the fixed-order sum are final now.
  void reduce_early() {
    add_rest();
    reduce("Tessel::gnn::DistSpmm::reduce");
    progress();
  }

  /// g += z_B^T (the halo terms)_B over the rows B with halo entries (the others' halo terms are zero).
  void reduce_boundary(std::vector<Matrix<M>> const &parts, BoundaryRows const &boundary) {
    auto const p0 = std::chrono::steady_clock::now();
    auto const nb = s.boundary.size();
    auto const &z = reduction->z;
    auto const zb = s.boundary_buf(0, nb, z.extent(1)), db = s.boundary_buf(1, nb, uf);
    auto const cols = uf;
    Kokkos::parallel_for(
        "Tessel::gnn::DistSpmm::boundary", Kokkos::RangePolicy<ExecSpace>(space, 0, nb), KOKKOS_LAMBDA(std::size_t i) {
          auto const r = static_cast<std::size_t>(boundary(i));
          for (std::size_t c = 0; c < z.extent(1); ++c)
            zb(i, c) = z(r, c);
          for (std::size_t c = 0; c < cols; ++c) {
            float sum = 0;
            for (auto const &part : parts)
              sum += part(i, c);
            db(i, c) = sum;
          }
        });
    tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(ConstMatrix<M>(zb)),
                 Impl::matrix_ref(ConstMatrix<M>(db)), 1.0f, Impl::matrix_ref(reduction->g));
    compat::fence(space, "Tessel::gnn::DistSpmm::reduce_boundary");
    t.product_seconds += since(p0);
  }

  /// Fixed order: y = local (+ rest) + halo(peer 0) + halo(peer 1) + ..., whatever the arrival order: the adaptive
  /// remainder (every row) first, then the halo terms (the boundary rows, numbered in their order).
  void sum_terms() {
    auto const a0 = std::chrono::steady_clock::now();
    add_rest();
    std::vector<Matrix<M>> parts;
    for (std::size_t k = 0; k < halos.size(); ++k)
      if (s.halo_y[k].extent(0) > 0)
        parts.push_back(s.halo_y[k]);
    BoundaryRows const boundary(s.boundary.data(), s.boundary.size());
    if (split_reduce && !s.boundary.empty() && !parts.empty())
      reduce_boundary(parts, boundary);
    if (!parts.empty()) {
      auto const yy = y;
      auto const cols = uf;
      Kokkos::parallel_for(
          "Tessel::gnn::DistSpmm::sum", Kokkos::RangePolicy<ExecSpace>(space, 0, s.boundary.size()),
          KOKKOS_LAMBDA(std::size_t i) {
            auto const r = static_cast<std::size_t>(boundary(i));
            for (auto const &part : parts)
              for (std::size_t c = 0; c < cols; ++c)
                yy(r, c) += part(i, c);
          });
    }
    compat::fence(space, "Tessel::gnn::DistSpmm::sum");
    t.halo_seconds += since(a0);
  }

  State &s;
  DistGraph<std::int32_t> const &g;
  std::vector<typename DistGraph<std::int32_t>::Halo> const &halos;
  ExecSpace space;
  ConstMatrix<M> x;
  Matrix<M> y;
  Product const *product;
  Reduction const *reduction;
  std::size_t rows;
  bool overlapped, split_product, split_reduce;
  int f = 0;
  std::size_t uf = 0;
  DistSpmmTimings t;
  std::chrono::steady_clock::time_point t0;
  std::vector<Request> recvs, sends;
  std::vector<std::size_t> msg_k, msg_j, first_msg;
  std::vector<char> done;        // per message: its part has run
  std::vector<std::size_t> next; // per peer: the first message whose part has not run
  std::size_t left = 0;          // messages not yet run
  bool rest_added = false;
};

template <class ExecSpace>
void DistSpmm<ExecSpace>::run(ExecSpace const &space, ConstMatrix<memory_space> const &x, Matrix<memory_space> const &y,
                              Product const *product, Reduction const *reduction) {
  Apply(*_s, space, x, y, product, reduction).run();
}

template <class ExecSpace> DistSpmmTimings const &DistSpmm<ExecSpace>::last() const { return _s->last; }

template <class ExecSpace> void DistSpmm<ExecSpace>::set_schedule(DistSchedule schedule) { _s->schedule = schedule; }

template <class ExecSpace> DistSchedule DistSpmm<ExecSpace>::schedule() const { return _s->schedule; }

template <class ExecSpace> std::vector<SpmmPlan> DistSpmm<ExecSpace>::local_plans() const {
  std::vector<SpmmPlan> out;
  for (auto const &h : _s->local)
    for (auto const &p : h.plans())
      out.push_back(p);
  return out;
}

template <class ExecSpace> double DistSpmm<ExecSpace>::overhead_seconds() const {
  double seconds = 0;
  for (auto const &h : _s->local)
    seconds += h.overhead_seconds();
  return seconds;
}

#define TESSEL_GNN_INSTANTIATE_DISTSPMM(SPACE) template class DistSpmm<SPACE>;
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_GNN_INSTANTIATE_DISTSPMM)
#undef TESSEL_GNN_INSTANTIATE_DISTSPMM

} // namespace tessel::gnn

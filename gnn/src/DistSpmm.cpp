#include <tessel/core/Error.hpp>
#include <tessel/gnn/DistSpmm.hpp>

#include "impl/HostCsr.hpp"
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

namespace {
/// Tag of the halo messages; MPI keeps the order of messages with one tag between two ranks, so consecutive applies
/// cannot mix.
constexpr int halo_tag = 0x6a10;

/// Most row tiles of the local block.
constexpr std::int64_t max_tiles = 8;

/// A peer's rows go in messages of at least this many feature rows and at most max_messages of them (the last
/// shorter), and the part of its halo block that reads a message's rows runs as soon as that message (and the ones
/// before it) has landed.
constexpr std::int64_t message_rows = 1024;
constexpr std::int64_t max_messages = 8;

/// Which entries of a row tile a slice keeps.
enum class TilePart {
  all,    ///< every column, numbered as in the block
  inside, ///< columns [r0, r1), renumbered from 0: the square diagonal tile
  outside ///< the other columns, numbered as in the block
};

/// Rows [r0, r1) of \p a, with the entries \p part keeps.
Graph<std::int32_t> tile_slice(Graph<std::int32_t> const &a, std::int64_t r0, std::int64_t r1, TilePart part) {
  Impl::HostCsr<std::int32_t> csr;
  csr.row_map.push_back(0);
  for (std::int64_t r = r0; r < r1; ++r) {
    for (offset_type k = a.row_map()(r); k < a.row_map()(r + 1); ++k) {
      auto const c = static_cast<std::int64_t>(a.entries()(k));
      bool const in = c >= r0 && c < r1;
      if (part == TilePart::all || (part == TilePart::inside) == in) {
        csr.entries.push_back(static_cast<std::int32_t>(part == TilePart::inside ? c - r0 : c));
        csr.values.push_back(a.values()(k));
      }
    }
    csr.row_map.push_back(static_cast<offset_type>(csr.entries.size()));
  }
  auto const cols = part == TilePart::inside ? static_cast<std::int32_t>(r1 - r0) : a.num_cols();
  return Impl::to_graph(a.name(), static_cast<std::int32_t>(r1 - r0), cols, std::move(csr));
}

/// The rows \p rows (increasing) of \p a, renumbered 0, 1, ...: a halo block over the rows that have halo entries.
Graph<std::int32_t> rows_slice(Graph<std::int32_t> const &a, std::vector<std::int32_t> const &rows) {
  Impl::HostCsr<std::int32_t> csr;
  csr.row_map.push_back(0);
  for (auto const r : rows) {
    for (offset_type k = a.row_map()(r); k < a.row_map()(r + 1); ++k) {
      csr.entries.push_back(a.entries()(k));
      csr.values.push_back(a.values()(k));
    }
    csr.row_map.push_back(static_cast<offset_type>(csr.entries.size()));
  }
  return Impl::to_graph(a.name(), static_cast<std::int32_t>(rows.size()), a.num_cols(), std::move(csr));
}

/// The part of a halo block \p a that reads one message's rows (columns [c0, c1), renumbered from 0), over the rows
/// of \p a that have such entries only; \p rows receives their numbers in \p a.
Graph<std::int32_t> message_part(Graph<std::int32_t> const &a, std::int64_t c0, std::int64_t c1,
                                 std::vector<std::int32_t> &rows) {
  Impl::HostCsr<std::int32_t> csr;
  csr.row_map.push_back(0);
  rows.clear();
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(a.num_rows()); ++r) {
    auto const before = csr.entries.size();
    for (offset_type k = a.row_map()(r); k < a.row_map()(r + 1); ++k)
      if (a.entries()(k) >= c0 && a.entries()(k) < c1) {
        csr.entries.push_back(static_cast<std::int32_t>(a.entries()(k) - c0));
        csr.values.push_back(a.values()(k));
      }
    if (csr.entries.size() > before) {
      rows.push_back(static_cast<std::int32_t>(r));
      csr.row_map.push_back(static_cast<offset_type>(csr.entries.size()));
    }
  }
  return Impl::to_graph(a.name(), static_cast<std::int32_t>(rows.size()), static_cast<std::int32_t>(c1 - c0),
                        std::move(csr));
}

/// Message boundaries of \p rows feature rows (the same on both sides of a pair: they depend on the count only).
std::vector<std::int64_t> message_bounds(std::size_t rows) {
  auto const r = static_cast<std::int64_t>(rows);
  auto const per = std::max(message_rows, (r + max_messages - 1) / max_messages);
  std::vector<std::int64_t> b{0};
  while (b.back() < r)
    b.push_back(std::min(r, b.back() + per));
  return b;
}

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

template <class ExecSpace>
void DistSpmm<ExecSpace>::run(ExecSpace const &space, ConstMatrix<memory_space> const &x, Matrix<memory_space> const &y,
                              Product const *product, Reduction const *reduction) {
  auto &s = *_s;
  auto const &g = s.graph;
  auto const rows = static_cast<std::size_t>(g.local_rows());
  TESSEL_REQUIRE(x.extent(0) == rows && y.extent(0) == rows && x.extent(1) == y.extent(1), "DistSpmm on '", g.name(),
                 "', rank ", g.rank(), ": x is ", x.extent(0), " x ", x.extent(1), " and y ", y.extent(0), " x ",
                 y.extent(1), ", expected ", rows, " rows (this rank's) and equal widths");
  int const f = static_cast<int>(x.extent(1));
  // A width that differs between ranks would post messages of different sizes: one clear error on every rank
  // instead, checked collectively at the first apply of each width (later applies then need no collective, so a
  // silent peer shows as a timeout of the messages from that peer, naming it).
  if (s.checked.insert(f).second)
    s.comm.require_same("DistSpmm on '" + g.name() + "': the feature width", static_cast<std::uint64_t>(f));
  s.resize(f);
  DistSpmmTimings t;
  auto const t0 = std::chrono::steady_clock::now();
  auto const &halos = g.halos();
  std::vector<Request> recvs, sends;
  bool const split_product = product && s.split_product;
  auto const compute_product = [&] {
    auto const p0 = std::chrono::steady_clock::now();
    tessel::gemm(space, Op::none, product->op_w, 1.0f, Impl::matrix_ref(product->x), Impl::matrix_ref(product->w), 0.0f,
                 Impl::matrix_ref(product->t));
    compat::fence(space, "Tessel::gnn::DistSpmm::product");
    t.product_seconds += since(p0);
  };
  if (product && !split_product) // many of the rows go to peers: the whole product once, before the exchange
    compute_product();
  // One receive per message: msg_k[m], msg_j[m] are message m's peer (halo index) and number; first_msg[k] is
  // peer k's first message.
  std::vector<std::size_t> msg_k, msg_j, first_msg;
  auto const uf = static_cast<std::size_t>(f);
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
  for (std::size_t k = 0; k < halos.size(); ++k) {
    auto const &buf = s.send_buf[k];
    if (buf.size() == 0)
      continue;
    auto const p0 = std::chrono::steady_clock::now();
    Kokkos::View<std::int32_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> const idx(
        halos[k].send_rows.data(), halos[k].send_rows.size());
    // The rows the peer needs: of x, or (apply_product, split) of x op(w), computed here from the gathered rows of x.
    auto const source = split_product ? product->x : x;
    auto const gathered = split_product ? s.gathered(k, source.extent(1)) : buf;
    Kokkos::parallel_for(
        "Tessel::gnn::DistSpmm::pack",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(space, {0, 0}, {gathered.extent(0), gathered.extent(1)}),
        KOKKOS_LAMBDA(std::size_t r, std::size_t c) { gathered(r, c) = source(static_cast<std::size_t>(idx(r)), c); });
    if (split_product)
      tessel::gemm(space, Op::none, product->op_w, 1.0f, Impl::matrix_ref(ConstMatrix<memory_space>(gathered)),
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
  // A peer's halo block, into its own buffer, message by message as they land: the part that reads message j runs
  // once messages 0 .. j have landed, and is added to the peer's term in message order (a fixed order).
  std::vector<char> done(recvs.size(), 0);
  std::vector<std::size_t> next(halos.size(), 0); // per peer: the first message whose part has not run
  std::size_t left = recvs.size();
  auto const run_halo = [&](std::size_t m) {
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
  };
  bool const overlapped = s.schedule == DistSchedule::overlapped;
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
    if (!overlapped)
      continue;
    // Between tiles the messages progress, and the halos that have landed are computed (COMET's order: whatever
    // is ready, as soon as it is).
    for (auto &r : sends)
      r.test();
    for (std::size_t m = 0; m < recvs.size(); ++m)
      if (!done[m] && recvs[m].test())
        run_halo(m);
  }
  if (!overlapped) {
    for (std::size_t m = 0; m < recvs.size(); ++m)
      run_halo(m);
  }
  // The adaptive remainder, the first term of the fixed-order sum after the local block (once).
  bool rest_added = false;
  auto const add_rest = [&] {
    if (s.rest_y.extent(0) == 0 || rest_added)
      return;
    auto const rest = s.rest_y;
    Kokkos::parallel_for(
        "Tessel::gnn::DistSpmm::sum_rest", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
        KOKKOS_LAMBDA(std::size_t r) {
          for (std::size_t c = 0; c < static_cast<std::size_t>(f); ++c)
            y(r, c) += rest(r, c);
        });
    rest_added = true;
  };
  bool const split_reduce = reduction && overlapped && s.split_reduce;
  if (split_reduce) {
    // g = z^T (local + rest) while the messages move: y's first terms of the fixed-order sum are final now.
    auto const p0 = std::chrono::steady_clock::now();
    add_rest();
    tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(reduction->z),
                 Impl::matrix_ref(ConstMatrix<memory_space>(y)), 0.0f, Impl::matrix_ref(reduction->g));
    compat::fence(space, "Tessel::gnn::DistSpmm::reduce");
    t.product_seconds += since(p0);
    for (auto &r : sends)
      r.test();
    for (std::size_t m = 0; m < recvs.size(); ++m)
      if (!done[m] && recvs[m].test())
        run_halo(m);
  }
  while (left > 0) { // the rest in arrival order
    auto const w0 = std::chrono::steady_clock::now();
    std::size_t const m = Request::wait_any(recvs, s.comm.timeout());
    t.wait_seconds += since(w0);
    run_halo(m);
  }
  // Fixed order: y = local (+ rest) + halo(peer 0) + halo(peer 1) + ..., whatever the arrival order.
  auto const a0 = std::chrono::steady_clock::now();
  // The adaptive remainder (every row) first, then the halo terms (the boundary rows, numbered in their order).
  add_rest();
  std::vector<Matrix<memory_space>> parts;
  for (std::size_t k = 0; k < halos.size(); ++k)
    if (s.halo_y[k].extent(0) > 0)
      parts.push_back(s.halo_y[k]);
  Kokkos::View<std::int32_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> const boundary(
      s.boundary.data(), s.boundary.size());
  if (split_reduce && !s.boundary.empty() && !parts.empty()) {
    // g += z_B^T (the halo terms)_B over the rows B with halo entries (the others' halo terms are zero).
    auto const p0 = std::chrono::steady_clock::now();
    auto const nb = s.boundary.size();
    auto const &z = reduction->z;
    auto const zb = s.boundary_buf(0, nb, z.extent(1)), db = s.boundary_buf(1, nb, static_cast<std::size_t>(f));
    Kokkos::parallel_for(
        "Tessel::gnn::DistSpmm::boundary", Kokkos::RangePolicy<ExecSpace>(space, 0, nb), KOKKOS_LAMBDA(std::size_t i) {
          auto const r = static_cast<std::size_t>(boundary(i));
          for (std::size_t c = 0; c < z.extent(1); ++c)
            zb(i, c) = z(r, c);
          for (std::size_t c = 0; c < static_cast<std::size_t>(f); ++c) {
            float sum = 0;
            for (auto const &part : parts)
              sum += part(i, c);
            db(i, c) = sum;
          }
        });
    tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(ConstMatrix<memory_space>(zb)),
                 Impl::matrix_ref(ConstMatrix<memory_space>(db)), 1.0f, Impl::matrix_ref(reduction->g));
    compat::fence(space, "Tessel::gnn::DistSpmm::reduce_boundary");
    t.product_seconds += since(p0);
  }
  if (!parts.empty()) {
    Kokkos::parallel_for(
        "Tessel::gnn::DistSpmm::sum", Kokkos::RangePolicy<ExecSpace>(space, 0, s.boundary.size()),
        KOKKOS_LAMBDA(std::size_t i) {
          auto const r = static_cast<std::size_t>(boundary(i));
          for (auto const &part : parts)
            for (std::size_t c = 0; c < static_cast<std::size_t>(f); ++c)
              y(r, c) += part(i, c);
        });
  }
  compat::fence(space, "Tessel::gnn::DistSpmm::sum");
  t.halo_seconds += since(a0);
  if (reduction && !split_reduce) { // the baseline (and a badly partitioned graph's way): one product after all
    auto const p0 = std::chrono::steady_clock::now();
    tessel::gemm(space, Op::transpose, Op::none, 1.0f, Impl::matrix_ref(reduction->z),
                 Impl::matrix_ref(ConstMatrix<memory_space>(y)), 0.0f, Impl::matrix_ref(reduction->g));
    compat::fence(space, "Tessel::gnn::DistSpmm::reduce");
    t.product_seconds += since(p0);
  }
  auto const w1 = std::chrono::steady_clock::now();
  Request::wait_all(sends, s.comm.timeout());
  t.wait_seconds += since(w1);
  t.total_seconds = since(t0);
  s.last = t;
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

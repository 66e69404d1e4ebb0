// pipelined (Tutel's a2a_ffn_overlap_degree, FasterMoE): C token chunks; the communication engine
// (pipeline_comm_workers threads, or the compute thread between experts) runs the dispatches of all chunks, then
// each chunk's combine as soon as the compute thread has produced it.
#include "impl/LayerState.hpp"

#include <tessel/core/Execution.hpp>

namespace tessel::moe {

using namespace Impl;

namespace {

template <class ExecSpace> class PipelinedForward {
public:
  PipelinedForward(MoeLayer::State &st, ExecSpace const &space, std::string context_text)
      : st(st), space(space), context_text(std::move(context_text)), chunks(st.pipeline_chunks), w(st.world()),
        me(st.rank()), n(st.config.hidden), data_left(sz(chunks)),
        engine(st.comm, st.options.pipeline_comm_workers, 0, this->context_text) {}

  // Returns where each (chunk, source)'s rows start in the received rows.
  std::vector<std::int64_t> run(HostMatrix out, Clock::time_point start) {
    t0 = start;
    st.post_routes(engine, chunks, routes, false);
    post_dispatch();
    engine.wait([&] { return routes.done.load() == chunks * (w - 1); });
    st.decode_metas(chunks, routes.in, context_text);
    layout();
    post_receives();
    for (int c = 0; c < chunks; ++c)
      compute_chunk(c);
    auto const [wait1, busy1] = st.finish_combines(space, engine, combines_left, out, {0, n});
    st.stats.total = since(t0);
    st.stats.rows = st.total_rows();
    if (st.options.trace) {
      st.stats.trace.push_back({seconds_between(t0, wait1), seconds_between(t0, busy1), "wait combine"});
      st.stats.trace.push_back({seconds_between(t0, busy1), st.stats.total, "final sum"});
    }
    return xo;
  }

private:
  void post_dispatch() {
    for (int c = 0; c < chunks; ++c)
      for (int k = 1; k < w; ++k) {
        int const d = (me + k) % w, g = st.group_of(d);
        auto const rows = st.plan.block_end(c, g) - st.plan.block_begin(c, g);
        if (rows > 0)
          engine.send(d, tag_data + c, st.send_rows.data() + st.plan.block_begin(c, g) * n, sz(rows * n),
                      DataType::float32, tessel::Impl::concat("dispatch rows of chunk ", c));
      }
  }

  // Receive buffers: chunk-major, source-minor.
  void layout() {
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        x_rows.push_back(s == me ? 0 : st.metas[sz(c)][sz(s)].rows());
    xo = exclusive_offsets(x_rows);
    xd = ensure(st.x, "Tessel::moe::recv_rows", sz(xo.back() * n));
    st.layout_combine(st.source_slots());
  }

  void post_receives() {
    // Counts first: a callback may fire as soon as its receive is posted.
    for (int c = 0; c < chunks; ++c) {
      int expected = 0;
      for (int s = 0; s < w; ++s)
        expected += s != me && x_rows[sz(c * w + s)] > 0 ? 1 : 0;
      data_left[sz(c)].store(expected);
    }
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s) {
        auto const rows = x_rows[sz(c * w + s)];
        if (s == me || rows == 0)
          continue;
        engine.recv(s, tag_data + c, xd + xo[sz(c * w + s)] * n, sz(rows * n), DataType::float32,
                    tessel::Impl::concat("dispatch rows of chunk ", c), [this, c] {
                      data_left[sz(c)].fetch_sub(1);
                      engine.notify();
                    });
      }
    for (int c = 0; c < chunks; ++c)
      for (int k = 1; k < w; ++k) {
        int const r = (me + k) % w, g = st.group_of(r);
        auto const count = st.plan.slot_count(c, g);
        if (count == 0)
          continue;
        combines_left.fetch_add(1);
        engine.recv(r, tag_combine + c, st.combine_recv.data() + st.recv_off[sz(r)] + st.plan.slot_begin(c, g) * n,
                    sz(count * n), DataType::float32, tessel::Impl::concat("combine rows of chunk ", c), [this] {
                      combines_left.fetch_sub(1);
                      engine.notify();
                    });
      }
  }

  // Chunk c's experts once its rows have landed, then its combine sends.
  void compute_chunk(int c) {
    engine.progress();
    auto const wait0 = Clock::now();
    engine.wait([&] { return data_left[sz(c)].load() == 0; });
    st.stats.compute_wait += since(wait0);
    auto const busy0 = Clock::now();
    if (st.options.trace)
      st.stats.trace.push_back({seconds_between(t0, wait0), seconds_between(t0, busy0), "wait"});
    std::vector<float const *> src(sz(w));
    for (int s = 0; s < w; ++s)
      src[sz(s)] = s == me ? st.local_rows(c) : xd + xo[sz(c * w + s)] * n;
    st.baseline_compute(space, c, src, [&] { engine.progress(); });
    for (int k = 1; k < w; ++k) {
      int const s = (me - k + w) % w;
      auto const &ms = st.metas[sz(c)][sz(s)];
      if (ms.slot_count > 0)
        engine.send(s, tag_combine + c, st.combine_send.data() + st.send_off[sz(s)] + ms.slot_begin * n,
                    sz(ms.slot_count * n), DataType::float32, tessel::Impl::concat("combine rows of chunk ", c));
    }
    st.stats.compute_busy += since(busy0);
    if (st.options.trace)
      st.stats.trace.push_back({seconds_between(t0, busy0), since(t0), tessel::Impl::concat("experts chunk ", c)});
  }

  MoeLayer::State &st;
  ExecSpace const &space;
  std::string const context_text;
  int const chunks, w, me;
  std::int64_t const n;
  Clock::time_point t0;
  std::vector<std::int64_t> x_rows, xo;
  float *xd = nullptr;
  // What the communication threads use is declared before the engine, so it outlives it.
  RouteMessages routes;
  std::atomic<int> combines_left{0};
  std::vector<std::atomic<int>> data_left;
  CommEngine engine;
};

} // namespace

template <class ExecSpace>
void MoeLayer::State::forward_pipelined(ExecSpace const &space, ConstHostMatrix tokens, GateInput const &gate,
                                        HostMatrix out) {
  auto const t0 = begin_overlapped(space, tokens, gate, pipeline_chunks, Schedule::pipelined);
  auto const xo = PipelinedForward<ExecSpace>(*this, space, context(Schedule::pipelined)).run(out, t0);
  int const w = world();
  save_for_backward(tokens, gate, [&](int c, int s, int e) {
    auto const first = metas[sz(c)][sz(s)].expert_offset(e) * config.hidden;
    return (s == rank() ? local_rows(c) : x.data() + xo[sz(c * w + s)] * config.hidden) + first;
  });
}

#define TESSEL_MOE_INSTANTIATE_PIPELINED(SPACE)                                                                        \
  template void MoeLayer::State::forward_pipelined(SPACE const &, ConstHostMatrix, GateInput const &, HostMatrix);
TESSEL_FOR_EACH_HOST_EXECUTION_SPACE(TESSEL_MOE_INSTANTIATE_PIPELINED)

} // namespace tessel::moe

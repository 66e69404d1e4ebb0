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
  PipelinedForward(MoeLayer::State &layer, ExecSpace const &space, std::string context_text)
      : layer(layer), space(space), context_text(std::move(context_text)), chunks(layer.pipeline_chunks),
        w(layer.world()), me(layer.rank()), n(layer.config.hidden), data_left(sz(chunks)),
        engine(layer.comm, layer.options.pipeline_comm_workers, 0, this->context_text) {}

  // Returns where each (chunk, source)'s rows start in the received rows.
  std::vector<std::int64_t> run(HostMatrix out, Clock::time_point start) {
    t0 = start;
    layer.post_routes(engine, chunks, routes, false);
    post_dispatch();
    engine.wait([&] { return routes.done.load() == chunks * (w - 1); });
    layer.decode_metas(chunks, routes.in, context_text);
    layout();
    post_receives();
    for (int c = 0; c < chunks; ++c)
      compute_chunk(c);
    auto const [wait1, busy1] = layer.finish_combines(space, engine, combines_left, out, {0, n});
    layer.stats.total = since(t0);
    layer.stats.rows = layer.total_rows();
    if (layer.options.trace) {
      layer.stats.trace.push_back({seconds_between(t0, wait1), seconds_between(t0, busy1), "wait combine"});
      layer.stats.trace.push_back({seconds_between(t0, busy1), layer.stats.total, "final sum"});
    }
    return xo;
  }

private:
  void post_dispatch() {
    for (int c = 0; c < chunks; ++c)
      for (int k = 1; k < w; ++k) {
        int const d = (me + k) % w, g = layer.group_of(d);
        auto const rows = layer.plan.block_end(c, g) - layer.plan.block_begin(c, g);
        if (rows > 0)
          engine.send(d, tag_data + c, layer.send_rows.data() + layer.plan.block_begin(c, g) * n, sz(rows * n),
                      DataType::float32, tessel::Impl::concat("dispatch rows of chunk ", c));
      }
  }

  // Receive buffers: chunk-major, source-minor.
  void layout() {
    for (int c = 0; c < chunks; ++c)
      for (int s = 0; s < w; ++s)
        x_rows.push_back(s == me ? 0 : layer.metas[sz(c)][sz(s)].rows());
    xo = exclusive_offsets(x_rows);
    xd = ensure(layer.x, "Tessel::moe::recv_rows", sz(xo.back() * n));
    layer.layout_combine(layer.source_slots());
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
        int const r = (me + k) % w, g = layer.group_of(r);
        auto const count = layer.plan.slot_count(c, g);
        if (count == 0)
          continue;
        combines_left.fetch_add(1);
        engine.recv(r, tag_combine + c,
                    layer.combine_recv.data() + layer.recv_off[sz(r)] + layer.plan.slot_begin(c, g) * n, sz(count * n),
                    DataType::float32, tessel::Impl::concat("combine rows of chunk ", c), [this] {
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
    layer.stats.compute_wait += since(wait0);
    auto const busy0 = Clock::now();
    if (layer.options.trace)
      layer.stats.trace.push_back({seconds_between(t0, wait0), seconds_between(t0, busy0), "wait"});
    std::vector<float const *> src(sz(w));
    for (int s = 0; s < w; ++s)
      src[sz(s)] = s == me ? layer.local_rows(c) : xd + xo[sz(c * w + s)] * n;
    layer.baseline_compute(space, c, src, [&] { engine.progress(); });
    for (int k = 1; k < w; ++k) {
      int const s = (me - k + w) % w;
      auto const &ms = layer.metas[sz(c)][sz(s)];
      if (ms.slot_count > 0)
        engine.send(s, tag_combine + c, layer.combine_send.data() + layer.send_off[sz(s)] + ms.slot_begin * n,
                    sz(ms.slot_count * n), DataType::float32, tessel::Impl::concat("combine rows of chunk ", c));
    }
    layer.stats.compute_busy += since(busy0);
    if (layer.options.trace)
      layer.stats.trace.push_back({seconds_between(t0, busy0), since(t0), tessel::Impl::concat("experts chunk ", c)});
  }

  MoeLayer::State &layer;
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

#ifndef TESSEL_GNN_CUDA_DEVICESTRUCTURES_HPP
#define TESSEL_GNN_CUDA_DEVICESTRUCTURES_HPP

// The device handle's structures in device memory (CSR pieces, tile sets, dense blocks in both engines' layouts),
// uploaded from the host-side builders (../impl/Builders.hpp), and the reordering probe on the device.
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/gnn/Graph.hpp>

#include "../impl/Builders.hpp"
#include "../impl/Decomposition.hpp"
#include "KernelApi.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tessel::gnn::cuda::Impl {

using gnn::Impl::HostCsrPiece;
using gnn::Impl::HostDenseBlock;
using gnn::Impl::HostTileSet;
using tessel::cuda::DeviceBuffer;
using tessel::cuda::Event;

template <class T>
inline DeviceBuffer<T> upload(std::vector<T> const &v, std::string const &label, cudaStream_t stream) {
  DeviceBuffer<T> d(v.size(), label);
  d.copy_from_host(v.data(), v.size(), stream);
  return d;
}

inline bool aligned16(void const *p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

inline int to_int(std::int64_t v, char const *what) {
  TESSEL_REQUIRE(v >= 0 && v <= std::numeric_limits<int>::max(), "tessel::gnn::cuda::SpmmHandle: ", what, " = ", v,
                 " does not fit the 32-bit int of the cuBLAS/cuSPARSE interface");
  return static_cast<int>(v);
}

template <class Index> struct DevCsr {
  DeviceBuffer<offset_type> row_map;
  DeviceBuffer<Index> entries;
  DeviceBuffer<float> values;
  DeviceBuffer<Index> row_ids;
  std::int64_t rows = 0, nnz = 0;

  DevCsr() = default;
  DevCsr(HostCsrPiece<Index> const &h, cudaStream_t stream)
      : row_map(upload(h.row_map, "Tessel::gnn::cuda::row_map", stream)),
        entries(upload(h.entries, "Tessel::gnn::cuda::entries", stream)),
        values(upload(h.values, "Tessel::gnn::cuda::values", stream)),
        row_ids(upload(h.row_ids, "Tessel::gnn::cuda::row_ids", stream)), rows(h.rows()), nnz(h.nnz) {}
  CsrArgs<Index> args() const {
    return {rows, row_map.data(), entries.data(), values.data(), row_ids.size() ? row_ids.data() : nullptr};
  }
  std::int64_t bytes() const { return row_map.bytes() + entries.bytes() + values.bytes() + row_ids.bytes(); }
};

template <class Index> struct DevTiles {
  DeviceBuffer<std::int64_t> row0;
  DeviceBuffer<int> nrows;
  DeviceBuffer<std::int64_t> tile_begin;
  DeviceBuffer<Index> tile_col;
  DeviceBuffer<float> tile_val;

  DevTiles() = default;
  DevTiles(HostTileSet<Index> const &h, cudaStream_t stream)
      : row0(upload(h.row0, "Tessel::gnn::cuda::tile_row0", stream)),
        nrows(upload(h.nrows, "Tessel::gnn::cuda::tile_nrows", stream)),
        tile_begin(upload(h.tile_begin, "Tessel::gnn::cuda::tile_begin", stream)),
        tile_col(upload(h.tile_col, "Tessel::gnn::cuda::tile_col", stream)),
        tile_val(upload(h.tile_val, "Tessel::gnn::cuda::tile_val", stream)) {}
  TileArgs<Index> args() const {
    return {static_cast<std::int64_t>(row0.size()),
            row0.data(),
            nrows.data(),
            tile_begin.data(),
            tile_col.data(),
            tile_val.data()};
  }
  std::int64_t bytes() const {
    return row0.bytes() + nrows.bytes() + tile_begin.bytes() + tile_col.bytes() + tile_val.bytes();
  }
};

/// Dense blocks in the two engines' layouts: zero-padded blocks with strips for the WMMA kernel, and waves of
/// problems for grouped cuBLAS GEMMs (a wave never holds two blocks of one row part, so its outputs never overlap).
struct DevDense {
  std::int64_t num_strips = 0;
  DeviceBuffer<float> values;
  DeviceBuffer<DenseBlockDesc> blocks;
  DeviceBuffer<DenseStrip> strips;
  std::vector<gnn::Impl::DenseLayout::Wave> waves;
  std::int64_t problems = 0;
  DeviceBuffer<std::int64_t> row0, col0;
  DeviceBuffer<float const *> block_ptr, x_ptr;
  DeviceBuffer<float *> y_ptr;
  // The X and Y the pointer arrays were filled for.
  float const *filled_x = nullptr;
  float *filled_y = nullptr;
  std::int64_t filled_ldx = -1, filled_ldy = -1;

  DevDense() = default;
  DevDense(std::vector<HostDenseBlock> list, cudaStream_t stream) {
    if (list.empty())
      return;
    auto layout = gnn::Impl::make_dense_layout(std::move(list));
    num_strips = static_cast<std::int64_t>(layout.strips.size());
    problems = static_cast<std::int64_t>(layout.problem_row0.size());
    waves = std::move(layout.waves);
    values = upload(layout.values, "Tessel::gnn::cuda::dense_values", stream);
    blocks = upload(layout.blocks, "Tessel::gnn::cuda::dense_blocks", stream);
    strips = upload(layout.strips, "Tessel::gnn::cuda::dense_strips", stream);
    row0 = upload(layout.problem_row0, "Tessel::gnn::cuda::gemm_row0", stream);
    col0 = upload(layout.problem_col0, "Tessel::gnn::cuda::gemm_col0", stream);
    std::vector<float const *> bptr;
    for (auto o : layout.problem_offset)
      bptr.push_back(values.data() + o);
    block_ptr = upload(bptr, "Tessel::gnn::cuda::gemm_block_ptr", stream);
    x_ptr = DeviceBuffer<float const *>(static_cast<std::size_t>(problems), "Tessel::gnn::cuda::gemm_x_ptr");
    y_ptr = DeviceBuffer<float *>(static_cast<std::size_t>(problems), "Tessel::gnn::cuda::gemm_y_ptr");
  }

  bool empty() const { return num_strips == 0; }
  DenseArgs args() const { return {num_strips, strips.data(), blocks.data(), values.data()}; }
  std::int64_t bytes() const {
    return values.bytes() + blocks.bytes() + strips.bytes() + row0.bytes() + col0.bytes() + block_ptr.bytes() +
           x_ptr.bytes() + y_ptr.bytes();
  }
};

/// The reordering probe on the device: CSR in the original and in the partitioned order, timed with events.
template <class Index> class DeviceCsrProbe final : public gnn::Impl::CsrProbe<Index> {
public:
  DeviceCsrProbe(cudaStream_t stream, Timeout timeout) : _stream(stream), _timeout(timeout) {}
  void prepare(Graph<Index> const &original, Graph<Index> const &reordered) override {
    std::vector<char> all(static_cast<std::size_t>(original.nnz()), 1);
    _graphs[0] = DevCsr<Index>(gnn::Impl::make_csr(original, all, false), _stream);
    _graphs[1] = DevCsr<Index>(gnn::Impl::make_csr(reordered, all, false), _stream);
    _rows = original.num_rows();
  }
  double seconds(int which, int f, int kernel) override {
    if (f != _f) {
      std::vector<float> ones(static_cast<std::size_t>(_rows) * static_cast<std::size_t>(f), 1.0f);
      _x = upload(ones, "Tessel::gnn::cuda::probe_x", _stream);
      _y = DeviceBuffer<float>(ones.size(), "Tessel::gnn::cuda::probe_y");
      _f = f;
    }
    _start.record(_stream);
    TESSEL_CUDA_CHECK(csr_spmm<Index>(_stream, _graphs[which].args(), _x.data(), f, _y.data(), f, f, false,
                                      kernel == 1 ? CsrSlicing::narrow32 : CsrSlicing::automatic));
    _stop.record(_stream);
    _stop.synchronize(_timeout);
    return 1e-3 * Event::elapsed_ms(_start, _stop);
  }

private:
  cudaStream_t _stream;
  Timeout _timeout;
  DevCsr<Index> _graphs[2];
  std::int64_t _rows = 0;
  int _f = 0;
  DeviceBuffer<float> _x, _y;
  Event _start{true}, _stop{true};
};

} // namespace tessel::gnn::cuda::Impl

#endif

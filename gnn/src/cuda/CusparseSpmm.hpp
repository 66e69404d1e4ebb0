#ifndef TESSEL_GNN_CUDA_CUSPARSESPMM_HPP
#define TESSEL_GNN_CUDA_CUSPARSESPMM_HPP

// The vendor baseline of the device handle (SpmmAlgorithm::cusparse): cusparseSpMM, CSR_ALG2, row-major X and Y.
#include <tessel/core/Gemm.hpp>
#include <tessel/core/cuda/Blas.hpp>
#include <tessel/core/cuda/Cuda.hpp>
#include <tessel/gnn/Graph.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tessel::gnn::cuda::Impl {

/// A CSR matrix uploaded once for cuSPARSE (32-bit indices where they fit, as DGL) and, per width and X / Y, the
/// dense descriptors and the work buffer.
template <class Index> class CusparseSpmm {
public:
  CusparseSpmm(cudaStream_t stream, Graph<Index> const &g);
  ~CusparseSpmm();
  CusparseSpmm(CusparseSpmm const &) = delete;
  CusparseSpmm &operator=(CusparseSpmm const &) = delete;

  /// Y = A X on \p stream. Returns the plan's reason when the descriptors were (re)made, else an empty string.
  std::string run(cudaStream_t stream, MatrixRef<float const> const &x, MatrixRef<float> const &y);
  std::int64_t bytes() const;

private:
  std::int64_t _rows = 0, _cols = 0, _nnz = 0;
  tessel::cuda::DeviceBuffer<std::int32_t> _off32, _col32;
  tessel::cuda::DeviceBuffer<std::int64_t> _off64, _col64;
  tessel::cuda::DeviceBuffer<float> _values;
  cusparseSpMatDescr_t _matrix = nullptr;
  cusparseDnMatDescr_t _x = nullptr, _y = nullptr;
  float const *_xp = nullptr;
  float *_yp = nullptr;
  std::int64_t _ldx = -1, _ldy = -1;
  int _f = -1;
  cusparseSpMMAlg_t _algorithm = CUSPARSE_SPMM_CSR_ALG2;
  tessel::cuda::DeviceBuffer<char> _buffer;
  std::optional<tessel::cuda::CusparseHandle> _handle; // created with the first apply
};

} // namespace tessel::gnn::cuda::Impl

#endif

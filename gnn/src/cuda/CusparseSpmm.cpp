#include "CusparseSpmm.hpp"

#include "DeviceStructures.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace tessel::gnn::cuda::Impl {

template <class Index>
CusparseSpmm<Index>::CusparseSpmm(cudaStream_t stream, Graph<Index> const &g)
    : _rows(g.num_rows()), _cols(g.num_cols()), _nnz(g.nnz()) {
  // cuSPARSE wants one index type for offsets and columns; 32-bit when they fit (as DGL does).
  bool const narrow = sizeof(Index) == 4 && _nnz <= std::numeric_limits<std::int32_t>::max();
  std::vector<float> v(g.values().data(), g.values().data() + _nnz);
  v.resize(std::max<std::size_t>(v.size(), 1)); // never a null pointer, also for an empty graph
  _values = upload(v, "Tessel::gnn::cuda::cusparse_values", stream);
  if (narrow) {
    std::vector<std::int32_t> off(g.row_map().data(), g.row_map().data() + _rows + 1);
    std::vector<std::int32_t> col(g.entries().data(), g.entries().data() + _nnz);
    col.resize(std::max<std::size_t>(col.size(), 1));
    _off32 = upload(off, "Tessel::gnn::cuda::cusparse_offsets", stream);
    _col32 = upload(col, "Tessel::gnn::cuda::cusparse_columns", stream);
    TESSEL_CUSPARSE_CHECK(cusparseCreateCsr(&_matrix, _rows, _cols, _nnz, _off32.data(), _col32.data(), _values.data(),
                                            CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                            CUDA_R_32F));
  } else {
    std::vector<std::int64_t> off(g.row_map().data(), g.row_map().data() + _rows + 1);
    std::vector<std::int64_t> col(g.entries().data(), g.entries().data() + _nnz);
    col.resize(std::max<std::size_t>(col.size(), 1));
    _off64 = upload(off, "Tessel::gnn::cuda::cusparse_offsets", stream);
    _col64 = upload(col, "Tessel::gnn::cuda::cusparse_columns", stream);
    TESSEL_CUSPARSE_CHECK(cusparseCreateCsr(&_matrix, _rows, _cols, _nnz, _off64.data(), _col64.data(), _values.data(),
                                            CUSPARSE_INDEX_64I, CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ZERO,
                                            CUDA_R_32F));
  }
}

template <class Index> CusparseSpmm<Index>::~CusparseSpmm() {
  if (_x)
    cusparseDestroyDnMat(_x);
  if (_y)
    cusparseDestroyDnMat(_y);
  if (_matrix)
    cusparseDestroySpMat(_matrix);
}

template <class Index> std::int64_t CusparseSpmm<Index>::bytes() const {
  return _off32.bytes() + _col32.bytes() + _off64.bytes() + _col64.bytes() + _values.bytes() + _buffer.bytes();
}

template <class Index>
std::string CusparseSpmm<Index>::run(cudaStream_t stream, MatrixRef<float const> const &x, MatrixRef<float> const &y) {
  int const f = static_cast<int>(x.cols);
  if (_nnz == 0) {
    TESSEL_CUDA_CHECK(cudaMemset2DAsync(y.data, static_cast<std::size_t>(y.ld) * sizeof(float), 0,
                                        static_cast<std::size_t>(f) * sizeof(float), static_cast<std::size_t>(_rows),
                                        stream));
    return "";
  }
  if (_handle)
    _handle->set_stream(stream);
  else
    _handle.emplace(stream);
  auto const handle = _handle->get();
  std::string reason;
  float const alpha = 1.0f, beta = 0.0f;
  if (_f != f || _ldx != x.ld || _ldy != y.ld) {
    if (_x)
      TESSEL_CUSPARSE_CHECK(cusparseDestroyDnMat(_x));
    if (_y)
      TESSEL_CUSPARSE_CHECK(cusparseDestroyDnMat(_y));
    _x = _y = nullptr;
    TESSEL_CUSPARSE_CHECK(
        cusparseCreateDnMat(&_x, _cols, f, x.ld, const_cast<float *>(x.data), CUDA_R_32F, CUSPARSE_ORDER_ROW));
    TESSEL_CUSPARSE_CHECK(cusparseCreateDnMat(&_y, _rows, f, y.ld, y.data, CUDA_R_32F, CUSPARSE_ORDER_ROW));
    _xp = x.data;
    _yp = y.data;
    _f = f;
    _ldx = x.ld;
    _ldy = y.ld;
    std::size_t bytes = 0;
    // CSR_ALG2 (row-major, deterministic) is the baseline; should a cuSPARSE refuse it for these operands, its
    // default algorithm runs instead (the plan's reason says so).
    _algorithm = CUSPARSE_SPMM_CSR_ALG2;
    cusparseStatus_t const rc =
        cusparseSpMM_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha,
                                _matrix, _x, &beta, _y, CUDA_R_32F, _algorithm, &bytes);
    if (rc == CUSPARSE_STATUS_NOT_SUPPORTED) {
      _algorithm = CUSPARSE_SPMM_ALG_DEFAULT;
      TESSEL_CUSPARSE_CHECK(cusparseSpMM_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                                    CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, _matrix, _x, &beta, _y,
                                                    CUDA_R_32F, _algorithm, &bytes));
    } else {
      TESSEL_CUSPARSE_CHECK(rc);
    }
    reason = _algorithm == CUSPARSE_SPMM_CSR_ALG2
                 ? "cusparseSpMM, CUSPARSE_SPMM_CSR_ALG2, row-major X and Y"
                 : "cusparseSpMM refused CSR_ALG2 for these operands: CUSPARSE_SPMM_ALG_DEFAULT";
    if (bytes > _buffer.size())
      _buffer = tessel::cuda::DeviceBuffer<char>(bytes, "Tessel::gnn::cuda::cusparse_buffer");
  }
  if (_xp != x.data) {
    TESSEL_CUSPARSE_CHECK(cusparseDnMatSetValues(_x, const_cast<float *>(x.data)));
    _xp = x.data;
  }
  if (_yp != y.data) {
    TESSEL_CUSPARSE_CHECK(cusparseDnMatSetValues(_y, y.data));
    _yp = y.data;
  }
  TESSEL_CUSPARSE_CHECK(cusparseSpMM(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha,
                                     _matrix, _x, &beta, _y, CUDA_R_32F, _algorithm, _buffer.data()));
  return reason;
}

template class CusparseSpmm<std::int32_t>;
template class CusparseSpmm<std::int64_t>;

} // namespace tessel::gnn::cuda::Impl

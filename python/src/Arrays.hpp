#ifndef TESSEL_PYTHON_ARRAYS_HPP
#define TESSEL_PYTHON_ARRAYS_HPP
/// \file Arrays.hpp
/// \brief Checks of the arrays Python passes in (DLPack through nanobind: NumPy, PyTorch, ...): dtype, shape,
/// strides and device, each refusal naming what was expected and what came; and zero-copy views on accepted ones.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tessel::python {

namespace nb = nanobind;

/// An input array (read-only accepted; any dtype, shape and device: checked by the functions below).
using InArray = nb::ndarray<nb::ro>;
/// An output array (must be writable).
using OutArray = nb::ndarray<>;

/// Element types the bindings take.
enum class Dtype { float32, float64, int32, int64, uint8, boolean };

/// "float32", "int64", ... for a DLPack dtype.
std::string dtype_name(nb::dlpack::dtype dtype);
/// "float32 array of shape (3, 4), strides (4, 1), on cpu".
template <class Array> std::string describe(Array const &a);

/// \brief Expected shape: -1 leaves an extent free. Throws TypeError (dtype, device) or ValueError (rank, extents,
/// strides: C-contiguous required) naming \p what and the array as it came. Returns the data pointer.
template <class Array>
void const *require_array(Array const &a, std::string const &what, Dtype dtype,
                          std::initializer_list<std::int64_t> shape);

/// The extent \p i of \p a as int64.
template <class Array> std::int64_t extent(Array const &a, std::size_t i) {
  return static_cast<std::int64_t>(a.shape(i));
}

/// \brief True when the array's dtype is \p dtype (no other check).
template <class Array> bool has_dtype(Array const &a, Dtype dtype);

/// \brief Copies a 1-D integer array (int32 or int64, any stride, CPU) into int64 values.
std::vector<std::int64_t> integer_vector(InArray const &a, std::string const &what);
/// \brief Copies a 1-D float32 or float64 array (any stride, CPU) into float values.
std::vector<float> float_vector(InArray const &a, std::string const &what);

/// \brief A NumPy array owning a copy of \p values with \p shape.
template <class T> nb::object numpy_array(std::vector<T> values, std::vector<std::size_t> const &shape);

} // namespace tessel::python

#endif

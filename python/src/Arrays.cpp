#include "Arrays.hpp"

#include <sstream>

namespace tessel::python {

namespace {

char const *name_of(Dtype d) {
  switch (d) {
  case Dtype::float32:
    return "float32";
  case Dtype::float64:
    return "float64";
  case Dtype::int32:
    return "int32";
  case Dtype::int64:
    return "int64";
  case Dtype::uint8:
    return "uint8";
  case Dtype::boolean:
    return "bool";
  }
  return "?";
}

nb::dlpack::dtype dlpack_of(Dtype d) {
  switch (d) {
  case Dtype::float32:
    return nb::dtype<float>();
  case Dtype::float64:
    return nb::dtype<double>();
  case Dtype::int32:
    return nb::dtype<std::int32_t>();
  case Dtype::int64:
    return nb::dtype<std::int64_t>();
  case Dtype::uint8:
    return nb::dtype<std::uint8_t>();
  case Dtype::boolean:
    return nb::dtype<bool>();
  }
  return {};
}

char const *device_name(int type) {
  switch (type) {
  case nb::device::cpu::value:
    return "cpu";
  case nb::device::cuda::value:
    return "cuda";
  case nb::device::cuda_host::value:
    return "cuda_host";
  case nb::device::cuda_managed::value:
    return "cuda_managed";
  case nb::device::rocm::value:
    return "rocm";
  case nb::device::metal::value:
    return "metal";
  default:
    return "an unknown device";
  }
}

template <class Array> std::string shape_text(Array const &a, bool strides) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < a.ndim(); ++i)
    os << (i ? ", " : "") << (strides ? a.stride(i) : static_cast<std::int64_t>(a.shape(i)));
  os << (a.ndim() == 1 ? ",)" : ")");
  return os.str();
}

std::string expected_shape(std::initializer_list<std::int64_t> shape) {
  std::ostringstream os;
  os << '(';
  std::size_t i = 0;
  for (auto e : shape) {
    os << (i++ ? ", " : "");
    if (e < 0)
      os << '*';
    else
      os << e;
  }
  os << (shape.size() == 1 ? ",)" : ")");
  return os.str();
}

template <class Array> void require_cpu(Array const &a, std::string const &what) {
  if (a.device_type() == nb::device::cpu::value)
    return;
  std::string hint = "; move it to the CPU first (.cpu() or numpy)";
  if (a.device_type() == nb::device::cuda::value) {
#ifdef TESSEL_PYTHON_CUDA
    hint = "; this operation runs on the host only: move it to the CPU first";
#else
    hint = "; this Tessel was built without its CUDA layer, so device arrays are not accepted: move it to the CPU "
           "(.cpu()), or build Tessel with a CUDA toolkit";
#endif
  }
  throw nb::type_error((what + " must be in CPU memory, got " + describe(a) + hint).c_str());
}

template <class T> std::vector<T> copy_1d(InArray const &a, std::string const &what) {
  std::vector<T> out(a.shape(0));
  auto const stride = a.stride(0);
  auto const dt = a.dtype();
  auto const *base = static_cast<char const *>(a.data());
  auto const bytes = static_cast<std::int64_t>(dt.bits / 8);
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto const *p = base + static_cast<std::int64_t>(i) * stride * bytes;
    if (dt == nb::dtype<std::int32_t>())
      out[i] = static_cast<T>(*reinterpret_cast<std::int32_t const *>(p));
    else if (dt == nb::dtype<std::int64_t>())
      out[i] = static_cast<T>(*reinterpret_cast<std::int64_t const *>(p));
    else if (dt == nb::dtype<float>())
      out[i] = static_cast<T>(*reinterpret_cast<float const *>(p));
    else if (dt == nb::dtype<double>())
      out[i] = static_cast<T>(*reinterpret_cast<double const *>(p));
    else
      throw nb::type_error((what + ": unsupported dtype " + dtype_name(dt)).c_str());
  }
  return out;
}

} // namespace

std::string dtype_name(nb::dlpack::dtype d) {
  using code = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<code>(d.code)) {
  case code::Int:
    base = "int";
    break;
  case code::UInt:
    base = "uint";
    break;
  case code::Float:
    base = "float";
    break;
  case code::Bfloat:
    base = "bfloat";
    break;
  case code::Complex:
    base = "complex";
    break;
  case code::Bool:
    return "bool";
  default:
    base = "unknown";
    break;
  }
  return base + std::to_string(d.bits);
}

template <class Array> std::string describe(Array const &a) {
  std::string s = dtype_name(a.dtype()) + " array of shape " + shape_text(a, false);
  if (a.ndim() > 0)
    s += ", strides " + shape_text(a, true) + " (elements)";
  s += std::string(", on ") + device_name(a.device_type());
  if (a.device_type() != nb::device::cpu::value)
    s += ":" + std::to_string(a.device_id());
  return s;
}

template <class Array> bool has_dtype(Array const &a, Dtype dtype) { return a.dtype() == dlpack_of(dtype); }

template <class Array>
void const *require_array(Array const &a, std::string const &what, Dtype dtype,
                          std::initializer_list<std::int64_t> shape) {
  require_cpu(a, what);
  if (!has_dtype(a, dtype))
    throw nb::type_error(
        (what + " must be " + name_of(dtype) + ", got " + describe(a) + " (convert it with .astype / .to)").c_str());
  if (a.ndim() != shape.size())
    throw nb::value_error((what + " must have " + std::to_string(shape.size()) + " dimension" +
                           (shape.size() == 1 ? "" : "s") + " " + expected_shape(shape) + ", got " + describe(a))
                              .c_str());
  std::size_t i = 0;
  for (auto e : shape) {
    if (e >= 0 && static_cast<std::int64_t>(a.shape(i)) != e)
      throw nb::value_error((what + " must have shape " + expected_shape(shape) + ", got " + describe(a)).c_str());
    ++i;
  }
  // C-contiguous: every stride is the product of the later extents (extents of 1 may have any stride).
  std::int64_t expected = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected)
      throw nb::value_error((what + " must be C-contiguous (row-major, no gaps), got " + describe(a) +
                             "; pass a contiguous copy (.contiguous() or numpy.ascontiguousarray)")
                                .c_str());
    expected *= static_cast<std::int64_t>(a.shape(d));
  }
  return a.data();
}

std::vector<std::int64_t> integer_vector(InArray const &a, std::string const &what) {
  require_cpu(a, what);
  if (a.ndim() != 1)
    throw nb::value_error((what + " must be 1-dimensional, got " + describe(a)).c_str());
  if (!has_dtype(a, Dtype::int32) && !has_dtype(a, Dtype::int64))
    throw nb::type_error((what + " must be int32 or int64, got " + describe(a)).c_str());
  return copy_1d<std::int64_t>(a, what);
}

std::vector<float> float_vector(InArray const &a, std::string const &what) {
  require_cpu(a, what);
  if (a.ndim() != 1)
    throw nb::value_error((what + " must be 1-dimensional, got " + describe(a)).c_str());
  if (!has_dtype(a, Dtype::float32) && !has_dtype(a, Dtype::float64))
    throw nb::type_error((what + " must be float32 or float64, got " + describe(a)).c_str());
  return copy_1d<float>(a, what);
}

template <class T> nb::object numpy_array(std::vector<T> values, std::vector<std::size_t> const &shape) {
  auto *owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void *p) noexcept { delete static_cast<std::vector<T> *>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner).cast();
}

template std::string describe(InArray const &);
template std::string describe(OutArray const &);
template bool has_dtype(InArray const &, Dtype);
template bool has_dtype(OutArray const &, Dtype);
template void const *require_array(InArray const &, std::string const &, Dtype, std::initializer_list<std::int64_t>);
template void const *require_array(OutArray const &, std::string const &, Dtype, std::initializer_list<std::int64_t>);
template nb::object numpy_array(std::vector<float>, std::vector<std::size_t> const &);
template nb::object numpy_array(std::vector<double>, std::vector<std::size_t> const &);
template nb::object numpy_array(std::vector<std::int32_t>, std::vector<std::size_t> const &);
template nb::object numpy_array(std::vector<std::int64_t>, std::vector<std::size_t> const &);

} // namespace tessel::python

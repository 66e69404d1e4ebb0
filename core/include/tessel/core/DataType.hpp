#ifndef TESSEL_CORE_DATATYPE_HPP
#define TESSEL_CORE_DATATYPE_HPP

/// \file DataType.hpp
/// \brief Run-time element types shared by communicators and HDF5 I/O.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace tessel {

/// \brief Element types Tessel moves, reduces and stores (16-bit floats are moved, not reduced, over MPI).
enum class DataType : int { int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64 };

/// Size in bytes of one element of \p type.
std::size_t size_of(DataType type);
/// Lower-case name of \p type ("float32", ...).
char const *name_of(DataType type);

namespace Impl {
template <class T> struct DataTypeOf;
template <> struct DataTypeOf<std::int8_t> { static constexpr DataType value = DataType::int8; };
template <> struct DataTypeOf<std::uint8_t> { static constexpr DataType value = DataType::uint8; };
template <> struct DataTypeOf<std::int32_t> { static constexpr DataType value = DataType::int32; };
template <> struct DataTypeOf<std::uint32_t> { static constexpr DataType value = DataType::uint32; };
template <> struct DataTypeOf<std::int64_t> { static constexpr DataType value = DataType::int64; };
template <> struct DataTypeOf<std::uint64_t> { static constexpr DataType value = DataType::uint64; };
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::float32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::float64; };
} // namespace Impl

/// \brief The DataType of a C++ element type (a compile error for unsupported types).
template <class T> inline constexpr DataType data_type_of = Impl::DataTypeOf<std::remove_cv_t<T>>::value;

} // namespace tessel

#endif

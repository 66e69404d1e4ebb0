#include <tessel/core/DataType.hpp>
#include <tessel/core/Error.hpp>

namespace tessel {

std::size_t size_of(DataType type) {
  switch (type) {
  case DataType::int8:
  case DataType::uint8:
    return 1;
  case DataType::float16:
  case DataType::bfloat16:
    return 2;
  case DataType::int32:
  case DataType::uint32:
  case DataType::float32:
    return 4;
  case DataType::int64:
  case DataType::uint64:
  case DataType::float64:
    return 8;
  }
  TESSEL_THROW("unknown DataType ", static_cast<int>(type));
}

char const *name_of(DataType type) {
  static char const *names[] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                "uint64", "float16", "bfloat16", "float32", "float64"};
  auto const i = static_cast<int>(type);
  return i >= 0 && i < 10 ? names[i] : "invalid";
}

} // namespace tessel

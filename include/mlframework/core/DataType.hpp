#pragma once
/// @file DataType.hpp
/// @brief Element types of tensors, generated from one list.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <mlframework/export.hpp>

namespace mlframework {

/// The one list of element types: name, enumerator, size in bytes.
#define MLFW_DATA_TYPES(X) \
  X(Float32, 4)            \
  X(Float16, 2)            \
  X(BFloat16, 2)

/// Element type of a tensor.
enum class DataType : std::uint8_t {
#define MLFW_ENUMERATOR(name, size) name,
  MLFW_DATA_TYPES(MLFW_ENUMERATOR)
#undef MLFW_ENUMERATOR
};

/// Spec name for DataType (the FSDP spec calls it TensorDataType).
using TensorDataType = DataType;

/// Number of enumerators in DataType.
inline constexpr int kDataTypeCount = 3;

/// Size of one element of @p dtype in bytes.
constexpr std::size_t ElementSize(DataType dtype) noexcept {
  switch (dtype) {
#define MLFW_SIZE_CASE(name, size) \
  case DataType::name:             \
    return size;
    MLFW_DATA_TYPES(MLFW_SIZE_CASE)
#undef MLFW_SIZE_CASE
  }
  return 0;
}

/// Name of @p dtype ("Float32", "Float16", "BFloat16"); "Unknown" for a value outside the enum.
constexpr std::string_view ToString(DataType dtype) noexcept {
  switch (dtype) {
#define MLFW_NAME_CASE(name, size) \
  case DataType::name:             \
    return #name;
    MLFW_DATA_TYPES(MLFW_NAME_CASE)
#undef MLFW_NAME_CASE
  }
  return "Unknown";
}

/// True when @p dtype is one of the enumerators (guards values cast from bytes).
constexpr bool IsValid(DataType dtype) noexcept {
  return static_cast<unsigned>(dtype) < static_cast<unsigned>(kDataTypeCount);
}

}  // namespace mlframework

#pragma once
/// @file DataType.hpp
/// @brief Element types of tensors, generated from one list.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <mlframework/export.hpp>

namespace mlframework {

/// The one list of element types: name, enumerator, size in bytes. Float8E4M3FN and Float8E5M2
/// are the OCP FP8 formats with the semantics of PyTorch's float8_e4m3fn and float8_e5m2
/// (core/Float8.hpp): E4M3FN has bias 7, no infinity, NaN S.1111.111 and a largest finite value of
/// 448; E5M2 has bias 15, infinities and NaNs as in IEEE 754, and a largest finite value of 57344.
#define MLFW_DATA_TYPES(X) \
  X(Float32, 4)            \
  X(Float16, 2)            \
  X(BFloat16, 2)           \
  X(Float8E4M3FN, 1)       \
  X(Float8E5M2, 1)

/// Element type of a tensor.
enum class DataType : std::uint8_t {
#define MLFW_ENUMERATOR(name, size) name,
  MLFW_DATA_TYPES(MLFW_ENUMERATOR)
#undef MLFW_ENUMERATOR
};

/// Spec name for DataType (the FSDP spec calls it TensorDataType).
using TensorDataType = DataType;

/// Number of enumerators in DataType.
inline constexpr int kDataTypeCount = 5;

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

/// Name of @p dtype ("Float32", "Float16", "BFloat16", "Float8E4M3FN", "Float8E5M2"); "Unknown" for a value outside the
/// enum.
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

/// True when @p dtype is one of the 8-bit floating-point formats (Float8E4M3FN, Float8E5M2).
constexpr bool IsFloat8(DataType dtype) noexcept {
  return dtype == DataType::Float8E4M3FN || dtype == DataType::Float8E5M2;
}

}  // namespace mlframework

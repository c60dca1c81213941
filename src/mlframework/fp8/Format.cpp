#include <mlframework/fp8/Format.hpp>

#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::fp8 {

std::string_view ToString(Format format) noexcept {
  switch (format) {
    case Format::E4M3:
      return "E4M3";
    case Format::HYBRID:
      return "HYBRID";
  }
  return "Unknown";
}

std::string_view ToString(TensorRole role) noexcept {
  switch (role) {
    case TensorRole::Forward:
      return "Forward";
    case TensorRole::Gradient:
      return "Gradient";
  }
  return "Unknown";
}

DataType Float8TypeOf(Format format, TensorRole role) {
  if (format != Format::E4M3 && format != Format::HYBRID) {
    throw ArgumentError("format", "value " + std::to_string(static_cast<int>(format)) + " is not E4M3 or HYBRID");
  }
  if (role != TensorRole::Forward && role != TensorRole::Gradient) {
    throw ArgumentError("role", "value " + std::to_string(static_cast<int>(role)) + " is not Forward or Gradient");
  }
  return format == Format::HYBRID && role == TensorRole::Gradient ? DataType::Float8E5M2 : DataType::Float8E4M3FN;
}

float Float8Max(DataType dtype) {
  switch (dtype) {
    case DataType::Float8E4M3FN:
      return 448.0f;
    case DataType::Float8E5M2:
      return 57344.0f;
    default:
      throw ArgumentError("dtype", "is " + std::string(ToString(dtype)) + ", not an FP8 type");
  }
}

}  // namespace mlframework::fp8

#include <mlframework/amp/ScaleFactor.hpp>

#include <cmath>
#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::amp {

float ScaleFactor::PowerOfTwo(int exponent) {
  if (exponent < -126 || exponent > 127) {
    throw ArgumentError(
        "exponent", "must be within [-126, 127] so that 2^exponent is a normal float, got " + std::to_string(exponent));
  }
  return std::ldexp(1.0f, exponent);
}

float ScaleFactor::GetRecommendedScale(DataType precision) {
  switch (precision) {
    case DataType::Float16:
      return Moderate;
    case DataType::BFloat16:
    case DataType::Float32:
      return None;
  }
  throw ArgumentError("precision", "value " + std::to_string(static_cast<int>(precision)) + " is not a DataType");
}

}  // namespace mlframework::amp

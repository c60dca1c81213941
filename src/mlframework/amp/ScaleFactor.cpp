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
    case DataType::Float8E4M3FN:
    case DataType::Float8E5M2:
      // One loss scale cannot fit FP8's few exponents to every tensor: FP8 training scales each
      // tensor by its own amax (a scaling recipe), not the loss.
      throw ArgumentError("precision", std::string(ToString(precision)) +
                                           " has no recommended loss scale: FP8 tensors need per-tensor scales");
  }
  throw ArgumentError("precision", "value " + std::to_string(static_cast<int>(precision)) + " is not a DataType");
}

}  // namespace mlframework::amp

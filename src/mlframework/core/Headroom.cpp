#include <mlframework/core/Headroom.hpp>

#include <cmath>
#include <limits>
#include <string>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/Validation.hpp"

namespace mlframework {

double MaxFiniteValue(DataType dtype) {
  if (dtype == DataType::Float32) {
    return static_cast<double>(std::numeric_limits<float>::max());
  }
  if (dtype == DataType::Float16) {
    return 65504.0;
  }
  if (dtype == DataType::BFloat16) {
    return 0x1.fep127;  // 0x7f7f: the largest finite BF16, (2 - 2^-7) * 2^127
  }
  if (dtype == DataType::Float8E4M3FN) {
    return 448.0;
  }
  if (dtype == DataType::Float8E5M2) {
    return 57344.0;
  }
  throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
}

double HeadroomBits(float amax, float scale, DataType gradient_dtype) {
  detail::RequireNonNegative(amax, "amax");
  detail::RequirePositive(scale, "scale");
  if (!IsValid(gradient_dtype)) {
    throw ArgumentError("gradient_dtype",
                        "value " + std::to_string(static_cast<int>(gradient_dtype)) + " is not a DataType");
  }
  if (amax == 0.0f) {
    return std::numeric_limits<double>::infinity();
  }
  return std::log2(MaxFiniteValue(gradient_dtype)) - std::log2(static_cast<double>(amax)) -
         std::log2(static_cast<double>(scale));
}

}  // namespace mlframework

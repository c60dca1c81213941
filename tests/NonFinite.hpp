// The float specials that test files feed to scalers, kernels and checks.
#pragma once

#include <limits>

namespace mlfw_test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace mlfw_test

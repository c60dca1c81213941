#pragma once
/// @file ScaleFactor.hpp
/// @brief Common loss-scale values.

#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// Common scale factors (spec 001's static class: no instances).
class MLFRAMEWORK_EXPORT ScaleFactor {
 public:
  /// Static class: not constructible.
  ScaleFactor() = delete;

  // Spec 001 names (C# public const), kept as they are: NOLINTBEGIN(readability-identifier-naming)
  static constexpr float None = 1.0f;              ///< No scaling (2^0).
  static constexpr float Conservative = 256.0f;    ///< 2^8.
  static constexpr float Moderate = 65536.0f;      ///< 2^16.
  static constexpr float Aggressive = 1048576.0f;  ///< 2^20.
  // NOLINTEND(readability-identifier-naming)

  /// 2^@p exponent, exact. ArgumentError naming `exponent` unless -126 <= exponent <= 127
  /// (the normal FP32 range: a loss scale must be a finite, positive, normal float).
  static float PowerOfTwo(int exponent);
  /// The recommended initial scale for training in @p precision: 65536 for Float16
  /// (its 5-bit exponent underflows small gradients), 1 for BFloat16 and Float32
  /// (FP32's exponent range). ArgumentError for an invalid DataType and for the FP8 dtypes
  /// (Float8E4M3FN, Float8E5M2), which need a scale per tensor, not one loss scale.
  static float GetRecommendedScale(DataType precision);
};

}  // namespace mlframework::amp

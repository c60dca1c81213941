#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>

#include <cmath>
#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::optimizers::mixed_precision {

MixedPrecisionOptions MixedPrecisionOptions::ForFP16() { return MixedPrecisionOptions{}; }

MixedPrecisionOptions MixedPrecisionOptions::ForBF16() {
  MixedPrecisionOptions options;
  options.Precision = DataType::BFloat16;
  options.EnableDynamicLossScaling = false;
  options.InitialLossScale = 1.0f;
  return options;
}

MixedPrecisionOptions MixedPrecisionOptions::ForFP32() {
  MixedPrecisionOptions options;
  options.Precision = DataType::Float32;
  options.EnableDynamicLossScaling = false;
  options.InitialLossScale = 1.0f;
  options.EnableAutoFallback = false;
  return options;
}

amp::ScalePolicy MixedPrecisionOptions::ToScalePolicy() const {
  return amp::ScalePolicy{.InitialScale = InitialLossScale,
                          .GrowthFactor = GrowthFactor,
                          .BackoffFactor = BackoffFactor,
                          .GrowthInterval = GrowthInterval,
                          .MinScale = MinLossScale,
                          .MaxScale = MaxLossScale,
                          .Hysteresis = 1};
}

void MixedPrecisionOptions::Validate() const {
  if (!IsValid(Precision)) {
    throw ArgumentError("Precision", "value " + std::to_string(static_cast<int>(Precision)) +
                                         " is not a DataType (Float32, Float16, BFloat16)");
  }
  if (IsFloat8(Precision)) {
    throw ArgumentError("Precision", std::string(ToString(Precision)) +
                                         " is not a training precision of this optimizer (Float32, Float16, "
                                         "BFloat16): FP8 needs per-tensor scaling");
  }
  // The loss-scale fields are checked by the shared rules, under this struct's field names.
  amp::ValidateScalePolicy(ToScalePolicy(), amp::ScalePolicyFieldNames{.InitialScale = "InitialLossScale",
                                                                       .GrowthFactor = "GrowthFactor",
                                                                       .BackoffFactor = "BackoffFactor",
                                                                       .GrowthInterval = "GrowthInterval",
                                                                       .MinScale = "MinLossScale",
                                                                       .MaxScale = "MaxLossScale",
                                                                       .Hysteresis = "Hysteresis"});
  if (MaxConsecutiveOverflows < 1) {
    throw ArgumentError("MaxConsecutiveOverflows", "must be >= 1, got " + std::to_string(MaxConsecutiveOverflows));
  }
  if (std::isnan(MaxGradNorm)) {
    throw ArgumentError("MaxGradNorm",
                        "must not be NaN (use a value <= 0 or EnableGradientClipping = false "
                        "to disable clipping), got NaN");
  }
  if (EnableDynamicLossScaling && Precision == DataType::Float32) {
    throw ArgumentError("EnableDynamicLossScaling",
                        "true needs a 16-bit Precision, got Precision Float32 (FP32 gradients do not underflow; "
                        "use MixedPrecisionOptions::ForFP32())");
  }
}

}  // namespace mlframework::optimizers::mixed_precision

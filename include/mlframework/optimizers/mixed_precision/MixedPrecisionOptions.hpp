#pragma once
/// @file MixedPrecisionOptions.hpp
/// @brief Configuration shared by DynamicLossScaler, PrecisionManager and GradientConversionLayer.
///
/// Seed specs 000 (DynamicLossScaler) and 003 (GradientConversionLayer) depend on a
/// "MixedPrecisionOptions" (their "Spec 002", in the numbering of the original spec series; our
/// seed 002 is the FSDP spec) that is not among our seed specs; this is its design, derived from
/// what those specs read:
/// the scaler reads the loss-scale fields, the conversion layer the clipping
/// fields, the precision manager the target precision and the fallback
/// fields. The default member values are the FP16 recipe (ForFP16()), so
/// `MixedPrecisionOptions{}` and `MixedPrecisionOptions{.MaxGradNorm = 5.0f}`
/// are ready to use.

#include <cstdint>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework::optimizers::mixed_precision {

/// Options of mixed-precision training (the spec's MixedPrecisionOptions; an aggregate).
struct MLFRAMEWORK_EXPORT MixedPrecisionOptions {
  /// Precision of the model's parameters and gradients during training (Float16, BFloat16 or
  /// Float32). The optimizer always works on FP32 master weights.
  DataType Precision = DataType::Float16;

  /// Whether the loss is scaled and gradients checked for overflow. Needs a 16-bit Precision.
  bool EnableDynamicLossScaling = true;
  /// Loss scale before the first step (within [MinLossScale, MaxLossScale]).
  float InitialLossScale = 65536.0f;
  /// Multiplier applied after GrowthInterval clean steps (> 1).
  float GrowthFactor = 2.0f;
  /// Multiplier applied on overflow (0 < f < 1).
  float BackoffFactor = 0.5f;
  /// Clean steps in a row before the scale grows (>= 1).
  int GrowthInterval = 2000;
  /// Lower bound of the scale (finite, > 0).
  float MinLossScale = 1.0f;
  /// Upper bound of the scale (finite, >= MinLossScale).
  float MaxLossScale = 16777216.0f;
  /// Overflows in a row after which the scaler reports itself unstable (`IsStable == false`,
  /// counting every overflow, as spec 000 does) and, with EnableAutoFallback, the number of
  /// overflows in a row **at MinLossScale** after which training falls back to FP32 (>= 1).
  /// The fallback counts only overflows that happen while the scale is already at its minimum,
  /// as DeepSpeed gives up only at its min_scale: the back-off from a high initial scale (16
  /// overflows from 65536) never triggers it (see PrecisionManager.hpp).
  int MaxConsecutiveOverflows = 10;

  /// Whether GradientConversionLayer clips gradients by their global L2 norm.
  bool EnableGradientClipping = false;
  /// Largest allowed global L2 norm of the unscaled gradients. A value <= 0 disables clipping
  /// (as in spec 003); NaN is rejected, +Inf means "never clip".
  float MaxGradNorm = 1.0f;

  /// Whether PrecisionManager switches training to FP32 after MaxConsecutiveOverflows overflows
  /// in a row at MinLossScale (the loss scaler then stops scaling but keeps checking, so steps
  /// with non-finite gradients are still skipped). Has no effect when Precision is Float32.
  bool EnableAutoFallback = true;

  /// FP16 recipe: scale 65536, growth 2, backoff 0.5, interval 2000, bounds [1, 2^24],
  /// 10 overflows in a row at the minimum scale before fallback, clipping off (max norm 1.0),
  /// auto-fallback on.
  static MixedPrecisionOptions ForFP16();
  /// BF16 recipe: BF16 has FP32's exponent range, so no loss scaling (scale 1); otherwise as ForFP16().
  static MixedPrecisionOptions ForBF16();
  /// Plain FP32 training: no loss scaling (scale 1), no fallback; otherwise as ForFP16().
  static MixedPrecisionOptions ForFP32();

  /// Throws ArgumentError naming the first invalid field and its value: Precision outside the
  /// enum; loss-scale fields that ValidateScalePolicy rejects (reported under these field names);
  /// MaxConsecutiveOverflows < 1; NaN MaxGradNorm; and the invalid combination
  /// EnableDynamicLossScaling with Precision Float32 (FP32 gradients do not underflow).
  void Validate() const;

  /// The loss-scale fields as the shared scaling rules' policy (Hysteresis 1: spec 000 backs off
  /// on every overflow).
  amp::ScalePolicy ToScalePolicy() const;
};

}  // namespace mlframework::optimizers::mixed_precision

#pragma once
/// @file FSDPMixedPrecisionConfig.hpp
/// @brief Mixed-precision settings of FSDP (spec 002, FSDPMixedPrecisionConfig).

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::fsdp {

/// Mixed-precision configuration of FSDP: forward dtype and dynamic loss scaling.
struct FSDPMixedPrecisionConfig {
  bool Enabled = true;                                     ///< Whether mixed precision is enabled.
  TensorDataType ForwardDType = TensorDataType::Float16;   ///< Forward pass dtype (FP16 or BF16).
  TensorDataType BackwardDType = TensorDataType::Float32;  ///< Gradient dtype for the optimizer (FP32).
  bool UseLossScaling = true;                              ///< Whether to use loss scaling.
  float InitialLossScale = 2.0f;                           ///< Initial loss scale.
  float MinLossScale = 1.0f;                               ///< Minimum loss scale.
  float MaxLossScale = 65536.0f;                           ///< Maximum loss scale.
  float LossScaleGrowthFactor = 2.0f;                      ///< Loss scale growth factor.
  float LossScaleBackoffFactor = 0.5f;                     ///< Loss scale backoff factor.
  int LossScaleSteps = 2000;                               ///< Clean steps before the loss scale grows.

  /// The spec's checks (ForwardDType FP16/BF16, BackwardDType FP32, InitialLossScale within
  /// [MinLossScale, MaxLossScale]) and the shared policy's (finite positive scales, growth > 1,
  /// backoff in (0, 1), LossScaleSteps >= 1): ArgumentError naming the field and its value.
  MLFRAMEWORK_EXPORT void Validate() const;
  /// The shared scaling rules these fields describe (hysteresis 1, as the spec backs off at once).
  MLFRAMEWORK_EXPORT amp::ScalePolicy ToScalePolicy() const;
};

}  // namespace mlframework::distributed::fsdp

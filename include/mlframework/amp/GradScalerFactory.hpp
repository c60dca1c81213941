#pragma once
/// @file GradScalerFactory.hpp
/// @brief GradScalers with common configurations.

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// Factory for GradScaler with spec 004's defaults (static class: no instances).
///
/// @code
/// auto scaler = amp::GradScalerFactory::CreateFromConfig({.InitialScale = 32768.0f, .GrowthInterval = 3000});
/// @endcode
class MLFRAMEWORK_EXPORT GradScalerFactory {
 public:
  GradScalerFactory() = delete;
  /// Dynamic scaler with DynamicScalerConfig's defaults (recommended for most uses).
  static GradScaler CreateDefault();
  /// Static scaler, scale 65536.
  static GradScaler CreateStatic();
  /// Static scaler with @p scale (ArgumentError when not finite and positive).
  static GradScaler CreateStatic(float scale);
  /// Dynamic scaler that grows slowly: GrowthInterval 5000.
  static GradScaler CreateConservative();
  /// Dynamic scaler that grows fast: GrowthInterval 1000.
  static GradScaler CreateAggressive();
  /// Dynamic scaler for FP16 training: GrowthInterval 2000, initial scale 65536.
  static GradScaler CreateForFP16();
  /// Static scaler with scale 1 for BF16 training (BF16 has FP32's exponent range).
  static GradScaler CreateForBF16();
  /// Dynamic scaler configured by @p config (ArgumentError naming an invalid field).
  static GradScaler CreateFromConfig(DynamicScalerConfig config);
};

}  // namespace mlframework::amp

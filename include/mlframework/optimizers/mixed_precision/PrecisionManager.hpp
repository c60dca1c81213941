#pragma once
/// @file PrecisionManager.hpp
/// @brief Target precision, FP32 master weights and the auto-fallback to FP32.
///
/// Spec 003 depends on a spec 004 "PrecisionManager" that we do not have;
/// this is its design. The manager owns three things:
///
/// 1. The target precision: the dtype the model's parameters and gradients
///    use (MixedPrecisionOptions::Precision, or Float32 after a fallback).
///    ConvertToTargetPrecision() makes parameter copies in it, ConvertToFP32()
///    widens gradients for the optimizer with one fused cast.
/// 2. The FP32 master copy of the parameters: InitializeMasterWeights() takes
///    a copy, the optimizer updates MasterWeights() in FP32, and
///    CopyMasterToModel() rounds them back into the model's tensors in one
///    fused pass (the usual mixed-precision loop: FP16 forward/backward,
///    FP32 update).
/// 3. The auto-fallback that spec 000 prepares for: CheckFallback() is
///    called after each scale update (GradientConversionLayer does it); when
///    EnableAutoFallback is set and the scaler has seen
///    MaxConsecutiveOverflows overflows in a row, the target precision
///    becomes Float32 and the scaler stops scaling, so training continues in
///    FP32. The event shows in the stats of the scaler and of the layer.

#include <cstddef>
#include <span>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>

namespace mlframework::optimizers::mixed_precision {

class DynamicLossScaler;

/// Owns the target precision, the FP32 master weights and the auto-fallback (spec 004, designed here).
class MLFRAMEWORK_EXPORT PrecisionManager {
 public:
  /// Manager for @p options (validated: ArgumentError naming the field otherwise).
  explicit PrecisionManager(const MixedPrecisionOptions& options);
  /// Manager for MixedPrecisionOptions::ForFP16().
  PrecisionManager();

  /// The dtype parameters and gradients should use now: the configured precision, or Float32
  /// after the auto-fallback.
  DataType TargetPrecision() const noexcept { return target_; }
  /// TargetPrecision() is a 16-bit type.
  bool IsMixedPrecision() const noexcept { return target_ != DataType::Float32; }
  /// The auto-fallback to FP32 has happened.
  bool HasFallenBack() const noexcept { return fallen_back_; }
  /// The options this manager was built with.
  const MixedPrecisionOptions& Options() const noexcept { return options_; }

  /// The gradients widened to FP32 for the optimizer. FP16/BF16 tensors go through one fused cast
  /// into new FP32 tensors; FP32 tensors are returned as they are (no copy).
  /// ArgumentNullError naming a null entry.
  GradientMap ConvertToFP32(const GradientMap& gradients) const;

  /// New tensors holding @p tensors rounded into TargetPrecision() (one fused cast; FP32 values
  /// beyond the FP16 range become infinities, as the dtype dictates). ArgumentNullError naming a null entry.
  GradientMap ConvertToTargetPrecision(const GradientMap& tensors) const;

  /// Takes FP32 master copies of @p parameters (always new tensors, also for FP32 parameters),
  /// replacing any previous ones. ArgumentNullError naming a null entry; unchanged on error.
  void InitializeMasterWeights(const GradientMap& parameters);
  /// The FP32 master weights (empty before InitializeMasterWeights()); the optimizer updates these.
  const GradientMap& MasterWeights() const noexcept { return master_; }
  /// InitializeMasterWeights() was called.
  bool HasMasterWeights() const noexcept { return !master_.empty(); }
  /// Rounds the master weights into @p model_parameters (each in its own dtype), one fused pass.
  /// The names must be exactly those of the master weights and the shapes must match:
  /// ArgumentError naming the first mismatch, InvalidOperationError before InitializeMasterWeights();
  /// nothing is written on error.
  void CopyMasterToModel(const GradientMap& model_parameters) const;

  /// The auto-fallback rule, called after each scale update. When EnableAutoFallback is set, the
  /// precision is 16-bit and `scaler.ConsecutiveOverflows() >= MaxConsecutiveOverflows`, switches
  /// TargetPrecision() to Float32 and calls `scaler.StopScaling()`. Returns true on the call that
  /// falls back, false otherwise (also once fallen back).
  bool CheckFallback(DynamicLossScaler& scaler);

  /// Versioned, checksummed blob of the fallback state (the master weights are parameters and
  /// belong in the model checkpoint).
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(); ArgumentError naming `state` otherwise, unchanged on error.
  void LoadStateDict(std::span<const std::byte> state);

 private:
  MixedPrecisionOptions options_;
  DataType target_;
  bool fallen_back_ = false;
  GradientMap master_;
};

}  // namespace mlframework::optimizers::mixed_precision

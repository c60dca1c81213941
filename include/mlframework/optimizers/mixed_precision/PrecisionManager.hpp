#pragma once
/// @file PrecisionManager.hpp
/// @brief Target precision, FP32 master weights and the auto-fallback to FP32.
///
/// The seed spec 003 (GradientConversionLayer) depends on a "PrecisionManager" (its "Spec 004",
/// in the numbering of the original spec series) that is not among our seed specs; this is its
/// design. The manager owns three things:
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
/// 3. The auto-fallback that seed spec 000 prepares for: CheckFallback() is
///    called after each scale update (GradientConversionLayer does it). The
///    trigger follows DeepSpeed, which gives up only when an overflow happens
///    while the scale is already at its minimum: with EnableAutoFallback, the
///    manager counts the overflows in a row that happen at MinLossScale
///    (OverflowsAtMinScale()) and falls back when they reach
///    MaxConsecutiveOverflows. The back-off from a high initial scale (2^32
///    in Megatron-LM and DeepSpeed, about 16 overflows in a row before the
///    first kept step) can therefore never trigger it, however long it is.
///    On the fallback the target precision becomes Float32 and the scaler
///    stops scaling but keeps checking, so steps with non-finite gradients
///    are still skipped.
///
/// What the caller does after the fallback (GradientProcessingResult::FellBackToFP32 on the
/// step it happens, HasFallenBack() from then on): take FP32Parameters() as the model's
/// parameters (the FP32 master weights when there are some, else the model's values widened),
/// run forward and backward in FP32 from then on, and keep calling ProcessGradients: the loss is
/// no longer scaled (ScaleLoss returns it as it is) and a step with non-finite gradients is still
/// skipped.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ScalePolicy.hpp>
#include <mlframework/export.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>

namespace mlframework::optimizers::mixed_precision {

class DynamicLossScaler;

/// Owns the target precision, the FP32 master weights and the auto-fallback (designed here: no seed spec).
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

  /// New FP32 tensors holding the parameters to train on after the fallback (or whenever FP32
  /// copies are wanted): the master weights' values when InitializeMasterWeights() was called,
  /// else @p model_parameters widened to FP32 (exact: every FP16/BF16 value is an FP32 value).
  /// With master weights the names must be exactly theirs and the shapes must match (ArgumentError
  /// naming the first mismatch, as CopyMasterToModel); ArgumentNullError naming a null entry.
  GradientMap FP32Parameters(const GradientMap& model_parameters) const;

  /// The auto-fallback rule, called after each scale update with the scaler that made it. When
  /// EnableAutoFallback is set and the precision is 16-bit, counts the overflows in a row that
  /// happened while the scale was already at MinLossScale (OverflowsAtMinScale()); when they
  /// reach MaxConsecutiveOverflows, switches TargetPrecision() to Float32 and calls
  /// `scaler.StopScaling()`. Returns true on the call that falls back, false otherwise (also once
  /// fallen back). Reads the scaler's state once (on a device: the read the caller's step already
  /// made, cached), so it costs nothing on the device.
  ///
  /// The count needs the scale before each overflow. The manager remembers the state it saw at
  /// its previous call, so calling it after every update counts exactly; when updates were made
  /// without a call, it is exact while they were all overflows, and otherwise it counts only the
  /// overflows that were certainly at the minimum (a run that began at an unseen scale is taken
  /// to have begun at MaxLossScale), so a fallback is never early.
  bool CheckFallback(DynamicLossScaler& scaler);

  /// Overflows in a row that happened while the scale was already at MinLossScale, as counted by
  /// the last CheckFallback(): 0 after a clean step and while the auto-fallback is off (nothing is
  /// counted then); once the fallback happened, the count that triggered it.
  std::int64_t OverflowsAtMinScale() const noexcept { return overflows_at_min_; }
  /// The scaler's step (ScaleState::TotalSteps, counted from 1) on which the fallback happened;
  /// 0 before it, and for a fallback restored from a version 1 blob, which did not record it.
  std::int64_t FallbackStep() const noexcept { return fallback_step_; }

  /// Versioned, checksummed blob of the fallback state: the flag, FallbackStep(),
  /// OverflowsAtMinScale() and the scaler state last seen (version 2; the master weights are
  /// parameters and belong in the model checkpoint).
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(), version 2 or 1. A version 1 blob holds only the flag: the
  /// scaler state last seen is then unknown, and the next CheckFallback() counts only the
  /// overflows certainly at the minimum (see there). ArgumentError naming `state` otherwise,
  /// unchanged on error.
  void LoadStateDict(std::span<const std::byte> state);

 private:
  MixedPrecisionOptions options_;
  DataType target_;
  // The master weights in name order, after checking @p model_parameters names exactly them with
  // the same shapes (ArgumentError naming the first mismatch, ArgumentNullError a null entry).
  std::vector<TensorPtr> MatchingMasterWeights(const GradientMap& model_parameters) const;
  // Advances overflows_at_min_ to the scaler state @p now under the scaler's @p policy (see CheckFallback).
  void CountOverflowsAtMin(const ScaleState& now, const ScalePolicy& policy);

  bool fallen_back_ = false;
  std::int64_t overflows_at_min_ = 0;
  std::int64_t fallback_step_ = 0;
  // The scaler state at the previous CheckFallback(); empty when unknown (after a version 1 blob).
  std::optional<ScaleState> seen_;
  GradientMap master_;
};

}  // namespace mlframework::optimizers::mixed_precision

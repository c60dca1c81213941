#pragma once
/// @file DynamicLossScaler.hpp
/// @brief Spec 000: the dynamic loss scaler of the mixed-precision optimizer stack.
///
/// The scaling rules are not written here: the scaler keeps an amp::ScaleState
/// and advances it with amp::UpdateScaleState() under the policy built from
/// MixedPrecisionOptions (MixedPrecisionOptions::ToScalePolicy), exactly like
/// amp::DynamicLossScaler and the FSDP manager, so all three follow the same
/// trajectory when configured alike.
///
/// Auto-fallback: the scaler only reports instability (`IsStable` in its
/// stats, ConsecutiveOverflows() >= MaxConsecutiveOverflows); PrecisionManager
/// decides to fall back to FP32 and then calls StopScaling(). A stopped scaler
/// is disabled (IsEnabled() false, scale 1) until a loaded state says otherwise;
/// Reset() clears counters but keeps the fallback, because the fallback is a
/// change of training precision, not a statistic.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>

namespace mlframework::optimizers::mixed_precision {

/// Statistics about the loss scaler (spec 000's LossScalerStats; an aggregate).
struct MLFRAMEWORK_EXPORT LossScalerStats {
  float CurrentScale = 0.0f;                 ///< Current loss scale.
  std::int64_t StepsSinceLastOverflow = 0;   ///< Clean steps since the last overflow or growth.
  std::int64_t ConsecutiveOverflows = 0;     ///< Overflows in a row.
  std::int64_t TotalOverflows = 0;           ///< Overflows since creation or Reset().
  std::int64_t GrowthInterval = 0;           ///< Clean steps between growths (from the options).
  std::int64_t MaxConsecutiveOverflows = 0;  ///< Instability threshold (from the options).
  bool IsStable = true;                      ///< ConsecutiveOverflows < MaxConsecutiveOverflows.
  bool FellBackToFP32 = false;               ///< Scaling was stopped by the auto-fallback to FP32.

  /// "Scale: 65536.00, Steps since overflow: 0, Consecutive overflows: 0, Total overflows: 0,
  /// Stable: True", exactly as spec 000 formats it (2 decimals, C# booleans); after an
  /// auto-fallback ", Fell back to FP32" is appended.
  std::string ToString() const;
};

/// Dynamically adjusts the loss scale to prevent FP16 gradient underflow (spec 000).
class MLFRAMEWORK_EXPORT DynamicLossScaler {
 public:
  /// Scaler for @p options (validated: ArgumentError naming the field otherwise).
  explicit DynamicLossScaler(const MixedPrecisionOptions& options);
  /// Scaler for MixedPrecisionOptions::ForFP16().
  DynamicLossScaler();

  /// Current loss scale factor.
  float CurrentScale() const noexcept { return state_.Scale; }
  /// Number of consecutive overflows detected.
  std::int64_t ConsecutiveOverflows() const noexcept { return state_.ConsecutiveOverflows; }
  /// Number of successful steps since the last overflow (or the last growth).
  std::int64_t StepsSinceLastOverflow() const noexcept { return state_.StepsSinceLastOverflow; }
  /// Total number of overflows detected since creation or Reset().
  std::int64_t TotalOverflows() const noexcept { return state_.TotalOverflows; }
  /// Whether dynamic loss scaling is active: enabled in the options and not stopped by a fallback.
  bool IsEnabled() const noexcept { return options_.EnableDynamicLossScaling && !stopped_; }
  /// Overflows in a row that make the scaler unstable (from the options).
  int MaxConsecutiveOverflows() const noexcept { return options_.MaxConsecutiveOverflows; }
  /// ConsecutiveOverflows() < MaxConsecutiveOverflows().
  bool IsStable() const noexcept { return state_.ConsecutiveOverflows < options_.MaxConsecutiveOverflows; }
  /// True after StopScaling() (the auto-fallback to FP32).
  bool FellBackToFP32() const noexcept { return stopped_; }
  /// The options this scaler was built with.
  const MixedPrecisionOptions& Options() const noexcept { return options_; }
  /// The shared scaling policy derived from the options.
  const amp::ScalePolicy& Policy() const noexcept { return policy_; }
  /// The full scaling state (scale and counters), as the shared rules see it.
  const amp::ScaleState& State() const noexcept { return state_; }

  /// `loss * CurrentScale()` as a new tensor, or @p loss itself when disabled.
  /// ArgumentNullError for a null @p loss.
  TensorPtr ScaleLoss(const TensorPtr& loss) const;

  /// Gradients multiplied by the inverse scale (computed in double), or @p gradients itself when
  /// disabled. FP32 gradients are unscaled in place (the same tensors are returned, fused with
  /// a non-finite check); FP16/BF16 gradients are unscaled into new FP32 tensors in one fused cast,
  /// because unscaling into FP16 would re-create the underflow that scaling avoided.
  /// ArgumentNullError naming a null entry.
  GradientMap UnscaleGradients(const GradientMap& gradients) const;

  /// True when any gradient holds NaN or an infinity (one fused read pass with early exit);
  /// false when disabled. ArgumentNullError naming a null entry.
  bool CheckOverflow(const GradientMap& gradients) const;

  /// Advances the scale by the shared rules; returns true when the step must be skipped
  /// (@p hadOverflow). Returns false and changes nothing when disabled.
  bool UpdateScale(bool hadOverflow);

  /// CheckOverflow() then UpdateScale(); returns whether to skip the step.
  bool CheckOverflowAndUpdate(const GradientMap& gradients);

  /// Back to the initial scale with all counters cleared. A fallback stays in force (see file notes).
  void Reset();

  /// Snapshot of the scaler's behaviour.
  LossScalerStats GetStats() const;

  /// Stops loss scaling for good (the auto-fallback to FP32): IsEnabled() becomes false and the
  /// scale becomes 1; the counters are kept so the overflow history stays visible. Idempotent.
  void StopScaling() noexcept;

  /// Versioned, checksummed blob of the scale, the counters and the fallback flag.
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(). ArgumentError naming `state` for a corrupt or foreign blob,
  /// or a scale outside [MinLossScale, MaxLossScale] of this scaler's options; the scaler is
  /// unchanged on error.
  void LoadStateDict(std::span<const std::byte> state);

 private:
  MixedPrecisionOptions options_;
  amp::ScalePolicy policy_;
  amp::ScaleState state_;
  bool stopped_ = false;
};

}  // namespace mlframework::optimizers::mixed_precision

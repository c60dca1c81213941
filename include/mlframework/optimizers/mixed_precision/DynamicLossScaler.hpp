#pragma once
/// @file DynamicLossScaler.hpp
/// @brief Spec 000: the dynamic loss scaler of the mixed-precision optimizer stack.
///
/// The scaling rules are not written here: the scaler keeps a ScaleState
/// (core/ScalePolicy.hpp) and advances it with UpdateScaleState() under the policy built from
/// MixedPrecisionOptions (MixedPrecisionOptions::ToScalePolicy), exactly like
/// amp::DynamicLossScaler and the FSDP manager, so all three follow the same
/// trajectory when configured alike.
///
/// Auto-fallback: the scaler only reports instability (`IsStable` in its
/// stats, ConsecutiveOverflows() >= MaxConsecutiveOverflows, every overflow
/// counted as spec 000 does); PrecisionManager decides to fall back to FP32,
/// on MaxConsecutiveOverflows overflows in a row at MinLossScale (its State()
/// tells it the scale), and then calls StopScaling(). A stopped scaler
/// no longer scales (IsEnabled() false, scale 1) but still checks: IsChecking()
/// stays true, CheckOverflow() still looks at the gradients and UpdateScale()
/// still counts overflows and returns true for them, so a step with non-finite
/// gradients is skipped after the fallback as before it. Reset() clears counters
/// but keeps the fallback, because the fallback is a change of training
/// precision, not a statistic.
///
/// The state lives where the gradients' scaling backend keeps it (core/DeviceScaling.hpp): in
/// host memory for CPU and user tensors; on a device (e.g. CUDA tensors) it moves to the
/// gradients' device on first use and stays there as the single truth, as in
/// amp::DynamicLossScaler, and every call runs the same code on both: ScaleLoss() on a
/// tensor of that device, UnscaleGradients(), RecordOverflow(), UpdateScale(bool)
/// and UpdateScaleFromRecord() never wait for the device. The accessors
/// (CurrentScale(), the counters, IsStable(), State(), GetStats(), StateDict())
/// read the state from the device; that read is cached until the next update,
/// so asking for several of them between two steps costs one synchronisation.
/// CheckOverflow() and CheckOverflowAndUpdate() return a host bool, so they
/// read the flag (docs/cuda-backend.md lists every call).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ScalePolicy.hpp>
#include <mlframework/export.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>

namespace mlframework::detail {
class ScaleStateOwner;
}  // namespace mlframework::detail

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
  /// Releases the state (device memory included).
  ~DynamicLossScaler();
  /// Copies options and state; the copy's state is on the host (read from the device if needed).
  DynamicLossScaler(const DynamicLossScaler& other);
  /// Copy assignment (same rules as the copy constructor).
  DynamicLossScaler& operator=(const DynamicLossScaler& other);

  /// Current loss scale factor (read from the device when the state lives there).
  float CurrentScale() const;
  /// Number of consecutive overflows detected.
  std::int64_t ConsecutiveOverflows() const;
  /// Number of successful steps since the last overflow (or the last growth).
  std::int64_t StepsSinceLastOverflow() const;
  /// Total number of overflows detected since creation or Reset().
  std::int64_t TotalOverflows() const;
  /// Whether dynamic loss scaling is active: enabled in the options and not stopped by a fallback.
  bool IsEnabled() const noexcept { return options_.EnableDynamicLossScaling && !stopped_; }
  /// Whether gradients are checked for overflow: EnableDynamicLossScaling in the options, also
  /// after a fallback stopped the scaling (the checks then go on at scale 1).
  bool IsChecking() const noexcept { return options_.EnableDynamicLossScaling; }
  /// Overflows in a row that make the scaler unstable (from the options).
  int MaxConsecutiveOverflows() const noexcept { return options_.MaxConsecutiveOverflows; }
  /// ConsecutiveOverflows() < MaxConsecutiveOverflows().
  bool IsStable() const;
  /// True after StopScaling() (the auto-fallback to FP32).
  bool FellBackToFP32() const noexcept { return stopped_; }
  /// The options this scaler was built with.
  const MixedPrecisionOptions& Options() const noexcept { return options_; }
  /// The shared scaling policy derived from the options.
  const ScalePolicy& Policy() const noexcept { return policy_; }
  /// The full scaling state (scale and counters), as the shared rules see it.
  ScaleState State() const;
  /// The state while it lives in device memory, else null (for reading its flag on the device).
  DeviceScaleState* DeviceState() const noexcept;

  /// `loss * CurrentScale()` as a new tensor, or @p loss itself when disabled.
  /// ArgumentNullError for a null @p loss.
  TensorPtr ScaleLoss(const TensorPtr& loss) const;

  /// Gradients multiplied by the inverse scale (computed in double), or @p gradients itself when
  /// disabled. FP32 gradients are unscaled in place (the same tensors are returned, fused with
  /// a non-finite check); FP16/BF16 gradients are unscaled into new FP32 tensors in one fused cast,
  /// because unscaling into FP16 would re-create the underflow that scaling avoided.
  /// ArgumentNullError naming a null entry. Every call that takes gradients refuses FP8 ones
  /// (ArgumentError naming the gradient and its dtype): FP8 needs per-tensor scales.
  GradientMap UnscaleGradients(const GradientMap& gradients) const;

  /// True when any gradient holds NaN or an infinity (one fused read pass with early exit);
  /// false when not IsChecking(). ArgumentNullError naming a null entry.
  bool CheckOverflow(const GradientMap& gradients) const;

  /// Advances the scale by the shared rules; returns true when the step must be skipped
  /// (@p hadOverflow). After a fallback the scale stays 1 but the counters still advance and an
  /// overflow still returns true. Returns false and changes nothing when not IsChecking().
  bool UpdateScale(bool hadOverflow);

  /// CheckOverflow() then UpdateScale(); returns whether to skip the step.
  /// On a device: one check into the flag, the update on the device, one read of the result.
  bool CheckOverflowAndUpdate(const GradientMap& gradients);
  /// ORs into the scaler's record whether any gradient holds NaN or an infinity (read only; on a
  /// device into the state's flag, without a synchronisation). Nothing happens when not IsChecking().
  void RecordOverflow(const GradientMap& gradients) const;
  /// ORs into the record whether any of @p tensors holds NaN or an infinity, like the map form.
  void RecordOverflow(std::span<const TensorPtr> tensors) const;
  /// Multiplies @p in_place by the inverse scale in place and writes `dst[i] = src[i]` times the
  /// inverse scale into @p dst (FP32 tensors of the same backend, e.g. from Float32OutputsLike()),
  /// with the scale read where the state lives; ORs "a non-finite value written" into the record.
  /// Never waits for a device. Runs even when not IsEnabled() (the scale is then 1 after a
  /// fallback, the initial scale when scaling is off in the options).
  void UnscaleAndRecordOverflow(std::span<const TensorPtr> in_place, std::span<const TensorPtr> src,
                                std::span<const TensorPtr> dst) const;
  /// Clears the record and the amax (no synchronisation).
  void ClearRecordedOverflow() const;
  /// Turns amax tracking on the scaler's state on or off (DeviceScaleState, "Amax"): while on,
  /// UnscaleAndRecordOverflow() also takes the largest finite absolute value it writes.
  void SetAmaxTracking(bool on) const;
  /// The amax of the unscales since the record was cleared (on a device: one synchronisation);
  /// nullopt while tracking is off.
  std::optional<float> RecordedAmax() const;
  /// Moves the state where the scaling backend of @p gradients keeps it, as the first operation on
  /// them would (one synchronisation onto or off a device). ArgumentError naming `gradients[i]`
  /// for a list that mixes a device with other tensors, with nothing changed: a caller can fail
  /// before it writes anything.
  void MoveStateTo(std::span<const TensorPtr> gradients) const;
  /// Advances the scale with the record and clears it (on a device the update kernel reads the
  /// flag there: no synchronisation; after a fallback it reads the flag). Not IsChecking(): only
  /// clears the record.
  void UpdateScaleFromRecord();

  /// Back to the initial scale with all counters cleared. A fallback stays in force (see file notes).
  void Reset();

  /// Snapshot of the scaler's behaviour.
  LossScalerStats GetStats() const;

  /// Stops loss scaling for good (the auto-fallback to FP32): IsEnabled() becomes false and the
  /// scale becomes 1; the counters are kept so the overflow history stays visible, and overflow
  /// checks go on (IsChecking()). Idempotent.
  void StopScaling();

  /// Versioned, checksummed blob of the scale, the counters, the fallback flag and the
  /// configuration PyTorch's GradScaler saves: GrowthFactor, BackoffFactor, GrowthInterval (version 2).
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(), version 2 or 1. The blob's configuration wins, as in
  /// PyTorch's `GradScaler.load_state_dict`: the scale, the counters (StepsSinceLastOverflow is
  /// PyTorch's growth tracker), GrowthFactor, BackoffFactor and GrowthInterval become the blob's
  /// (Options() and Policy() show them); the other options (MinLossScale, MaxLossScale, ...) and
  /// amax tracking stay this scaler's. A version 1 blob holds no configuration: the options stay.
  /// ArgumentError naming `state` for a corrupt or foreign blob, an invalid configuration, or a
  /// scale outside [MinLossScale, MaxLossScale] of this scaler's options; the scaler is unchanged on error.
  void LoadStateDict(std::span<const std::byte> state);

 private:
  MixedPrecisionOptions options_;
  ScalePolicy policy_;
  // The single owner of the state (src/mlframework/core/ScaleStateOwner.hpp); mutable because a
  // const call on device gradients may move the state to their device.
  mutable std::unique_ptr<mlframework::detail::ScaleStateOwner> owner_;
  bool stopped_ = false;
};

}  // namespace mlframework::optimizers::mixed_precision

#pragma once
/// @file DynamicLossScaler.hpp
/// @brief Loss scaling that backs off on overflow and grows after a run of clean steps.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// Configuration of DynamicLossScaler (spec 004's DynamicScalerConfig).
struct DynamicScalerConfig {
  float InitialScale = 65536.0f;  ///< Scale before the first step.
  float GrowthFactor = 2.0f;      ///< Multiplier after GrowthInterval clean steps (> 1).
  float BackoffFactor = 0.5f;     ///< Multiplier on overflow (strictly between 0 and 1).
  int GrowthInterval = 2000;      ///< Consecutive clean steps before growth (>= 1).
  float MinScale = 1.0f;          ///< Lower bound of the scale (> 0).
  float MaxScale = 16777216.0f;   ///< Upper bound of the scale (2^24; finite, >= MinScale).
  int Hysteresis = 1;             ///< Overflows in a row before backing off (>= 1).
  bool Enabled = true;            ///< Whether scaling is applied.

  /// The scaling rules as the shared policy type.
  MLFRAMEWORK_EXPORT ScalePolicy ToScalePolicy() const;
  /// ArgumentError naming the first invalid field and its value (ValidateScalePolicy's checks).
  MLFRAMEWORK_EXPORT void Validate() const;
};

/// Where a DynamicLossScaler stands.
struct DynamicScalerStats {
  float CurrentScale = 0.0f;                ///< The scale now.
  std::int64_t StepsSinceLastOverflow = 0;  ///< Clean steps since the last overflow or growth.
  std::int64_t ConsecutiveOverflows = 0;    ///< Overflows in a row (0 after a clean step).
  std::int64_t TotalOverflows = 0;          ///< Updates that reported an overflow.
  std::int64_t TotalSteps = 0;              ///< Updates (UpdateScale calls while enabled).
  std::int64_t SkippedSteps = 0;            ///< Steps skipped because they overflowed (every overflow is skipped).
  std::int64_t SuccessfulSteps = 0;         ///< TotalSteps - SkippedSteps.
  float MinScale = 0.0f;                    ///< Configured lower bound.
  float MaxScale = 0.0f;                    ///< Configured upper bound.
  int GrowthInterval = 0;                   ///< Configured growth interval.
};

/// Dynamic loss scaler: the rules of ScalePolicy.hpp (UpdateScaleState), behind ILossScaler.
///
/// Unscaling works as in StaticLossScaler (inverse scale in double; FP32 gradients in
/// place, FP16/BF16 into FP32 buffers owned by the scaler, reused from the next ScaleLoss() on,
/// and within a step only once the earlier result is released; overflow check fused).
/// A disabled scaler passes values through, reports no overflow and ignores UpdateScale().
/// FP8 gradients are refused as there (ArgumentError naming the gradient and its dtype).
///
/// **Device-resident state.** The state starts on the host. The first unscale, check or update
/// on gradients whose backend keeps scaling state on a device (CUDA tensors) moves it to their device
/// (DeviceScalingBackend::CreateScaleState, one synchronisation); from then on the device copy is
/// the single truth: the inverse scale is read on the device, overflow goes into the device
/// found-inf flag and the scale update runs there, so no step-time call waits for the device.
/// Host gradients later (or another device) move the state back (one synchronisation). One call
/// takes gradients of one device-scaling backend and device, or host tensors only (ArgumentError
/// naming the first entry that differs otherwise).
///
/// Which calls synchronise with a device-owned state (docs/cuda-backend.md has the table):
/// - never: ScaleLoss() on a tensor of the state's device, UnscaleGradients(),
///   UnscaleAndRecordOverflow(), UnscaleGradient(), RecordOverflow(), MarkOverflow(),
///   ClearRecordedOverflow(), UpdateScale(bool), UpdateScaleFromRecord();
/// - they return a value read on the device: CurrentScale() (and its alias Scale()), State(), GetStats(),
///   StateDict(), GetScaleTensor(), GetInverseScaleTensor(), RecordedOverflow(), copying;
///   CheckOverflow() and UnscaleGradientsAndCheck() (they return this call's own overflow);
/// - they write the state: Reset() (and the first move to the device).
///
/// **The record** is the found-inf result of the current step: the *Record* calls OR into it
/// (on the device, the flag), UpdateScaleFromRecord() consumes and clears it. The
/// bool-returning CheckOverflow() / UnscaleGradientsAndCheck() leave it unchanged;
/// UpdateScale(bool) uses its argument, not the record, and clears the record.
///
/// Usage:
/// @code
/// amp::DynamicLossScaler scaler({.InitialScale = 32768.0f, .GrowthInterval = 1000});
/// auto [grads32, overflow] = scaler.UnscaleGradientsAndCheck(grads);
/// scaler.UpdateScale(overflow);
/// @endcode
class MLFRAMEWORK_EXPORT DynamicLossScaler final : public ILossScaler {
 public:
  /// A scaler configured by @p config; ArgumentError naming the invalid field otherwise.
  explicit DynamicLossScaler(DynamicScalerConfig config = {});
  /// Releases the cached tensors and buffers.
  ~DynamicLossScaler() override;
  /// Copies the configuration and state (the cached tensors and buffers are not shared).
  DynamicLossScaler(const DynamicLossScaler& other);
  /// Copy assignment (the cached tensors and buffers are not shared).
  DynamicLossScaler& operator=(const DynamicLossScaler& other);

  /// The current scale (ILossScaler::Scale() is spec 001's name for it).
  float CurrentScale() const override;
  /// Whether scaling is applied (ILossScaler::Enabled() is spec 001's name for it).
  bool IsEnabled() const override;
  /// Enables or disables scaling (do it between iterations); returns true (the scaler has its own switch).
  bool SetEnabled(bool enabled) override;
  /// The configuration.
  const DynamicScalerConfig& Config() const noexcept;
  /// The full state of the shared rules (a copy: read from the device when device-owned).
  ScaleState State() const;
  /// The device-resident state while the device owns it (see the class notes), else null.
  /// A fused optimizer may read its found-inf flag on the device to skip a step without a host
  /// read; the scaler keeps ownership.
  DeviceScaleState* DeviceState() const noexcept;

  /// `loss * scale` in the loss's dtype; the loss itself when disabled. ArgumentNullError for null.
  TensorPtr ScaleLoss(const TensorPtr& loss) override;
  /// Unscaled gradients (FP32 in place, FP16/BF16 into FP32 buffers); the same map when disabled.
  /// Same as UnscaleAndRecordOverflow(): overflow goes into the record; no synchronisation.
  GradientMap UnscaleGradients(const GradientMap& gradients) override;
  /// Unscales like UnscaleGradients() and ORs "any non-finite value written" into the record
  /// (the device flag on a device path: no synchronisation). Nothing happens when disabled.
  GradientMap UnscaleAndRecordOverflow(const GradientMap& gradients) override;
  /// One gradient unscaled: an FP32 tensor in place (returned), an FP16/BF16 one into a new FP32
  /// tensor; its overflow goes into the record.
  TensorPtr UnscaleGradient(const TensorPtr& gradient);
  /// True when any gradient holds Inf or NaN (one read pass, stops early); false when disabled.
  bool CheckOverflow(const GradientMap& gradients) override;
  /// True when @p gradient holds Inf or NaN; false when disabled.
  bool CheckOverflow(const TensorPtr& gradient);
  /// ORs into the record whether any gradient holds Inf or NaN (read only; no synchronisation).
  void RecordOverflow(const GradientMap& gradients);
  /// Records an overflow found elsewhere (another rank, another backend); no synchronisation.
  void MarkOverflow() override;
  /// The record of this step (reads the device flag when device-owned); false when disabled.
  bool RecordedOverflow() const override;
  /// Clears the record and the amax (no synchronisation).
  void ClearRecordedOverflow() override;
  /// Turns amax tracking on the scaler's state on or off (DeviceScaleState, "Amax"); true.
  bool SetAmaxTracking(bool on) override;
  /// The amax of the gradients unscaled since the record was cleared (on a device: reads it, one
  /// synchronisation); nullopt while tracking is off.
  std::optional<float> RecordedAmax() const override;
  /// Advances the rules by one step (backoff on overflow, growth after the interval) with
  /// @p overflow, and clears the record; no effect when disabled. No synchronisation.
  void UpdateScale(bool overflow) override;
  /// Advances the rules by one step with the record, and clears it; on the device the update
  /// kernel reads the flag there (no synchronisation). Disabled: only clears the record.
  void UpdateScaleFromRecord() override;
  /// Unscale and overflow check in one pass over memory.
  UnscaledGradients UnscaleGradientsAndCheck(const GradientMap& gradients) override;

  /// The factor ScaleLoss multiplies by, as an FP32 scalar cached until the scale changes (1 when disabled).
  TensorPtr GetScaleTensor() override;
  /// The inverse factor as an FP32 scalar cached until the scale changes (1 when disabled).
  TensorPtr GetInverseScaleTensor();

  /// Statistics of the run so far (always present for this scaler).
  std::optional<DynamicScalerStats> GetStats() const override;
  /// Back to the initial scale with all counters cleared (configuration and enabled flag kept).
  void Reset() override;

  /// Versioned blob of the configuration and the state.
  std::vector<std::byte> StateDict() const override;
  /// Restores StateDict(). The blob's configuration wins, as in PyTorch's
  /// `GradScaler.load_state_dict`: Config() becomes the blob's (every DynamicScalerConfig field,
  /// Enabled included), with the blob's scale and counters; amax tracking stays as it was.
  /// ArgumentError for a truncated, corrupted, foreign or invalid blob (state unchanged).
  void LoadStateDict(std::span<const std::byte> state) override;
  /// The scale state (ScaleState's fields) as a blob: the host copy of the state, so no device
  /// read while it is current (after Write, state creation, a read, or UpdateScale(bool)).
  std::vector<std::byte> ScaleSnapshot() const override;
  /// Writes the snapshot's scale state where the state lives (on a device: one host-to-device
  /// copy) and clears the record and the amax; configuration and placement are kept.
  /// ArgumentError for a blob that is not a snapshot, or a scale outside [MinScale, MaxScale].
  void RestoreScaleSnapshot(std::span<const std::byte> snapshot) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::amp

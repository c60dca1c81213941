#pragma once
/// @file ILossScaler.hpp
/// @brief The loss-scaling interface; subclass it for your own scaling policy.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

struct DynamicScalerStats;  // amp/DynamicLossScaler.hpp; include it to override GetStats()

/// Result of unscaling a gradient list with the overflow check fused into the same pass.
struct UnscaledGradients {
  GradientMap Gradients;  ///< The unscaled gradients, by parameter name.
  bool Overflow = false;  ///< True when any unscaled gradient holds Inf or NaN.
};

/// A loss-scaling policy: scale the loss before backward, unscale the gradients
/// after it, detect overflow, and adapt the scale.
///
/// The six pure members are spec 001's interface; a subclass only has to implement them. Spec 001's
/// getters `Scale` and `Enabled` are CurrentScale() and IsEnabled() here, the names every front end
/// of the library uses; Scale() and Enabled() stay as aliases.
/// GradScaler drives every scaler, built in or yours, through this interface alone, so the
/// other members have defaults built on the six and a subclass overrides them to do better:
///
/// | member | default |
/// |---|---|
/// | UnscaleGradientsAndCheck() | CheckOverflow() then UnscaleGradients() (the built-ins fuse them in one pass) |
/// | the found-inf record (UnscaleAndRecordOverflow() ... UpdateScaleFromRecord()) | a host flag |
/// | SetEnabled() | returns false: GradScaler then keeps its own switch in front of the scaler |
/// | Reset() | nothing (the scaler has no state the interface can see to reset) |
/// | GetScaleTensor() | a new FP32 scalar of `IsEnabled() ? CurrentScale() : 1` |
/// | GetStats() | empty |
/// | StateDict() / LoadStateDict() | CurrentScale() and IsEnabled(); another state throws (LoadStateDict()) |
/// | ScaleSnapshot() / RestoreScaleSnapshot() | StateDict() / LoadStateDict() |
///
/// A policy whose state goes beyond CurrentScale() and IsEnabled() (a counter of clean steps, a
/// configuration) overrides StateDict() and LoadStateDict(), and GradScaler checkpoints it
/// like the built-in scalers (samples/custom_loss_scaler shows one).
///
/// Implementations are not required to be thread-safe: one training loop owns a scaler.
class MLFRAMEWORK_EXPORT ILossScaler {
 public:
  /// Implementations are destroyed through the interface.
  virtual ~ILossScaler();

  /// The current scaling factor.
  virtual float CurrentScale() const = 0;
  /// Whether scaling is applied (a disabled scaler passes values through unchanged).
  virtual bool IsEnabled() const = 0;
  /// CurrentScale() under spec 001's name (`ILossScaler.Scale`).
  float Scale() const { return CurrentScale(); }
  /// IsEnabled() under spec 001's name (`ILossScaler.Enabled`).
  bool Enabled() const { return IsEnabled(); }
  /// The loss multiplied by the scale, to run backward on. ArgumentNullError for a null loss.
  virtual TensorPtr ScaleLoss(const TensorPtr& loss) = 0;
  /// The gradients divided by the scale, by parameter name.
  virtual GradientMap UnscaleGradients(const GradientMap& gradients) = 0;
  /// True when any gradient holds Inf or NaN.
  virtual bool CheckOverflow(const GradientMap& gradients) = 0;
  /// Adapts the scale after a step that did (@p overflow true) or did not overflow.
  virtual void UpdateScale(bool overflow) = 0;

  /// Unscales @p gradients and reports overflow in the unscaled values.
  /// Default: `CheckOverflow(gradients)` then `UnscaleGradients(gradients)`.
  virtual UnscaledGradients UnscaleGradientsAndCheck(const GradientMap& gradients);

  /// @name The found-inf record
  /// The overflow result of the current step, kept by the scaler so that a scaler whose state
  /// lives on a device can keep it there (in a device flag) and never wait for the device in a
  /// step. GradScaler clears it when an iteration records its first result, ORs into it, reads
  /// it only when it must return a bool, and ends the iteration with UpdateScaleFromRecord(),
  /// or, when it already read the iteration's result (`Step(optimizer)`), with
  /// `UpdateScale(result)` and ClearRecordedOverflow().
  /// The defaults keep a host flag and call UnscaleGradientsAndCheck() / UpdateScale().
  /// @{
  /// Unscales like UnscaleGradients() and ORs "any non-finite value" into the record.
  virtual GradientMap UnscaleAndRecordOverflow(const GradientMap& gradients);
  /// Records an overflow found elsewhere (another check, another rank).
  virtual void MarkOverflow();
  /// The record of this step.
  virtual bool RecordedOverflow() const;
  /// Clears the record.
  virtual void ClearRecordedOverflow();
  /// `UpdateScale(record)`, then clears the record.
  virtual void UpdateScaleFromRecord();
  /// @}

  /// @name Amax (headroom telemetry, off by default)
  /// The largest finite absolute value of the unscaled gradients (max|g| / scale, what the
  /// optimizer receives), taken in the same pass as the overflow check. Inf and NaN are left out,
  /// so a step that overflows still reports the amax of its finite values.
  /// @{
  /// Turns amax tracking on or off and returns true; the default returns false without a change,
  /// meaning the scaler cannot take it (GradScaler::SetAmaxTracking then throws).
  virtual bool SetAmaxTracking(bool on);
  /// The amax of the gradients unscaled since the record was last cleared
  /// (ClearRecordedOverflow()); nullopt while tracking is off. Default: nullopt.
  virtual std::optional<float> RecordedAmax() const;
  /// @}

  /// Switches scaling on or off and returns true; the default returns false without a change,
  /// meaning the scaler has no switch of its own (GradScaler then keeps one in front of it).
  virtual bool SetEnabled(bool enabled);
  /// Back to the initial state. Default: nothing.
  virtual void Reset();
  /// The factor the loss is multiplied by, as an FP32 scalar (1 when disabled).
  /// Default: a new scalar each call (the built-ins cache theirs until the scale changes).
  virtual TensorPtr GetScaleTensor();
  /// Statistics of the scaling run so far, when the scaler keeps them. Default: empty.
  virtual std::optional<DynamicScalerStats> GetStats() const;

  /// Versioned blob of the scaler's state, for checkpoints.
  /// Default: a blob (kind `amp.ILossScaler`) of CurrentScale() and IsEnabled().
  virtual std::vector<std::byte> StateDict() const;
  /// Restores StateDict(). An override must validate the whole blob before changing anything:
  /// ArgumentError for a truncated, corrupted or foreign blob, and the scaler unchanged.
  /// Default: validates the default blob (ArgumentError as above); when it equals the current
  /// CurrentScale() and IsEnabled() there is nothing to restore, otherwise InvalidOperationError naming
  /// both states, because the interface cannot set them: override both members to restore.
  virtual void LoadStateDict(std::span<const std::byte> state);

  /// @name Scale-state snapshot (several optimizers per iteration)
  /// GradScaler takes a snapshot before the scale update of `Step(optimizer)`, and restores it
  /// only when another optimizer joins that iteration (GradScaler's class notes), to unscale it
  /// with the iteration's scale and update again. A scaler whose state lives on a device
  /// overrides both to cost no device read in a step (DynamicLossScaler: the host copy of its
  /// state, current after each `UpdateScale(bool)`).
  /// @{
  /// The scale state (not the configuration, not the found-inf record), for RestoreScaleSnapshot().
  /// Default: StateDict().
  virtual std::vector<std::byte> ScaleSnapshot() const;
  /// Returns the scale state to @p snapshot, a ScaleSnapshot() of this scaler under its current
  /// configuration, and clears the found-inf record (and the amax). ArgumentError for a blob that
  /// is not such a snapshot, the scaler unchanged. Default: LoadStateDict() (so a scaler that
  /// does not override LoadStateDict() cannot go back to another scale: InvalidOperationError).
  virtual void RestoreScaleSnapshot(std::span<const std::byte> snapshot);
  /// @}

 protected:
  /// Only implementations construct the interface.
  ILossScaler() = default;
  /// Implementations may be copyable.
  ILossScaler(const ILossScaler&) = default;
  /// Implementations may be copy-assignable.
  ILossScaler& operator=(const ILossScaler&) = default;

 private:
  bool recorded_overflow_ = false;  // the default found-inf record
};

}  // namespace mlframework::amp

#pragma once
/// @file StaticLossScaler.hpp
/// @brief Loss scaling with a constant factor.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// Static loss scaler: a constant scale that keeps small FP16 gradients from underflowing.
///
/// Unscaling multiplies by the inverse scale, computed in double and rounded to float
/// once (exact for power-of-two scales). FP32 gradients are unscaled **in place** with
/// the fused unscale-and-check kernel: the map returned holds the very same tensors.
/// FP16/BF16 gradients are unscaled into FP32 tensors (one fused cast pass), because
/// unscaling back into 16 bits would re-create the underflow loss scaling avoids; these
/// FP32 buffers belong to the scaler and are reused for the same names and shapes from the next
/// step on (the next ScaleLoss(); clone them to keep them longer). Within a step, a call writes
/// other buffers while an earlier call's result is still held (two optimizers whose gradients
/// share names each keep their own), and a released one again. Every call that takes
/// gradients refuses FP8 ones (ArgumentError naming the gradient and its dtype), also while
/// disabled: FP8 tensors are scaled per tensor by an fp8 recipe, not by a loss scale.
///
/// Usage:
/// @code
/// amp::StaticLossScaler scaler(amp::ScaleFactor::Moderate);
/// auto scaled = scaler.ScaleLoss(loss);            // backward on `scaled`
/// if (!scaler.CheckOverflow(grads)) {
///   optimizer.SetGradients(scaler.UnscaleGradients(grads));
///   optimizer.Step();
/// }
/// @endcode
class MLFRAMEWORK_EXPORT StaticLossScaler final : public ILossScaler {
 public:
  /// A scaler with constant @p scale. ArgumentError naming `scale` when it is zero,
  /// negative, NaN or infinite.
  explicit StaticLossScaler(float scale = 65536.0f, bool enabled = true);
  /// Releases the cached tensors and buffers.
  ~StaticLossScaler() override;
  /// Copies share nothing (the cached tensors are rebuilt).
  StaticLossScaler(const StaticLossScaler& other);
  /// Copy assignment (the cached tensors are rebuilt).
  StaticLossScaler& operator=(const StaticLossScaler& other);

  /// The constant scale (also when disabled).
  float CurrentScale() const override;
  /// Whether scaling is applied.
  bool IsEnabled() const override;
  /// Enables or disables scaling (do it between iterations); returns true (the scaler has its own switch).
  bool SetEnabled(bool enabled) override;
  /// Turns amax tracking on or off (ILossScaler, "Amax"); true.
  bool SetAmaxTracking(bool on) override;
  /// The amax of the gradients unscaled since the record was cleared; nullopt while tracking is off.
  std::optional<float> RecordedAmax() const override;
  /// Clears the record and the amax.
  void ClearRecordedOverflow() override;

  /// `loss * scale` in the loss's dtype; the loss itself when disabled. ArgumentNullError for null.
  TensorPtr ScaleLoss(const TensorPtr& loss) override;
  /// Unscaled gradients (see the class notes for what is in place); the same map when disabled.
  GradientMap UnscaleGradients(const GradientMap& gradients) override;
  /// One gradient unscaled: an FP32 tensor in place (returned), an FP16/BF16 one into a new FP32 tensor.
  TensorPtr UnscaleGradient(const TensorPtr& gradient);
  /// True when any gradient holds Inf or NaN (one read pass, stops early); false when disabled.
  bool CheckOverflow(const GradientMap& gradients) override;
  /// True when @p gradient holds Inf or NaN; false when disabled. ArgumentNullError for null.
  bool CheckOverflow(const TensorPtr& gradient);
  /// No effect: the scale is constant.
  void UpdateScale(bool overflow) override;
  /// Unscale and overflow check in one pass over memory.
  UnscaledGradients UnscaleGradientsAndCheck(const GradientMap& gradients) override;

  /// The factor ScaleLoss multiplies by, as a cached FP32 scalar (1 when disabled). Shared: do not modify it.
  TensorPtr GetScaleTensor() override;
  /// The factor unscaling multiplies by, as a cached FP32 scalar (1 when disabled). Shared: do not modify it.
  TensorPtr GetInverseScaleTensor();

  /// Versioned blob of the scale and the enabled flag.
  std::vector<std::byte> StateDict() const override;
  /// Restores StateDict(); ArgumentError for a truncated, corrupted or foreign blob (state unchanged).
  /// Amax tracking stays as it was (a setting of this scaler, not in the blob).
  void LoadStateDict(std::span<const std::byte> state) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::amp

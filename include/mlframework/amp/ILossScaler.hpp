#pragma once
/// @file ILossScaler.hpp
/// @brief The loss-scaling interface; subclass it for your own scaling policy.

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// Result of unscaling a gradient list with the overflow check fused into the same pass.
struct UnscaledGradients {
  GradientMap Gradients;  ///< The unscaled gradients, by parameter name.
  bool Overflow = false;  ///< True when any unscaled gradient holds Inf or NaN.
};

/// A loss-scaling policy: scale the loss before backward, unscale the gradients
/// after it, detect overflow, and adapt the scale.
///
/// The six pure members are spec 001's interface. UnscaleGradientsAndCheck() is
/// the hook GradScaler calls; its default runs CheckOverflow() then
/// UnscaleGradients(), so a subclass only has to implement the six, and may
/// override it to do both in one pass (the built-in scalers do).
///
/// Implementations are not required to be thread-safe: one training loop owns a scaler.
class MLFRAMEWORK_EXPORT ILossScaler {
 public:
  virtual ~ILossScaler();

  /// The current scaling factor.
  virtual float Scale() const = 0;
  /// Whether scaling is applied (a disabled scaler passes values through unchanged).
  virtual bool Enabled() const = 0;
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

 protected:
  /// Only implementations construct the interface.
  ILossScaler() = default;
  /// Implementations may be copyable.
  ILossScaler(const ILossScaler&) = default;
  /// Implementations may be copy-assignable.
  ILossScaler& operator=(const ILossScaler&) = default;
};

}  // namespace mlframework::amp

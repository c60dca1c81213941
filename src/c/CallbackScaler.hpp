#pragma once
// A loss scaler whose scale a C scaling policy (mlfw_scale_policy) owns.

#include <optional>

#include <mlframework/c/grad_scaler.h>
#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/amp/StaticLossScaler.hpp>

namespace mlframework::c_api {

/// The policy's callbacks decide the scale; the tensor work is a StaticLossScaler's with that
/// scale (rebuilt when the policy changes it), so the unscale is the same fused pass.
class CallbackScaler final : public amp::ILossScaler {
 public:
  /// Reads the policy's first scale. ArgumentNullError naming a missing required callback.
  CallbackScaler(const mlfw_scale_policy& policy, void* user);

  float CurrentScale() const override { return scale_; }
  bool IsEnabled() const override { return tensors_.IsEnabled(); }
  bool SetEnabled(bool enabled) override { return tensors_.SetEnabled(enabled); }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return tensors_.ScaleLoss(loss); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override { return tensors_.UnscaleGradients(gradients); }
  bool CheckOverflow(const GradientMap& gradients) override { return tensors_.CheckOverflow(gradients); }
  amp::UnscaledGradients UnscaleGradientsAndCheck(const GradientMap& gradients) override {
    return tensors_.UnscaleGradientsAndCheck(gradients);
  }
  GradientMap UnscaleAndRecordOverflow(const GradientMap& gradients) override {
    return tensors_.UnscaleAndRecordOverflow(gradients);
  }
  void MarkOverflow() override { tensors_.MarkOverflow(); }
  bool RecordedOverflow() const override { return tensors_.RecordedOverflow(); }
  void ClearRecordedOverflow() override { tensors_.ClearRecordedOverflow(); }
  bool SetAmaxTracking(bool on) override;
  std::optional<float> RecordedAmax() const override { return tensors_.RecordedAmax(); }
  /// The policy's update callback, then its new scale.
  void UpdateScale(bool overflow) override;
  /// UpdateScale() with the record, then the record cleared.
  void UpdateScaleFromRecord() override;
  /// The policy's reset callback (when it has one), then its scale.
  void Reset() override;

 private:
  // The policy's current scale, checked (finite, > 0).
  float ReadScale() const;
  // Makes @p scale the one the tensors are scaled with.
  void Apply(float scale);

  mlfw_scale_policy policy_;
  void* user_;
  float scale_;
  bool amax_tracking_ = false;
  amp::StaticLossScaler tensors_;
};

}  // namespace mlframework::c_api

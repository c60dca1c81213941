#pragma once
#include <algorithm>

#include <mlframework/mlframework.hpp>

// A custom policy: start high, halve on overflow, never grow back.
class BackoffOnlyScaler final : public mlframework::amp::ILossScaler {
 public:
  explicit BackoffOnlyScaler(float scale) : scale_(scale) {}
  float CurrentScale() const override { return scale_; }
  bool IsEnabled() const override { return true; }
  mlframework::TensorPtr ScaleLoss(const mlframework::TensorPtr& loss) override { return loss->Multiply(scale_); }
  mlframework::GradientMap UnscaleGradients(const mlframework::GradientMap& gradients) override {
    // One fused pass per backend: FP16/BF16 in, FP32 out, times 1/scale.
    const auto fp32 =
        mlframework::Cast(mlframework::TensorList(gradients), mlframework::DataType::Float32, 1.0f / scale_);
    mlframework::GradientMap unscaled;
    auto it = fp32.begin();
    for (const auto& [name, gradient] : gradients) {
      unscaled[name] = *it++;
    }
    return unscaled;
  }
  bool CheckOverflow(const mlframework::GradientMap& gradients) override {
    return mlframework::HasNonFinite(mlframework::TensorList(gradients));
  }
  void UpdateScale(bool overflow) override {
    if (overflow) {
      scale_ = std::max(1.0f, scale_ / 2.0f);
    }
  }

 private:
  float scale_;
};

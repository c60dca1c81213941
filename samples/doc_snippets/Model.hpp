#pragma once
// Stands in for a framework's model in the docs' training loops: linear regression
// with FP16 weights whose backward writes FP16 gradients of the scaled loss.
#include <cstddef>
#include <random>
#include <vector>

#include <mlframework/mlframework.hpp>

class Model {
 public:
  static constexpr std::size_t kFeatures = 8;
  static constexpr std::size_t kSamples = 64;

  Model() {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    inputs_.resize(kSamples * kFeatures);
    for (float& x : inputs_) {
      x = normal(rng);
    }
    targets_.assign(kSamples, 0.0f);
    for (std::size_t s = 0; s < kSamples; ++s) {
      for (std::size_t f = 0; f < kFeatures; ++f) {
        targets_[s] += inputs_[s * kFeatures + f] * static_cast<float>(f + 1);  // true weights 1..8
      }
    }
    parameters_["w"] = mlframework::Zeros({kFeatures}, mlframework::DataType::Float16);
    gradients_["w"] = mlframework::Zeros({kFeatures}, mlframework::DataType::Float16);
  }

  const mlframework::GradientMap& Parameters() const { return parameters_; }
  const mlframework::GradientMap& Gradients() const { return gradients_; }

  /// Mean squared error in FP32 over the FP16 weights.
  mlframework::TensorPtr Forward() {
    weights_ = parameters_.at("w")->ToFloatVector();
    residuals_.assign(kSamples, 0.0f);
    double loss = 0.0;
    for (std::size_t s = 0; s < kSamples; ++s) {
      for (std::size_t f = 0; f < kFeatures; ++f) {
        residuals_[s] += inputs_[s * kFeatures + f] * weights_[f];
      }
      residuals_[s] -= targets_[s];
      loss += static_cast<double>(residuals_[s]) * residuals_[s];
    }
    loss_ = static_cast<float>(loss / kSamples);
    return mlframework::Scalar(loss_);
  }

  /// Gradients of the scaled loss, rounded into FP16 (they overflow while the scale is too high);
  /// with @p accumulate they are added to the gradients already there, as a backward pass does.
  void Backward(const mlframework::TensorPtr& scaled_loss, bool accumulate = false) {
    const float scale = loss_ == 0.0f ? 0.0f : scaled_loss->ToFloatVector()[0] / loss_;
    BackwardFrom(scale, accumulate);
  }

  /// Backward from a seed gradient: the gradients of `seed * loss`.
  void BackwardFrom(float seed, bool accumulate = false) {
    std::vector<float> grad(kFeatures, 0.0f);
    for (std::size_t s = 0; s < kSamples; ++s) {
      for (std::size_t f = 0; f < kFeatures; ++f) {
        grad[f] += seed * 2.0f * residuals_[s] * inputs_[s * kFeatures + f] / kSamples;
      }
    }
    if (accumulate) {
      const std::vector<float> previous = gradients_.at("w")->ToFloatVector();
      for (std::size_t f = 0; f < kFeatures; ++f) {
        grad[f] += previous[f];
      }
    }
    gradients_.at("w")->CopyFromFloats(grad);
  }

  /// Sets the gradients to zero (before accumulating).
  void ZeroGradients() { gradients_.at("w")->CopyFromFloats(std::vector<float>(kFeatures, 0.0f)); }

  float LastLoss() const { return loss_; }

 private:
  std::vector<float> inputs_;
  std::vector<float> targets_;
  std::vector<float> weights_;
  std::vector<float> residuals_;
  float loss_ = 0.0f;
  mlframework::GradientMap parameters_;
  mlframework::GradientMap gradients_;
};

#pragma once
// Stands in for a framework's model in README's training loop: linear regression
// with FP16 weights whose backward writes FP16 gradients of the scaled loss.
#include <cstddef>
#include <random>
#include <span>
#include <string>
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
    // Two parameters (the first and second half of the weights), so that README's loop with
    // two optimizers can give each its own.
    for (const char* name : {"embedding", "output"}) {
      parameters_[name] = mlframework::Zeros({kFeatures / 2}, mlframework::DataType::Float16);
      gradients_[name] = mlframework::Zeros({kFeatures / 2}, mlframework::DataType::Float16);
    }
  }

  const mlframework::GradientMap& Parameters() const { return parameters_; }
  const mlframework::GradientMap& Gradients() const { return gradients_; }
  /// One parameter (`embedding` or `output`), or its gradient, as a map of its own.
  mlframework::GradientMap Parameters(const std::string& name) const { return {{name, parameters_.at(name)}}; }
  mlframework::GradientMap Gradients(const std::string& name) const { return {{name, gradients_.at(name)}}; }

  /// Mean squared error in FP32 over the FP16 weights.
  mlframework::TensorPtr Forward() {
    weights_ = parameters_.at("embedding")->ToFloatVector();
    const std::vector<float> output = parameters_.at("output")->ToFloatVector();
    weights_.insert(weights_.end(), output.begin(), output.end());
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

  /// Gradients of the scaled loss, rounded into FP16 (they overflow while the scale is too high).
  void Backward(const mlframework::TensorPtr& scaled_loss) {
    const float scale = loss_ == 0.0f ? 0.0f : scaled_loss->ToFloatVector()[0] / loss_;
    std::vector<float> grad(kFeatures, 0.0f);
    for (std::size_t s = 0; s < kSamples; ++s) {
      for (std::size_t f = 0; f < kFeatures; ++f) {
        grad[f] += scale * 2.0f * residuals_[s] * inputs_[s * kFeatures + f] / kSamples;
      }
    }
    gradients_.at("embedding")->CopyFromFloats(std::span<const float>(grad).first(kFeatures / 2));
    gradients_.at("output")->CopyFromFloats(std::span<const float>(grad).last(kFeatures / 2));
  }

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

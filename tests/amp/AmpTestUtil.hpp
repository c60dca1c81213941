#pragma once
// Helpers shared by the amp tests: printing, gradient builders, an IOptimizer test double,
// and a plain model of the dynamic-scaling rules written independently of ScalePolicy.hpp.

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>

namespace mlframework {
// Boost.Test prints the operands of a failed check.
inline std::ostream& operator<<(std::ostream& out, DataType dtype) { return out << ToString(dtype); }
namespace amp {
inline std::ostream& operator<<(std::ostream& out, GradScaler::IterationState state) {
  return out << static_cast<int>(state);
}
}  // namespace amp
}  // namespace mlframework

namespace mlfw_test {

using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::TensorPtr;

inline std::vector<float> Values(const TensorPtr& tensor) { return tensor->ToFloatVector(); }

// Two gradients of @p dtype with exactly representable values times @p factor.
inline GradientMap Grads(DataType dtype, float factor = 1.0f) {
  return {{"a", mlframework::FromVector({1.0f * factor, -2.0f * factor, 0.5f * factor}, {3}, dtype)},
          {"b", mlframework::FromVector({4.0f * factor, -0.25f * factor}, {2}, dtype)}};
}

// Gradients where @p poison (Inf or NaN) replaces one element.
inline GradientMap PoisonedGrads(DataType dtype, float poison, float factor = 1.0f) {
  return {{"a", mlframework::FromVector({1.0f * factor, poison, 0.5f * factor}, {3}, dtype)},
          {"b", mlframework::FromVector({4.0f * factor, -0.25f * factor}, {2}, dtype)}};
}

// An optimizer that records what the scaler does to it.
class RecordingOptimizer final : public mlframework::amp::IOptimizer {
 public:
  explicit RecordingOptimizer(GradientMap gradients = {}) : gradients_(std::move(gradients)) {}
  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& gradients) override {
    gradients_ = gradients;
    ++set_calls;
  }
  void Step() override {
    ++steps;
    stepped_with = gradients_;
  }
  void Load(GradientMap gradients) { gradients_ = std::move(gradients); }
  int steps = 0;
  int set_calls = 0;
  GradientMap stepped_with;

 private:
  GradientMap gradients_;
};

// The rules of the issue, written out plainly (not through UpdateScaleState).
struct PlainRules {
  explicit PlainRules(const mlframework::amp::DynamicScalerConfig& c) : config(c), scale(c.InitialScale) {}
  void Step(bool overflow) {
    ++total;
    if (overflow) {
      ++overflows;
      ++consecutive;
      clean = 0;
      if (consecutive >= config.Hysteresis) {
        scale = std::max(scale * config.BackoffFactor, config.MinScale);
      }
    } else {
      consecutive = 0;
      if (++clean == config.GrowthInterval) {
        scale = std::min(scale * config.GrowthFactor, config.MaxScale);
        clean = 0;
      }
    }
  }
  mlframework::amp::DynamicScalerConfig config;
  float scale;
  std::int64_t clean = 0, consecutive = 0, overflows = 0, total = 0;
};

// A user's policy with only spec 001's six members: GradScaler drives it through ILossScaler's
// defaults (a host found-inf record, a checkpoint that cannot restore a changed scale).
class HalvingScaler final : public mlframework::amp::ILossScaler {
 public:
  float CurrentScale() const override { return scale_; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(scale_); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override {
    GradientMap out;
    for (const auto& [name, tensor] : gradients) {
      out.emplace(name, tensor->CastTo(DataType::Float32)->Multiply(1.0f / scale_));
    }
    return out;
  }
  bool CheckOverflow(const GradientMap& gradients) override {
    return mlframework::HasNonFinite(mlframework::TensorList(gradients));
  }
  void UpdateScale(bool overflow) override { scale_ = overflow ? scale_ / 2.0f : scale_; }

 private:
  float scale_ = 256.0f;
};

// @p misuse throws E with @p hint in its message, and leaves @p scaler's state and blob as they were.
template <typename E, typename F>
void ExpectRefused(mlframework::amp::GradScaler& scaler, F&& misuse, const std::string& hint) {
  const auto state = scaler.State();
  const auto before = scaler.StateDict();
  try {
    misuse();
    BOOST_FAIL("expected an error");
  } catch (const E& e) {
    BOOST_TEST(std::string(e.what()).find(hint) != std::string::npos, "message: " << e.what());
  }
  BOOST_TEST(scaler.State() == state);
  BOOST_TEST((scaler.StateDict() == before));
}

}  // namespace mlfw_test

// Your own loss-scaling policy: subclass amp::ILossScaler and hand it to GradScaler.
//
// This policy backs off by 4x on overflow and grows by 2x every `interval` clean steps,
// but never above a cap: a variant of dynamic scaling some teams prefer for unstable
// early training. It reuses the library's fused kernels for the heavy lifting:
// TensorList + HasNonFinite for the check, Cast with a factor for the unscale to FP32.
// It overrides StateDict/LoadStateDict, so GradScaler checkpoints it like a built-in scaler.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include <mlframework/mlframework.hpp>

namespace {

using namespace mlframework;

class CappedScaler final : public amp::ILossScaler {
 public:
  CappedScaler(float initial, float cap, int interval) : scale_(initial), cap_(cap), interval_(interval) {}

  float CurrentScale() const override { return scale_; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(scale_); }

  GradientMap UnscaleGradients(const GradientMap& gradients) override {
    const std::vector<TensorPtr> list = TensorList(gradients);
    // One fused pass per backend: FP32 copies times 1/scale (computed in double).
    const std::vector<TensorPtr> unscaled =
        Cast(list, DataType::Float32, static_cast<float>(1.0 / static_cast<double>(scale_)));
    GradientMap out;
    std::size_t i = 0;
    for (const auto& [name, tensor] : gradients) {
      out.emplace(name, unscaled[i++]);
    }
    return out;
  }

  bool CheckOverflow(const GradientMap& gradients) override { return HasNonFinite(TensorList(gradients)); }

  void UpdateScale(bool overflow) override {
    if (overflow) {
      scale_ = std::max(scale_ / 4.0f, 1.0f);
      clean_ = 0;
    } else if (++clean_ == interval_) {
      scale_ = std::min(scale_ * 2.0f, cap_);
      clean_ = 0;
    }
  }

  // The policy's state, for GradScaler::StateDict(). ILossScaler's default would save only
  // CurrentScale() and IsEnabled() and could not restore a different scale or the clean-step count.
  std::vector<std::byte> StateDict() const override {
    std::vector<std::byte> blob(sizeof(scale_) + sizeof(clean_));
    std::memcpy(blob.data(), &scale_, sizeof(scale_));
    std::memcpy(blob.data() + sizeof(scale_), &clean_, sizeof(clean_));
    return blob;
  }

  // Validates the whole blob before changing anything, as GradScaler::LoadStateDict expects.
  void LoadStateDict(std::span<const std::byte> state) override {
    float scale = 0.0f;
    int clean = 0;
    if (state.size() != sizeof(scale) + sizeof(clean)) {
      throw ArgumentError("state", "is " + std::to_string(state.size()) + " bytes, not a CappedScaler state");
    }
    std::memcpy(&scale, state.data(), sizeof(scale));
    std::memcpy(&clean, state.data() + sizeof(scale), sizeof(clean));
    if (!std::isfinite(scale) || scale < 1.0f || scale > cap_ || clean < 0 || clean >= interval_) {
      throw ArgumentError("state", "holds scale " + std::to_string(scale) + " and clean steps " +
                                       std::to_string(clean) + ", outside this policy's bounds");
    }
    scale_ = scale;
    clean_ = clean;
  }

 private:
  float scale_;
  float cap_;
  int interval_;
  int clean_ = 0;
};

}  // namespace

int main() {
  auto policy = std::make_shared<CappedScaler>(1024.0f, 4096.0f, 2);
  amp::GradScaler scaler(policy);

  // One FP16 parameter vector trained towards a target with SGD (FP32 master weights).
  const GradientMap params{{"w", FromVector({0.0f, 0.0f, 0.0f, 0.0f}, {4}, DataType::Float16)}};
  optimizers::SGD sgd(params, {.LearningRate = 0.1f, .Momentum = 0.9f});
  const std::vector<float> target{0.5f, -1.0f, 0.25f, 2.0f};

  std::vector<std::byte> checkpoint;
  float scale_at_checkpoint = 0.0f;
  for (int step = 0; step < 60; ++step) {
    if (step == 15) {  // between iterations, as a training loop saves its checkpoints
      checkpoint = scaler.StateDict();
      scale_at_checkpoint = scaler.CurrentScale();
    }
    const std::vector<float> w = params.at("w")->ToFloatVector();
    double loss = 0.0;
    std::vector<float> scaled_grad(4);
    for (std::size_t i = 0; i < 4; ++i) {
      loss += 0.5 * (w[i] - target[i]) * (w[i] - target[i]);
      scaled_grad[i] = scaler.CurrentScale() * (w[i] - target[i]);  // backward of the scaled loss
    }
    if (step == 10) {
      scaled_grad[2] = std::numeric_limits<float>::infinity();  // a simulated FP16 overflow
    }
    amp::GradScalerContext ctx(scaler, Scalar(static_cast<float>(loss)));
    sgd.SetGradients({{"w", FromVector(scaled_grad, {4}, DataType::Float16)}});
    const bool stepped = ctx.Step(sgd);
    if (step % 10 == 0 || !stepped) {
      std::printf("step %2d  loss %.6f  scale %6.0f  %s\n", step, loss, scaler.CurrentScale(),
                  stepped ? "stepped" : "skipped (overflow)");
    }
  }
  const std::vector<float> w = params.at("w")->ToFloatVector();
  std::printf("final w = [%.3f, %.3f, %.3f, %.3f], target [0.5, -1, 0.25, 2]\n", w[0], w[1], w[2], w[3]);

  // Resuming: a fresh policy restored from the checkpoint continues where step 15 stood.
  amp::GradScaler resumed(std::make_shared<CappedScaler>(1024.0f, 4096.0f, 2));
  resumed.LoadStateDict(checkpoint);
  std::printf("resumed from the step-15 checkpoint: scale %.0f (saved %.0f)\n", resumed.CurrentScale(),
              scale_at_checkpoint);
  return resumed.CurrentScale() == scale_at_checkpoint ? 0 : 1;
}

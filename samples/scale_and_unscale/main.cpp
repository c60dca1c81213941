// The smallest useful program: scale a loss, unscale FP16 gradients in one
// fused pass, and see an overflow caught.
#include <cstdio>

#include <mlframework/mlframework.hpp>

int main() {
  using namespace mlframework;
  const float scale = 65536.0f;

  const TensorPtr loss = Scalar(0.25f);
  const TensorPtr scaled_loss = loss->Multiply(scale);
  std::printf("loss %.4f scaled by %.0f -> %.1f\n", loss->ToFloatVector()[0], scale, scaled_loss->ToFloatVector()[0]);

  // True gradients of 2e-8 and -1.5e-7 are below or near FP16's smallest subnormal (6e-8).
  const std::vector<float> true_grads = {2.0e-8f, -1.5e-7f, 6.0e-6f};
  const TensorPtr unscaled_fp16 = FromVector(true_grads, {3}, DataType::Float16);
  std::printf("FP16 backward without scaling holds:");
  for (const float g : unscaled_fp16->ToFloatVector()) {
    std::printf("  %.3g", g);
  }
  std::printf("\n");

  // With scaling, backward produces scale * grad in FP16; the fused kernel
  // checks for overflow and writes FP32 gradients times 1/scale.
  std::vector<float> scaled_values;
  scaled_values.reserve(true_grads.size());
  for (const float g : true_grads) {
    scaled_values.push_back(g * scale);
  }
  const std::vector<TensorPtr> grads = {FromVector(scaled_values, {3}, DataType::Float16)};
  const auto inverse = static_cast<float>(1.0 / scale);
  const bool overflow = HasNonFinite(grads);
  const std::vector<TensorPtr> fp32 = Cast(grads, DataType::Float32, inverse);
  std::printf("FP16 backward with scaling, unscaled to FP32 (overflow: %s):", overflow ? "yes" : "no");
  for (const float g : fp32[0]->ToFloatVector()) {
    std::printf("  %.3g", g);
  }
  std::printf("\n");

  // A gradient that overflowed FP16 during backward is caught, and the step skipped.
  const std::vector<TensorPtr> bad = {FromVector({1.0f, 1.0e6f}, {2}, DataType::Float16)};
  std::printf("gradients with 1e6 in FP16: overflow %s -> skip the optimizer step\n",
              HasNonFinite(bad) ? "detected" : "missed");
  std::printf("CPU kernels: %s\n", std::string(backends::cpu::InstructionSet()).c_str());
  return 0;
}

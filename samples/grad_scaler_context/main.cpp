// A mixed-precision training loop with the RAII GradScalerContext.
//
// The model is a linear regression y = x . w + b with FP16 parameters; Adam keeps FP32
// master weights and writes the rounded FP16 weights back after each step. Each iteration
// opens a GradScalerContext: the loss is scaled on entry, ctx.Step() unscales the FP16
// gradients into FP32 (one fused pass with the overflow check), skips the step on overflow
// and updates the dynamic scale once. An iteration that leaves early (here: a batch we
// decide to drop, or an exception in backward) abandons cleanly when the context is destroyed.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <mlframework/mlframework.hpp>

int main() {
  using namespace mlframework;
  constexpr std::size_t kFeatures = 4;
  constexpr std::size_t kBatch = 64;

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<float> true_w{1.5f, -2.0f, 0.5f, 3.0f};
  const float true_b = 0.25f;

  const GradientMap params{{"w", Zeros({kFeatures}, DataType::Float16)}, {"b", Zeros({1}, DataType::Float16)}};
  optimizers::Adam adam(params, {.LearningRate = 0.05f});
  // Starts high on purpose: the first iterations overflow in FP16 and the scale backs off.
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 16777216.0f, .GrowthInterval = 25});

  for (int step = 0; step < 200; ++step) {
    std::vector<float> x(kBatch * kFeatures), y(kBatch);
    for (std::size_t i = 0; i < kBatch; ++i) {
      y[i] = true_b;
      for (std::size_t k = 0; k < kFeatures; ++k) {
        x[i * kFeatures + k] = normal(rng);
        y[i] += x[i * kFeatures + k] * true_w[k];
      }
    }
    const std::vector<float> w = params.at("w")->ToFloatVector();
    const float b = params.at("b")->ToFloatVector()[0];
    std::vector<float> err(kBatch);
    double loss = 0.0;
    for (std::size_t i = 0; i < kBatch; ++i) {
      float pred = b;
      for (std::size_t k = 0; k < kFeatures; ++k) {
        pred += x[i * kFeatures + k] * w[k];
      }
      err[i] = pred - y[i];
      loss += static_cast<double>(err[i]) * err[i] / kBatch;
    }

    amp::GradScalerContext ctx(scaler, Scalar(static_cast<float>(loss)));
    if (step == 100) {
      continue;  // drop this batch: the context abandons the iteration, no scale update
    }
    // Backward of the scaled loss, producing FP16 gradients (as an FP16 model would).
    const float seed = scaler.GetScaleTensor()->ToFloatVector()[0];
    std::vector<float> gw(kFeatures, 0.0f);
    float gb = 0.0f;
    for (std::size_t i = 0; i < kBatch; ++i) {
      const float d = seed * 2.0f * err[i] / static_cast<float>(kBatch);
      gb += d;
      for (std::size_t k = 0; k < kFeatures; ++k) {
        gw[k] += d * x[i * kFeatures + k];
      }
    }
    adam.SetGradients(
        {{"w", FromVector(gw, {kFeatures}, DataType::Float16)}, {"b", FromVector({gb}, {1}, DataType::Float16)}});
    const bool stepped = ctx.Step(adam);
    if (step % 25 == 0 || !stepped) {
      std::printf("step %3d  loss %9.5f  scale %10.0f%s\n", step, loss, scaler.CurrentScale(),
                  stepped ? "" : "  (overflow: step skipped)");
    }
  }
  const auto stats = scaler.GetStats();
  const std::vector<float> w = params.at("w")->ToFloatVector();
  std::printf("w = [%.3f, %.3f, %.3f, %.3f] (true [1.5, -2, 0.5, 3]), b = %.3f (true 0.25)\n", w[0], w[1], w[2], w[3],
              params.at("b")->ToFloatVector()[0]);
  std::printf("steps %lld, skipped %lld, final scale %.0f\n", static_cast<long long>(stats->TotalSteps),
              static_cast<long long>(stats->SkippedSteps), stats->CurrentScale);
  return 0;
}

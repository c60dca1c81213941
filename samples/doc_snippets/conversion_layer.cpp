// docs/conversion-layer.md: GradientConversionLayer between a backward pass and an optimizer.
#include <mlframework/mlframework.hpp>

#include "Model.hpp"  // your framework's model: FP16 parameters and gradients

using namespace mlframework;
namespace mp = mlframework::optimizers::mixed_precision;

// Check, unscale, clip at norm 1 and convert to FP32 in two passes, then step on FP32 gradients.
void TrainWithConversionLayer(Model& model, int steps) {
  mp::GradientConversionLayer layer({.EnableGradientClipping = true, .MaxGradNorm = 1.0f});
  optimizers::Adam optimizer(model.Parameters(), {.LearningRate = 5e-2});
  for (int step = 0; step < steps; ++step) {
    model.Backward(layer.ScaleLoss(model.Forward()));  // FP16 gradients of loss * scale
    const mp::GradientProcessingResult result = layer.ProcessGradients(model.Gradients());
    if (result.ShouldSkip) {
      continue;  // overflow: the scale has backed off, no Inf or NaN reaches the optimizer
    }
    optimizer.SetGradients(result.Gradients);  // FP32, unscaled, clipped
    optimizer.Step();
  }
}

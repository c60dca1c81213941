#include <cstdio>

#include <mlframework/mlframework.hpp>

#include "Model.hpp"  // your framework's model: FP16 parameters and gradients

using namespace mlframework;

// Mixed-precision training: FP16 model, FP32 master weights, dynamic loss scaling.
void Train(Model& model, int steps) {
  optimizers::Adam optimizer(model.Parameters(), {.LearningRate = 5e-2});
  amp::GradScaler scaler = amp::GradScalerFactory::CreateForFP16();
  for (int step = 0; step < steps; ++step) {
    const TensorPtr loss = model.Forward();    // FP32 scalar
    amp::GradScalerContext ctx(scaler, loss);  // loss * scale
    model.Backward(ctx.ScaledLoss());          // FP16 gradients, scaled
    optimizer.SetGradients(model.Gradients());
    if (!ctx.Step(optimizer)) {  // unscale, check, step, update scale
      std::printf("step %d: overflow, skipped; scale now %g\n", step, scaler.CurrentScale());
    }
  }
}

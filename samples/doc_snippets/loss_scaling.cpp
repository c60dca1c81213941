// docs/loss-scaling.md: several optimizers per scaler, gradient accumulation, the factor for
// your own backward.
#include <mlframework/mlframework.hpp>

#include "Model.hpp"  // your framework's model: FP16 parameters and gradients

using namespace mlframework;

// Two optimizers, one scaler (one for the embeddings, one for the rest): the PyTorch sequence.
void TrainTwoOptimizers(Model& embeddings, Model& rest, int steps) {
  optimizers::Adam sparse(embeddings.Parameters(), {.LearningRate = 1e-2});
  optimizers::SGD dense(rest.Parameters(), {.LearningRate = 1e-3});
  amp::GradScaler scaler = amp::GradScalerFactory::CreateForFP16();
  for (int step = 0; step < steps; ++step) {
    const float loss = embeddings.Forward()->ToFloatVector()[0] + rest.Forward()->ToFloatVector()[0];
    scaler.Scale(Scalar(loss));                      // one scale for the whole iteration
    embeddings.BackwardFrom(scaler.CurrentScale());  // FP16 gradients of loss * scale
    rest.BackwardFrom(scaler.CurrentScale());
    sparse.SetGradients(embeddings.Gradients());
    dense.SetGradients(rest.Gradients());
    scaler.Step(sparse);  // skipped only if the embeddings' gradients hold Inf/NaN
    scaler.Step(dense);   // skipped only if its own gradients do
    scaler.Update();      // as in PyTorch; the iteration's one scale update covers both checks
  }
}

// Gradient accumulation: four micro-batches, one optimizer step.
void TrainAccumulating(Model& model, int steps) {
  constexpr int kMicroBatches = 4;
  optimizers::Adam optimizer(model.Parameters(), {.LearningRate = 5e-2});
  amp::GradScaler scaler = amp::GradScalerFactory::CreateForFP16();
  for (int step = 0; step < steps; ++step) {
    model.ZeroGradients();
    for (int micro = 0; micro < kMicroBatches; ++micro) {
      // the mean over the micro-batches; backward adds into the gradients, with the same scale
      const TensorPtr loss = model.Forward()->Multiply(1.0f / kMicroBatches);
      model.Backward(scaler.Scale(loss), /*accumulate=*/true);
    }
    optimizer.SetGradients(model.Gradients());
    scaler.Step(optimizer);  // unscales the sum once, skips it on overflow, updates the scale
  }
}

// A framework whose backward starts from a seed gradient instead of a loss tensor.
void TrainWithOwnBackward(Model& model, int steps) {
  optimizers::Adam optimizer(model.Parameters(), {.LearningRate = 5e-2});
  amp::GradScaler scaler = amp::GradScalerFactory::CreateForFP16();
  for (int step = 0; step < steps; ++step) {
    const TensorPtr loss = model.Forward();
    scaler.Scale(loss);                         // starts the iteration
    model.BackwardFrom(scaler.CurrentScale());  // d(loss * scale)/d(loss): seed your backward with it
    optimizer.SetGradients(model.Gradients());
    scaler.Step(optimizer);
  }
}

#include <cstdio>

#include <mlframework/mlframework.hpp>

#include "Model.hpp"

using namespace mlframework;

// Two optimizers, one scaler: PyTorch's scaler.step(o1), scaler.step(o2), scaler.update().
void TrainWithTwoOptimizers(Model& model, int steps) {
  optimizers::SGD embedding(model.Parameters("embedding"), {.LearningRate = 2e-2f, .Momentum = 0.5f});
  optimizers::Adam output(model.Parameters("output"), {.LearningRate = 5e-2f});
  amp::GradScaler scaler = amp::GradScalerFactory::CreateForFP16();
  for (int step = 0; step < steps; ++step) {
    model.Backward(scaler.Scale(model.Forward()));  // FP16 gradients, scaled
    embedding.SetGradients(model.Gradients("embedding"));
    output.SetGradients(model.Gradients("output"));
    // Each optimizer's gradients are unscaled once, each optimizer is skipped only when its
    // own gradients overflow, and the scale is updated once, from both.
    const bool embedding_stepped = scaler.Step(embedding);
    const bool output_stepped = scaler.Step(output);
    scaler.Update();  // optional: Step already updated the scale, so this changes nothing
    if (!embedding_stepped || !output_stepped) {
      std::printf("step %d: skipped%s%s; scale now %g\n", step, embedding_stepped ? "" : " embedding",
                  output_stepped ? "" : " output", scaler.Scale());
    }
  }
}

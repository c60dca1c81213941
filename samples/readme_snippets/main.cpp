// Runs README's snippets and checks that they do what README says.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include <mlframework/mlframework.hpp>

#include "BackoffOnlyScaler.hpp"
#include "Model.hpp"
#include "VectorTensor.hpp"

void Train(Model& model, int steps);                   // training_loop.cpp
void TrainWithTwoOptimizers(Model& model, int steps);  // two_optimizers.cpp

namespace {

int failures = 0;

void Expect(bool condition, const char* what) {
  std::printf("%s: %s\n", condition ? "ok  " : "FAIL", what);
  failures += condition ? 0 : 1;
}

}  // namespace

int main() {
  using namespace mlframework;

  Model model;
  model.Forward();
  const float initial_loss = model.LastLoss();
  Train(model, 400);
  model.Forward();
  std::printf("training loop: loss %.4g -> %.4g\n", static_cast<double>(initial_loss),
              static_cast<double>(model.LastLoss()));
  Expect(model.LastLoss() < 1e-3f * initial_loss, "the training loop fits the FP16 model");

  Model two;
  two.Forward();
  const float two_initial_loss = two.LastLoss();
  TrainWithTwoOptimizers(two, 400);
  two.Forward();
  std::printf("two optimizers: loss %.4g -> %.4g\n", static_cast<double>(two_initial_loss),
              static_cast<double>(two.LastLoss()));
  Expect(two.LastLoss() < 1e-3f * two_initial_loss, "the loop with two optimizers fits the FP16 model");

  // The custom scaler inside GradScaler: an overflow skips the step and halves the scale.
  amp::GradScaler scaler(std::make_shared<BackoffOnlyScaler>(1024.0f));
  const TensorPtr weight = FromVector({1.0f, 2.0f}, {2}, DataType::Float16);
  optimizers::SGD sgd({{"w", weight}}, {.LearningRate = 0.5f});
  {
    amp::GradScalerContext ctx(scaler, Scalar(1.0f));
    sgd.SetGradients({{"w", FromVector({1.0f, std::numeric_limits<float>::infinity()}, {2}, DataType::Float16)}});
    Expect(!ctx.Step(sgd), "BackoffOnlyScaler: an overflow skips the step");
  }
  Expect(scaler.Scale() == 512.0f, "BackoffOnlyScaler: the scale halves on overflow");
  {
    amp::GradScalerContext ctx(scaler, Scalar(1.0f));
    Expect(ctx.ScaledLoss()->ToFloatVector()[0] == 512.0f, "BackoffOnlyScaler: the loss is scaled");
    sgd.SetGradients({{"w", FromVector({512.0f, 1024.0f}, {2}, DataType::Float16)}});
    Expect(ctx.Step(sgd), "BackoffOnlyScaler: a finite step is taken");
  }
  const std::vector<float> stepped = weight->ToFloatVector();
  Expect(stepped[0] == 0.5f && stepped[1] == 1.0f, "BackoffOnlyScaler: gradients are unscaled before the step");
  Expect(scaler.Scale() == 512.0f, "BackoffOnlyScaler: the scale never grows");

  // The custom tensor through the library's multi-tensor functions (its host memory on the CPU
  // kernels, HostStorage()).
  const std::vector<TensorPtr> tensors = {std::make_shared<VectorTensor>(std::vector<float>{3.0f, 4.0f}),
                                          std::make_shared<VectorTensor>(std::vector<float>{12.0f})};
  Expect(!HasNonFinite(tensors), "VectorTensor: finite values pass the overflow check");
  Expect(SumOfSquares(tensors) == 169.0, "VectorTensor: sum of squares over the list");
  const std::vector<TensorPtr> halves = Cast(tensors, DataType::Float16, 0.5f);
  Expect(halves[1]->GetDataType() == DataType::Float16 && halves[1]->ToFloatVector()[0] == 6.0f,
         "VectorTensor: cast to FP16 with a factor");
  Expect(!UnscaleAndCheck(tensors, 0.25f) && tensors[1]->ToFloatVector()[0] == 3.0f,
         "VectorTensor: unscaled in place, overflow check passes");
  tensors[0]->CopyFromFloats(std::vector<float>{1.0f, std::nanf("")});
  Expect(HasNonFinite(tensors), "VectorTensor: a NaN is caught");

  // README, "FP8 tensors": the values its snippet states.
  const TensorPtr x = FromVector({1.0f, 300.0f, 1e6f}, {3}, DataType::Float32);
  const std::vector<float> e4m3 = x->CastTo(DataType::Float8E4M3FN)->ToFloatVector();
  const std::vector<float> e5m2 = x->CastTo(DataType::Float8E5M2)->ToFloatVector();
  Expect(e4m3 == std::vector<float>{1.0f, 288.0f, 448.0f}, "FP8: E4M3FN rounds and saturates");
  Expect(e5m2[0] == 1.0f && e5m2[1] == 320.0f && std::isinf(e5m2[2]), "FP8: E5M2 rounds and overflows to inf");
  Expect(x->CastTo(DataType::Float8E4M3FN)->CastTo(DataType::BFloat16)->ToFloatVector() == e4m3,
         "FP8: widening to BF16 is exact");

  std::printf(failures == 0 ? "readme snippets ok\n" : "readme snippets: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}

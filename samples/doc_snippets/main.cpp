// Runs the docs' snippets that need no MPI rank or GPU and checks that they do what the docs say.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <mlframework/mlframework.hpp>

#include "BackoffOnlyScaler.hpp"
#include "Model.hpp"
#include "Snippets.hpp"
#include "VectorTensor.hpp"

namespace {

int failures = 0;

void Expect(bool condition, const char* what) {
  std::printf("%s: %s\n", condition ? "ok  " : "FAIL", what);
  failures += condition ? 0 : 1;
}

// Runs a training-loop snippet on a fresh model; true when it fitted the model.
bool Fits(void (*train)(Model&, int), const char* name) {
  Model model;
  model.Forward();
  const float initial_loss = model.LastLoss();
  train(model, 400);
  model.Forward();
  std::printf("%s: loss %.4g -> %.4g\n", name, static_cast<double>(initial_loss),
              static_cast<double>(model.LastLoss()));
  return model.LastLoss() < 1e-3f * initial_loss;
}

}  // namespace

int main() {
  using namespace mlframework;

  LeaveTheCoresToTheFramework();
  Expect(NumThreads() == 1, "cpu backend: the library's thread count is set");
  Expect(Fits(Train, "training loop"), "the training loop fits the FP16 model");
  SetNumThreads(0);
  Expect(Fits(TrainAccumulating, "accumulation"), "accumulating over micro-batches fits the FP16 model");
  Expect(Fits(TrainWithConversionLayer, "conversion layer"), "the conversion layer's loop fits the FP16 model");
  Expect(Fits(TrainWithOwnBackward, "own backward"), "a backward seeded with the scale fits the FP16 model");
  {
    Model embeddings;
    Model rest;
    const float embeddings_before = embeddings.Forward()->ToFloatVector()[0];
    const float rest_before = rest.Forward()->ToFloatVector()[0];
    TrainTwoOptimizers(embeddings, rest, 400);
    const float embeddings_after = embeddings.Forward()->ToFloatVector()[0];
    const float rest_after = rest.Forward()->ToFloatVector()[0];
    std::printf("two optimizers: Adam's model loss %.4g -> %.4g, SGD's %.4g -> %.4g\n",
                static_cast<double>(embeddings_before), static_cast<double>(embeddings_after),
                static_cast<double>(rest_before), static_cast<double>(rest_after));
    Expect(embeddings_after < 0.5f * embeddings_before && rest_after < 0.5f * rest_before,
           "two optimizers, one scaler: both models learn");
  }

  // The custom scaler inside GradScaler: an overflow skips the step and halves the scale.
  amp::GradScaler scaler(std::make_shared<BackoffOnlyScaler>(1024.0f));
  const TensorPtr weight = FromVector({1.0f, 2.0f}, {2}, DataType::Float16);
  optimizers::SGD sgd({{"w", weight}}, {.LearningRate = 0.5});
  {
    amp::GradScalerContext ctx(scaler, Scalar(1.0f));
    sgd.SetGradients({{"w", FromVector({1.0f, std::numeric_limits<float>::infinity()}, {2}, DataType::Float16)}});
    Expect(!ctx.Step(sgd), "BackoffOnlyScaler: an overflow skips the step");
  }
  Expect(scaler.CurrentScale() == 512.0f, "BackoffOnlyScaler: the scale halves on overflow");
  {
    amp::GradScalerContext ctx(scaler, Scalar(1.0f));
    Expect(ctx.ScaledLoss()->ToFloatVector()[0] == 512.0f, "BackoffOnlyScaler: the loss is scaled");
    sgd.SetGradients({{"w", FromVector({512.0f, 1024.0f}, {2}, DataType::Float16)}});
    Expect(ctx.Step(sgd), "BackoffOnlyScaler: a finite step is taken");
  }
  const std::vector<float> stepped = weight->ToFloatVector();
  Expect(stepped[0] == 0.5f && stepped[1] == 1.0f, "BackoffOnlyScaler: gradients are unscaled before the step");
  Expect(scaler.CurrentScale() == 512.0f, "BackoffOnlyScaler: the scale never grows");

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

  // docs/diagnostics.md: the observers see an overflow, the report names the tensor, amax is tracked.
  {
    amp::GradScaler watched = amp::GradScalerFactory::CreateForFP16();
    std::ostringstream log;
    std::ostringstream csv;
    WatchOverflows(watched, log, csv);
    FollowTheFramework(watched, 4200, {"w"});
    const TensorPtr w = FromVector({1.0f, 2.0f}, {2}, DataType::Float16);
    optimizers::SGD plain({{"w", w}}, {.LearningRate = 0.5});
    watched.Scale(Scalar(1.0f));
    plain.SetGradients({{"w", FromVector({1.0f, std::numeric_limits<float>::infinity()}, {2}, DataType::Float16)}});
    Expect(!watched.Step(plain), "diagnostics: an overflow skips the step");
    PrintDiagnostics(watched, log);
    const auto& report = watched.LastOverflow();
    Expect(report.has_value() && report->ToString().find("w (") != std::string::npos &&
               log.str().find(report->ToString()) != std::string::npos,
           "diagnostics: the report names the tensor and is printed");
    Expect(report.has_value() && report->Step == 4200, "diagnostics: the report has the framework's step");
    Expect(!csv.str().empty(), "diagnostics: the CSV writer has a line");
    watched.Scale(Scalar(1.0f));
    plain.SetGradients({{"w", FromVector({4.0f, -8.0f}, {2}, DataType::Float16)}});
    Expect(watched.Step(plain), "diagnostics: a finite step is taken");
    Expect(watched.LastAmax().has_value() && *watched.LastAmax() == 8.0f / watched.CurrentScale(),
           "diagnostics: amax of the unscaled gradients");
  }

  // README and docs/own-tensors.md: wrapped memory and DLPack, no copy.
  {
    std::vector<Float16> grad(6, Float16(1.0f));
    const TensorPtr wrapped = WrapHost(grad, 2, 3, nullptr);
    Expect(!UnscaleAndCheck(std::vector{wrapped}, 0.5f), "Wrap: unscaled in place, no overflow");
    Expect(static_cast<float>(grad[5]) == 0.5f, "Wrap: the framework's memory changed in place");
    const TensorPtr imported = Import(Export(wrapped));
    Expect(imported->ToFloatVector() == wrapped->ToFloatVector(), "DLPack: exported and imported, same values");
  }

  // docs/fp8.md: the values the casting snippet states, the list kernels, a recipe, an FP8 FSDP unit.
  {
    const std::vector<TensorPtr> casts = Float8Casts();
    const std::vector<float> e4m3 = casts[0]->ToFloatVector();
    const std::vector<float> e5m2 = casts[1]->ToFloatVector();
    Expect(e4m3 == std::vector<float>{1.0f, 288.0f, 448.0f}, "FP8: E4M3FN rounds and saturates");
    Expect(e5m2[0] == 1.0f && e5m2[1] == 320.0f && std::isinf(e5m2[2]), "FP8: E5M2 rounds and overflows to inf");
    Expect(casts[2]->ToFloatVector() == e4m3, "FP8: widening to BF16 is exact");

    const std::vector<TensorPtr> weights = {FromVector({1.0f, -2.0f}, {2}), FromVector({0.25f}, {1})};
    const std::vector<TensorPtr> fp8 = {Zeros({2}, DataType::Float8E4M3FN), Zeros({1}, DataType::Float8E4M3FN)};
    const std::vector<TensorPtr> decoded = {Zeros({2}), Zeros({1})};
    const TensorPtr amax = Zeros({2});
    const float peak =
        CastToFloat8(weights, fp8, decoded, FromVector({4.0f, 16.0f}, {2}), FromVector({0.25f, 0.0625f}, {2}), amax);
    Expect(peak == 2.0f && amax->ToFloatVector() == std::vector<float>{2.0f, 0.25f}, "FP8: amax per tensor and list");
    Expect(decoded[0]->ToFloatVector() == std::vector<float>{1.0f, -2.0f} && decoded[1]->ToFloatVector()[0] == 0.25f,
           "FP8: scaled cast and dequantize round-trip exact values");

    const TensorPtr fc1 = FromVector({0.5f, -1.5f, 3.0f}, {3});
    Expect(!TrainFc1InFp8(fc1, Zeros({3}), 3).empty(), "FP8: the recipe loop runs and checkpoints");

    // A {4, 40} weight: two blocks of a row (32 and 8 values), eight E8M0 scales.
    std::vector<float> values(160, 0.0f);
    values[0] = 3.0f;   // row 0, block 0: scale 2^(1 - 8), code 120
    values[39] = 0.5f;  // row 0, block 1: scale 2^(-1 - 8), code 118
    const TensorPtr w8 = Zeros({4, 40}, DataType::Float8E4M3FN);
    const std::vector<std::uint8_t> scales = WeightInMxfp8(FromVector(values, {4, 40}), w8);
    Expect(scales == std::vector<std::uint8_t>{120, 118, 0, 0, 0, 0, 0, 0} && w8->ToFloatVector()[0] == 384.0f &&
               w8->ToFloatVector()[39] == 256.0f,
           "MXFP8: one E8M0 scale per block of 32 along the last dimension, the short last block its own");

    fp8::DelayedScaling recipe({.Fp8Format = fp8::Format::HYBRID, .AmaxHistoryLen = 4});
    recipe.Register("act", fp8::TensorRole::Forward, *fc1);
    const TensorPtr w32 = GatherInFp8(distributed::MakeLocalProcessGroup(), FromVector({0.5f, -1.5f}, {2}), recipe);
    const std::vector<float> gathered = w32->ToFloatVector();
    Expect(gathered.size() == 2 && std::fabs(gathered[0] - 0.5f) <= 0.5f / 16 && gathered[1] == -1.5f,
           "FP8 under FSDP: the gathered E4M3 unit decodes to its values (3 mantissa bits; the amax exactly)");
  }

  // Compiled, not run: TrainTwoOptimizers, SaveAndResume (ranks writing checkpoint files) and
  // the *_cuda.cpp snippets (a GPU).
  std::printf(failures == 0 ? "doc snippets ok\n" : "doc snippets: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}

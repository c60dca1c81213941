// The demo's MLP: its backward pass is the derivative of its forward pass (checked
// by finite differences in FP32), and rounding into FP16 flushes small gradients
// to zero the way the demo reports, while BF16 and FP32 keep them; FP8 storage goes
// through the library's DelayedScaling.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/mlframework.hpp>

#include "Fp8Codec.hpp"
#include "Mlp.hpp"

using namespace fashion_mnist;
using mlframework::DataType;

namespace {

constexpr std::size_t kBatch = 4;

struct Batch {
  std::vector<float> inputs;
  std::vector<std::uint8_t> labels;
};

Batch MakeBatch(std::size_t features, std::size_t classes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Batch batch;
  batch.inputs.resize(kBatch * features);
  for (float& x : batch.inputs) {
    x = uniform(rng);
  }
  for (std::size_t b = 0; b < kBatch; ++b) {
    batch.labels.push_back(static_cast<std::uint8_t>(b % classes));
  }
  return batch;
}

double SumLoss(Mlp& model, const Batch& batch, std::size_t features) {
  (void)features;
  return model.Forward(batch.inputs, batch.labels, kBatch).mean_loss * static_cast<double>(kBatch);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(DemoMlp)

BOOST_AUTO_TEST_CASE(BackwardMatchesFiniteDifferencesInFP32) {
  const std::vector<std::size_t> sizes = {6, 5, 4, 3};
  Mlp model(sizes, DataType::Float32, 5, 1.0f);
  const Batch batch = MakeBatch(sizes.front(), sizes.back());
  // Biases start at zero; a sample whose ReLUs are all off below a layer would then sit exactly
  // on that layer's kink (pre-activation 0), where finite differences are one-sided.
  for (const auto& [name, parameter] : model.Parameters()) {
    if (name.ends_with(".bias")) {
      parameter->CopyFromFloats(std::vector<float>(parameter->Size(), 0.1f));
    }
  }
  model.Forward(batch.inputs, batch.labels, kBatch);
  UnderflowCount count;
  model.Backward(1.0f, count);  // gradient of the summed loss
  BOOST_TEST(count.flushed == 0u);
  BOOST_TEST(count.nonzero > 0u);

  int checked = 0;
  for (const auto& [name, parameter] : model.Parameters()) {
    const std::vector<float> analytic = model.Gradients().at(name)->ToFloatVector();
    std::vector<float> values = parameter->ToFloatVector();
    for (std::size_t i = 0; i < values.size(); i += 3) {
      const float original = values[i];
      const float eps = 1e-3f;
      values[i] = original + eps;
      parameter->CopyFromFloats(values);
      model.RefreshWeights();
      const double up = SumLoss(model, batch, sizes.front());
      values[i] = original - eps;
      parameter->CopyFromFloats(values);
      model.RefreshWeights();
      const double down = SumLoss(model, batch, sizes.front());
      values[i] = original;
      parameter->CopyFromFloats(values);
      model.RefreshWeights();
      const double numeric = (up - down) / (2.0 * eps);
      BOOST_TEST(std::abs(numeric - analytic[i]) <= 2e-3 + 2e-2 * std::abs(numeric),
                 name << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
      ++checked;
    }
  }
  BOOST_TEST(checked > 20);
}

BOOST_AUTO_TEST_CASE(SmallGradientsFlushInFP16ButNotInBF16) {
  const std::vector<std::size_t> sizes = {8, 6, 3};
  const Batch batch = MakeBatch(sizes.front(), sizes.back());
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    Mlp model(sizes, dtype, 9, 1.0f);
    model.Forward(batch.inputs, batch.labels, kBatch);
    UnderflowCount count;
    model.Backward(1e-9f, count);  // far below FP16's smallest subnormal (6e-8)
    BOOST_TEST(count.nonzero > 0u);
    for (const auto& [name, gradient] : model.Gradients()) {
      BOOST_TEST((gradient->GetDataType() == dtype));
    }
    if (dtype == DataType::Float16) {
      BOOST_TEST(count.Share() == 1.0, "FP16 flushed " << count.Share());
      for (const auto& [name, gradient] : model.Gradients()) {
        BOOST_TEST(gradient->SumOfSquares() == 0.0);
      }
    } else {
      BOOST_TEST(count.flushed == 0u);
    }
    // The same backward with a loss scale of 2^16 keeps the FP16 gradients.
    model.Forward(batch.inputs, batch.labels, kBatch);
    UnderflowCount scaled;
    model.Backward(1e-9f * 65536.0f, scaled);
    BOOST_TEST(scaled.Share() < 0.05);
  }
}

BOOST_AUTO_TEST_CASE(FP16GradientsAreTheRoundedFP32Products) {
  // Rounding through F16C (when the CPU has it) must give the library's round-to-nearest-even.
  const std::vector<std::size_t> sizes = {40, 3};  // one layer: its weight gradient is one product
  const Batch batch = MakeBatch(sizes.front(), sizes.back());
  Mlp wide(sizes, DataType::Float32, 4, 1.0f);
  Mlp half(sizes, DataType::Float16, 4, 1.0f);
  // Same weights: copy the FP16-rounded weights into the FP32 model, and FP16-representable inputs.
  for (const auto& [name, parameter] : half.Parameters()) {
    wide.Parameters().at(name)->CopyFromFloats(parameter->ToFloatVector());
  }
  Batch rounded = batch;
  for (float& x : rounded.inputs) {
    x = static_cast<float>(mlframework::Float16(x));
  }
  wide.Forward(rounded.inputs, rounded.labels, kBatch);
  half.Forward(rounded.inputs, rounded.labels, kBatch);
  UnderflowCount ignored;
  // Logits differ only by FP16 rounding; seed 0.37 gives many non-trivial mantissas.
  wide.Backward(0.37f, ignored);
  half.Backward(0.37f, ignored);
  const std::vector<float> bias_wide = wide.Gradients().at("layer0.bias")->ToFloatVector();
  const std::vector<float> bias_half = half.Gradients().at("layer0.bias")->ToFloatVector();
  for (std::size_t j = 0; j < bias_half.size(); ++j) {
    // Both are rounded sums of rounded logit gradients; they agree to FP16 precision.
    BOOST_TEST(std::abs(bias_half[j] - bias_wide[j]) <= 2e-3f * (1.0f + std::abs(bias_wide[j])));
    BOOST_TEST(bias_half[j] == static_cast<float>(mlframework::Float16(bias_half[j])));
  }
  for (const float g : half.Gradients().at("layer0.weight")->ToFloatVector()) {
    BOOST_TEST(g == static_cast<float>(mlframework::Float16(g)));  // exactly representable
  }
}

BOOST_AUTO_TEST_CASE(FP8StorageQuantizesWeightsInputsAndGradientsUnderDelayedScaling) {
  namespace fp8 = mlframework::fp8;
  const std::vector<std::size_t> sizes = {40, 3};
  const Batch batch = MakeBatch(sizes.front(), sizes.back());
  fp8::DelayedScaling recipe({.Margin = 0, .Fp8Format = fp8::Format::HYBRID, .AmaxHistoryLen = 4});
  Fp8Codec codec(recipe);

  Mlp bf16(sizes, DataType::BFloat16, 4, 1.0f);
  BOOST_CHECK_EXCEPTION(bf16.UseFp8(&codec), mlframework::ArgumentError, [](const mlframework::ArgumentError& e) {
    return std::string(e.what()).find("codec") != std::string::npos;
  });
  BOOST_TEST(recipe.Names().empty());  // nothing registered by the refused call

  Mlp wide(sizes, DataType::Float32, 4, 1.0f);
  Mlp narrow(sizes, DataType::Float32, 4, 1.0f);
  narrow.UseFp8(&codec);
  const double loss_wide = wide.Forward(batch.inputs, batch.labels, kBatch).mean_loss;
  const double loss_narrow = narrow.Forward(batch.inputs, batch.labels, kBatch).mean_loss;
  UnderflowCount count;
  narrow.Backward(0.25f, count);
  BOOST_TEST((recipe.Names() == std::vector<std::string>{"layer0.weight", "layer0.input", "layer0.grad_output"}));
  BOOST_TEST((recipe.Float8TypeOf("layer0.weight") == DataType::Float8E4M3FN));
  BOOST_TEST((recipe.Float8TypeOf("layer0.grad_output") == DataType::Float8E5M2));
  // The recorded amax is the FP32 master weights' (they stay FP32 for the optimizer).
  float weight_amax = 0.0f;
  for (const float w : narrow.Parameters().at("layer0.weight")->ToFloatVector()) {
    weight_amax = std::max(weight_amax, std::abs(w));
  }
  BOOST_TEST(recipe.Amax("layer0.weight")->ToFloatVector().at(0) == weight_amax);
  BOOST_TEST(count.nonzero == kBatch * sizes.back());  // the logit gradients, all non-zero
  // Quantized, but close: E4M3 keeps 3 mantissa bits.
  BOOST_TEST(loss_narrow != loss_wide);
  BOOST_TEST(std::abs(loss_narrow - loss_wide) < 0.1 * loss_wide);

  // After UpdateScales the gradients are cast with scale 57344 / amax, so none flushes, and the
  // bias gradient (4 logit gradients of at most 0.25 each, summed) stays near the FP32 one: the
  // E4M3 weights and inputs move the softmax by a few hundredths.
  recipe.UpdateScales();
  wide.Forward(batch.inputs, batch.labels, kBatch);
  narrow.Forward(batch.inputs, batch.labels, kBatch);
  UnderflowCount ignored;
  wide.Backward(0.25f, ignored);
  narrow.Backward(0.25f, ignored);
  BOOST_TEST(ignored.flushed == 0u);
  const std::vector<float> bias_wide = wide.Gradients().at("layer0.bias")->ToFloatVector();
  const std::vector<float> bias_narrow = narrow.Gradients().at("layer0.bias")->ToFloatVector();
  for (std::size_t j = 0; j < bias_wide.size(); ++j) {
    BOOST_TEST(std::abs(bias_narrow[j] - bias_wide[j]) <= 0.05f);
  }
}

BOOST_AUTO_TEST_SUITE_END()

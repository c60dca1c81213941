// Spec 003: GradientConversionLayer, the two-pass gradient pipeline.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "ContiguousCheck.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using namespace mlfw_test;
namespace tt = boost::test_tools;

namespace {

MixedPrecisionOptions Clipping(float max_norm, float scale = 1024.0f) {
  return MixedPrecisionOptions{.InitialLossScale = scale, .EnableGradientClipping = true, .MaxGradNorm = max_norm};
}

// Clipping under a recipe whose scaler checks nothing (BF16, FP32), so non-finite or huge
// gradients reach the clipping step.
MixedPrecisionOptions UncheckedClipping(MixedPrecisionOptions options, float max_norm) {
  options.EnableGradientClipping = true;
  options.MaxGradNorm = max_norm;
  return options;
}

double NormOf(const std::vector<std::vector<float>>& tensors) {
  double sum = 0.0;
  for (const auto& values : tensors) {
    for (const float v : values) {
      sum += static_cast<double>(v) * v;
    }
  }
  return std::sqrt(sum);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradientConversionLayerTests)

BOOST_AUTO_TEST_CASE(ConstructorsCheckTheirArguments) {
  const MixedPrecisionOptions options;
  BOOST_CHECK_EXCEPTION(GradientConversionLayer(options, nullptr, std::make_shared<PrecisionManager>()),
                        ArgumentNullError, [](const ArgumentNullError& e) { return e.Parameter() == "lossScaler"; });
  BOOST_CHECK_EXCEPTION(GradientConversionLayer(options, std::make_shared<DynamicLossScaler>(), nullptr),
                        ArgumentNullError,
                        [](const ArgumentNullError& e) { return e.Parameter() == "precisionManager"; });
  BOOST_CHECK_EXCEPTION(GradientConversionLayer(MixedPrecisionOptions{.GrowthInterval = -5}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "GrowthInterval"; });
  const GradientConversionLayer layer;
  BOOST_TEST(layer.CurrentScale() == 65536.0f);
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(layer.LastGradientNorm() == 0.0f);
}

BOOST_AUTO_TEST_CASE(SharedScalerIsSeenByTheLayer) {
  const MixedPrecisionOptions options{.InitialLossScale = 512.0f};
  auto scaler = std::make_shared<DynamicLossScaler>(options);
  GradientConversionLayer layer(options, scaler, std::make_shared<PrecisionManager>(options));
  scaler->UpdateScale(true);
  BOOST_TEST(layer.CurrentScale() == 256.0f);
  BOOST_TEST(layer.LossScaler() == scaler);
}

BOOST_AUTO_TEST_CASE(ScaleLossDelegatesToTheScaler) {
  const GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 8.0f});
  BOOST_TEST(Values(layer.ScaleLoss(Scalar(0.5f)))[0] == 4.0f);
  BOOST_CHECK_EXCEPTION(layer.ScaleLoss(nullptr), ArgumentNullError,
                        [](const ArgumentNullError& e) { return e.Parameter() == "loss"; });
}

BOOST_AUTO_TEST_CASE(CleanStepUnscalesIntoFP32) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 1024.0f});
  const TensorPtr g = Vec({1024.0f, -3.0f, 0.5f}, DataType::Float16);
  auto [gradients, skip] = layer.ProcessGradients({{"w", g}});
  BOOST_TEST(!skip);
  BOOST_TEST(gradients.at("w")->GetDataType() == DataType::Float32);
  // 0.5 / 1024 is exact in FP32 (and would be a lossy subnormal in FP16).
  BOOST_TEST(Values(gradients.at("w")) == (std::vector<float>{1.0f, -3.0f / 1024.0f, 0.5f / 1024.0f}),
             tt::per_element());
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(layer.LastGradientNorm() == 0.0f);  // clipping off: no norm measured
  BOOST_TEST(layer.LossScaler()->StepsSinceLastOverflow() == 1);
}

BOOST_AUTO_TEST_CASE(ClipsByTheGlobalNormOfTheUnscaledGradients) {
  GradientConversionLayer layer(Clipping(1.0f, 4.0f));
  // Unscaled: [3] and [0, 4] -> global norm 5.
  const TensorPtr a = Vec({12.0f}, DataType::Float16);
  const TensorPtr b = Vec({0.0f, 16.0f}, DataType::BFloat16);
  const auto [gradients, skip] = layer.ProcessGradients({{"a", a}, {"b", b}});
  BOOST_TEST(!skip);
  BOOST_TEST(layer.LastGradientNorm() == 5.0f);
  BOOST_TEST(layer.ClipCount() == 1);
  const float coef = 1.0f / (5.0f + 1e-6f);
  BOOST_TEST(Values(gradients.at("a"))[0] == 3.0f * coef, tt::tolerance(1e-6f));
  BOOST_TEST(Values(gradients.at("b"))[1] == 4.0f * coef, tt::tolerance(1e-6f));
  BOOST_TEST(Values(gradients.at("b"))[0] == 0.0f);
  BOOST_TEST(NormOf({Values(gradients.at("a")), Values(gradients.at("b"))}) == 1.0, tt::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(NoClipBelowTheMaximum) {
  GradientConversionLayer layer(Clipping(10.0f, 2.0f));
  const auto [gradients, skip] = layer.ProcessGradients({{"a", Vec({6.0f, 8.0f}, DataType::Float16)}});
  BOOST_TEST(!skip);
  BOOST_TEST(layer.LastGradientNorm() == 5.0f);
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(Values(gradients.at("a")) == (std::vector<float>{3.0f, 4.0f}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(OverflowSkipsWithAnEmptyMap) {
  GradientConversionLayer layer(Clipping(1.0f, 1024.0f));
  std::vector<float> big(100000, 1.0f);
  big[77777] = kNaN;
  const TensorPtr clean = Vec({1.0f, 2.0f}, DataType::Float16);
  const auto [gradients, skip] =
      layer.ProcessGradients({{"a", clean}, {"b", Vec(big, DataType::Float16)}, {"c", Vec({5.0f})}});
  BOOST_TEST(skip);
  BOOST_TEST(gradients.empty());
  BOOST_TEST(layer.CurrentScale() == 512.0f);
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(layer.LastGradientNorm() == 0.0f);
  BOOST_TEST(layer.LossScaler()->TotalOverflows() == 1);
  // An infinity in an FP32 tensor is an overflow too, and the inputs are never modified on skip.
  const TensorPtr fp32 = Vec({2.0f, -kInf});
  BOOST_TEST(layer.ProcessGradients({{"a", clean}, {"f", fp32}}).ShouldSkip);
  BOOST_TEST(Values(fp32)[0] == 2.0f);
  BOOST_TEST(layer.CurrentScale() == 256.0f);
}

BOOST_AUTO_TEST_CASE(EmptyMapIsACleanStep) {
  GradientConversionLayer layer(Clipping(1.0f));
  const auto [gradients, skip] = layer.ProcessGradients({});
  BOOST_TEST(!skip);
  BOOST_TEST(gradients.empty());
  BOOST_TEST(layer.LastGradientNorm() == 0.0f);
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(layer.LossScaler()->StepsSinceLastOverflow() == 1);
}

BOOST_AUTO_TEST_CASE(ZeroNormIsNotClipped) {
  GradientConversionLayer layer(Clipping(1.0f));
  const auto [gradients, skip] =
      layer.ProcessGradients({{"a", Zeros({3, 4}, DataType::Float16)}, {"b", Zeros({5}, DataType::BFloat16)}});
  BOOST_TEST(!skip);
  BOOST_TEST(layer.LastGradientNorm() == 0.0f);
  BOOST_TEST(layer.ClipCount() == 0);
  for (const auto& [name, tensor] : gradients) {
    BOOST_TEST(tensor->GetDataType() == DataType::Float32);
    for (const float v : Values(tensor)) {
      BOOST_TEST(v == 0.0f);
    }
  }
  BOOST_TEST(gradients.at("a")->GetShape() == (Shape{3, 4}));
}

BOOST_AUTO_TEST_CASE(MixedDtypesAllComeOutFP32AndFP32IsScaledInPlace) {
  GradientConversionLayer layer(Clipping(1.0f, 8.0f));
  const TensorPtr h = Vec({8.0f, 16.0f}, DataType::Float16);  // unscaled 1, 2
  const TensorPtr b = Vec({-16.0f}, DataType::BFloat16);      // unscaled -2
  const TensorPtr f = Vec({32.0f});                           // unscaled 4 -> norm 5
  const auto [gradients, skip] = layer.ProcessGradients({{"b", b}, {"f", f}, {"h", h}});
  BOOST_TEST(!skip);
  BOOST_TEST(layer.LastGradientNorm() == 5.0f);
  BOOST_TEST(gradients.at("f") == f);  // in place
  const float coef = 1.0f / (5.0f + 1e-6f);
  BOOST_TEST(Values(f)[0] == 4.0f * coef, tt::tolerance(1e-6f));
  BOOST_TEST(Values(gradients.at("h")) == (std::vector<float>{coef, 2.0f * coef}), tt::tolerance(1e-6f)
                                                                                       << tt::per_element());
  BOOST_TEST(Values(gradients.at("b"))[0] == -2.0f * coef, tt::tolerance(1e-6f));
  for (const auto& [name, tensor] : gradients) {
    BOOST_TEST(tensor->GetDataType() == DataType::Float32);
  }
}

BOOST_AUTO_TEST_CASE(AnFP32TensorListedTwiceIsScaledOnce) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 4.0f});
  const TensorPtr shared = Vec({8.0f});
  const auto [gradients, skip] = layer.ProcessGradients({{"tied.a", shared}, {"tied.b", shared}});
  BOOST_TEST(!skip);
  BOOST_TEST(Values(shared)[0] == 2.0f);
  const DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 2.0f});
  scaler.UnscaleGradients({{"x", shared}, {"y", shared}});
  BOOST_TEST(Values(shared)[0] == 1.0f);
}

BOOST_AUTO_TEST_CASE(ClippingDisabledOrNonPositiveMaxNorm) {
  for (const MixedPrecisionOptions& options :
       {MixedPrecisionOptions{.InitialLossScale = 2.0f, .EnableGradientClipping = false, .MaxGradNorm = 1.0f},
        MixedPrecisionOptions{.InitialLossScale = 2.0f, .EnableGradientClipping = true, .MaxGradNorm = 0.0f},
        MixedPrecisionOptions{.InitialLossScale = 2.0f, .EnableGradientClipping = true, .MaxGradNorm = -1.0f}}) {
    GradientConversionLayer layer(options);
    const auto [gradients, skip] = layer.ProcessGradients({{"a", Vec({200.0f, 400.0f}, DataType::Float16)}});
    BOOST_TEST(!skip);
    BOOST_TEST(Values(gradients.at("a")) == (std::vector<float>{100.0f, 200.0f}), tt::per_element());
    BOOST_TEST(layer.ClipCount() == 0);
    BOOST_TEST(layer.LastGradientNorm() == 0.0f);
    const GradientMap input{{"x", Vec({30.0f, 40.0f})}};
    BOOST_TEST(layer.ClipGradients(input).at("x") == input.at("x"));
  }
}

BOOST_AUTO_TEST_CASE(GrowthStepUnscalesByTheScaleTheGradientsWereMadeWith) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 64.0f, .GrowthInterval = 1});
  const auto [gradients, skip] = layer.ProcessGradients({{"a", Vec({64.0f}, DataType::Float16)}});
  BOOST_TEST(!skip);
  BOOST_TEST(layer.CurrentScale() == 128.0f);        // grown by this step
  BOOST_TEST(Values(gradients.at("a"))[0] == 1.0f);  // but unscaled by 64
}

BOOST_AUTO_TEST_CASE(MatchesTheSpecPipelineRunStepByStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 300.0f);
  const MixedPrecisionOptions options = Clipping(0.5f, 256.0f);
  GradientConversionLayer layer(options);
  GradientConversionLayer reference_layer(options);  // for its public ClipGradients
  const DynamicLossScaler reference_scaler(options);
  const PrecisionManager reference_manager(options);
  GradientMap gradients;
  const DataType dtypes[] = {DataType::Float16, DataType::BFloat16, DataType::Float32};
  for (int i = 0; i < 9; ++i) {
    std::vector<float> values(static_cast<std::size_t>(1000 + 4099 * i));
    for (float& v : values) {
      v = normal(rng);
    }
    std::string name = "p";
    name += std::to_string(i);
    gradients.emplace(name, Vec(values, dtypes[i % 3]));
  }
  // Spec 003 step by step on copies: unscale, clip, convert.
  GradientMap copies;
  for (const auto& [name, tensor] : gradients) {
    copies.emplace(name, tensor->Clone());
  }
  const GradientMap expected =
      reference_manager.ConvertToFP32(reference_layer.ClipGradients(reference_scaler.UnscaleGradients(copies)));
  const auto [actual, skip] = layer.ProcessGradients(gradients);
  BOOST_TEST(!skip);
  BOOST_TEST(layer.ClipCount() == 1);
  BOOST_TEST(layer.LastGradientNorm() == reference_layer.LastGradientNorm(), tt::tolerance(1e-5f));
  BOOST_TEST(actual.size() == expected.size());
  for (const auto& [name, tensor] : expected) {
    const std::vector<float> want = Values(tensor);
    const std::vector<float> got = Values(actual.at(name));
    BOOST_TEST(actual.at(name)->GetDataType() == DataType::Float32);
    BOOST_REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      BOOST_TEST(got[k] == want[k], tt::tolerance(1e-5f));
    }
  }
}

BOOST_AUTO_TEST_CASE(OutputBuffersAreReusedOnlyWhenReleased) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 2.0f});
  const GradientMap input{{"a", Vec({2.0f, 4.0f}, DataType::Float16)}};
  const ITensor* buffer = layer.ProcessGradients(input).Gradients.at("a").get();  // result released at once
  // The caller released the previous result: its buffer is written again, nothing is allocated.
  const GradientMap held = layer.ProcessGradients({{"a", Vec({6.0f, 8.0f}, DataType::Float16)}}).Gradients;
  BOOST_TEST(held.at("a").get() == buffer);
  BOOST_TEST(Values(held.at("a")) == (std::vector<float>{3.0f, 4.0f}), tt::per_element());
  // The caller still holds it: the next step writes elsewhere and the held gradients stay as they were.
  const GradientMap next = layer.ProcessGradients(input).Gradients;
  BOOST_TEST(next.at("a").get() != buffer);
  BOOST_TEST(Values(next.at("a")) == (std::vector<float>{1.0f, 2.0f}), tt::per_element());
  BOOST_TEST(Values(held.at("a")) == (std::vector<float>{3.0f, 4.0f}), tt::per_element());
  // A gradient whose shape changed gets a fresh buffer of the new shape.
  const GradientMap reshaped = layer.ProcessGradients({{"a", Vec({2.0f, 2.0f, 2.0f}, DataType::Float16)}}).Gradients;
  BOOST_TEST(reshaped.at("a")->GetShape() == (Shape{3}));
}

BOOST_AUTO_TEST_CASE(AnOptimizerHoldingTheLastStepStillGetsBuffersReused) {
  // An optimizer keeps step n's gradients (SetGradients) until step n + 1's are handed over, so
  // each call runs while the previous result is held: the buffers alternate between two sets.
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 2.0f});
  GradientMap held = layer.ProcessGradients({{"a", Vec({2.0f, 4.0f}, DataType::Float16)}}).Gradients;
  const ITensor* first = held.at("a").get();
  held = layer.ProcessGradients({{"a", Vec({6.0f, 8.0f}, DataType::Float16)}}).Gradients;
  const ITensor* second = held.at("a").get();
  BOOST_TEST(second != first);
  for (int step = 0; step < 4; ++step) {
    const float v = static_cast<float>(step);
    GradientMap next = layer.ProcessGradients({{"a", Vec({2.0f * v, 4.0f}, DataType::Float16)}}).Gradients;
    // The set the caller released is written again; the held one keeps its values until replaced.
    BOOST_TEST(next.at("a").get() == (step % 2 == 0 ? first : second));
    BOOST_TEST(next.at("a").get() != held.at("a").get());
    BOOST_TEST(Values(next.at("a")) == (std::vector<float>{v, 2.0f}), tt::per_element());
    held = std::move(next);
  }
}

BOOST_AUTO_TEST_CASE(NewOutputsShareOneContiguousBuffer) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 2.0f});
  const GradientMap input{{"a", Vec({2.0f, 4.0f}, DataType::Float16)},
                          {"b", Vec({2.0f}, DataType::Float32)},
                          {"c", Vec(std::vector<float>(33, 2.0f), DataType::BFloat16)},
                          {"d", Vec({6.0f}, DataType::Float16)}};
  GradientMap out = layer.ProcessGradients(input).Gradients;
  // The FP32 outputs of the 16-bit gradients are made together, back to back in name order.
  BOOST_TEST(mlfw_test::BackToBack({out.at("a"), out.at("c"), out.at("d")}));
  BOOST_TEST(Values(out.at("c")) == std::vector<float>(33, 1.0f), tt::per_element());
  // Held by the caller: "c" gets a new output next step, "a" and "d" are written again.
  const TensorPtr held = out.at("c");
  const ITensor* a = out.at("a").get();
  out.clear();
  const GradientMap next = layer.ProcessGradients(input).Gradients;
  BOOST_TEST(next.at("a").get() == a);
  BOOST_TEST(next.at("c") != held);
  BOOST_TEST(Values(next.at("c")) == std::vector<float>(33, 1.0f), tt::per_element());
}

BOOST_AUTO_TEST_CASE(NullEntryIsRejectedAndNothingChanges) {
  GradientConversionLayer layer(Clipping(1.0f));
  const TensorPtr f = Vec({1024.0f});
  BOOST_CHECK_EXCEPTION(layer.ProcessGradients({{"a", f}, {"b", nullptr}}), ArgumentNullError,
                        [](const ArgumentNullError& e) { return e.Parameter() == "gradients[\"b\"]"; });
  BOOST_TEST(Values(f)[0] == 1024.0f);
  BOOST_TEST(layer.LossScaler()->State().TotalSteps == 0);
  BOOST_CHECK_THROW(layer.ClipGradients({{"b", nullptr}}), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(ClipGradientsReturnsScaledCopies) {
  GradientConversionLayer layer(Clipping(2.5f));
  const TensorPtr a = Vec({3.0f}, DataType::Float16);
  const TensorPtr b = Vec({4.0f});
  const GradientMap clipped = layer.ClipGradients({{"a", a}, {"b", b}});
  BOOST_TEST(layer.LastGradientNorm() == 5.0f);
  BOOST_TEST(layer.ClipCount() == 1);
  BOOST_TEST(clipped.at("a")->GetDataType() == DataType::Float16);  // same dtype as the input
  BOOST_TEST(Values(clipped.at("b"))[0] == 4.0f * (2.5f / (5.0f + 1e-6f)), tt::tolerance(1e-6f));
  BOOST_TEST(Values(clipped.at("a"))[0] == 1.5f, tt::tolerance(1e-3f));
  BOOST_TEST(Values(b)[0] == 4.0f);  // inputs untouched
  const GradientMap small{{"a", Vec({0.1f})}};
  BOOST_TEST(layer.ClipGradients(small).at("a") == small.at("a"));
  BOOST_TEST(layer.ClipCount() == 1);
}

BOOST_AUTO_TEST_CASE(StatsStringsAndReset) {
  GradientConversionLayer plain;
  BOOST_TEST(plain.GetStats().ToString() ==
             "LossScale: 65536.00, LastGradNorm: 0.0000, ClipCount: 0, ClippingEnabled: False, MaxGradNorm: 1.00");
  GradientConversionLayer layer(Clipping(1.0f, 1.0f));
  layer.ProcessGradients({{"a", Vec({3.0f, 4.0f}, DataType::Float16)}});
  layer.ProcessGradients({{"a", Vec({0.3f, 0.4f}, DataType::Float16)}});
  const GradientProcessingStats stats = layer.GetStats();
  BOOST_TEST(stats.LossScale == 1.0f);
  BOOST_TEST(stats.ClipCount == 1);
  BOOST_TEST(stats.LastGradientNorm == 0.5f, tt::tolerance(1e-3f));
  BOOST_TEST(stats.ClippingEnabled);
  BOOST_TEST(stats.MaxGradNorm == 1.0f);
  BOOST_TEST(stats.LossScalerStats.StepsSinceLastOverflow == 2);
  BOOST_TEST(stats.TargetPrecision == DataType::Float16);
  BOOST_TEST(!stats.FellBackToFP32);
  BOOST_TEST(stats.ToString() ==
             "LossScale: 1.00, LastGradNorm: 0.5000, ClipCount: 1, ClippingEnabled: True, MaxGradNorm: 1.00");
  layer.Reset();
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(layer.LastGradientNorm() == 0.0f);
  BOOST_TEST(layer.LossScaler()->StepsSinceLastOverflow() == 0);
  BOOST_TEST(layer.GetStats().ToString() ==
             "LossScale: 1.00, LastGradNorm: 0.0000, ClipCount: 0, ClippingEnabled: True, MaxGradNorm: 1.00");
}

BOOST_AUTO_TEST_CASE(AutoFallbackContinuesTrainingInFP32) {
  // Starting at the minimum scale 1, so every overflow counts towards the fallback.
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 1.0f, .MaxConsecutiveOverflows = 3});
  const GradientMap bad{{"w", Vec({kNaN, 1.0f}, DataType::Float16)}};
  BOOST_TEST(layer.ProcessGradients(bad).ShouldSkip);
  const GradientProcessingResult second = layer.ProcessGradients(bad);
  BOOST_TEST(second.ShouldSkip);
  BOOST_TEST(!second.FellBackToFP32);
  BOOST_TEST(!layer.GetStats().FellBackToFP32);
  BOOST_TEST(layer.GetStats().OverflowsAtMinScale == 2);
  const GradientProcessingResult third = layer.ProcessGradients(bad);  // third in a row: fallback
  BOOST_TEST(third.ShouldSkip);
  BOOST_TEST(third.FellBackToFP32);  // the event, on the step it happens
  BOOST_TEST(third.Gradients.empty());
  const GradientProcessingStats stats = layer.GetStats();
  BOOST_TEST(stats.FellBackToFP32);
  BOOST_TEST(stats.FallbackStep == 3);
  BOOST_TEST(stats.OverflowsAtMinScale == 3);
  BOOST_TEST(stats.TargetPrecision == DataType::Float32);
  BOOST_TEST(stats.LossScalerStats.FellBackToFP32);
  BOOST_TEST(stats.LossScale == 1.0f);
  BOOST_TEST(stats.ToString().ends_with(", Fell back to FP32"));
  BOOST_TEST(layer.Precision()->TargetPrecision() == DataType::Float32);
  BOOST_TEST(!layer.LossScaler()->IsEnabled());
  // Training goes on: the loss is no longer scaled and gradients are not unscaled.
  BOOST_TEST(Values(layer.ScaleLoss(Scalar(2.0f)))[0] == 2.0f);
  const GradientProcessingResult after = layer.ProcessGradients({{"w", Vec({0.25f, -1.0f})}});
  BOOST_TEST(!after.FellBackToFP32);  // reported once
  const auto& [gradients, skip] = after;
  BOOST_TEST(!skip);
  BOOST_TEST(Values(gradients.at("w")) == (std::vector<float>{0.25f, -1.0f}), tt::per_element());
  // The overflow checks go on after the fallback: non-finite gradients never reach the optimizer.
  for (const float v : {kNaN, kInf, -kInf}) {
    for (const DataType dtype : {DataType::Float16, DataType::Float32}) {
      const GradientProcessingResult result = layer.ProcessGradients({{"w", Vec({1.0f, v}, dtype)}});
      BOOST_TEST(result.ShouldSkip);
      BOOST_TEST(result.Gradients.empty());
    }
  }
  BOOST_TEST(layer.CurrentScale() == 1.0f);
  BOOST_TEST(layer.LossScaler()->TotalOverflows() == 9);
  // Reset clears the statistics, not the fallback.
  layer.Reset();
  BOOST_TEST(layer.GetStats().FellBackToFP32);
  BOOST_TEST(layer.CurrentScale() == 1.0f);
}

BOOST_AUTO_TEST_CASE(NonFiniteGradientsAreSkippedOnEveryStepThroughTheFallback) {
  // Overflow after overflow from a high initial scale: 16 back-offs from 65536 to the minimum,
  // then the fallback fires on the third overflow at the minimum (step 19), and neither before
  // nor after it does a step hand non-finite values on, with clipping on or off.
  for (const bool clipping : {false, true}) {
    for (const DataType dtype : {DataType::Float16, DataType::BFloat16, DataType::Float32}) {
      GradientConversionLayer layer(
          MixedPrecisionOptions{.MaxConsecutiveOverflows = 3, .EnableGradientClipping = clipping, .MaxGradNorm = 1.0f});
      for (int step = 0; step < 24; ++step) {
        const float bad = step % 3 == 0 ? kNaN : (step % 3 == 1 ? kInf : -kInf);
        const GradientProcessingResult result =
            layer.ProcessGradients({{"a", Vec({0.5f, bad}, dtype)}, {"b", Vec({1.0f}, dtype)}});
        BOOST_TEST(result.ShouldSkip, "step " << step << " clipping " << clipping);
        BOOST_TEST(result.Gradients.empty());
        BOOST_TEST(result.FellBackToFP32 == (step == 18), "step " << step << " clipping " << clipping);
      }
      BOOST_TEST(layer.GetStats().FellBackToFP32);
      BOOST_TEST(layer.GetStats().FallbackStep == 19);
      BOOST_TEST(layer.LossScaler()->TotalOverflows() == 24);
      const GradientProcessingResult clean = layer.ProcessGradients({{"a", Vec({0.5f, 0.25f}, dtype)}});
      BOOST_TEST(!clean.ShouldSkip);
      BOOST_TEST(Values(clean.Gradients.at("a")) == (std::vector<float>{0.5f, 0.25f}), tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(StateDictResumesTheWholeLayer) {
  // The minimum 32 is one back-off below the initial scale, so the run below reaches the fallback.
  const MixedPrecisionOptions options{.InitialLossScale = 64.0f,
                                      .GrowthInterval = 2,
                                      .MinLossScale = 32.0f,
                                      .MaxConsecutiveOverflows = 2,
                                      .EnableGradientClipping = true,
                                      .MaxGradNorm = 1.0f};
  GradientConversionLayer a(options);
  a.ProcessGradients({{"w", Vec({640.0f}, DataType::Float16)}});  // clip (norm 10)
  a.ProcessGradients({{"w", Vec({kNaN}, DataType::Float16)}});
  GradientConversionLayer b(options);
  b.LoadStateDict(a.StateDict());
  BOOST_TEST(b.GetStats().ToString() == a.GetStats().ToString());
  BOOST_TEST(b.LossScaler()->State() == a.LossScaler()->State());
  // Both continue identically, through the fallback (two overflows at the minimum 32).
  for (const float v : {kInf, -kInf, 3.0f, 5.0f}) {
    const GradientMap g{{"w", Vec({v}, DataType::Float16)}};
    BOOST_TEST(a.ProcessGradients(g).ShouldSkip == b.ProcessGradients(g).ShouldSkip);
    BOOST_TEST(b.GetStats().ToString() == a.GetStats().ToString());
  }
  BOOST_TEST(b.GetStats().FellBackToFP32);
  GradientConversionLayer c(options);
  c.LoadStateDict(b.StateDict());
  BOOST_TEST(c.Precision()->HasFallenBack());
  BOOST_TEST(!c.LossScaler()->IsEnabled());

  // A corrupt blob, or a scaler's blob, changes nothing.
  GradientConversionLayer d(options);
  d.ProcessGradients({{"w", Vec({640.0f}, DataType::Float16)}});
  const std::string before = d.GetStats().ToString();
  std::vector<std::byte> blob = a.StateDict();
  blob[30] ^= std::byte{1};
  BOOST_CHECK_THROW(d.LoadStateDict(blob), ArgumentError);
  BOOST_CHECK_THROW(d.LoadStateDict(d.LossScaler()->StateDict()), ArgumentError);
  BOOST_TEST(d.GetStats().ToString() == before);
  // Valid frame, but the scaler inside does not fit this layer's bounds: nothing is committed.
  GradientConversionLayer e(MixedPrecisionOptions{.InitialLossScale = 2.0f, .MaxLossScale = 4.0f});
  BOOST_CHECK_THROW(e.LoadStateDict(d.StateDict()), ArgumentError);
  BOOST_TEST(e.CurrentScale() == 2.0f);
  BOOST_TEST(e.ClipCount() == 0);
}

BOOST_AUTO_TEST_CASE(ALayerBlobWithAVersionOnePrecisionManagerStillLoads) {
  // A checkpoint written before the count at the minimum scale: the layer's frame is unchanged,
  // the manager's part is version 1 (precision and fallback flag).
  const MixedPrecisionOptions options{.InitialLossScale = 1.0f, .MaxConsecutiveOverflows = 2};
  DynamicLossScaler scaler(options);
  scaler.UpdateScale(true);
  scaler.StopScaling();
  const std::vector<std::byte> scaler_blob = scaler.StateDict();
  mlframework::detail::BlobWriter manager("optimizers.mixed_precision.PrecisionManager", 1);
  manager.U8(static_cast<std::uint8_t>(DataType::Float16));
  manager.U8(1);
  const std::vector<std::byte> manager_blob = manager.Finish();
  mlframework::detail::BlobWriter writer("optimizers.mixed_precision.GradientConversionLayer", 1);
  writer.I64(3);
  writer.F32(0.5f);
  writer.U64(scaler_blob.size());
  writer.Bytes(scaler_blob);
  writer.U64(manager_blob.size());
  writer.Bytes(manager_blob);
  GradientConversionLayer layer(options);
  layer.LoadStateDict(writer.Finish());
  BOOST_TEST(layer.ClipCount() == 3);
  BOOST_TEST(layer.GetStats().FellBackToFP32);
  BOOST_TEST(layer.GetStats().FallbackStep == 0);  // version 1 did not record it
  BOOST_TEST(layer.CurrentScale() == 1.0f);
  // Resumed in FP32, still checking: a NaN step is skipped, a clean one kept.
  BOOST_TEST(layer.ProcessGradients({{"w", Vec({kNaN})}}).ShouldSkip);
  BOOST_TEST(!layer.ProcessGradients({{"w", Vec({0.5f})}}).ShouldSkip);
}

BOOST_AUTO_TEST_CASE(AnInfiniteGradientIsNotClippedIntoNaNAndZeros) {
  // The norm is +Inf: a coefficient of 0 would turn the Inf into NaN and zero every other
  // gradient; like a NaN norm it is left unclipped.
  GradientConversionLayer layer(UncheckedClipping(MixedPrecisionOptions::ForBF16(), 1.0f));
  const auto [gradients, skip] = layer.ProcessGradients(
      {{"a", Vec({kInf, 1.0f}, DataType::BFloat16)}, {"b", Vec({3.0f, 4.0f}, DataType::BFloat16)}});
  BOOST_TEST(!skip);  // the BF16 recipe's scaler reports no overflow
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(Values(gradients.at("a")) == (std::vector<float>{kInf, 1.0f}), tt::per_element());
  BOOST_TEST(Values(gradients.at("b")) == (std::vector<float>{3.0f, 4.0f}), tt::per_element());
  const GradientMap inputs{{"a", Vec({-kInf}, DataType::Float16)}, {"b", Vec({2.0f})}};
  const GradientMap clipped = layer.ClipGradients(inputs);
  BOOST_TEST(layer.ClipCount() == 0);
  BOOST_TEST(clipped.at("a") == inputs.at("a"));
  BOOST_TEST(clipped.at("b") == inputs.at("b"));
}

BOOST_AUTO_TEST_CASE(AFiniteNormAboveTheFloatRangeStillClipsToMaxGradNorm) {
  // |g| = 3e38 * sqrt(2) exceeds FLT_MAX although every element is finite: the gradients must
  // come out with norm MaxGradNorm, not zeroed by a coefficient of MaxGradNorm / inf.
  GradientConversionLayer layer(UncheckedClipping(MixedPrecisionOptions::ForFP32(), 1.0f));
  const auto [gradients, skip] = layer.ProcessGradients({{"w", Vec({3e38f, -3e38f})}});
  BOOST_TEST(!skip);
  BOOST_TEST(layer.ClipCount() == 1);
  const std::vector<float> got = Values(gradients.at("w"));
  BOOST_TEST(got[0] == 0.70710678f, tt::tolerance(1e-4f));
  BOOST_TEST(got[1] == -0.70710678f, tt::tolerance(1e-4f));
  const GradientMap clipped = layer.ClipGradients({{"w", Vec({3e38f, 3e38f}, DataType::BFloat16)}});
  BOOST_TEST(Values(clipped.at("w"))[0] == 0.70710678f, tt::tolerance(1e-2f));  // BF16 output
}

BOOST_AUTO_TEST_CASE(AStateDictSavedAfterANaNNormLoadsBack) {
  // An unchecked NaN gradient makes the measured norm NaN; the blob StateDict() writes then
  // must still load.
  const MixedPrecisionOptions options = UncheckedClipping(MixedPrecisionOptions::ForBF16(), 1.0f);
  GradientConversionLayer layer(options);
  layer.ProcessGradients({{"w", Vec({kNaN, 1.0f}, DataType::BFloat16)}});
  BOOST_TEST(std::isnan(layer.LastGradientNorm()));
  const std::vector<std::byte> blob = layer.StateDict();
  GradientConversionLayer resumed(options);
  BOOST_CHECK_NO_THROW(resumed.LoadStateDict(blob));
  BOOST_TEST(std::isnan(resumed.LastGradientNorm()));
  BOOST_TEST(resumed.StepIndex() == 1);
}

BOOST_AUTO_TEST_CASE(AFiniteFP32GradientThatOverflowsWhenUnscaledIsSkipped) {
  // A scale below 1 multiplies by more than 1 when unscaling: 3e38 / 0.5 is Inf in FP32.
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 0.5f, .MinLossScale = 0.5f});
  const TensorPtr fp32 = Vec({3e38f, 1.0f});
  const auto [gradients, skip] = layer.ProcessGradients({{"w", fp32}});
  BOOST_TEST(skip);
  BOOST_TEST(gradients.empty());
  BOOST_TEST(Values(fp32)[0] == 3e38f);  // a skipped step leaves FP32 inputs as they were
  BOOST_TEST(layer.LossScaler()->TotalOverflows() == 1);
  // One that stays finite is unscaled in place as before.
  const TensorPtr finite = Vec({1e38f, 1.0f});
  BOOST_TEST(!layer.ProcessGradients({{"w", finite}}).ShouldSkip);
  BOOST_TEST(Values(finite) == (std::vector<float>{2e38f, 2.0f}), tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

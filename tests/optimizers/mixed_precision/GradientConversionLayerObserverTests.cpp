// GradientConversionLayer::LastOverflow() and observers: reports, event order, fallback, clipping.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "amp/FakeDeviceBackend.hpp"
#include "core/RecordingObserver.hpp"
#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using mlfw_test::kInf;
using mlfw_test::kNaN;
using mlfw_test::RecordingObserver;
using mlfw_test::Vec;

namespace {

using Strings = std::vector<std::string>;

GradientMap Clean(float scale) {
  return {{"a", Vec({1.0f * scale, 2.0f * scale}, DataType::Float16)},
          {"b", Vec({0.5f * scale}, DataType::Float32)},
          {"c", Vec({-1.0f * scale, 0.25f * scale, 1.0f}, DataType::BFloat16)}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradientConversionLayerObservers)

BOOST_AUTO_TEST_CASE(EventsInOrderAndAReportOnSkippedStepsOnly) {
  GradientConversionLayer layer(
      MixedPrecisionOptions{.InitialLossScale = 1024.0f, .GrowthInterval = 2, .MaxConsecutiveOverflows = 100});
  auto observer = std::make_shared<RecordingObserver>();
  layer.AddObserver(observer);
  BOOST_TEST(!layer.ProcessGradients(Clean(1024.0f)).ShouldSkip);
  BOOST_TEST(!layer.ProcessGradients(Clean(1024.0f)).ShouldSkip);
  BOOST_TEST(!layer.LastOverflow().has_value());
  GradientMap bad = Clean(2048.0f);
  bad["a"] = Vec({1.0f, kInf}, DataType::Float16);
  bad["c"] = Vec({kNaN, -kInf, kNaN}, DataType::BFloat16);
  BOOST_TEST(layer.ProcessGradients(bad).ShouldSkip);
  BOOST_TEST(observer->events == (Strings{"step 0", "growth 1 1024->2048", "step 1", "overflow 2", "skipped 2 2048",
                                          "backoff 2 2048->1024", "step 2 skipped"}));
  BOOST_TEST_REQUIRE(observer->steps.size() == 3u);
  for (const StepEvent& event : observer->steps) {
    BOOST_TEST_REQUIRE(event.MinLossScale.has_value());
    BOOST_TEST(*event.MinLossScale == 1.0f);  // MixedPrecisionOptions' minimum
  }
  BOOST_TEST_REQUIRE(layer.LastOverflow().has_value());
  const OverflowReport& report = *layer.LastOverflow();
  BOOST_TEST(report.Step == 2);
  BOOST_TEST(report.LossScale == 2048.0f);
  BOOST_TEST_REQUIRE(report.Tensors.size() == 2u);
  BOOST_TEST(report.Tensors[0].Name == "a");
  BOOST_TEST(report.Tensors[0].NonFiniteCount == 1u);
  BOOST_TEST(report.Tensors[0].FirstIndex == 1u);
  BOOST_TEST(report.Tensors[0].HasPosInf);
  BOOST_TEST(report.Tensors[1].Name == "c");
  BOOST_TEST(report.Tensors[1].NonFiniteCount == 3u);
  BOOST_TEST(report.Tensors[1].HasNaN);
  BOOST_TEST(report.Tensors[1].HasNegInf);
  BOOST_TEST(report.Tensors[1].NaNCount == 2u);
  BOOST_TEST(report.Tensors[1].NegInfCount == 1u);
  // An FP32 input that overflowed is reported too (checked in place).
  GradientMap fp32_bad = Clean(1024.0f);
  fp32_bad["b"] = Vec({kInf}, DataType::Float32);
  BOOST_TEST(layer.ProcessGradients(fp32_bad).ShouldSkip);
  BOOST_TEST(layer.LastOverflow()->Step == 3);
  BOOST_TEST(layer.LastOverflow()->Tensors.size() == 1u);
  BOOST_TEST(layer.LastOverflow()->Tensors[0].Name == "b");
  // Clean steps keep the last report; Reset() clears it.
  BOOST_TEST(!layer.ProcessGradients(Clean(512.0f)).ShouldSkip);
  BOOST_TEST(layer.LastOverflow()->Step == 3);
  layer.Reset();
  BOOST_TEST(!layer.LastOverflow().has_value());
}

BOOST_AUTO_TEST_CASE(FallbackIsAnEventAndChecksGoOn) {
  GradientConversionLayer layer(MixedPrecisionOptions{
      .InitialLossScale = 2.0f, .MinLossScale = 1.0f, .MaxConsecutiveOverflows = 2, .EnableAutoFallback = true});
  auto observer = std::make_shared<RecordingObserver>();
  layer.AddObserver(observer);
  const GradientMap nan{{"w", Vec({kNaN, 1.0f}, DataType::Float16)}};
  int step = 0;
  for (; step < 20 && !layer.GetStats().FellBackToFP32; ++step) {
    BOOST_TEST(layer.ProcessGradients(nan).ShouldSkip);
  }
  BOOST_TEST_REQUIRE(layer.GetStats().FellBackToFP32);
  const std::string fallback = "fallback " + std::to_string(step - 1);
  const auto at = std::find(observer->events.begin(), observer->events.end(), fallback);
  BOOST_TEST_REQUIRE((at != observer->events.end()));
  // After the step's overflow events, before its OnStep; exactly once.
  BOOST_TEST(*(at + 1) == "step " + std::to_string(step - 1) + " skipped");
  BOOST_TEST(std::count(observer->events.begin(), observer->events.end(), fallback) == 1);
  // After the fallback the checks go on: the next NaN step is skipped and reported, no new fallback.
  observer->events.clear();
  BOOST_TEST(layer.ProcessGradients(nan).ShouldSkip);
  BOOST_TEST(layer.LastOverflow()->Step == step);
  BOOST_TEST(std::none_of(observer->events.begin(), observer->events.end(),
                          [](const std::string& e) { return e.rfind("fallback", 0) == 0; }));
}

BOOST_AUTO_TEST_CASE(ClippingReportsTheNormAndTheCoefficient) {
  GradientConversionLayer layer(
      MixedPrecisionOptions{.InitialLossScale = 1024.0f, .EnableGradientClipping = true, .MaxGradNorm = 1.0f});
  auto observer = std::make_shared<RecordingObserver>();
  layer.AddObserver(observer);
  const GradientMap grads{{"w", Vec({3.0f * 1024.0f, 4.0f * 1024.0f}, DataType::Float16)}};
  BOOST_TEST(!layer.ProcessGradients(grads).ShouldSkip);
  BOOST_TEST(observer->events == (Strings{"clip 0", "step 0"}));
  BOOST_TEST(observer->clip_norms.at(0) == 5.0f);
  BOOST_TEST(observer->clip_coefficients.at(0) == 1.0f / (5.0f + 1e-6f));
  BOOST_TEST(observer->steps.at(0).GradientNorm.value() == 5.0f);
  // Below the limit: the norm is in OnStep, no clipping event.
  BOOST_TEST(!layer.ProcessGradients(GradientMap{{"w", Vec({0.5f * 1024.0f}, DataType::Float16)}}).ShouldSkip);
  BOOST_TEST(observer->events.back() == "step 1");
  BOOST_TEST(observer->steps.at(1).GradientNorm.value() == 0.5f);
  // An overflow with clipping: the inputs are reported, no norm.
  BOOST_TEST(layer.ProcessGradients(GradientMap{{"w", Vec({kInf, 1.0f}, DataType::BFloat16)}}).ShouldSkip);
  BOOST_TEST(layer.LastOverflow()->Tensors.at(0).Name == "w");
  BOOST_TEST(!observer->steps.at(2).GradientNorm.has_value());
}

BOOST_AUTO_TEST_CASE(OnADeviceOnlyOverflowStepsScan) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 8.0f});
  const auto& backend = mlfw_test::FakeBackend();
  const std::int64_t scans = backend.ScanCount();
  const auto grads = [](float poison) {
    return GradientMap{{"p", mlfw_test::FakeTensor({1.0f, poison}, {2}, DataType::Float16)},
                       {"q", mlfw_test::FakeTensor({poison}, {1}, DataType::Float32)}};
  };
  // Without an observer: the one synchronisation per step, no scan, no report.
  BOOST_TEST(layer.ProcessGradients(grads(kNaN)).ShouldSkip);
  BOOST_TEST(backend.ScanCount() == scans);
  BOOST_TEST(!layer.LastOverflow().has_value());
  layer.AddObserver(std::make_shared<RecordingObserver>());
  for (int i = 0; i < 3; ++i) BOOST_TEST(!layer.ProcessGradients(grads(2.0f)).ShouldSkip);
  BOOST_TEST(backend.ScanCount() == scans);
  BOOST_TEST(layer.ProcessGradients(grads(-kInf)).ShouldSkip);
  BOOST_TEST(backend.ScanCount() == scans + 1);
  BOOST_TEST(layer.LastOverflow()->Tensors.size() == 2u);
  BOOST_TEST(layer.LastOverflow()->Tensors[1].HasNegInf);
}

BOOST_AUTO_TEST_CASE(AThrowingObserverLeavesTheLayerConsistent) {
  GradientConversionLayer layer(
      MixedPrecisionOptions{.InitialLossScale = 1024.0f, .EnableGradientClipping = true, .MaxGradNorm = 1.0f});
  auto thrower = std::make_shared<RecordingObserver>("clip", "clip observer failed");
  auto recorder = std::make_shared<RecordingObserver>();
  layer.AddObserver(thrower);
  layer.AddObserver(recorder);
  const GradientMap grads{{"w", Vec({3.0f * 1024.0f, 4.0f * 1024.0f}, DataType::Float16)}};
  BOOST_CHECK_THROW(layer.ProcessGradients(grads), std::runtime_error);
  BOOST_TEST(recorder->events == (Strings{"clip 0", "step 0"}));
  BOOST_TEST(thrower->events == (Strings{"clip 0", "step 0"}));
  BOOST_TEST(layer.ClipCount() == 1);  // committed before the observers ran
  BOOST_TEST(layer.LastGradientNorm() == 5.0f);
  BOOST_TEST(layer.RemoveObserver(thrower));
  const GradientProcessingResult next = layer.ProcessGradients(grads);
  BOOST_TEST(!next.ShouldSkip);
  BOOST_TEST(layer.ClipCount() == 2);
  BOOST_TEST(recorder->events.back() == "step 1");
}

// The step index is the framework's (set, saved, restored); the report lists the gradients in
// the order given to SetGradientOrder(), the others after them in name order.
BOOST_AUTO_TEST_CASE(StepIndexAndGradientOrderAreTheFrameworks) {
  GradientConversionLayer layer(MixedPrecisionOptions{.InitialLossScale = 8.0f, .MaxConsecutiveOverflows = 100});
  layer.SetStepIndex(1000);
  layer.SetGradientOrder({"c", "a"});
  BOOST_TEST(!layer.ProcessGradients(Clean(8.0f)).ShouldSkip);
  GradientMap bad = Clean(8.0f);
  bad["a"] = Vec({1.0f, kInf}, DataType::Float16);
  bad["b"] = Vec({kNaN}, DataType::Float32);
  bad["c"] = Vec({kNaN, -kInf, kNaN}, DataType::BFloat16);
  BOOST_TEST(layer.ProcessGradients(bad).ShouldSkip);
  BOOST_TEST_REQUIRE(layer.LastOverflow().has_value());
  BOOST_TEST(layer.LastOverflow()->Step == 1001);
  Strings names;
  for (const TensorOverflow& tensor : layer.LastOverflow()->Tensors) {
    names.push_back(tensor.Name);
  }
  BOOST_TEST(names == (Strings{"c", "a", "b"}));
  BOOST_TEST(layer.StepIndex() == 1002);
  GradientConversionLayer resumed(MixedPrecisionOptions{.InitialLossScale = 8.0f, .MaxConsecutiveOverflows = 100});
  resumed.LoadStateDict(layer.StateDict());
  BOOST_TEST(resumed.StepIndex() == 1002);
  BOOST_CHECK_THROW(resumed.SetStepIndex(-5), ArgumentError);
  BOOST_TEST(resumed.StepIndex() == 1002);
}

BOOST_AUTO_TEST_SUITE_END()

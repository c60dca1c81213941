// Spec 000: DynamicLossScaler of the mixed-precision optimizer stack.
#include <cmath>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using namespace mlfw_test;

BOOST_AUTO_TEST_SUITE(DynamicLossScalerTests)

BOOST_AUTO_TEST_CASE(DefaultIsTheFP16Recipe) {
  const DynamicLossScaler scaler;
  BOOST_TEST(scaler.CurrentScale() == 65536.0f);
  BOOST_TEST(scaler.IsEnabled());
  BOOST_TEST(scaler.ConsecutiveOverflows() == 0);
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 0);
  BOOST_TEST(scaler.TotalOverflows() == 0);
  BOOST_TEST(scaler.MaxConsecutiveOverflows() == 10);
  BOOST_TEST(scaler.IsStable());
  BOOST_TEST(!scaler.FellBackToFP32());
}

BOOST_AUTO_TEST_CASE(ConstructorValidatesOptions) {
  BOOST_CHECK_EXCEPTION(DynamicLossScaler(MixedPrecisionOptions{.GrowthFactor = 0.5f}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "GrowthFactor"; });
}

BOOST_AUTO_TEST_CASE(ScaleLossMultipliesByTheScale) {
  const DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 1024.0f});
  const TensorPtr loss = Scalar(2.5f);
  const TensorPtr scaled = scaler.ScaleLoss(loss);
  BOOST_TEST(Values(scaled)[0] == 2560.0f);
  BOOST_TEST(Values(loss)[0] == 2.5f);  // the loss itself is untouched
  BOOST_CHECK_EXCEPTION(scaler.ScaleLoss(nullptr), ArgumentNullError,
                        [](const ArgumentNullError& e) { return e.Parameter() == "loss"; });
  const DynamicLossScaler disabled(MixedPrecisionOptions::ForBF16());
  BOOST_TEST(disabled.ScaleLoss(loss) == loss);
}

BOOST_AUTO_TEST_CASE(UnscaleGradientsMultipliesByTheInverse) {
  const DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 16777216.0f});
  const TensorPtr fp32 = Vec({16777216.0f, -8.0f});
  // 0.5 / 2^24 is below FP16's smallest subnormal: unscaling into FP16 would flush it to zero.
  const TensorPtr fp16 = Vec({0.5f, 3.0f}, DataType::Float16);
  const TensorPtr bf16 = Vec({256.0f}, DataType::BFloat16);
  const GradientMap unscaled = scaler.UnscaleGradients({{"a", fp32}, {"b", fp16}, {"c", bf16}});
  BOOST_TEST(unscaled.size() == 3u);
  BOOST_TEST(unscaled.at("a") == fp32);  // FP32 unscaled in place
  BOOST_TEST(Values(fp32) == (std::vector<float>{1.0f, -8.0f / 16777216.0f}), boost::test_tools::per_element());
  BOOST_TEST(unscaled.at("b")->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(unscaled.at("b")) == (std::vector<float>{0.5f / 16777216.0f, 3.0f / 16777216.0f}),
             boost::test_tools::per_element());
  BOOST_TEST(Values(unscaled.at("b"))[0] != 0.0f);
  BOOST_TEST(unscaled.at("c")->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(unscaled.at("c"))[0] == 256.0f / 16777216.0f);
  BOOST_TEST(Values(fp16)[0] == 0.5f);  // the 16-bit inputs are untouched
}

BOOST_AUTO_TEST_CASE(UnscaleGradientsRejectsNullAndWritesNothing) {
  const DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 4.0f});
  const TensorPtr fp32 = Vec({8.0f});
  BOOST_CHECK_EXCEPTION(scaler.UnscaleGradients({{"a", fp32}, {"b", nullptr}}), ArgumentNullError,
                        [](const ArgumentNullError& e) { return e.Parameter() == "gradients[\"b\"]"; });
  BOOST_TEST(Values(fp32)[0] == 8.0f);
  BOOST_TEST(scaler.UnscaleGradients({}).empty());
}

BOOST_AUTO_TEST_CASE(DisabledScalerPassesGradientsThrough) {
  const DynamicLossScaler scaler(MixedPrecisionOptions::ForBF16());
  BOOST_TEST(!scaler.IsEnabled());
  const TensorPtr g = Vec({kNaN, 2.0f}, DataType::BFloat16);
  const GradientMap gradients{{"w", g}};
  const GradientMap unscaled = scaler.UnscaleGradients(gradients);
  BOOST_TEST(unscaled.at("w") == g);
  BOOST_TEST(!scaler.CheckOverflow(gradients));  // spec: a disabled scaler never reports overflow
  DynamicLossScaler mutable_scaler(MixedPrecisionOptions::ForBF16());
  BOOST_TEST(!mutable_scaler.UpdateScale(true));
  BOOST_TEST(mutable_scaler.TotalOverflows() == 0);
  BOOST_TEST(mutable_scaler.CurrentScale() == 1.0f);
}

BOOST_AUTO_TEST_CASE(CheckOverflowFindsNaNAndInfinitiesInEveryDtype) {
  const DynamicLossScaler scaler;
  const TensorPtr clean16 = Vec({1.0f, -2.0f, 65504.0f}, DataType::Float16);
  const TensorPtr clean32 = Vec({1e30f, -1e-30f});
  BOOST_TEST(!scaler.CheckOverflow({{"a", clean16}, {"b", clean32}}));
  BOOST_TEST(!scaler.CheckOverflow({}));
  BOOST_TEST(scaler.CheckOverflow({{"a", clean16}, {"b", Vec({1.0f, kNaN})}}));
  BOOST_TEST(scaler.CheckOverflow({{"a", Vec({kInf}, DataType::Float16)}}));
  BOOST_TEST(scaler.CheckOverflow({{"a", Vec({-kInf}, DataType::BFloat16)}, {"b", clean32}}));
  BOOST_TEST(scaler.CheckOverflow({{"a", Vec({1e5f}, DataType::Float16)}}));  // beyond FP16 range: stored as Inf
  // A NaN deep in a large tensor among many clean ones.
  std::vector<float> big(300000, 0.25f);
  big[299999] = kNaN;
  BOOST_TEST(scaler.CheckOverflow({{"a", clean16}, {"big", Vec(big, DataType::Float16)}, {"z", clean32}}));
  BOOST_CHECK_THROW(scaler.CheckOverflow({{"a", nullptr}}), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(OverflowBacksOffDownToTheMinimum) {
  DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 8.0f, .MinLossScale = 2.0f});
  BOOST_TEST(scaler.UpdateScale(true));
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  BOOST_TEST(scaler.UpdateScale(true));
  BOOST_TEST(scaler.CurrentScale() == 2.0f);
  BOOST_TEST(scaler.UpdateScale(true));
  BOOST_TEST(scaler.CurrentScale() == 2.0f);  // bounded by MinLossScale
  BOOST_TEST(scaler.ConsecutiveOverflows() == 3);
  BOOST_TEST(scaler.TotalOverflows() == 3);
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 0);
}

BOOST_AUTO_TEST_CASE(CleanStepsGrowUpToTheMaximum) {
  DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 8.0f, .GrowthInterval = 3, .MaxLossScale = 32.0f});
  BOOST_TEST(!scaler.UpdateScale(false));
  BOOST_TEST(!scaler.UpdateScale(false));
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 2);
  BOOST_TEST(scaler.CurrentScale() == 8.0f);
  BOOST_TEST(!scaler.UpdateScale(false));
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 0);
  for (int i = 0; i < 6; ++i) {
    scaler.UpdateScale(false);
  }
  BOOST_TEST(scaler.CurrentScale() == 32.0f);  // bounded by MaxLossScale
  // An overflow restarts the clean-step count and clears nothing else.
  scaler.UpdateScale(false);
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 0);
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  scaler.UpdateScale(false);
  BOOST_TEST(scaler.ConsecutiveOverflows() == 0);
  BOOST_TEST(scaler.TotalOverflows() == 1);
}

BOOST_AUTO_TEST_CASE(CheckOverflowAndUpdateCombinesBoth) {
  DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 64.0f});
  BOOST_TEST(scaler.CheckOverflowAndUpdate({{"w", Vec({kNaN}, DataType::Float16)}}));
  BOOST_TEST(scaler.CurrentScale() == 32.0f);
  BOOST_TEST(!scaler.CheckOverflowAndUpdate({{"w", Vec({1.0f}, DataType::Float16)}}));
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 1);
}

BOOST_AUTO_TEST_CASE(StatsAndTheirString) {
  DynamicLossScaler scaler(
      MixedPrecisionOptions{.InitialLossScale = 65536.0f, .GrowthInterval = 100, .MaxConsecutiveOverflows = 2});
  BOOST_TEST(scaler.GetStats().ToString() ==
             "Scale: 65536.00, Steps since overflow: 0, Consecutive overflows: 0, Total overflows: 0, Stable: True");
  scaler.UpdateScale(false);
  scaler.UpdateScale(true);
  scaler.UpdateScale(true);
  const LossScalerStats stats = scaler.GetStats();
  BOOST_TEST(stats.CurrentScale == 16384.0f);
  BOOST_TEST(stats.StepsSinceLastOverflow == 0);
  BOOST_TEST(stats.ConsecutiveOverflows == 2);
  BOOST_TEST(stats.TotalOverflows == 2);
  BOOST_TEST(stats.GrowthInterval == 100);
  BOOST_TEST(stats.MaxConsecutiveOverflows == 2);
  BOOST_TEST(!stats.IsStable);
  BOOST_TEST(stats.ToString() ==
             "Scale: 16384.00, Steps since overflow: 0, Consecutive overflows: 2, Total overflows: 2, Stable: False");
  scaler.UpdateScale(false);
  BOOST_TEST(scaler.GetStats().IsStable);
  const DynamicLossScaler fractional(MixedPrecisionOptions{.InitialLossScale = 1.375f});
  BOOST_TEST(fractional.GetStats().ToString().starts_with("Scale: 1.38, "));
}

BOOST_AUTO_TEST_CASE(ResetRestoresTheInitialState) {
  DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 128.0f, .GrowthInterval = 2});
  scaler.UpdateScale(true);
  scaler.UpdateScale(false);
  scaler.UpdateScale(false);
  BOOST_TEST(scaler.CurrentScale() == 128.0f);
  scaler.UpdateScale(true);
  scaler.Reset();
  BOOST_TEST(scaler.CurrentScale() == 128.0f);
  BOOST_TEST(scaler.ConsecutiveOverflows() == 0);
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 0);
  BOOST_TEST(scaler.TotalOverflows() == 0);
  BOOST_TEST(scaler.State() == amp::ScaleState::Initial(scaler.Policy()));
}

BOOST_AUTO_TEST_CASE(StopScalingIsTheFallbackAndSurvivesReset) {
  DynamicLossScaler scaler(MixedPrecisionOptions{.InitialLossScale = 1024.0f});
  scaler.UpdateScale(true);
  scaler.StopScaling();
  BOOST_TEST(!scaler.IsEnabled());
  BOOST_TEST(scaler.FellBackToFP32());
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(scaler.TotalOverflows() == 1);  // history kept
  const TensorPtr loss = Scalar(3.0f);
  BOOST_TEST(scaler.ScaleLoss(loss) == loss);
  // The checks go on at scale 1: an overflow is still counted and still skips the step.
  BOOST_TEST(scaler.IsChecking());
  BOOST_TEST(scaler.UpdateScale(true));
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(scaler.TotalOverflows() == 2);
  BOOST_TEST(scaler.ConsecutiveOverflows() == 2);
  BOOST_TEST(scaler.CheckOverflow({{"w", Vec({kNaN})}}));
  BOOST_TEST(scaler.CheckOverflowAndUpdate({{"w", Vec({kInf})}}));
  BOOST_TEST(scaler.TotalOverflows() == 3);
  BOOST_TEST(!scaler.CheckOverflowAndUpdate({{"w", Vec({1.0f})}}));
  BOOST_TEST(scaler.ConsecutiveOverflows() == 0);
  BOOST_TEST(scaler.StepsSinceLastOverflow() == 1);
  scaler.RecordOverflow({{"w", Vec({-kInf})}});
  scaler.UpdateScaleFromRecord();
  BOOST_TEST(scaler.TotalOverflows() == 4);
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(scaler.GetStats().ToString().ends_with(", Fell back to FP32"));
  scaler.Reset();
  BOOST_TEST(scaler.FellBackToFP32());
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(scaler.TotalOverflows() == 0);
}

BOOST_AUTO_TEST_CASE(StateDictRoundTripsAndResumesExactly) {
  const MixedPrecisionOptions options{.InitialLossScale = 256.0f, .GrowthInterval = 3};
  DynamicLossScaler a(options);
  for (const bool overflow : {false, true, false, false, true, true, false}) {
    a.UpdateScale(overflow);
  }
  const std::vector<std::byte> blob = a.StateDict();
  DynamicLossScaler b(options);
  b.LoadStateDict(blob);
  BOOST_TEST(b.State() == a.State());
  for (const bool overflow : {false, false, false, true, false}) {
    BOOST_TEST(a.UpdateScale(overflow) == b.UpdateScale(overflow));
    BOOST_TEST(a.State() == b.State());
  }
  DynamicLossScaler stopped(options);
  stopped.StopScaling();
  DynamicLossScaler c(options);
  c.LoadStateDict(stopped.StateDict());
  BOOST_TEST(c.FellBackToFP32());
  BOOST_TEST(!c.IsEnabled());
}

BOOST_AUTO_TEST_CASE(LoadStateDictRejectsBadBlobsAndKeepsState) {
  const MixedPrecisionOptions options{.InitialLossScale = 256.0f};
  DynamicLossScaler source(options);
  source.UpdateScale(true);
  std::vector<std::byte> blob = source.StateDict();
  DynamicLossScaler target(options);
  target.UpdateScale(false);
  const amp::ScaleState before = target.State();
  auto rejected = [&](std::span<const std::byte> bytes) {
    try {
      target.LoadStateDict(bytes);
    } catch (const ArgumentError& e) {
      return e.Parameter() == "state" && target.State() == before && !target.FellBackToFP32();
    }
    return false;
  };
  std::vector<std::byte> corrupt = blob;
  corrupt[corrupt.size() / 2] ^= std::byte{0x40};
  BOOST_TEST(rejected(corrupt));
  BOOST_TEST(rejected(std::span<const std::byte>(blob).first(blob.size() - 3)));
  BOOST_TEST(rejected({}));
  // A valid blob whose scale lies outside this scaler's bounds.
  DynamicLossScaler high(MixedPrecisionOptions{.InitialLossScale = 65536.0f});
  DynamicLossScaler low_bounds(MixedPrecisionOptions{.InitialLossScale = 256.0f, .MaxLossScale = 1024.0f});
  BOOST_CHECK_THROW(low_bounds.LoadStateDict(high.StateDict()), ArgumentError);
  BOOST_TEST(low_bounds.CurrentScale() == 256.0f);
}

BOOST_AUTO_TEST_SUITE_END()

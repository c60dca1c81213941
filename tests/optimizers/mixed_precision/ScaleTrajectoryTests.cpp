// One scaling policy for every front-end: the same random overflow/clean sequence gives the same
// scale trajectory in amp::DynamicLossScaler, in this DynamicLossScaler, in the layer that drives
// it, and in the shared rules.
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using namespace mlfw_test;

namespace {

// A random but valid configuration, with small intervals so growth and both bounds are hit.
MixedPrecisionOptions RandomOptions(std::mt19937& rng) {
  std::uniform_int_distribution<int> interval(1, 6);
  std::uniform_int_distribution<int> exponent(0, 10);
  const float min_scale = static_cast<float>(1 << exponent(rng)) / 64.0f;
  const float max_scale = min_scale * static_cast<float>(1 << exponent(rng));
  return MixedPrecisionOptions{.InitialLossScale = max_scale,
                               .GrowthFactor = std::uniform_real_distribution<float>(1.1f, 4.0f)(rng),
                               .BackoffFactor = std::uniform_real_distribution<float>(0.1f, 0.9f)(rng),
                               .GrowthInterval = interval(rng),
                               .MinLossScale = min_scale,
                               .MaxLossScale = max_scale,
                               .EnableAutoFallback = false};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ScaleTrajectoryTests)

BOOST_AUTO_TEST_CASE(AmpAndMixedPrecisionScalersShareOneTrajectory) {
  std::mt19937 rng(31337);
  int configs_that_grew = 0;
  int configs_that_backed_off = 0;
  for (int config = 0; config < 100; ++config) {
    const MixedPrecisionOptions options = RandomOptions(rng);
    amp::DynamicLossScaler amp_scaler(amp::DynamicScalerConfig{.InitialScale = options.InitialLossScale,
                                                               .GrowthFactor = options.GrowthFactor,
                                                               .BackoffFactor = options.BackoffFactor,
                                                               .GrowthInterval = options.GrowthInterval,
                                                               .MinScale = options.MinLossScale,
                                                               .MaxScale = options.MaxLossScale});
    DynamicLossScaler scaler(options);
    BOOST_REQUIRE(amp_scaler.State() == scaler.State());
    std::bernoulli_distribution overflow(std::uniform_real_distribution<double>(0.02, 0.6)(rng));
    bool grew = false;
    bool backed_off = false;
    for (int step = 0; step < 300; ++step) {
      const float before = scaler.CurrentScale();
      const bool had_overflow = overflow(rng);
      amp_scaler.UpdateScale(had_overflow);
      BOOST_REQUIRE(scaler.UpdateScale(had_overflow) == had_overflow);
      BOOST_REQUIRE(amp_scaler.State() == scaler.State());
      BOOST_REQUIRE(amp_scaler.CurrentScale() == scaler.CurrentScale());
      grew = grew || scaler.CurrentScale() > before;
      backed_off = backed_off || scaler.CurrentScale() < before;
    }
    configs_that_grew += grew ? 1 : 0;
    configs_that_backed_off += backed_off ? 1 : 0;
  }
  // The sequences exercised both rules, not only the bounds.
  BOOST_TEST(configs_that_grew > 50);
  BOOST_TEST(configs_that_backed_off > 50);
}

BOOST_AUTO_TEST_CASE(ScalerFollowsTheSharedRulesStepForStep) {
  std::mt19937 rng(2024);
  for (int config = 0; config < 100; ++config) {
    const MixedPrecisionOptions options = RandomOptions(rng);
    const amp::ScalePolicy policy = options.ToScalePolicy();
    amp::ScaleState model = amp::ScaleState::Initial(policy);
    DynamicLossScaler scaler(options);
    std::bernoulli_distribution overflow(std::uniform_real_distribution<double>(0.02, 0.6)(rng));
    for (int step = 0; step < 300; ++step) {
      const bool had_overflow = overflow(rng);
      const bool model_skip = amp::UpdateScaleState(model, policy, had_overflow);
      BOOST_REQUIRE(scaler.UpdateScale(had_overflow) == model_skip);
      BOOST_REQUIRE(scaler.State() == model);
      BOOST_REQUIRE(scaler.CurrentScale() >= options.MinLossScale);
      BOOST_REQUIRE(scaler.CurrentScale() <= options.MaxLossScale);
    }
  }
}

BOOST_AUTO_TEST_CASE(LayerDrivesTheSameTrajectoryFromRealGradients) {
  std::mt19937 rng(99);
  const MixedPrecisionOptions options{.InitialLossScale = 4096.0f,
                                      .GrowthInterval = 3,
                                      .MinLossScale = 1.0f,
                                      .MaxLossScale = 65536.0f,
                                      .EnableAutoFallback = false};
  const amp::ScalePolicy policy = options.ToScalePolicy();
  amp::ScaleState model = amp::ScaleState::Initial(policy);
  GradientConversionLayer layer(options);
  std::bernoulli_distribution overflow(0.3);
  for (int step = 0; step < 60; ++step) {
    const bool had_overflow = overflow(rng);
    const GradientMap gradients{{"a", Vec({1.0f, had_overflow ? kInf : 2.0f}, DataType::Float16)},
                                {"b", Vec({3.0f}, DataType::BFloat16)}};
    const bool model_skip = amp::UpdateScaleState(model, policy, had_overflow);
    BOOST_REQUIRE(layer.ProcessGradients(gradients).ShouldSkip == model_skip);
    BOOST_REQUIRE(layer.LossScaler()->State() == model);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// A state blob loaded into a scaler built with another configuration (issue 38): the blob's
// configuration wins, as in PyTorch's GradScaler.load_state_dict (which replaces the scale, growth
// factor, backoff factor, growth interval and growth tracker). The loaded scaler then follows the
// saved scaler's trajectory step for step; settings of the running scaler that the blob does not
// hold (amax tracking, the mixed-precision bounds) stay the loading scaler's.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "mlframework/core/StateBlob.hpp"

using namespace mlframework;
namespace mp = mlframework::optimizers::mixed_precision;

namespace {

// Overflow on the steps of this pattern, clean otherwise: growth and backoff both happen.
const std::vector<bool> kOverflows = {false, false, false, true, false, false, false, false, true, false, false};

mp::MixedPrecisionOptions SavedOptions() {
  mp::MixedPrecisionOptions options = mp::MixedPrecisionOptions::ForFP16();
  options.InitialLossScale = 1024.0f;
  options.GrowthFactor = 4.0f;
  options.BackoffFactor = 0.25f;
  options.GrowthInterval = 3;
  return options;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(StateBlobConfiguration)

BOOST_AUTO_TEST_CASE(AmpDynamicLossScalerTakesTheBlobsConfiguration) {
  const amp::DynamicScalerConfig saved_config{.InitialScale = 1024.0f,
                                              .GrowthFactor = 4.0f,
                                              .BackoffFactor = 0.25f,
                                              .GrowthInterval = 3,
                                              .MinScale = 2.0f,
                                              .MaxScale = 65536.0f,
                                              .Hysteresis = 2};
  amp::DynamicLossScaler saved(saved_config);
  saved.UpdateScale(false);
  saved.UpdateScale(true);
  amp::DynamicLossScaler loaded;  // the default configuration
  BOOST_TEST(loaded.SetAmaxTracking(true));
  loaded.LoadStateDict(saved.StateDict());

  const amp::DynamicScalerConfig& config = loaded.Config();
  BOOST_TEST(config.InitialScale == saved_config.InitialScale);
  BOOST_TEST(config.GrowthFactor == saved_config.GrowthFactor);
  BOOST_TEST(config.BackoffFactor == saved_config.BackoffFactor);
  BOOST_TEST(config.GrowthInterval == saved_config.GrowthInterval);
  BOOST_TEST(config.MinScale == saved_config.MinScale);
  BOOST_TEST(config.MaxScale == saved_config.MaxScale);
  BOOST_TEST(config.Hysteresis == saved_config.Hysteresis);
  BOOST_TEST(config.Enabled == saved_config.Enabled);
  BOOST_TEST((loaded.State() == saved.State()));
  BOOST_TEST(loaded.RecordedAmax().has_value(), "amax tracking is the running scaler's and survives the load");
  for (const bool overflow : kOverflows) {
    saved.UpdateScale(overflow);
    loaded.UpdateScale(overflow);
    BOOST_TEST((loaded.State() == saved.State()));
  }
}

BOOST_AUTO_TEST_CASE(MixedPrecisionScalerTakesTheBlobsGrowthSettings) {
  mp::DynamicLossScaler saved(SavedOptions());
  (void)saved.UpdateScale(false);
  (void)saved.UpdateScale(true);
  mp::MixedPrecisionOptions own = mp::MixedPrecisionOptions::ForFP16();
  own.MinLossScale = 2.0f;  // not in the blob: stays
  mp::DynamicLossScaler loaded(own);
  loaded.SetAmaxTracking(true);
  loaded.LoadStateDict(saved.StateDict());

  BOOST_TEST(loaded.Options().GrowthFactor == 4.0f);
  BOOST_TEST(loaded.Options().BackoffFactor == 0.25f);
  BOOST_TEST(loaded.Options().GrowthInterval == 3);
  BOOST_TEST(loaded.Policy().GrowthInterval == 3);
  BOOST_TEST(loaded.Options().MinLossScale == 2.0f);
  BOOST_TEST(loaded.Options().InitialLossScale == own.InitialLossScale);
  BOOST_TEST((loaded.State() == saved.State()));
  BOOST_TEST(loaded.RecordedAmax().has_value(), "amax tracking is the running scaler's and survives the load");
  for (const bool overflow : kOverflows) {
    (void)saved.UpdateScale(overflow);
    (void)loaded.UpdateScale(overflow);
    BOOST_TEST((loaded.State() == saved.State()));
  }
}

BOOST_AUTO_TEST_CASE(MixedPrecisionVersion1BlobKeepsTheScalersConfiguration) {
  // A version 1 blob (scale state and fallback flag, no configuration) still loads.
  detail::BlobWriter writer("optimizers.mixed_precision.DynamicLossScaler", 1);
  const ScaleState state{
      .Scale = 512.0f, .StepsSinceLastOverflow = 2, .ConsecutiveOverflows = 0, .TotalOverflows = 1, .TotalSteps = 7};
  writer.ScaleStateFields(state);
  writer.U8(0);
  mp::DynamicLossScaler loaded(SavedOptions());
  loaded.LoadStateDict(writer.Finish());
  BOOST_TEST((loaded.State() == state));
  BOOST_TEST(loaded.Options().GrowthFactor == 4.0f);
  BOOST_TEST(loaded.Options().GrowthInterval == 3);
}

BOOST_AUTO_TEST_CASE(ConversionLayerScalerTakesTheBlobsGrowthSettings) {
  mp::GradientConversionLayer saved(SavedOptions());
  (void)saved.ProcessGradients({{"w", FromVector({1.0f}, {1}, DataType::Float16)}});
  mp::GradientConversionLayer loaded;
  loaded.LoadStateDict(saved.StateDict());
  BOOST_TEST(loaded.LossScaler()->Options().GrowthInterval == 3);
  BOOST_TEST(loaded.LossScaler()->Options().GrowthFactor == 4.0f);
  BOOST_TEST(loaded.CurrentScale() == saved.CurrentScale());
  BOOST_TEST((loaded.StateDict() == saved.StateDict()));
}

BOOST_AUTO_TEST_SUITE_END()

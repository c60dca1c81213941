// GradScalerFactory: each method creates the configuration spec 004 lists.
#include <boost/test/unit_test.hpp>

#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using mlframework::amp::DynamicLossScaler;
using mlframework::amp::GradScaler;
using mlframework::amp::GradScalerFactory;
using mlframework::amp::StaticLossScaler;

namespace {
const amp::DynamicScalerConfig& ConfigOf(const GradScaler& scaler) {
  const auto* dynamic = dynamic_cast<const DynamicLossScaler*>(scaler.Scaler().get());
  BOOST_REQUIRE(dynamic != nullptr);
  return dynamic->Config();
}
bool IsStatic(const GradScaler& scaler) {
  return dynamic_cast<const StaticLossScaler*>(scaler.Scaler().get()) != nullptr;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerFactoryTests)

BOOST_AUTO_TEST_CASE(DefaultIsDynamicWithModerateSettings) {
  const GradScaler scaler = GradScalerFactory::CreateDefault();
  const auto& c = ConfigOf(scaler);
  BOOST_TEST(c.InitialScale == 65536.0f);
  BOOST_TEST(c.GrowthFactor == 2.0f);
  BOOST_TEST(c.BackoffFactor == 0.5f);
  BOOST_TEST(c.GrowthInterval == 2000);
  BOOST_TEST(scaler.IsEnabled());
  BOOST_TEST(scaler.GetStats().has_value());
}

BOOST_AUTO_TEST_CASE(StaticScalers) {
  const GradScaler moderate = GradScalerFactory::CreateStatic();
  BOOST_TEST(IsStatic(moderate));
  BOOST_TEST(moderate.CurrentScale() == 65536.0f);
  BOOST_TEST(!moderate.GetStats().has_value());
  const GradScaler custom = GradScalerFactory::CreateStatic(128.0f);
  BOOST_TEST(IsStatic(custom));
  BOOST_TEST(custom.CurrentScale() == 128.0f);
  BOOST_CHECK_THROW(GradScalerFactory::CreateStatic(0.0f), ArgumentError);
  const GradScaler bf16 = GradScalerFactory::CreateForBF16();
  BOOST_TEST(IsStatic(bf16));
  BOOST_TEST(bf16.CurrentScale() == 1.0f);
  BOOST_TEST(bf16.IsEnabled());
}

BOOST_AUTO_TEST_CASE(DynamicPresets) {
  BOOST_TEST(ConfigOf(GradScalerFactory::CreateConservative()).GrowthInterval == 5000);
  BOOST_TEST(ConfigOf(GradScalerFactory::CreateAggressive()).GrowthInterval == 1000);
  const GradScaler fp16 = GradScalerFactory::CreateForFP16();
  BOOST_TEST(ConfigOf(fp16).GrowthInterval == 2000);
  BOOST_TEST(fp16.CurrentScale() == 65536.0f);
}

BOOST_AUTO_TEST_CASE(FromConfig) {
  const GradScaler scaler = GradScalerFactory::CreateFromConfig(
      {.InitialScale = 32768.0f, .GrowthFactor = 2.0f, .BackoffFactor = 0.5f, .GrowthInterval = 3000});
  BOOST_TEST(scaler.CurrentScale() == 32768.0f);
  BOOST_TEST(ConfigOf(scaler).GrowthInterval == 3000);
  try {
    GradScalerFactory::CreateFromConfig({.InitialScale = 2.0f, .MinScale = 4.0f});
    BOOST_FAIL("expected ArgumentError");
  } catch (const ArgumentError& e) {
    BOOST_TEST(e.Parameter() == "InitialScale");
  }
}

BOOST_AUTO_TEST_SUITE_END()

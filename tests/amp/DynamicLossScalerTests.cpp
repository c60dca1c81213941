// DynamicLossScaler: configuration, the shared rules against a plain model, stats, save/restore.
#include <cmath>
#include <limits>
#include <random>

#include <boost/test/unit_test.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using namespace mlfw_test;
using mlframework::amp::DynamicLossScaler;
using mlframework::amp::DynamicScalerConfig;

namespace {

void CheckMatches(const DynamicLossScaler& scaler, const PlainRules& model) {
  const amp::DynamicScalerStats stats = scaler.GetStats().value();
  BOOST_REQUIRE(stats.CurrentScale == model.scale);
  BOOST_REQUIRE(scaler.CurrentScale() == model.scale);
  BOOST_REQUIRE(stats.StepsSinceLastOverflow == model.clean);
  BOOST_REQUIRE(stats.ConsecutiveOverflows == model.consecutive);
  BOOST_REQUIRE(stats.TotalOverflows == model.overflows);
  BOOST_REQUIRE(stats.SkippedSteps == model.overflows);
  BOOST_REQUIRE(stats.TotalSteps == model.total);
  BOOST_REQUIRE(stats.SuccessfulSteps == model.total - model.overflows);
}

std::string FieldOf(const DynamicScalerConfig& config) {
  try {
    DynamicLossScaler scaler(config);
  } catch (const ArgumentError& e) {
    return e.Parameter();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(DynamicLossScalerTests)

BOOST_AUTO_TEST_CASE(DefaultsFollowTheIssue) {
  const DynamicScalerConfig c;
  BOOST_TEST(c.InitialScale == 65536.0f);
  BOOST_TEST(c.GrowthFactor == 2.0f);
  BOOST_TEST(c.BackoffFactor == 0.5f);
  BOOST_TEST(c.GrowthInterval == 2000);
  BOOST_TEST(c.MinScale == 1.0f);
  BOOST_TEST(c.MaxScale == 16777216.0f);
  BOOST_TEST(c.Hysteresis == 1);
  BOOST_TEST(c.Enabled);
  const auto policy = c.ToScalePolicy();
  BOOST_TEST(policy.GrowthInterval == 2000);
  BOOST_TEST(policy.MaxScale == 16777216.0f);
  const DynamicLossScaler scaler;
  BOOST_TEST(scaler.Scale() == 65536.0f);  // spec 001's alias
  BOOST_TEST(scaler.CurrentScale() == 65536.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  BOOST_TEST(scaler.GetStats()->GrowthInterval == 2000);
}

BOOST_AUTO_TEST_CASE(InvalidConfigurationsNameTheField) {
  BOOST_TEST(FieldOf({.InitialScale = 0.0f}) == "InitialScale");
  BOOST_TEST(FieldOf({.InitialScale = -4.0f}) == "InitialScale");
  BOOST_TEST(FieldOf({.InitialScale = kNaN}) == "InitialScale");
  BOOST_TEST(FieldOf({.InitialScale = kInf}) == "InitialScale");
  BOOST_TEST(FieldOf({.GrowthFactor = 1.0f}) == "GrowthFactor");
  BOOST_TEST(FieldOf({.GrowthFactor = 0.5f}) == "GrowthFactor");
  BOOST_TEST(FieldOf({.BackoffFactor = 0.0f}) == "BackoffFactor");
  BOOST_TEST(FieldOf({.BackoffFactor = 1.0f}) == "BackoffFactor");
  BOOST_TEST(FieldOf({.GrowthInterval = 0}) == "GrowthInterval");
  BOOST_TEST(FieldOf({.Hysteresis = 0}) == "Hysteresis");
  BOOST_TEST(FieldOf({.MinScale = 8.0f, .MaxScale = 4.0f}) == "MinScale");
  BOOST_TEST(FieldOf({.InitialScale = 2.0f, .MinScale = 4.0f}) == "InitialScale");
  BOOST_TEST(FieldOf({.MaxScale = kInf}) == "MaxScale");
  BOOST_TEST(FieldOf({.InitialScale = 1.0f, .MinScale = 1e-45f}) == "MinScale");
  BOOST_TEST(FieldOf({}) == "");
  try {
    DynamicLossScaler scaler({.BackoffFactor = 1.5f});
  } catch (const ArgumentError& e) {
    BOOST_TEST(std::string(e.what()).find("1.5") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(BackoffGrowthAndBounds) {
  DynamicLossScaler scaler({.InitialScale = 8.0f, .GrowthInterval = 2, .MinScale = 2.0f, .MaxScale = 32.0f});
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  scaler.UpdateScale(true);
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.CurrentScale() == 2.0f);  // clamped at MinScale
  BOOST_TEST(scaler.GetStats()->ConsecutiveOverflows == 3);
  for (int i = 0; i < 20; ++i) {
    scaler.UpdateScale(false);
  }
  BOOST_TEST(scaler.CurrentScale() == 32.0f);  // clamped at MaxScale
  BOOST_TEST(scaler.GetStats()->ConsecutiveOverflows == 0);
  // Growth never reaches infinity, even with a maximal bound.
  DynamicLossScaler big({.InitialScale = 1e38f,
                         .GrowthFactor = 1000.0f,
                         .GrowthInterval = 1,
                         .MaxScale = std::numeric_limits<float>::max()});
  big.UpdateScale(false);
  BOOST_TEST(std::isfinite(big.CurrentScale()));
  BOOST_TEST(big.CurrentScale() == std::numeric_limits<float>::max());
}

BOOST_AUTO_TEST_CASE(HysteresisToleratesOverflowsInARow) {
  DynamicLossScaler scaler({.InitialScale = 64.0f, .Hysteresis = 3});
  scaler.UpdateScale(true);
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.CurrentScale() == 64.0f);
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.CurrentScale() == 32.0f);
  scaler.UpdateScale(false);  // a clean step restarts the run
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.CurrentScale() == 32.0f);
}

BOOST_AUTO_TEST_CASE(LongRandomSequencesMatchAPlainModelOfTheRules) {
  std::mt19937 rng(1234);
  const DynamicScalerConfig configs[] = {
      {.InitialScale = 1024.0f, .GrowthInterval = 7, .MinScale = 1.0f, .MaxScale = 65536.0f},
      {.InitialScale = 65536.0f,
       .GrowthFactor = 4.0f,
       .BackoffFactor = 0.25f,
       .GrowthInterval = 3,
       .MinScale = 0.5f,
       .MaxScale = 1e9f,
       .Hysteresis = 2},
      {.InitialScale = 3.0f,
       .GrowthFactor = 1.5f,
       .BackoffFactor = 0.7f,
       .GrowthInterval = 1,
       .MinScale = 1.0f,
       .MaxScale = 100.0f,
       .Hysteresis = 4},
      {}};
  for (const auto& config : configs) {
    for (const double p_overflow : {0.01, 0.2, 0.6}) {
      DynamicLossScaler scaler(config);
      PlainRules model(config);
      std::bernoulli_distribution overflow(p_overflow);
      for (int step = 0; step < 5000; ++step) {
        const bool o = overflow(rng);
        scaler.UpdateScale(o);
        model.Step(o);
        CheckMatches(scaler, model);
        BOOST_REQUIRE(scaler.CurrentScale() >= config.MinScale);
        BOOST_REQUIRE(scaler.CurrentScale() <= config.MaxScale);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(UnscaleUsesTheCurrentScale) {
  DynamicLossScaler scaler({.InitialScale = 16.0f});
  auto grads = Grads(DataType::Float16, 16.0f);
  auto result = scaler.UnscaleGradientsAndCheck(grads);
  BOOST_TEST(!result.Overflow);
  BOOST_TEST(result.Gradients.at("a")->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(result.Gradients.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
             boost::test_tools::per_element());
  scaler.UpdateScale(true);  // 8
  const auto g32 = Grads(DataType::Float32, 8.0f);
  scaler.UnscaleGradients(g32);
  BOOST_TEST(Values(g32.at("b")) == (std::vector<float>{4.0f, -0.25f}), boost::test_tools::per_element());
  BOOST_TEST(scaler.CheckOverflow(PoisonedGrads(DataType::BFloat16, kNaN)));
  BOOST_TEST(scaler.CheckOverflow(PoisonedGrads(DataType::Float32, kInf).at("a")));
  BOOST_TEST(Values(scaler.ScaleLoss(Scalar(1.5f)))[0] == 12.0f);
  const auto u = scaler.UnscaleGradient(FromVector({8.0f}, {1}, DataType::BFloat16));
  BOOST_TEST(Values(u)[0] == 1.0f);
}

BOOST_AUTO_TEST_CASE(ScaleTensorsFollowTheScale) {
  DynamicLossScaler scaler({.InitialScale = 4.0f});
  const auto s = scaler.GetScaleTensor();
  BOOST_TEST(Values(s)[0] == 4.0f);
  BOOST_TEST(scaler.GetScaleTensor() == s);  // cached while the scale is unchanged
  BOOST_TEST(Values(scaler.GetInverseScaleTensor())[0] == 0.25f);
  scaler.UpdateScale(true);
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 2.0f);
  BOOST_TEST(Values(scaler.GetInverseScaleTensor())[0] == 0.5f);
}

BOOST_AUTO_TEST_CASE(DisabledScalerPassesThroughAndIgnoresUpdates) {
  DynamicLossScaler scaler({.InitialScale = 4.0f, .Enabled = false});
  const auto loss = Scalar(2.0f);
  BOOST_TEST(scaler.ScaleLoss(loss) == loss);
  const auto grads = Grads(DataType::Float16, 4.0f);
  BOOST_TEST(scaler.UnscaleGradients(grads).at("a") == grads.at("a"));
  BOOST_TEST(!scaler.CheckOverflow(PoisonedGrads(DataType::Float16, kInf)));
  scaler.UpdateScale(true);
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 1.0f);
  scaler.SetEnabled(true);
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 4.0f);
}

BOOST_AUTO_TEST_CASE(ResetReturnsToTheInitialState) {
  DynamicLossScaler scaler({.InitialScale = 64.0f, .GrowthInterval = 2});
  scaler.UpdateScale(true);
  scaler.UpdateScale(false);
  scaler.Reset();
  BOOST_TEST(scaler.CurrentScale() == 64.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  BOOST_TEST(scaler.GetStats()->TotalOverflows == 0);
  BOOST_TEST(scaler.GetStats()->StepsSinceLastOverflow == 0);
}

BOOST_AUTO_TEST_CASE(SaveRestoreMidRunFollowsTheSameTrajectory) {
  const DynamicScalerConfig config{.InitialScale = 512.0f, .GrowthInterval = 5, .MaxScale = 1e6f, .Hysteresis = 2};
  std::mt19937 rng(99);
  std::bernoulli_distribution overflow(0.25);
  std::vector<bool> sequence(1000);
  for (auto&& o : sequence) {
    o = overflow(rng);
  }
  DynamicLossScaler a(config);
  std::vector<std::byte> saved;
  std::vector<amp::ScaleState> trajectory;
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    if (i == 400) {
      saved = a.StateDict();
    }
    a.UpdateScale(sequence[i]);
    trajectory.push_back(a.State());
  }
  DynamicLossScaler b;  // different configuration: the blob restores it
  b.LoadStateDict(saved);
  BOOST_TEST(b.Config().GrowthInterval == 5);
  BOOST_TEST(b.Config().Hysteresis == 2);
  for (std::size_t i = 400; i < sequence.size(); ++i) {
    b.UpdateScale(sequence[i]);
    BOOST_REQUIRE(b.State() == trajectory[i]);
  }
  BOOST_TEST((b.StateDict() == a.StateDict()));
}

BOOST_AUTO_TEST_CASE(BadBlobsAreRejectedWithoutChange) {
  DynamicLossScaler scaler({.InitialScale = 256.0f});
  scaler.UpdateScale(true);
  const auto before = scaler.StateDict();
  auto blob = DynamicLossScaler({.InitialScale = 8.0f}).StateDict();
  auto truncated = blob;
  truncated.resize(truncated.size() - 3);
  BOOST_CHECK_THROW(scaler.LoadStateDict(truncated), ArgumentError);
  auto flipped = blob;
  flipped[flipped.size() / 2] ^= std::byte{0x10};
  BOOST_CHECK_THROW(scaler.LoadStateDict(flipped), ArgumentError);
  BOOST_CHECK_THROW(scaler.LoadStateDict(amp::StaticLossScaler().StateDict()), ArgumentError);
  BOOST_CHECK_THROW(scaler.LoadStateDict({}), ArgumentError);
  BOOST_TEST((scaler.StateDict() == before));
}

BOOST_AUTO_TEST_CASE(ScaleSnapshotRestoresTheStateAndKeepsTheConfiguration) {
  DynamicLossScaler scaler({.InitialScale = 256.0f, .GrowthInterval = 2, .Hysteresis = 2});
  scaler.UpdateScale(true);
  const auto snapshot = scaler.ScaleSnapshot();
  const amp::ScaleState before = scaler.State();
  scaler.UpdateScale(true);  // the second overflow in a row backs off
  scaler.MarkOverflow();
  BOOST_TEST(scaler.CurrentScale() == 128.0f);
  scaler.RestoreScaleSnapshot(snapshot);
  BOOST_TEST((scaler.State() == before));
  BOOST_TEST(!scaler.RecordedOverflow());
  BOOST_TEST(scaler.Config().Hysteresis == 2);

  // A foreign or corrupted blob, or a scale the configuration cannot hold: ArgumentError naming
  // the snapshot, nothing changed.
  const auto state_blob = scaler.StateDict();
  auto flipped = snapshot;
  flipped[flipped.size() / 2] ^= std::byte{0x10};
  const auto outside = DynamicLossScaler({.InitialScale = 1024.0f, .MaxScale = 1024.0f}).ScaleSnapshot();
  DynamicLossScaler bounded({.InitialScale = 256.0f, .MaxScale = 512.0f});
  for (const auto& bad : {state_blob, flipped, std::vector<std::byte>{}}) {
    try {
      scaler.RestoreScaleSnapshot(bad);
      BOOST_FAIL("expected an ArgumentError");
    } catch (const ArgumentError& error) {
      BOOST_TEST(std::string(error.what()).find("snapshot") != std::string::npos, error.what());
    }
    BOOST_TEST((scaler.State() == before));
  }
  BOOST_CHECK_THROW(bounded.RestoreScaleSnapshot(outside), ArgumentError);
  BOOST_TEST(bounded.CurrentScale() == 256.0f);
}

BOOST_AUTO_TEST_SUITE_END()

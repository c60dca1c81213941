// The shared dynamic-scaling rules, checked against a plain model of them.
#include <cmath>
#include <random>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/Error.hpp>

using namespace mlframework;
using namespace mlframework::amp;

BOOST_AUTO_TEST_SUITE(ScalePolicyRules)

BOOST_AUTO_TEST_CASE(GrowsExactlyAtTheInterval) {
  const ScalePolicy policy{.InitialScale = 8.0f, .GrowthInterval = 3, .MaxScale = 32.0f};
  ScaleState state = ScaleState::Initial(policy);
  BOOST_TEST(!UpdateScaleState(state, policy, false));
  BOOST_TEST(!UpdateScaleState(state, policy, false));
  BOOST_TEST(state.Scale == 8.0f);
  BOOST_TEST(!UpdateScaleState(state, policy, false));
  BOOST_TEST(state.Scale == 16.0f);
  BOOST_TEST(state.StepsSinceLastOverflow == 0);
  for (int i = 0; i < 9; ++i) {
    UpdateScaleState(state, policy, false);
  }
  BOOST_TEST(state.Scale == 32.0f);  // clamped at MaxScale
}

BOOST_AUTO_TEST_CASE(BacksOffOnlyAfterHysteresisOverflowsInARow) {
  const ScalePolicy policy{.InitialScale = 64.0f, .MinScale = 4.0f, .Hysteresis = 2};
  ScaleState state = ScaleState::Initial(policy);
  BOOST_TEST(UpdateScaleState(state, policy, true));
  BOOST_TEST(state.Scale == 64.0f);
  BOOST_TEST(UpdateScaleState(state, policy, true));
  BOOST_TEST(state.Scale == 32.0f);
  BOOST_TEST(!UpdateScaleState(state, policy, false));  // a clean step ends the run
  BOOST_TEST(UpdateScaleState(state, policy, true));
  BOOST_TEST(state.Scale == 32.0f);
  for (int i = 0; i < 10; ++i) {
    UpdateScaleState(state, policy, true);
  }
  BOOST_TEST(state.Scale == 4.0f);  // clamped at MinScale
  BOOST_TEST(state.TotalOverflows == 13);
  BOOST_TEST(state.TotalSteps == 14);
  BOOST_TEST(state.ConsecutiveOverflows == 11);
}

BOOST_AUTO_TEST_CASE(NeverInfiniteEvenWithHugeGrowth) {
  const ScalePolicy policy{
      .InitialScale = 3e38f, .GrowthFactor = 1e30f, .GrowthInterval = 1, .MaxScale = std::numeric_limits<float>::max()};
  ScaleState state = ScaleState::Initial(policy);
  UpdateScaleState(state, policy, false);
  BOOST_TEST(std::isfinite(state.Scale));
  BOOST_TEST(state.Scale == std::numeric_limits<float>::max());
}

BOOST_AUTO_TEST_CASE(RandomSequencesFollowThePlainModel) {
  std::mt19937 rng(42);
  for (int config = 0; config < 200; ++config) {
    const ScalePolicy policy{.InitialScale = 1024.0f,
                             .GrowthFactor = 2.0f,
                             .BackoffFactor = 0.5f,
                             .GrowthInterval = 1 + static_cast<std::int64_t>(rng() % 7),
                             .MinScale = 1.0f,
                             .MaxScale = 65536.0f,
                             .Hysteresis = 1 + static_cast<std::int64_t>(rng() % 3)};
    ScaleState state = ScaleState::Initial(policy);
    double scale = 1024.0;
    std::int64_t clean = 0;
    std::int64_t run = 0;
    for (int step = 0; step < 500; ++step) {
      const bool overflow = rng() % 4 == 0;
      const bool skip = UpdateScaleState(state, policy, overflow);
      BOOST_TEST_REQUIRE(skip == overflow);
      if (overflow) {
        ++run;
        clean = 0;
        if (run >= policy.Hysteresis) {
          scale = std::max(scale / 2, 1.0);
        }
      } else {
        run = 0;
        if (++clean == policy.GrowthInterval) {
          scale = std::min(scale * 2, 65536.0);
          clean = 0;
        }
      }
      BOOST_TEST_REQUIRE(static_cast<double>(state.Scale) == scale);
      BOOST_TEST_REQUIRE(state.StepsSinceLastOverflow == clean);
      BOOST_TEST_REQUIRE(state.ConsecutiveOverflows == run);
    }
  }
}

BOOST_AUTO_TEST_CASE(ValidationNamesTheFieldAndValue) {
  auto message_of = [](const ScalePolicy& policy) {
    try {
      ValidateScalePolicy(policy);
    } catch (const ArgumentError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(message_of({.InitialScale = 0.0f}).find("InitialScale") != std::string::npos);
  BOOST_TEST(message_of({.InitialScale = NAN}).find("nan") != std::string::npos);
  BOOST_TEST(message_of({.GrowthFactor = 1.0f}).find("GrowthFactor") != std::string::npos);
  BOOST_TEST(message_of({.BackoffFactor = 1.0f}).find("BackoffFactor") != std::string::npos);
  BOOST_TEST(message_of({.BackoffFactor = 0.0f}).find("BackoffFactor") != std::string::npos);
  BOOST_TEST(message_of({.GrowthInterval = 0}).find("GrowthInterval") != std::string::npos);
  BOOST_TEST(message_of({.Hysteresis = 0}).find("Hysteresis") != std::string::npos);
  BOOST_TEST(message_of({.InitialScale = 2.0f, .MinScale = 4.0f, .MaxScale = 2.0f}).find("MinScale") !=
             std::string::npos);
  BOOST_TEST(message_of({.InitialScale = 1e30f}).find("InitialScale") != std::string::npos);
  BOOST_TEST(message_of({.MaxScale = INFINITY}).find("MaxScale") != std::string::npos);
  BOOST_TEST(message_of({}) == "no error");
  BOOST_TEST(message_of({.GrowthInterval = 0}).find("got 0") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

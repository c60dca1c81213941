// Property tests of the shared dynamic-scaling rules (amp::ScalePolicy and
// UpdateScaleState), which every dynamic scaler front-end runs: thousands of
// random policies, each driven through random overflow/clean sequences.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "reliability/PropertySupport.hpp"

using namespace mlframework;
using namespace mlframework::amp;
using mlframework::testing::Describe;

namespace {

constexpr int kPolicies = 4000;
constexpr std::size_t kSteps = 300;

// Checks one step against the rules in ScalePolicy.hpp; returns an empty string or what broke.
std::string CheckStep(const ScalePolicy& policy, const ScaleState& before, const ScaleState& after, bool overflow,
                      bool skipped) {
  if (!std::isfinite(after.Scale) || after.Scale <= 0.0f) {
    return "scale is not finite and positive";
  }
  if (after.Scale < policy.MinScale || after.Scale > policy.MaxScale) {
    return "scale left [MinScale, MaxScale]";
  }
  if (skipped != overflow) {
    return "the skip decision differs from the overflow flag";
  }
  if (after.TotalSteps != before.TotalSteps + 1 || after.TotalOverflows != before.TotalOverflows + (overflow ? 1 : 0)) {
    return "step counters did not advance by one step";
  }
  if (overflow) {
    if (after.ConsecutiveOverflows != before.ConsecutiveOverflows + 1 || after.StepsSinceLastOverflow != 0) {
      return "an overflow did not extend the overflow run and restart the clean count";
    }
    if (after.Scale > before.Scale) {
      return "the scale grew on an overflow";
    }
    const bool due = after.ConsecutiveOverflows >= policy.Hysteresis;
    if (!due && after.Scale != before.Scale) {
      return "backoff before Hysteresis overflows in a row";
    }
    if (due && after.Scale != std::fmax(before.Scale * policy.BackoffFactor, policy.MinScale)) {
      return "no backoff (or the wrong one) after Hysteresis overflows in a row";
    }
    return {};
  }
  if (after.ConsecutiveOverflows != 0) {
    return "a clean step did not end the overflow run";
  }
  if (after.Scale < before.Scale) {
    return "the scale shrank on a clean step";
  }
  const bool due = before.StepsSinceLastOverflow + 1 >= policy.GrowthInterval;
  if (!due && (after.Scale != before.Scale || after.StepsSinceLastOverflow != before.StepsSinceLastOverflow + 1)) {
    return "growth before GrowthInterval clean steps";
  }
  if (due && (after.Scale != std::fmin(before.Scale * policy.GrowthFactor, policy.MaxScale) ||
              after.StepsSinceLastOverflow != 0)) {
    return "no growth (or the wrong one) after GrowthInterval clean steps";
  }
  return {};
}

std::vector<std::byte> Save(const ScaleState& state) {
  detail::BlobWriter writer("reliability.ScaleState", 1);
  writer.ScaleStateFields(state);
  return writer.Finish();
}

ScaleState Restore(const std::vector<std::byte>& blob) {
  detail::BlobReader reader(blob, "reliability.ScaleState", 1);
  const ScaleState state = reader.ScaleStateFields();
  reader.ExpectEnd();
  return state;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ScalePolicyProperties)

BOOST_AUTO_TEST_CASE(EveryStepFollowsTheRulesForRandomPoliciesAndSequences) {
  const std::uint64_t seed = mlframework::testing::PropertySeed();
  std::mt19937_64 rng(seed);
  std::int64_t steps = 0;
  std::int64_t growths = 0;
  std::int64_t backoffs = 0;
  std::int64_t at_floor = 0;
  std::int64_t at_ceiling = 0;
  for (int p = 0; p < kPolicies; ++p) {
    const ScalePolicy policy = mlframework::testing::DrawPolicy(rng);
    BOOST_REQUIRE_NO_THROW(ValidateScalePolicy(policy));
    ScaleState state = ScaleState::Initial(policy);
    for (const bool overflow : mlframework::testing::DrawOverflows(rng, kSteps)) {
      const ScaleState before = state;
      const bool skipped = UpdateScaleState(state, policy, overflow);
      const std::string broken = CheckStep(policy, before, state, overflow, skipped);
      if (!broken.empty()) {
        BOOST_FAIL(broken << " at step " << state.TotalSteps << " of policy " << Describe(policy) << " (seed " << seed
                          << ", scale " << before.Scale << " -> " << state.Scale << ")");
      }
      ++steps;
      growths += state.Scale > before.Scale ? 1 : 0;
      backoffs += state.Scale < before.Scale ? 1 : 0;
      at_floor += state.Scale == policy.MinScale ? 1 : 0;
      at_ceiling += state.Scale == policy.MaxScale ? 1 : 0;
    }
  }
  // The sequences must exercise every rule, or the properties above say little.
  BOOST_TEST(growths > 1000);
  BOOST_TEST(backoffs > 1000);
  BOOST_TEST(at_floor > 1000);
  BOOST_TEST(at_ceiling > 1000);
  BOOST_TEST_MESSAGE("ScalePolicyProperties: " << kPolicies << " policies, " << steps << " steps, " << growths
                                               << " growths, " << backoffs << " backoffs (seed " << seed << ")");
}

BOOST_AUTO_TEST_CASE(SaveAndRestoreAtAnyStepContinuesTheSameTrajectory) {
  const std::uint64_t seed = mlframework::testing::PropertySeed() + 1;
  std::mt19937_64 rng(seed);
  int restores = 0;
  for (int p = 0; p < kPolicies / 4; ++p) {
    const ScalePolicy policy = mlframework::testing::DrawPolicy(rng);
    const std::vector<bool> overflows = mlframework::testing::DrawOverflows(rng, kSteps);
    const auto cut = static_cast<std::size_t>(mlframework::testing::DrawInt(rng, 0, kSteps));
    ScaleState original = ScaleState::Initial(policy);
    for (std::size_t i = 0; i < cut; ++i) {
      UpdateScaleState(original, policy, overflows[i]);
    }
    ScaleState restored = Restore(Save(original));
    BOOST_REQUIRE(restored == original);
    for (std::size_t i = cut; i < overflows.size(); ++i) {
      UpdateScaleState(original, policy, overflows[i]);
      UpdateScaleState(restored, policy, overflows[i]);
      if (!(restored == original)) {
        BOOST_FAIL("restored state diverged at step " << i << " after a restore at step " << cut << " of policy "
                                                      << Describe(policy) << " (seed " << seed << ")");
      }
    }
    ++restores;
  }
  BOOST_TEST_MESSAGE("ScalePolicyProperties: " << restores << " save/restore trajectories (seed " << seed << ")");
}

BOOST_AUTO_TEST_CASE(ScaleNeverReachesInfinityEvenWithTheLargestFactors) {
  // The worst case for overflow: FLT_MAX ceiling, huge growth, interval 1.
  const ScalePolicy policy{.InitialScale = 1.0f,
                           .GrowthFactor = 3.0e38f,
                           .BackoffFactor = 1e-38f,
                           .GrowthInterval = 1,
                           .MinScale = FLT_MIN,
                           .MaxScale = FLT_MAX,
                           .Hysteresis = 1};
  ValidateScalePolicy(policy);
  ScaleState state = ScaleState::Initial(policy);
  for (int i = 0; i < 1000; ++i) {
    UpdateScaleState(state, policy, i % 7 == 6);
    BOOST_REQUIRE(std::isfinite(state.Scale));
    BOOST_REQUIRE(state.Scale >= FLT_MIN);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// The three dynamic-scaler front-ends (amp::DynamicLossScaler,
// optimizers::mixed_precision::DynamicLossScaler and
// distributed::fsdp::FSDPMixedPrecisionManager), configured alike and fed the
// same random overflow sequences, must walk the very same ScaleState
// trajectory as the shared rules, keep the scale finite and in [min, max],
// and continue exactly after a StateDict/LoadStateDict at any step.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "reliability/PropertySupport.hpp"

using namespace mlframework;
using mlframework::testing::Describe;
namespace mp = mlframework::optimizers::mixed_precision;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

// Under AddressSanitizer a fifth of the policies run (the same first draws): about 15 s there
// instead of 80 s. A Release build runs them all in under a second.
constexpr int kFrontEndPolicies = mlframework::testing::kUnderAddressSanitizer ? 300 : 1500;
constexpr std::size_t kFrontEndSteps = 200;

// A policy every front-end can express: the mixed-precision and FSDP configs have
// no hysteresis (it is 1) and int growth intervals.
amp::ScalePolicy DrawCommonPolicy(std::mt19937_64& rng) {
  amp::ScalePolicy policy = mlframework::testing::DrawPolicy(rng);
  policy.Hysteresis = 1;
  policy.GrowthInterval = std::min<std::int64_t>(policy.GrowthInterval, 50);
  return policy;
}

amp::DynamicScalerConfig AmpConfig(const amp::ScalePolicy& p) {
  return {.InitialScale = p.InitialScale,
          .GrowthFactor = p.GrowthFactor,
          .BackoffFactor = p.BackoffFactor,
          .GrowthInterval = static_cast<int>(p.GrowthInterval),
          .MinScale = p.MinScale,
          .MaxScale = p.MaxScale,
          .Hysteresis = static_cast<int>(p.Hysteresis)};
}

mp::MixedPrecisionOptions MixedOptions(const amp::ScalePolicy& p) {
  mp::MixedPrecisionOptions options = mp::MixedPrecisionOptions::ForFP16();
  options.InitialLossScale = p.InitialScale;
  options.GrowthFactor = p.GrowthFactor;
  options.BackoffFactor = p.BackoffFactor;
  options.GrowthInterval = static_cast<int>(p.GrowthInterval);
  options.MinLossScale = p.MinScale;
  options.MaxLossScale = p.MaxScale;
  options.MaxConsecutiveOverflows = std::numeric_limits<int>::max();
  return options;
}

fsdp::FSDPMixedPrecisionConfig FsdpConfig(const amp::ScalePolicy& p) {
  fsdp::FSDPMixedPrecisionConfig config;
  config.InitialLossScale = p.InitialScale;
  config.MinLossScale = p.MinScale;
  config.MaxLossScale = p.MaxScale;
  config.LossScaleGrowthFactor = p.GrowthFactor;
  config.LossScaleBackoffFactor = p.BackoffFactor;
  config.LossScaleSteps = static_cast<int>(p.GrowthInterval);
  return config;
}

// One instance of each front-end for a policy, stepped together.
struct FrontEnds {
  explicit FrontEnds(const amp::ScalePolicy& policy)
      : amp_scaler(AmpConfig(policy)),
        mixed(MixedOptions(policy)),
        fsdp_instance(distributed::MakeLocalProcessGroup()),
        manager(FsdpConfig(policy), fsdp_instance),
        clean_grad(FromVector({1.0f, -2.0f}, {2}, DataType::Float16)),
        inf_grad(FromVector({1.0f, std::numeric_limits<float>::infinity()}, {2}, DataType::Float16)) {}

  // Returns the skip decisions of the three front-ends.
  std::array<bool, 3> Step(bool overflow) {
    amp_scaler.UpdateScale(overflow);
    const bool amp_skip = overflow;  // amp's UpdateScale returns nothing: every overflow is skipped
    const bool mixed_skip = mixed.UpdateScale(overflow);
    const bool fsdp_skip = manager.CheckOverflow(GradientMap{{"w", overflow ? inf_grad : clean_grad}});
    return {amp_skip, mixed_skip, fsdp_skip};
  }

  amp::DynamicLossScaler amp_scaler;
  mp::DynamicLossScaler mixed;
  fsdp::FSDP fsdp_instance;
  fsdp::FSDPMixedPrecisionManager manager;
  TensorPtr clean_grad;
  TensorPtr inf_grad;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(FrontEndProperties)

BOOST_AUTO_TEST_CASE(ThreeFrontEndsWalkTheSameTrajectoryAsTheSharedRules) {
  const std::uint64_t seed = mlframework::testing::PropertySeed() + 2;
  std::mt19937_64 rng(seed);
  std::int64_t steps = 0;
  for (int p = 0; p < kFrontEndPolicies; ++p) {
    const amp::ScalePolicy policy = DrawCommonPolicy(rng);
    FrontEnds ends(policy);
    amp::ScaleState reference = amp::ScaleState::Initial(policy);
    for (const bool overflow : mlframework::testing::DrawOverflows(rng, kFrontEndSteps)) {
      const bool reference_skip = amp::UpdateScaleState(reference, policy, overflow);
      const auto skips = ends.Step(overflow);
      const bool agree = ends.amp_scaler.State() == reference && ends.mixed.State() == reference &&
                         ends.manager.State() == reference && skips[1] == reference_skip && skips[2] == reference_skip;
      if (!agree) {
        BOOST_FAIL("front-ends disagree at step "
                   << reference.TotalSteps << " of " << Describe(policy) << ": reference " << reference.Scale
                   << ", amp " << ends.amp_scaler.State().Scale << ", mixed " << ends.mixed.State().Scale << ", fsdp "
                   << ends.manager.State().Scale << " (seed " << seed << ")");
      }
      const float scale = ends.amp_scaler.CurrentScale();
      BOOST_REQUIRE(std::isfinite(scale) && scale >= policy.MinScale && scale <= policy.MaxScale);
      BOOST_REQUIRE(ends.mixed.CurrentScale() == scale && ends.manager.CurrentScale() == scale);
      ++steps;
    }
  }
  BOOST_TEST_MESSAGE("FrontEndProperties: " << kFrontEndPolicies << " policies, " << steps
                                            << " steps on each of 3 front-ends (seed " << seed << ")");
}

BOOST_AUTO_TEST_CASE(AmpHysteresisFollowsTheSharedRules) {
  const std::uint64_t seed = mlframework::testing::PropertySeed() + 3;
  std::mt19937_64 rng(seed);
  for (int p = 0; p < kFrontEndPolicies; ++p) {
    amp::ScalePolicy policy = mlframework::testing::DrawPolicy(rng);
    policy.GrowthInterval = std::min<std::int64_t>(policy.GrowthInterval, 50);
    policy.Hysteresis = std::min<std::int64_t>(policy.Hysteresis, 6);
    amp::DynamicLossScaler scaler(AmpConfig(policy));
    amp::ScaleState reference = amp::ScaleState::Initial(policy);
    for (const bool overflow : mlframework::testing::DrawOverflows(rng, kFrontEndSteps)) {
      amp::UpdateScaleState(reference, policy, overflow);
      scaler.UpdateScale(overflow);
      if (!(scaler.State() == reference)) {
        BOOST_FAIL("amp::DynamicLossScaler left the shared rules at step " << reference.TotalSteps << " of "
                                                                           << Describe(policy));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SaveAndRestoreAtAnyStepContinuesEveryFrontEnd) {
  const std::uint64_t seed = mlframework::testing::PropertySeed() + 4;
  std::mt19937_64 rng(seed);
  int restores = 0;
  for (int p = 0; p < kFrontEndPolicies / 5; ++p) {
    const amp::ScalePolicy policy = DrawCommonPolicy(rng);
    const std::vector<bool> overflows = mlframework::testing::DrawOverflows(rng, kFrontEndSteps);
    const auto cut = static_cast<std::size_t>(mlframework::testing::DrawInt(rng, 0, kFrontEndSteps));
    FrontEnds original(policy);
    for (std::size_t i = 0; i < cut; ++i) {
      original.Step(overflows[i]);
    }
    FrontEnds restored(policy);
    restored.amp_scaler.LoadStateDict(original.amp_scaler.StateDict());
    restored.mixed.LoadStateDict(original.mixed.StateDict());
    restored.manager.LoadStateDict(original.manager.StateDict());
    for (std::size_t i = cut; i <= overflows.size(); ++i) {
      const bool same = restored.amp_scaler.State() == original.amp_scaler.State() &&
                        restored.mixed.State() == original.mixed.State() &&
                        restored.manager.State() == original.manager.State() &&
                        restored.amp_scaler.StateDict() == original.amp_scaler.StateDict() &&
                        restored.mixed.StateDict() == original.mixed.StateDict() &&
                        restored.manager.StateDict() == original.manager.StateDict();
      if (!same) {
        BOOST_FAIL("a restored front-end diverged at step " << i << " after a restore at step " << cut << " of "
                                                            << Describe(policy) << " (seed " << seed << ")");
      }
      if (i < overflows.size()) {
        original.Step(overflows[i]);
        restored.Step(overflows[i]);
      }
    }
    ++restores;
  }
  BOOST_TEST_MESSAGE("FrontEndProperties: " << restores << " save/restore trajectories x 3 front-ends (seed " << seed
                                            << ")");
}

// One getter name on every front end (docs/spec-mapping.md, "One API"); each spec's own name is an
// alias that reads the same value, also after the scale has moved.
BOOST_AUTO_TEST_CASE(EveryFrontEndReadsItsScaleUnderOneNameAndItsSpecAlias) {
  const amp::ScalePolicy policy{.InitialScale = 1024.0f, .GrowthInterval = 2, .MinScale = 1.0f, .MaxScale = 4096.0f};
  FrontEnds ends(policy);
  auto amp_shared = std::make_shared<amp::DynamicLossScaler>(AmpConfig(policy));
  amp::GradScaler scaler(amp_shared);
  const std::shared_ptr<amp::ILossScaler> custom = std::make_shared<amp::StaticLossScaler>(8.0f, false);
  mp::GradientConversionLayer layer(MixedOptions(policy));
  const TensorPtr inf16 = FromVector({std::numeric_limits<float>::infinity()}, {1}, DataType::Float16);
  const TensorPtr one16 = FromVector({1.0f}, {1}, DataType::Float16);
  for (const bool overflow : {false, false, true, false, false, false}) {
    ends.Step(overflow);
    amp_shared->UpdateScale(overflow);
    layer.ProcessGradients(GradientMap{{"w", overflow ? inf16 : one16}});
    BOOST_TEST(scaler.Scale() == scaler.CurrentScale());
    BOOST_TEST(scaler.CurrentScale() == ends.amp_scaler.CurrentScale());
    BOOST_TEST(ends.amp_scaler.Scale() == ends.amp_scaler.CurrentScale());
    BOOST_TEST(ends.manager.CurrentLossScale() == ends.manager.CurrentScale());
    BOOST_TEST(ends.manager.CurrentScale() == ends.mixed.CurrentScale());
    BOOST_TEST(layer.LossScale() == layer.CurrentScale());
    BOOST_TEST(layer.CurrentScale() == ends.mixed.CurrentScale());
  }
  BOOST_TEST(ends.mixed.CurrentScale() != policy.InitialScale);  // the scale moved, so the aliases were tested live
  BOOST_TEST(scaler.Enabled() == scaler.IsEnabled());
  BOOST_TEST(custom->Scale() == 8.0f);
  BOOST_TEST(custom->Enabled() == custom->IsEnabled());
  BOOST_TEST(!custom->IsEnabled());
}

BOOST_AUTO_TEST_SUITE_END()

// Spec 002: FSDPMixedPrecisionConfig, FSDPMixedPrecisionManager, FSDPAmpIntegration.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>

#include "NonFinite.hpp"
#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::FromVector;
using mlfw_test::kInf;
using mlfw_test::kNaN;
using mlfw_test::Mlp;

namespace {

void ExpectFieldError(const fsdp::FSDPMixedPrecisionConfig& config, const std::string& field) {
  try {
    config.Validate();
    BOOST_ERROR("Validate accepted a bad " << field);
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), field);
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(FSDPMixedPrecisionConfigTests)

BOOST_AUTO_TEST_CASE(DefaultsOfTheSpec) {
  const fsdp::FSDPMixedPrecisionConfig config;
  BOOST_CHECK(config.Enabled);
  BOOST_CHECK(config.ForwardDType == DataType::Float16);
  BOOST_CHECK(config.BackwardDType == DataType::Float32);
  BOOST_CHECK(config.UseLossScaling);
  BOOST_CHECK_EQUAL(config.InitialLossScale, 2.0f);
  BOOST_CHECK_EQUAL(config.MinLossScale, 1.0f);
  BOOST_CHECK_EQUAL(config.MaxLossScale, 65536.0f);
  BOOST_CHECK_EQUAL(config.LossScaleGrowthFactor, 2.0f);
  BOOST_CHECK_EQUAL(config.LossScaleBackoffFactor, 0.5f);
  BOOST_CHECK_EQUAL(config.LossScaleSteps, 2000);
  BOOST_CHECK_NO_THROW(config.Validate());
  BOOST_CHECK_NO_THROW(fsdp::FSDPMixedPrecisionConfig{.ForwardDType = DataType::BFloat16}.Validate());
}

BOOST_AUTO_TEST_CASE(ValidateNamesTheField) {
  ExpectFieldError({.ForwardDType = DataType::Float32}, "ForwardDType");
  ExpectFieldError({.BackwardDType = DataType::Float16}, "BackwardDType");
  ExpectFieldError({.InitialLossScale = 0.5f}, "InitialLossScale");
  ExpectFieldError({.InitialLossScale = 1e6f}, "InitialLossScale");
  ExpectFieldError({.MinLossScale = -1.0f}, "MinLossScale");
  ExpectFieldError({.MaxLossScale = kInf}, "MaxLossScale");
  ExpectFieldError({.LossScaleGrowthFactor = 1.0f}, "LossScaleGrowthFactor");
  ExpectFieldError({.LossScaleBackoffFactor = 1.5f}, "LossScaleBackoffFactor");
  ExpectFieldError({.LossScaleSteps = 0}, "LossScaleSteps");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(FSDPMixedPrecisionManagerTests)

BOOST_AUTO_TEST_CASE(ConversionsUseTheConfiguredDTypes) {
  fsdp::FSDP model(dist::MakeLocalProcessGroup());
  for (const DataType forward : {DataType::Float16, DataType::BFloat16}) {
    fsdp::FSDPMixedPrecisionManager manager({.ForwardDType = forward}, model);
    auto param = FromVector({1.0f, 0.1f, -3.5f}, {3});
    auto mixed = manager.ConvertToMixedPrecision(param);
    BOOST_CHECK(mixed->GetDataType() == forward);
    BOOST_CHECK(mixed->GetShape() == param->GetShape());
    BOOST_CHECK_EQUAL(mixed->ToFloatVector()[2], -3.5f);
    BOOST_CHECK_CLOSE_FRACTION(mixed->ToFloatVector()[1], 0.1f, 1e-2);
    BOOST_CHECK(manager.ConvertToMixedPrecision(mixed) == mixed);  // already there: same tensor
    auto back = manager.ConvertGradientToFP32(mixed);
    BOOST_CHECK(back->GetDataType() == DataType::Float32);
    BOOST_CHECK(back->ToFloatVector() == mixed->ToFloatVector());
    BOOST_CHECK(manager.ConvertGradientToFP32(back) == back);
    BOOST_CHECK_THROW(manager.ConvertToMixedPrecision(nullptr), mlframework::ArgumentNullError);
    BOOST_CHECK_THROW(manager.ConvertGradientToFP32(nullptr), mlframework::ArgumentNullError);
  }
  fsdp::FSDPMixedPrecisionManager disabled({.Enabled = false}, model);
  auto param = FromVector({1.0f}, {1});
  BOOST_CHECK(disabled.ConvertToMixedPrecision(param) == param);
  BOOST_CHECK_THROW(fsdp::FSDPMixedPrecisionManager({.LossScaleSteps = -1}, model), mlframework::ArgumentError);
}

BOOST_AUTO_TEST_CASE(ScaleLossAndDynamicScaling) {
  fsdp::FSDP model(dist::MakeLocalProcessGroup());
  fsdp::FSDPMixedPrecisionManager manager({.InitialLossScale = 4.0f, .MaxLossScale = 16.0f, .LossScaleSteps = 2},
                                          model);
  auto loss = FromVector({1.5f}, {});
  auto scaled = manager.ScaleLoss(loss);
  BOOST_CHECK_EQUAL(scaled->ToFloatVector()[0], 6.0f);
  BOOST_CHECK_EQUAL(loss->ToFloatVector()[0], 1.5f);  // a new tensor
  BOOST_CHECK_THROW(manager.ScaleLoss(nullptr), mlframework::ArgumentNullError);
  mlframework::GradientMap clean{{"a", FromVector({1.0f, 2.0f}, {2}, DataType::Float16)}, {"skipped", nullptr}};
  mlframework::GradientMap inf{{"a", FromVector({1.0f, kInf}, {2})}};
  mlframework::GradientMap nan{{"a", FromVector({kNaN}, {1}, DataType::BFloat16)}};
  // Growth after LossScaleSteps clean steps, bounded by MaxLossScale.
  BOOST_CHECK(!manager.CheckOverflow(clean));
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 4.0f);
  BOOST_CHECK(!manager.CheckOverflow(clean));
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 8.0f);
  for (int i = 0; i < 4; ++i) manager.CheckOverflow(clean);
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 16.0f);
  // Backoff on Inf and NaN, bounded by MinLossScale; the clean count restarts.
  BOOST_CHECK(manager.CheckOverflow(inf));
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 8.0f);
  BOOST_CHECK_EQUAL(manager.StepsSinceLastOverflow(), 0);
  BOOST_CHECK(manager.CheckOverflow(nan));
  for (int i = 0; i < 5; ++i) manager.CheckOverflow(nan);
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 1.0f);
  const auto blob = manager.StateDict();
  manager.ResetLossScale();
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 4.0f);
  manager.LoadStateDict(blob);
  BOOST_CHECK_EQUAL(manager.CurrentScale(), 1.0f);
  BOOST_CHECK_EQUAL(manager.State().TotalOverflows, 7);
  // Unscale and check in one pass.
  manager.ResetLossScale();
  mlframework::GradientMap grads{{"a", FromVector({8.0f, -4.0f}, {2})}};
  BOOST_CHECK(!manager.UnscaleAndCheckOverflow(grads));
  BOOST_CHECK(grads.at("a")->ToFloatVector() == (std::vector<float>{2.0f, -1.0f}));
  // Without loss scaling: the loss is returned as is and no overflow is reported.
  fsdp::FSDPMixedPrecisionManager off({.UseLossScaling = false}, model);
  BOOST_CHECK(off.ScaleLoss(loss) == loss);
  BOOST_CHECK(!off.CheckOverflow(inf));
  // UnscaleAndCheckOverflow still checks: non-finite gradients are reported, nothing is scaled.
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    mlframework::GradientMap bad_grads{{"a", FromVector({8.0f, bad}, {2})}, {"b", FromVector({1.0f}, {1})}};
    BOOST_CHECK(off.UnscaleAndCheckOverflow(bad_grads));
    BOOST_CHECK_EQUAL(bad_grads.at("a")->ToFloatVector()[0], 8.0f);
  }
  mlframework::GradientMap finite{{"a", FromVector({8.0f, -4.0f}, {2})}};
  BOOST_CHECK(!off.UnscaleAndCheckOverflow(finite));
  BOOST_CHECK(finite.at("a")->ToFloatVector() == (std::vector<float>{8.0f, -4.0f}));
  BOOST_CHECK_EQUAL(off.CurrentScale(), off.Config().InitialLossScale);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(FSDPAmpIntegrationTests)

BOOST_AUTO_TEST_CASE(AppliedToShardingUnits) {
  fsdp::FSDP model(dist::MakeLocalProcessGroup());
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  fsdp::FSDPAmpIntegration amp(model, fsdp::FSDPMixedPrecisionConfig{.ForwardDType = DataType::BFloat16});
  BOOST_CHECK(model.Config().ParamDType == DataType::BFloat16);  // 16-bit gathers
  BOOST_CHECK_THROW(amp.ApplyMixedPrecision(unit), mlframework::InvalidOperationError);
  BOOST_CHECK_THROW(amp.ApplyGradientFP32(unit), mlframework::InvalidOperationError);
  unit.Gather();
  BOOST_CHECK(unit.GatheredParameter()->GetDataType() == DataType::BFloat16);
  // A unit gathered in FP32 (set by hand) is converted and its views follow.
  unit.SetGatheredParameter(
      mlframework::Cast(std::vector<mlframework::TensorPtr>{unit.GatheredParameter()}, DataType::Float32)[0]);
  BOOST_CHECK(unit.Parameters().at("weight")->GetDataType() == DataType::Float32);
  amp.ApplyMixedPrecision(unit);
  BOOST_CHECK(unit.GatheredParameter()->GetDataType() == DataType::BFloat16);
  BOOST_CHECK(unit.Parameters().at("weight")->GetDataType() == DataType::BFloat16);
  unit.ReduceGradients(Mlp::Layer1());
  unit.SetLocalGradient(FromVector(unit.LocalGradient()->ToFloatVector(), {unit.ShardSize()}, DataType::Float16));
  amp.ApplyGradientFP32(unit);
  BOOST_CHECK(unit.LocalGradient()->GetDataType() == DataType::Float32);
  BOOST_CHECK_THROW(unit.SetLocalGradient(FromVector({1.0f}, {1})), mlframework::ArgumentError);
  auto loss = FromVector({0.25f}, {});
  BOOST_CHECK_EQUAL(amp.ScaleLoss(loss)->ToFloatVector()[0], 0.5f);  // default InitialLossScale 2
  BOOST_CHECK(!amp.CheckOverflow(model.LocalGradients()));
  BOOST_CHECK_EQUAL(amp.Manager().State().TotalSteps, 1);
  unit.Release();
}

BOOST_AUTO_TEST_SUITE_END()

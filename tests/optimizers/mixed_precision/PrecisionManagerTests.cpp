// PrecisionManager (designed here: no seed spec): conversions, master weights, auto-fallback.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using namespace mlfw_test;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_SUITE(PrecisionManagerTests)

BOOST_AUTO_TEST_CASE(TargetPrecisionFollowsTheOptions) {
  BOOST_TEST(PrecisionManager().TargetPrecision() == DataType::Float16);
  BOOST_TEST(PrecisionManager().IsMixedPrecision());
  BOOST_TEST(PrecisionManager(MixedPrecisionOptions::ForBF16()).TargetPrecision() == DataType::BFloat16);
  BOOST_TEST(!PrecisionManager(MixedPrecisionOptions::ForFP32()).IsMixedPrecision());
  BOOST_CHECK_THROW(PrecisionManager(MixedPrecisionOptions{.MaxConsecutiveOverflows = -1}), ArgumentError);
}

BOOST_AUTO_TEST_CASE(ConvertToFP32WidensAndPassesFP32Through) {
  const PrecisionManager manager;
  const TensorPtr fp16 = Vec({1.5f, -65504.0f, 6e-8f}, DataType::Float16);
  const TensorPtr bf16 = Vec({3.0e38f}, DataType::BFloat16);
  const TensorPtr fp32 = Vec({0.1f});
  const GradientMap out = manager.ConvertToFP32({{"a", fp16}, {"b", bf16}, {"c", fp32}});
  BOOST_TEST(out.size() == 3u);
  for (const auto& [name, tensor] : out) {
    BOOST_TEST(tensor->GetDataType() == DataType::Float32);
  }
  BOOST_TEST(Values(out.at("a")) == Values(fp16), boost::test_tools::per_element());
  BOOST_TEST(Values(out.at("b")) == Values(bf16), boost::test_tools::per_element());
  BOOST_TEST(out.at("c") == fp32);
  BOOST_TEST(manager.ConvertToFP32({}).empty());
  BOOST_CHECK_EXCEPTION(manager.ConvertToFP32({{"x", nullptr}}), ArgumentNullError,
                        [](const ArgumentNullError& e) { return e.Parameter() == "gradients[\"x\"]"; });
}

BOOST_AUTO_TEST_CASE(ConvertToTargetPrecisionRounds) {
  const PrecisionManager manager;
  const TensorPtr p = Vec({1.0f, 1.0f + 1.0f / 4096.0f, 1e6f});
  const GradientMap out = manager.ConvertToTargetPrecision({{"p", p}});
  BOOST_TEST(out.at("p")->GetDataType() == DataType::Float16);
  const std::vector<float> values = Values(out.at("p"));
  BOOST_TEST(values[0] == 1.0f);
  BOOST_TEST(values[1] == 1.0f);  // below FP16's resolution at 1
  BOOST_TEST(values[2] == kInf);  // beyond FP16's range
  BOOST_TEST(Values(p)[1] == 1.0f + 1.0f / 4096.0f);
}

BOOST_AUTO_TEST_CASE(MasterWeightsAreIndependentFP32Copies) {
  PrecisionManager manager;
  BOOST_TEST(!manager.HasMasterWeights());
  const TensorPtr w16 = Vec({0.5f, -2.0f}, DataType::Float16);
  const TensorPtr b32 = Vec({0.25f});
  BOOST_CHECK_THROW(manager.CopyMasterToModel({{"b", b32}, {"w", w16}}), InvalidOperationError);
  manager.InitializeMasterWeights({{"b", b32}, {"w", w16}});
  BOOST_TEST(manager.HasMasterWeights());
  const GradientMap& master = manager.MasterWeights();
  BOOST_TEST(master.at("w")->GetDataType() == DataType::Float32);
  BOOST_TEST(master.at("b") != b32);  // a copy even when already FP32
  BOOST_TEST(Values(master.at("w")) == (std::vector<float>{0.5f, -2.0f}), boost::test_tools::per_element());

  // The optimizer updates the FP32 master by a step below FP16 resolution; the model sees the rounding.
  master.at("w")->CopyFromFloats(std::vector<float>{0.5f + 1e-5f, -2.0f + 0.0625f});
  master.at("b")->CopyFromFloats(std::vector<float>{0.375f});
  manager.CopyMasterToModel({{"b", b32}, {"w", w16}});
  BOOST_TEST(Values(w16) == (std::vector<float>{0.5f, -1.9375f}), boost::test_tools::per_element());
  BOOST_TEST(Values(b32)[0] == 0.375f);
  BOOST_TEST(Values(master.at("w"))[0] == 0.5f + 1e-5f);  // the master keeps the small update
}

BOOST_AUTO_TEST_CASE(CopyMasterToModelRejectsMismatchesWithoutWriting) {
  PrecisionManager manager;
  manager.InitializeMasterWeights({{"a", Vec({1.0f})}, {"b", Vec({2.0f, 3.0f})}});
  const TensorPtr a = Vec({9.0f}, DataType::Float16);
  BOOST_CHECK_THROW(manager.CopyMasterToModel({{"a", a}}), ArgumentError);
  BOOST_CHECK_THROW(manager.CopyMasterToModel({{"a", a}, {"c", Vec({0.0f, 0.0f})}}), ArgumentError);
  BOOST_CHECK_EXCEPTION(manager.CopyMasterToModel({{"a", a}, {"b", Vec({0.0f})}}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "model_parameters[\"b\"]"; });
  BOOST_CHECK_THROW(manager.CopyMasterToModel({{"a", a}, {"b", nullptr}}), ArgumentNullError);
  BOOST_TEST(Values(a)[0] == 9.0f);
  // A failed InitializeMasterWeights keeps the previous master weights.
  BOOST_CHECK_THROW(manager.InitializeMasterWeights({{"z", nullptr}}), ArgumentNullError);
  BOOST_TEST(manager.MasterWeights().size() == 2u);
}

BOOST_AUTO_TEST_CASE(AutoFallbackAfterMaxConsecutiveOverflowsAtTheMinimumScale) {
  const MixedPrecisionOptions options{.InitialLossScale = 4.0f, .MaxConsecutiveOverflows = 3};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  // The back-off from 4 to the minimum 1 does not count: those overflows were above the minimum.
  for (int i = 0; i < 2; ++i) {
    scaler.UpdateScale(true);
    BOOST_TEST(!manager.CheckFallback(scaler));
    BOOST_TEST(manager.OverflowsAtMinScale() == 0);
  }
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  for (int i = 0; i < 2; ++i) {
    scaler.UpdateScale(true);
    BOOST_TEST(!manager.CheckFallback(scaler));
    BOOST_TEST(manager.OverflowsAtMinScale() == i + 1);
  }
  scaler.UpdateScale(false);  // a clean step ends the run
  BOOST_TEST(!manager.CheckFallback(scaler));
  BOOST_TEST(manager.OverflowsAtMinScale() == 0);
  for (int i = 0; i < 2; ++i) {
    scaler.UpdateScale(true);
    BOOST_TEST(!manager.CheckFallback(scaler));
  }
  BOOST_TEST(!manager.CheckFallback(scaler));  // a second look at the same step counts nothing
  BOOST_TEST(manager.OverflowsAtMinScale() == 2);
  BOOST_TEST(manager.TargetPrecision() == DataType::Float16);
  BOOST_TEST(manager.FallbackStep() == 0);
  scaler.UpdateScale(true);
  BOOST_TEST(manager.CheckFallback(scaler));  // third overflow in a row at the minimum
  BOOST_TEST(manager.HasFallenBack());
  BOOST_TEST(manager.FallbackStep() == 8);
  BOOST_TEST(manager.OverflowsAtMinScale() == 3);
  BOOST_TEST(manager.TargetPrecision() == DataType::Float32);
  BOOST_TEST(!scaler.IsEnabled());
  BOOST_TEST(scaler.IsChecking());
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(!manager.CheckFallback(scaler));  // reported once
  // Parameters now go to FP32.
  BOOST_TEST(manager.ConvertToTargetPrecision({{"p", Vec({1e6f})}}).at("p")->GetDataType() == DataType::Float32);
}

BOOST_AUTO_TEST_CASE(TheBackOffFromAHighInitialScaleNeverFallsBack) {
  // Megatron-LM and DeepSpeed start at 2^32 and back off about 16 times before the first kept
  // step; here the whole way down to the minimum (32 overflows) with a threshold of 1.
  const MixedPrecisionOptions options{
      .InitialLossScale = 4294967296.0f, .MaxLossScale = 4294967296.0f, .MaxConsecutiveOverflows = 1};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  for (int i = 0; i < 32; ++i) {
    scaler.UpdateScale(true);
    BOOST_TEST(!manager.CheckFallback(scaler), "overflow " << i);
  }
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(scaler.ConsecutiveOverflows() == 32);
  scaler.UpdateScale(true);  // the first overflow at the minimum
  BOOST_TEST(manager.CheckFallback(scaler));
  BOOST_TEST(manager.FallbackStep() == 33);
}

BOOST_AUTO_TEST_CASE(UpdatesWithoutACheckAreCountedSafely) {
  const MixedPrecisionOptions options{.InitialLossScale = 8.0f, .GrowthInterval = 1, .MaxConsecutiveOverflows = 4};
  {
    // Only overflows since the last look: exact (3 to reach 1 from 8, then 3 at the minimum).
    PrecisionManager manager(options);
    DynamicLossScaler scaler(options);
    for (int i = 0; i < 6; ++i) {
      scaler.UpdateScale(true);
    }
    BOOST_TEST(!manager.CheckFallback(scaler));
    BOOST_TEST(manager.OverflowsAtMinScale() == 3);
    scaler.UpdateScale(true);
    BOOST_TEST(manager.CheckFallback(scaler));
  }
  {
    // A clean step the manager did not see: the run may have begun as high as MaxLossScale
    // (2^24, 24 back-offs), so only overflows beyond that count, and the fallback is not early.
    PrecisionManager manager(options);
    DynamicLossScaler scaler(options);
    scaler.UpdateScale(false);  // grows to 16
    for (int i = 0; i < 10; ++i) {
      scaler.UpdateScale(true);  // 4 back-offs, then 6 at the minimum
    }
    BOOST_TEST(!manager.CheckFallback(scaler));
    BOOST_TEST(manager.OverflowsAtMinScale() == 0);
    // From here on it sees every update and counts exactly.
    for (int i = 0; i < 3; ++i) {
      scaler.UpdateScale(true);
      BOOST_TEST(!manager.CheckFallback(scaler));
    }
    scaler.UpdateScale(true);
    BOOST_TEST(manager.CheckFallback(scaler));
  }
  {
    // After the scaler's Reset() the run starts again from the initial scale: counted exactly.
    PrecisionManager manager(options);
    DynamicLossScaler scaler(options);
    for (int i = 0; i < 5; ++i) {
      scaler.UpdateScale(i != 2);
      manager.CheckFallback(scaler);
    }
    scaler.Reset();
    for (int i = 0; i < 4; ++i) {
      scaler.UpdateScale(true);  // 8 -> 1: three back-offs, then one at the minimum
      BOOST_TEST(!manager.CheckFallback(scaler));
    }
    BOOST_TEST(manager.OverflowsAtMinScale() == 1);
  }
}

BOOST_AUTO_TEST_CASE(FP32ParametersAreTheMasterWeightsOrTheModelWidened) {
  PrecisionManager manager;
  const TensorPtr w = Vec({1.5f, -2.0f}, DataType::Float16);
  const GradientMap model{{"w", w}};
  // Without master weights: the model's values, widened.
  const GradientMap widened = manager.FP32Parameters(model);
  BOOST_TEST(widened.at("w")->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(widened.at("w")) == (std::vector<float>{1.5f, -2.0f}), tt::per_element());
  BOOST_CHECK_THROW(manager.FP32Parameters({{"w", nullptr}}), ArgumentNullError);
  // With master weights: their exact FP32 values (not the FP16-rounded model), as new tensors.
  manager.InitializeMasterWeights({{"w", Vec({1.0001f, -2.0f})}});
  const TensorPtr master = manager.MasterWeights().at("w");
  const GradientMap fp32 = manager.FP32Parameters(model);
  BOOST_TEST(fp32.at("w") != master);
  BOOST_TEST(Values(fp32.at("w"))[0] == 1.0001f);
  // Names and shapes must match the master weights.
  BOOST_CHECK_EXCEPTION(manager.FP32Parameters({{"v", w}}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "model_parameters"; });
  BOOST_CHECK_EXCEPTION(manager.FP32Parameters({{"w", Vec({1.0f}, DataType::Float16)}}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "model_parameters[\"w\"]"; });
}

BOOST_AUTO_TEST_CASE(NoFallbackWhenDisabled) {
  const MixedPrecisionOptions options{.MaxConsecutiveOverflows = 1, .EnableAutoFallback = false};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  scaler.UpdateScale(true);
  scaler.UpdateScale(true);
  BOOST_TEST(!manager.CheckFallback(scaler));
  BOOST_TEST(manager.TargetPrecision() == DataType::Float16);
  BOOST_TEST(scaler.IsEnabled());
}

BOOST_AUTO_TEST_CASE(StateDictKeepsTheFallback) {
  // Starting at the minimum scale, the first overflow is at the minimum.
  const MixedPrecisionOptions options{.InitialLossScale = 1.0f, .MaxConsecutiveOverflows = 1};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  scaler.UpdateScale(true);
  BOOST_TEST(manager.CheckFallback(scaler));
  PrecisionManager restored(options);
  restored.LoadStateDict(manager.StateDict());
  BOOST_TEST(restored.HasFallenBack());
  BOOST_TEST(restored.TargetPrecision() == DataType::Float32);
  BOOST_TEST(restored.FallbackStep() == manager.FallbackStep());
  BOOST_TEST(restored.OverflowsAtMinScale() == 1);
  // A blob saved for another precision, or a scaler's blob, is rejected and changes nothing.
  PrecisionManager bf16(MixedPrecisionOptions::ForBF16());
  BOOST_CHECK_THROW(bf16.LoadStateDict(manager.StateDict()), ArgumentError);
  BOOST_CHECK_THROW(bf16.LoadStateDict(scaler.StateDict()), ArgumentError);
  BOOST_TEST(bf16.TargetPrecision() == DataType::BFloat16);
  BOOST_TEST(!bf16.HasFallenBack());
}

BOOST_AUTO_TEST_CASE(StateDictKeepsTheCountAtTheMinimumScale) {
  const MixedPrecisionOptions options{.InitialLossScale = 2.0f, .MaxConsecutiveOverflows = 3};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  for (int i = 0; i < 3; ++i) {  // one back-off, two at the minimum
    scaler.UpdateScale(true);
    manager.CheckFallback(scaler);
  }
  BOOST_TEST(manager.OverflowsAtMinScale() == 2);
  PrecisionManager restored(options);
  restored.LoadStateDict(manager.StateDict());
  BOOST_TEST(restored.OverflowsAtMinScale() == 2);
  scaler.UpdateScale(true);
  BOOST_TEST(restored.CheckFallback(scaler));  // the resumed count reaches 3
  BOOST_TEST(restored.FallbackStep() == 4);
}

BOOST_AUTO_TEST_CASE(VersionOneBlobsStillLoad) {
  // The layout before the count at the minimum scale: precision and fallback flag only.
  const auto v1 = [](std::uint8_t fallen_back) {
    mlframework::detail::BlobWriter writer("optimizers.mixed_precision.PrecisionManager", 1);
    writer.U8(static_cast<std::uint8_t>(DataType::Float16));
    writer.U8(fallen_back);
    return writer.Finish();
  };
  const MixedPrecisionOptions options{.InitialLossScale = 2.0f, .MaxConsecutiveOverflows = 2};
  PrecisionManager fallen(options);
  fallen.LoadStateDict(v1(1));
  BOOST_TEST(fallen.HasFallenBack());
  BOOST_TEST(fallen.TargetPrecision() == DataType::Float32);
  BOOST_TEST(fallen.FallbackStep() == 0);  // version 1 did not record it
  // Not fallen back: the state last seen is unknown, so a run of a scaler stepped past a clean
  // step counts only what is certainly at the minimum (2^24 down to 1 takes 24 back-offs).
  PrecisionManager manager(options);
  manager.LoadStateDict(v1(0));
  BOOST_TEST(!manager.HasFallenBack());
  DynamicLossScaler scaler(options);
  scaler.UpdateScale(false);
  for (int i = 0; i < 3; ++i) {
    scaler.UpdateScale(true);
  }
  BOOST_TEST(!manager.CheckFallback(scaler));
  BOOST_TEST(manager.OverflowsAtMinScale() == 0);
  scaler.UpdateScale(true);
  BOOST_TEST(!manager.CheckFallback(scaler));  // seen from now on: exact
  scaler.UpdateScale(true);
  BOOST_TEST(manager.CheckFallback(scaler));
  // A version 1 blob with a bad flag is refused and changes nothing.
  PrecisionManager untouched(options);
  BOOST_CHECK_THROW(untouched.LoadStateDict(v1(2)), ArgumentError);
  BOOST_TEST(!untouched.HasFallenBack());
}

BOOST_AUTO_TEST_SUITE_END()

// PrecisionManager (the spec 004 we designed): conversions, master weights, auto-fallback.
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using namespace mlfw_test;

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

BOOST_AUTO_TEST_CASE(AutoFallbackAfterMaxConsecutiveOverflows) {
  const MixedPrecisionOptions options{.InitialLossScale = 1024.0f, .MaxConsecutiveOverflows = 3};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  for (int i = 0; i < 2; ++i) {
    scaler.UpdateScale(true);
    BOOST_TEST(!manager.CheckFallback(scaler));
  }
  scaler.UpdateScale(false);  // a clean step ends the run
  BOOST_TEST(!manager.CheckFallback(scaler));
  for (int i = 0; i < 2; ++i) {
    scaler.UpdateScale(true);
    BOOST_TEST(!manager.CheckFallback(scaler));
  }
  BOOST_TEST(manager.TargetPrecision() == DataType::Float16);
  scaler.UpdateScale(true);
  BOOST_TEST(manager.CheckFallback(scaler));  // third overflow in a row
  BOOST_TEST(manager.HasFallenBack());
  BOOST_TEST(manager.TargetPrecision() == DataType::Float32);
  BOOST_TEST(!scaler.IsEnabled());
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
  BOOST_TEST(!manager.CheckFallback(scaler));  // reported once
  // Parameters now go to FP32.
  BOOST_TEST(manager.ConvertToTargetPrecision({{"p", Vec({1e6f})}}).at("p")->GetDataType() == DataType::Float32);
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
  const MixedPrecisionOptions options{.MaxConsecutiveOverflows = 1};
  PrecisionManager manager(options);
  DynamicLossScaler scaler(options);
  scaler.UpdateScale(true);
  manager.CheckFallback(scaler);
  PrecisionManager restored(options);
  restored.LoadStateDict(manager.StateDict());
  BOOST_TEST(restored.HasFallenBack());
  BOOST_TEST(restored.TargetPrecision() == DataType::Float32);
  // A blob saved for another precision, or a scaler's blob, is rejected and changes nothing.
  PrecisionManager bf16(MixedPrecisionOptions::ForBF16());
  BOOST_CHECK_THROW(bf16.LoadStateDict(manager.StateDict()), ArgumentError);
  BOOST_CHECK_THROW(bf16.LoadStateDict(scaler.StateDict()), ArgumentError);
  BOOST_TEST(bf16.TargetPrecision() == DataType::BFloat16);
  BOOST_TEST(!bf16.HasFallenBack());
}

BOOST_AUTO_TEST_SUITE_END()

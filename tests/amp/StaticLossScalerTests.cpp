// StaticLossScaler and the ILossScaler contract (spec 001 testing requirements and success criteria).
#include <cmath>
#include <limits>

#include <boost/test/unit_test.hpp>

#include "ContiguousCheck.hpp"
#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using namespace mlfw_test;
using mlframework::amp::ILossScaler;
using mlframework::amp::StaticLossScaler;

namespace {
const DataType kDtypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};
}  // namespace

BOOST_AUTO_TEST_SUITE(StaticLossScalerTests)

BOOST_AUTO_TEST_CASE(DefaultsAndProperties) {
  const StaticLossScaler scaler;
  BOOST_TEST(scaler.CurrentScale() == 65536.0f);
  BOOST_TEST(scaler.IsEnabled());
  const StaticLossScaler off(8.0f, false);
  BOOST_TEST(off.CurrentScale() == 8.0f);
  BOOST_TEST(!off.IsEnabled());
  // Usable through the interface.
  const ILossScaler& base = scaler;
  BOOST_TEST(base.CurrentScale() == 65536.0f);
}

BOOST_AUTO_TEST_CASE(LossIsScaledByVariousFactorsInEachDtype) {
  for (const float factor : {1.0f, 2.0f, 256.0f, 65536.0f, 1048576.0f, 3.0f, 0.5f}) {
    StaticLossScaler scaler(factor);
    for (const DataType dtype : kDtypes) {
      const auto loss = Scalar(0.75f, dtype);
      const auto scaled = scaler.ScaleLoss(loss);
      BOOST_TEST(scaled != loss);
      BOOST_TEST(scaled->GetDataType() == dtype);
      const float expected = FromVector({0.75f * factor}, {1}, dtype)->ToFloatVector()[0];
      BOOST_TEST(Values(scaled)[0] == expected);
      BOOST_TEST(Values(loss)[0] == 0.75f);  // the input is not modified
    }
  }
}

BOOST_AUTO_TEST_CASE(Fp32GradientsAreUnscaledAccuratelyInPlace) {
  StaticLossScaler scaler(1024.0f);
  const auto grads = Grads(DataType::Float32, 1024.0f);
  const auto unscaled = scaler.UnscaleGradients(grads);
  BOOST_TEST(unscaled.size() == 2u);
  BOOST_TEST(unscaled.at("a") == grads.at("a"));  // in place: the same tensors
  BOOST_TEST(Values(unscaled.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}), boost::test_tools::per_element());
  BOOST_TEST(Values(unscaled.at("b")) == (std::vector<float>{4.0f, -0.25f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(LowPrecisionGradientsAreUnscaledIntoFp32) {
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    StaticLossScaler scaler(65536.0f);
    // 2^-26 is below FP16's smallest subnormal (2^-24): unscaled back into FP16 it would be 0.
    const auto grads = GradientMap{{"g", FromVector({std::ldexp(1.0f, -10), 3.0f}, {2}, dtype)}};
    const auto unscaled = scaler.UnscaleGradients(grads);
    const auto& g = unscaled.at("g");
    BOOST_TEST(g->GetDataType() == DataType::Float32);
    BOOST_TEST(g != grads.at("g"));
    BOOST_TEST(Values(g)[0] == std::ldexp(1.0f, -26));  // exact in FP32
    BOOST_TEST(Values(grads.at("g"))[0] * (1.0f / 65536.0f) == std::ldexp(1.0f, -26));
    BOOST_TEST(Values(g)[1] == 3.0f / 65536.0f);
    BOOST_TEST(Values(grads.at("g"))[0] == std::ldexp(1.0f, -10));  // the scaled source is left alone
    // The FP32 buffer is reused from the next step on (ScaleLoss) with the same names and shapes.
    scaler.ScaleLoss(Scalar(1.0f));
    const auto again = scaler.UnscaleGradients(grads);
    BOOST_TEST(again.at("g") == g);
  }
}

BOOST_AUTO_TEST_CASE(Fp32BuffersOfLowPrecisionGradientsShareOneBuffer) {
  StaticLossScaler scaler(4.0f);
  const auto grads = GradientMap{{"a", FromVector({4.0f, 8.0f, 12.0f}, {3}, DataType::Float16)},
                                 {"b", FromVector({1.0f}, {1}, DataType::Float32)},
                                 {"c", FromVector(std::vector<float>(40, 4.0f), {5, 8}, DataType::BFloat16)},
                                 {"d", FromVector({-4.0f}, {1}, DataType::Float16)}};
  const auto unscaled = scaler.UnscaleGradients(grads);
  // The FP32 buffers of a, c and d are one contiguous allocation, in name order (the FP32 b is
  // unscaled in place), so the fused cast writes them like one flat tensor.
  BOOST_TEST(mlfw_test::BackToBack({unscaled.at("a"), unscaled.at("c"), unscaled.at("d")}));
  BOOST_TEST(Values(unscaled.at("a")) == (std::vector<float>{1.0f, 2.0f, 3.0f}));
  BOOST_TEST(Values(unscaled.at("c")) == std::vector<float>(40, 1.0f));
  BOOST_TEST(Values(unscaled.at("d")) == (std::vector<float>{-1.0f}));
  BOOST_TEST(unscaled.at("b") == grads.at("b"));
  // The next step (ScaleLoss): a gradient whose shape changed gets a new buffer of its own; the
  // others are reused, though `unscaled` still holds them.
  scaler.ScaleLoss(Scalar(1.0f));
  auto reshaped = grads;
  reshaped["c"] = FromVector({8.0f, 8.0f}, {2}, DataType::BFloat16);
  const auto next = scaler.UnscaleGradients(reshaped);
  BOOST_TEST(next.at("a") == unscaled.at("a"));
  BOOST_TEST(next.at("d") == unscaled.at("d"));
  BOOST_TEST(next.at("c") != unscaled.at("c"));
  BOOST_TEST(Values(next.at("c")) == (std::vector<float>{2.0f, 2.0f}));
}

// Two unscales in one step (two optimizers, or the clipping flow's result kept while another
// list is unscaled): the second writes other buffers while the first result is held, so neither
// sees the other's values; a released buffer is written again, and the next step reuses them all.
BOOST_AUTO_TEST_CASE(AHeldResultIsNotOverwrittenWithinAStep) {
  const auto half = [](std::vector<float> values) {
    return GradientMap{{"a", FromVector(values, {values.size()}, DataType::Float16)}};
  };
  StaticLossScaler static_scaler(4.0f);
  amp::DynamicLossScaler dynamic_scaler(amp::DynamicScalerConfig{.InitialScale = 4.0f});
  for (ILossScaler* scaler : {static_cast<ILossScaler*>(&static_scaler), static_cast<ILossScaler*>(&dynamic_scaler)}) {
    BOOST_TEST_CONTEXT((scaler == &static_scaler ? "static" : "dynamic")) {
      scaler->ScaleLoss(Scalar(1.0f));
      const GradientMap first = scaler->UnscaleGradients(half({4.0f, 8.0f, 12.0f}));
      GradientMap second = scaler->UnscaleGradients(half({8.0f, 8.0f, 8.0f}));
      BOOST_TEST(Values(first.at("a")) == (std::vector<float>{1.0f, 2.0f, 3.0f}), boost::test_tools::per_element());
      BOOST_TEST(Values(second.at("a")) == (std::vector<float>{2.0f, 2.0f, 2.0f}), boost::test_tools::per_element());
      const ITensor* released = second.at("a").get();
      second.clear();
      const GradientMap third = scaler->UnscaleGradients(half({12.0f, 4.0f, 4.0f}));
      BOOST_TEST(third.at("a").get() == released);
      BOOST_TEST(Values(first.at("a")) == (std::vector<float>{1.0f, 2.0f, 3.0f}), boost::test_tools::per_element());
      scaler->ScaleLoss(Scalar(1.0f));
      const GradientMap next = scaler->UnscaleGradients(half({4.0f, 4.0f, 4.0f}));
      BOOST_TEST(next.at("a") == first.at("a"));
      BOOST_TEST(Values(next.at("a")) == (std::vector<float>{1.0f, 1.0f, 1.0f}), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(SingleGradientUnscale) {
  StaticLossScaler scaler(4.0f);
  const auto g32 = FromVector({8.0f, -4.0f}, {2});
  BOOST_TEST(scaler.UnscaleGradient(g32) == g32);
  BOOST_TEST(Values(g32) == (std::vector<float>{2.0f, -1.0f}), boost::test_tools::per_element());
  const auto g16 = FromVector({8.0f, -4.0f}, {2}, DataType::Float16);
  const auto u16 = scaler.UnscaleGradient(g16);
  BOOST_TEST(u16->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(u16) == (std::vector<float>{2.0f, -1.0f}), boost::test_tools::per_element());
  BOOST_CHECK_THROW(scaler.UnscaleGradient(nullptr), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(OverflowDetectionForInfAndNaNInEachDtype) {
  StaticLossScaler scaler;
  for (const DataType dtype : kDtypes) {
    BOOST_TEST(!scaler.CheckOverflow(Grads(dtype)));
    for (const float poison : {kInf, -kInf, kNaN}) {
      BOOST_TEST(scaler.CheckOverflow(PoisonedGrads(dtype, poison)));
      BOOST_TEST(scaler.CheckOverflow(PoisonedGrads(dtype, poison).at("a")));
      BOOST_TEST(!scaler.CheckOverflow(PoisonedGrads(dtype, poison).at("b")));
    }
    // A finite FP16 value scaled past 65504 overflows when the gradient itself is FP16.
    BOOST_TEST(scaler.CheckOverflow(GradientMap{{"x", FromVector({70000.0f}, {1}, dtype)}}) ==
               (dtype == DataType::Float16));
  }
  BOOST_TEST(!scaler.CheckOverflow(GradientMap{}));
  BOOST_CHECK_THROW(scaler.CheckOverflow(GradientMap{{"x", nullptr}}), ArgumentNullError);
  BOOST_CHECK_THROW(scaler.CheckOverflow(TensorPtr{}), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(UnscaleReportsOverflowOfTheUnscaledValuesInOnePass) {
  StaticLossScaler scaler(2.0f);
  for (const DataType dtype : kDtypes) {
    const auto clean = scaler.UnscaleGradientsAndCheck(Grads(dtype, 2.0f));
    BOOST_TEST(!clean.Overflow);
    BOOST_TEST(Values(clean.Gradients.at("b")) == (std::vector<float>{4.0f, -0.25f}), boost::test_tools::per_element());
    BOOST_TEST(scaler.UnscaleGradientsAndCheck(PoisonedGrads(dtype, kNaN)).Overflow);
    BOOST_TEST(scaler.UnscaleGradientsAndCheck(PoisonedGrads(dtype, -kInf)).Overflow);
  }
}

BOOST_AUTO_TEST_CASE(DisabledScalerPassesValuesThroughUnchanged) {
  StaticLossScaler scaler(1024.0f, false);
  const auto loss = Scalar(3.0f);
  BOOST_TEST(scaler.ScaleLoss(loss) == loss);
  BOOST_TEST(Values(loss)[0] == 3.0f);
  for (const DataType dtype : kDtypes) {
    const auto grads = Grads(dtype, 8.0f);
    const auto out = scaler.UnscaleGradients(grads);
    BOOST_TEST(out.at("a") == grads.at("a"));
    BOOST_TEST(Values(out.at("a"))[0] == 8.0f);
    BOOST_TEST(scaler.UnscaleGradient(grads.at("b")) == grads.at("b"));
    BOOST_TEST(!scaler.CheckOverflow(PoisonedGrads(dtype, kInf)));  // never skips
  }
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 1.0f);
  BOOST_TEST(Values(scaler.GetInverseScaleTensor())[0] == 1.0f);
  scaler.SetEnabled(true);
  BOOST_TEST(Values(scaler.ScaleLoss(loss))[0] == 3072.0f);
}

BOOST_AUTO_TEST_CASE(ScaleTensorsAreCachedScalars) {
  StaticLossScaler scaler(512.0f);
  const auto s = scaler.GetScaleTensor();
  const auto inv = scaler.GetInverseScaleTensor();
  BOOST_TEST(s->Size() == 1u);
  BOOST_TEST(s->GetShape().empty());
  BOOST_TEST(s->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(s)[0] == 512.0f);
  BOOST_TEST(Values(inv)[0] == 1.0f / 512.0f);
  BOOST_TEST(scaler.GetScaleTensor() == s);  // cached: the same tensor every time
  BOOST_TEST(scaler.GetInverseScaleTensor() == inv);
  // The inverse is computed in double and rounded once.
  StaticLossScaler three(3.0f);
  BOOST_TEST(Values(three.GetInverseScaleTensor())[0] == static_cast<float>(1.0 / 3.0));
}

BOOST_AUTO_TEST_CASE(UpdateScaleIsANoOp) {
  StaticLossScaler scaler(128.0f);
  const auto before = scaler.StateDict();
  scaler.UpdateScale(true);
  scaler.UpdateScale(false);
  BOOST_TEST(scaler.CurrentScale() == 128.0f);
  BOOST_TEST((scaler.StateDict() == before));
}

BOOST_AUTO_TEST_CASE(EdgeCaseScalesAreRejected) {
  for (const float bad : {0.0f, -0.0f, -1.0f, kInf, -kInf, kNaN, 1e-45f}) {
    try {
      StaticLossScaler scaler(bad);
      BOOST_FAIL("expected ArgumentError");
    } catch (const ArgumentError& e) {
      BOOST_TEST(e.Parameter() == "scale");
    }
  }
  BOOST_CHECK_THROW(StaticLossScaler(1.0f).ScaleLoss(nullptr), ArgumentNullError);
  // The largest finite float is a legal (if useless) scale: scaling an FP32 loss of 2 overflows to Inf.
  StaticLossScaler huge(std::numeric_limits<float>::max());
  BOOST_TEST(std::isinf(Values(huge.ScaleLoss(Scalar(2.0f)))[0]));
}

BOOST_AUTO_TEST_CASE(StateDictRoundTripsAndRejectsBadBlobs) {
  StaticLossScaler a(32.0f, false);
  StaticLossScaler b;
  b.LoadStateDict(a.StateDict());
  BOOST_TEST(b.CurrentScale() == 32.0f);
  BOOST_TEST(!b.IsEnabled());
  auto blob = a.StateDict();
  const auto before = b.StateDict();
  auto truncated = blob;
  truncated.pop_back();
  BOOST_CHECK_THROW(b.LoadStateDict(truncated), ArgumentError);
  blob[blob.size() - 10] ^= std::byte{0x01};
  BOOST_CHECK_THROW(b.LoadStateDict(blob), ArgumentError);
  BOOST_CHECK_THROW(b.LoadStateDict(amp::DynamicLossScaler().StateDict()), ArgumentError);  // foreign kind
  BOOST_TEST((b.StateDict() == before));
  // Copies are independent.
  StaticLossScaler c = a;
  c.SetEnabled(true);
  BOOST_TEST(!a.IsEnabled());
}

BOOST_AUTO_TEST_SUITE_END()

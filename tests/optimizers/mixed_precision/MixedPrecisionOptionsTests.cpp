// MixedPrecisionOptions (designed here: no seed spec): recipes, validation, policy mapping.
#include <cmath>
#include <limits>
#include <string>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>

#include "mlframework/optimizers/mixed_precision/CSharpFormat.hpp"
#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;

namespace {

// Runs Validate() and returns the field the ArgumentError names ("" when it passes).
std::string RejectedField(const MixedPrecisionOptions& options) {
  try {
    options.Validate();
  } catch (const ArgumentError& error) {
    return error.Parameter();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(MixedPrecisionOptionsTests)

BOOST_AUTO_TEST_CASE(ForFP16IsTheDocumentedRecipe) {
  const MixedPrecisionOptions o = MixedPrecisionOptions::ForFP16();
  BOOST_TEST(o.Precision == DataType::Float16);
  BOOST_TEST(o.EnableDynamicLossScaling);
  BOOST_TEST(o.InitialLossScale == 65536.0f);
  BOOST_TEST(o.GrowthFactor == 2.0f);
  BOOST_TEST(o.BackoffFactor == 0.5f);
  BOOST_TEST(o.GrowthInterval == 2000);
  BOOST_TEST(o.MinLossScale == 1.0f);
  BOOST_TEST(o.MaxLossScale == 16777216.0f);
  BOOST_TEST(o.MaxConsecutiveOverflows == 10);
  BOOST_TEST(!o.EnableGradientClipping);
  BOOST_TEST(o.MaxGradNorm == 1.0f);
  BOOST_TEST(o.EnableAutoFallback);
  BOOST_CHECK_NO_THROW(o.Validate());
  // The aggregate's defaults are the FP16 recipe, so designated initializers start from it.
  const MixedPrecisionOptions d{.MaxGradNorm = 5.0f};
  BOOST_TEST(d.InitialLossScale == 65536.0f);
  BOOST_TEST(d.MaxGradNorm == 5.0f);
}

BOOST_AUTO_TEST_CASE(ForBF16AndForFP32DoNotScale) {
  const MixedPrecisionOptions bf16 = MixedPrecisionOptions::ForBF16();
  BOOST_TEST(bf16.Precision == DataType::BFloat16);
  BOOST_TEST(!bf16.EnableDynamicLossScaling);
  BOOST_TEST(bf16.InitialLossScale == 1.0f);
  BOOST_CHECK_NO_THROW(bf16.Validate());
  const MixedPrecisionOptions fp32 = MixedPrecisionOptions::ForFP32();
  BOOST_TEST(fp32.Precision == DataType::Float32);
  BOOST_TEST(!fp32.EnableDynamicLossScaling);
  BOOST_TEST(fp32.InitialLossScale == 1.0f);
  BOOST_TEST(!fp32.EnableAutoFallback);
  BOOST_CHECK_NO_THROW(fp32.Validate());
}

BOOST_AUTO_TEST_CASE(ValidateNamesEveryInvalidField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(RejectedField({.Precision = static_cast<DataType>(7)}) == "Precision");
  BOOST_TEST(RejectedField({.InitialLossScale = 0.0f}) == "InitialLossScale");
  BOOST_TEST(RejectedField({.InitialLossScale = nan}) == "InitialLossScale");
  BOOST_TEST(RejectedField({.InitialLossScale = 1e9f}) == "InitialLossScale");  // above MaxLossScale
  BOOST_TEST(RejectedField({.GrowthFactor = 1.0f}) == "GrowthFactor");
  BOOST_TEST(RejectedField({.GrowthFactor = inf}) == "GrowthFactor");
  BOOST_TEST(RejectedField({.BackoffFactor = 1.0f}) == "BackoffFactor");
  BOOST_TEST(RejectedField({.BackoffFactor = 0.0f}) == "BackoffFactor");
  BOOST_TEST(RejectedField({.GrowthInterval = 0}) == "GrowthInterval");
  BOOST_TEST(RejectedField({.MinLossScale = -1.0f}) == "MinLossScale");
  BOOST_TEST(RejectedField({.MinLossScale = 1e8f, .MaxLossScale = 1e7f}) == "MinLossScale");
  BOOST_TEST(RejectedField({.MaxLossScale = inf}) == "MaxLossScale");
  BOOST_TEST(RejectedField({.MaxConsecutiveOverflows = 0}) == "MaxConsecutiveOverflows");
  BOOST_TEST(RejectedField({.MaxGradNorm = nan}) == "MaxGradNorm");
  BOOST_TEST(RejectedField({.Precision = DataType::Float32}) == "EnableDynamicLossScaling");
  // Values the specs give a meaning to are accepted.
  BOOST_TEST(RejectedField({.EnableGradientClipping = true, .MaxGradNorm = 0.0f}) == "");
  BOOST_TEST(RejectedField({.EnableGradientClipping = true, .MaxGradNorm = -3.0f}) == "");
  BOOST_TEST(RejectedField({.MaxGradNorm = inf}) == "");
  BOOST_TEST(RejectedField({.Precision = DataType::BFloat16}) == "");  // BF16 may still scale
}

BOOST_AUTO_TEST_CASE(MessagesCarryTheValue) {
  try {
    MixedPrecisionOptions{.BackoffFactor = 1.5f}.Validate();
    BOOST_FAIL("Validate accepted BackoffFactor 1.5");
  } catch (const ArgumentError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("BackoffFactor") != std::string::npos);
    BOOST_TEST(message.find("1.5") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(ToScalePolicyMapsEveryField) {
  const MixedPrecisionOptions o{.InitialLossScale = 8.0f,
                                .GrowthFactor = 4.0f,
                                .BackoffFactor = 0.25f,
                                .GrowthInterval = 7,
                                .MinLossScale = 2.0f,
                                .MaxLossScale = 512.0f};
  const amp::ScalePolicy p = o.ToScalePolicy();
  BOOST_TEST(p.InitialScale == 8.0f);
  BOOST_TEST(p.GrowthFactor == 4.0f);
  BOOST_TEST(p.BackoffFactor == 0.25f);
  BOOST_TEST(p.GrowthInterval == 7);
  BOOST_TEST(p.MinScale == 2.0f);
  BOOST_TEST(p.MaxScale == 512.0f);
  BOOST_TEST(p.Hysteresis == 1);
}

BOOST_AUTO_TEST_CASE(CSharpFixedPointFormatting) {
  using detail::FormatFixed;
  BOOST_TEST(FormatFixed(65536.0, 2) == "65536.00");
  BOOST_TEST(FormatFixed(0.125, 2) == "0.12");    // exact tie: .NET Core 2.1+ picks the even digit
  BOOST_TEST(FormatFixed(0.375, 2) == "0.38");    // exact tie, even digit upwards
  BOOST_TEST(FormatFixed(2.675, 2) == "2.67");    // 2.675 is 2.67499999... in binary
  BOOST_TEST(FormatFixed(1.15, 1) == "1.1");      // 1.1499999... (dotnet/runtime#74979)
  BOOST_TEST(FormatFixed(9.9951, 2) == "10.00");  // carry into a new digit
  BOOST_TEST(FormatFixed(-1.5, 2) == "-1.50");
  BOOST_TEST(FormatFixed(1.0 / 3.0, 4) == "0.3333");
  BOOST_TEST(FormatFixed(std::nan(""), 2) == "NaN");
  BOOST_TEST(FormatFixed(HUGE_VAL, 2) == "Infinity");
  BOOST_TEST(FormatFixed(-HUGE_VAL, 4) == "-Infinity");
  BOOST_TEST(FormatFixed(1.7976931348623157e308, 2).size() == 309 + 3);
}

BOOST_AUTO_TEST_SUITE_END()

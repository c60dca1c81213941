// ScaleFactor: the constants, PowerOfTwo and the recommended scales (spec 001).
#include <cmath>

#include <boost/test/unit_test.hpp>

#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using mlframework::amp::ScaleFactor;

BOOST_AUTO_TEST_SUITE(ScaleFactorTests)

BOOST_AUTO_TEST_CASE(ConstantsArePowersOfTwo) {
  static_assert(ScaleFactor::None == 1.0f);
  static_assert(ScaleFactor::Conservative == 256.0f);
  static_assert(ScaleFactor::Moderate == 65536.0f);
  static_assert(ScaleFactor::Aggressive == 1048576.0f);
  BOOST_TEST(ScaleFactor::PowerOfTwo(0) == ScaleFactor::None);
  BOOST_TEST(ScaleFactor::PowerOfTwo(8) == ScaleFactor::Conservative);
  BOOST_TEST(ScaleFactor::PowerOfTwo(16) == ScaleFactor::Moderate);
  BOOST_TEST(ScaleFactor::PowerOfTwo(20) == ScaleFactor::Aggressive);
}

BOOST_AUTO_TEST_CASE(PowerOfTwoIsExactOverTheNormalRange) {
  for (int e = -126; e <= 127; ++e) {
    BOOST_TEST(ScaleFactor::PowerOfTwo(e) == std::ldexp(1.0f, e));
  }
  BOOST_TEST(ScaleFactor::PowerOfTwo(-1) == 0.5f);
  for (const int bad : {128, -127, 1000, -1000}) {
    try {
      ScaleFactor::PowerOfTwo(bad);
      BOOST_FAIL("expected ArgumentError");
    } catch (const ArgumentError& e) {
      BOOST_TEST(e.Parameter() == "exponent");
      BOOST_TEST(std::string(e.what()).find(std::to_string(bad)) != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(RecommendedScalePerPrecision) {
  BOOST_TEST(ScaleFactor::GetRecommendedScale(DataType::Float16) == 65536.0f);
  BOOST_TEST(ScaleFactor::GetRecommendedScale(DataType::BFloat16) == 1.0f);
  BOOST_TEST(ScaleFactor::GetRecommendedScale(DataType::Float32) == 1.0f);
  BOOST_CHECK_THROW(ScaleFactor::GetRecommendedScale(static_cast<DataType>(99)), ArgumentError);
}

BOOST_AUTO_TEST_SUITE_END()

// FP16 / BF16 conversions against an independent reference: widening by
// ldexp from the fields, narrowing by searching the sorted table of all
// finite values for the nearest one (ties to the even encoding).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/BFloat16.hpp>
#include <mlframework/core/Float16.hpp>

using namespace mlframework;

namespace {

float ReferenceHalfToFloat(std::uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 31) {
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : (sign < 0 ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity();
  }
  if (exponent == 0) {
    return static_cast<float>(sign * std::ldexp(static_cast<double>(mantissa), -24));
  }
  return static_cast<float>(sign * std::ldexp(1024.0 + mantissa, exponent - 25));
}

float ReferenceBF16ToFloat(std::uint16_t b) {
  const int sign = (b & 0x8000) ? -1 : 1;
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  if (exponent == 255) {
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : (sign < 0 ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity();
  }
  if (exponent == 0) {
    return static_cast<float>(sign * std::ldexp(static_cast<double>(mantissa), -133));
  }
  return static_cast<float>(sign * std::ldexp(128.0 + mantissa, exponent - 134));
}

// Non-negative finite values in increasing order with their encodings.
struct Table {
  std::vector<double> values;
  std::vector<std::uint16_t> codes;
  double overflow_threshold;  // |x| >= this rounds to infinity
};

Table MakeTable(float (*widen)(std::uint16_t), std::uint16_t inf_code) {
  Table table;
  for (std::uint32_t code = 0; code < inf_code; ++code) {
    table.values.push_back(widen(static_cast<std::uint16_t>(code)));
    table.codes.push_back(static_cast<std::uint16_t>(code));
  }
  const double largest = table.values.back();
  const double step = largest - table.values[table.values.size() - 2];
  table.overflow_threshold = largest + step / 2;  // the tie goes to infinity (largest is odd)
  return table;
}

std::uint16_t ReferenceNarrow(const Table& table, float x, std::uint16_t inf_code) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= table.overflow_threshold) {
    return sign | inf_code;
  }
  const auto it = std::lower_bound(table.values.begin(), table.values.end(), ax);
  std::size_t hi = static_cast<std::size_t>(it - table.values.begin());
  if (hi == table.values.size()) {
    return sign | table.codes.back();  // above the largest finite value, below the overflow threshold
  }
  if (hi < table.values.size() && table.values[hi] == ax) {
    return sign | table.codes[hi];
  }
  const std::size_t lo = hi - 1;
  const double below = ax - table.values[lo];
  const double above = table.values[hi] - ax;
  if (below < above) {
    return sign | table.codes[lo];
  }
  if (above < below) {
    return sign | table.codes[hi];
  }
  return sign | ((table.codes[lo] & 1) == 0 ? table.codes[lo] : table.codes[hi]);
}

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float16Conversions)

BOOST_AUTO_TEST_CASE(AllHalfPatternsWidenExactlyAndRoundTrip) {
  for (std::uint32_t code = 0; code <= 0xffff; ++code) {
    const auto bits = static_cast<std::uint16_t>(code);
    const float widened = static_cast<float>(Float16::FromBits(bits));
    BOOST_TEST_REQUIRE(SameFloat(widened, ReferenceHalfToFloat(bits)), "code " << code);
    const Float16 back(widened);
    if (std::isnan(widened)) {
      BOOST_TEST_REQUIRE((back.bits & 0x7c00) == 0x7c00);
      BOOST_TEST_REQUIRE((back.bits & 0x03ff) != 0);
      BOOST_TEST_REQUIRE((back.bits & 0x8000) == (bits & 0x8000));
    } else {
      BOOST_TEST_REQUIRE(back.bits == bits, "code " << code);
    }
  }
}

BOOST_AUTO_TEST_CASE(AllBFloat16PatternsWidenExactlyAndRoundTrip) {
  for (std::uint32_t code = 0; code <= 0xffff; ++code) {
    const auto bits = static_cast<std::uint16_t>(code);
    const float widened = static_cast<float>(BFloat16::FromBits(bits));
    BOOST_TEST_REQUIRE(SameFloat(widened, ReferenceBF16ToFloat(bits)), "code " << code);
    const BFloat16 back(widened);
    if (std::isnan(widened)) {
      BOOST_TEST_REQUIRE((back.bits & 0x7f80) == 0x7f80);
      BOOST_TEST_REQUIRE((back.bits & 0x007f) != 0);
    } else {
      BOOST_TEST_REQUIRE(back.bits == bits, "code " << code);
    }
  }
}

BOOST_AUTO_TEST_CASE(HalfNarrowingMatchesReferenceOnHalfwayAndRandomValues) {
  const Table table = MakeTable(ReferenceHalfToFloat, 0x7c00);
  std::vector<float> inputs = {0.0f,
                               -0.0f,
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               -65520.0f,
                               1e9f,
                               std::ldexp(1.0f, -24),
                               std::ldexp(1.0f, -25),
                               std::ldexp(1.5f, -25),
                               std::ldexp(1.0f, -26),
                               std::ldexp(1.0f, -14),
                               std::ldexp(1023.5f, -24),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max()};
  // Every halfway point between neighbouring finite halves, and its float neighbours.
  for (std::size_t i = 0; i + 1 < table.values.size(); ++i) {
    const auto mid = static_cast<float>((table.values[i] + table.values[i + 1]) / 2);
    inputs.push_back(mid);
    inputs.push_back(std::nextafter(mid, 0.0f));
    inputs.push_back(std::nextafter(mid, 1e30f));
    inputs.push_back(-mid);
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits = any_bits(rng);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    if (!std::isnan(x)) {
      inputs.push_back(x);
    }
  }
  for (const float x : inputs) {
    BOOST_TEST_REQUIRE(Float16(x).bits == ReferenceNarrow(table, x, 0x7c00), "x = " << x);
  }
  BOOST_TEST((Float16(std::numeric_limits<float>::infinity()).bits == 0x7c00));
  BOOST_TEST((Float16(-std::numeric_limits<float>::infinity()).bits == 0xfc00));
  BOOST_TEST(std::isnan(static_cast<float>(Float16(std::numeric_limits<float>::quiet_NaN()))));
  BOOST_TEST((Float16(-0.0f).bits == 0x8000));
}

BOOST_AUTO_TEST_CASE(BFloat16NarrowingMatchesReferenceOnHalfwayAndRandomValues) {
  const Table table = MakeTable(ReferenceBF16ToFloat, 0x7f80);
  std::vector<float> inputs = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::max(),
                               3.3895314e38f,
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min()};
  for (std::size_t i = 0; i + 1 < table.values.size(); i += 7) {
    const auto mid = static_cast<float>((table.values[i] + table.values[i + 1]) / 2);
    inputs.push_back(mid);
    inputs.push_back(std::nextafter(mid, 0.0f));
    inputs.push_back(std::nextafter(mid, 1e38f));
    inputs.push_back(-mid);
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits = any_bits(rng);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    if (!std::isnan(x)) {
      inputs.push_back(x);
    }
  }
  for (const float x : inputs) {
    BOOST_TEST_REQUIRE(BFloat16(x).bits == ReferenceNarrow(table, x, 0x7f80), "x = " << x);
  }
  BOOST_TEST(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  BOOST_TEST((BFloat16(-0.0f).bits == 0x8000));
}

BOOST_AUTO_TEST_SUITE_END()

// FP8 (E4M3FN, E5M2) conversions against an independent reference that needs no data: widening
// by ldexp from the fields, narrowing by searching the sorted table of every finite value for the
// nearest one (ties to the even encoding), with the overflow rules of torch 2.15 (E4M3FN
// saturates to 448, E5M2 overflows to infinity). tests/core/Float8ReferenceTests.cpp checks the
// same functions against torch's own output.
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
#include <mlframework/core/Float8.hpp>

using namespace mlframework;

namespace {

std::uint32_t Bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float FromBits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// One format's fields and its rules, for the reference.
struct Format {
  int mantissa_bits;
  int bias;
  bool has_infinity;  // E5M2: exponent all ones is Inf/NaN; E4M3FN: only S.1111.111 is NaN
  std::uint8_t (*encode)(float);
  float (*decode)(std::uint8_t);
};

const Format kE4M3{3, 7, false, &detail::FloatToFloat8E4M3FNBits, &detail::Float8E4M3FNBitsToFloat};
const Format kE5M2{2, 15, true, &detail::FloatToFloat8E5M2Bits, &detail::Float8E5M2BitsToFloat};

bool IsNaNCode(const Format& f, std::uint8_t code) {
  const unsigned magnitude = code & 0x7fu;
  return f.has_infinity ? magnitude > 0x7cu : magnitude == 0x7fu;
}

bool IsInfCode(const Format& f, std::uint8_t code) { return f.has_infinity && (code & 0x7fu) == 0x7cu; }

// The value of @p code from its fields, in double (NaN and Inf by the format's rules).
double ReferenceDecode(const Format& f, std::uint8_t code) {
  const double sign = (code & 0x80u) != 0 ? -1.0 : 1.0;
  if (IsNaNCode(f, code)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (IsInfCode(f, code)) {
    return sign * std::numeric_limits<double>::infinity();
  }
  const int exponent = (code & 0x7f) >> f.mantissa_bits;
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  if (exponent == 0) {
    return sign * std::ldexp(static_cast<double>(mantissa), 1 - f.bias - f.mantissa_bits);
  }
  return sign * std::ldexp(static_cast<double>((1 << f.mantissa_bits) + mantissa), exponent - f.bias - f.mantissa_bits);
}

// Non-negative finite values in increasing order (codes 0x00 up to the largest finite code).
std::vector<double> FiniteValues(const Format& f) {
  std::vector<double> values;
  for (unsigned code = 0; code < 0x80u; ++code) {
    const double v = ReferenceDecode(f, static_cast<std::uint8_t>(code));
    if (std::isfinite(v)) {
      values.push_back(v);
    }
  }
  return values;
}

// The encoding torch writes for @p x: nearest finite value, ties to the even code; a value that
// would round past the largest finite one saturates (E4M3FN) or becomes infinity (E5M2).
std::uint8_t ReferenceEncode(const Format& f, float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  if (std::isnan(x)) {
    return sign | 0x7fu;
  }
  static const std::vector<double> kE4M3Values = FiniteValues(kE4M3);
  static const std::vector<double> kE5M2Values = FiniteValues(kE5M2);
  const std::vector<double>& values = f.has_infinity ? kE5M2Values : kE4M3Values;
  // The value one step past the largest (480 for E4M3FN, 65536 for E5M2): where rounding goes
  // when the input is closer to it; its "code" is one past the largest finite code.
  const double largest = values.back();
  const double beyond = largest + (largest - values[values.size() - 2]);
  const auto over = [&] { return static_cast<std::uint8_t>(sign | (f.has_infinity ? 0x7cu : 0x7eu)); };
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= beyond) {
    return over();
  }
  const auto it = std::lower_bound(values.begin(), values.end(), ax);
  const auto hi = static_cast<std::size_t>(it - values.begin());
  if (hi < values.size() && values[hi] == ax) {
    return static_cast<std::uint8_t>(sign | hi);
  }
  const double lo_value = values[hi - 1];
  const double hi_value = hi < values.size() ? values[hi] : beyond;
  const double to_lo = ax - lo_value;
  const double to_hi = hi_value - ax;
  std::size_t code = hi - 1;
  if (to_hi < to_lo || (to_hi == to_lo && (hi % 2) == 0)) {
    code = hi;
  }
  if (code == values.size()) {
    return over();
  }
  return static_cast<std::uint8_t>(sign | code);
}

void CheckEncode(const Format& f, float x) {
  const std::uint8_t got = f.encode(x);
  const std::uint8_t expected = ReferenceEncode(f, x);
  if (got != expected) {
    BOOST_ERROR("encode of float bits 0x" << std::hex << Bits(x) << " (" << x << "): got 0x" << unsigned{got}
                                          << ", expected 0x" << unsigned{expected});
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8Conversions)

BOOST_AUTO_TEST_CASE(EveryCodeDecodesExactly) {
  for (const Format* f : {&kE4M3, &kE5M2}) {
    for (unsigned c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const float got = f->decode(code);
      const double expected = ReferenceDecode(*f, code);
      if (std::isnan(expected)) {
        BOOST_TEST(std::isnan(got), "code 0x" << std::hex << c);
        BOOST_TEST(std::signbit(got) == ((c & 0x80u) != 0), "NaN sign of code 0x" << std::hex << c);
      } else {
        BOOST_TEST(static_cast<double>(got) == expected, "code 0x" << std::hex << c);
        BOOST_TEST(std::signbit(got) == ((c & 0x80u) != 0), "sign of code 0x" << std::hex << c);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(EveryCodeRoundTrips) {
  for (const Format* f : {&kE4M3, &kE5M2}) {
    for (unsigned c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const std::uint8_t back = f->encode(f->decode(code));
      if (IsNaNCode(*f, code)) {
        BOOST_TEST(IsNaNCode(*f, back), "NaN code 0x" << std::hex << c);
        BOOST_TEST((back & 0x80u) == (code & 0x80u), "NaN sign of code 0x" << std::hex << c);
      } else {
        BOOST_TEST(unsigned{back} == c, "code 0x" << std::hex << c);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(EveryTieGoesToTheEvenCode) {
  for (const Format* f : {&kE4M3, &kE5M2}) {
    const std::vector<double> values = FiniteValues(*f);
    for (std::size_t i = 0; i + 1 < values.size(); ++i) {
      const auto mid = static_cast<float>((values[i] + values[i + 1]) / 2);  // exact in FP32
      BOOST_TEST(static_cast<double>(mid) == (values[i] + values[i + 1]) / 2);
      const unsigned even = (i % 2 == 0) ? static_cast<unsigned>(i) : static_cast<unsigned>(i + 1);
      BOOST_TEST(unsigned{f->encode(mid)} == even, "tie after code " << i);
      BOOST_TEST(unsigned{f->encode(-mid)} == (even | 0x80u), "negative tie after code " << i);
      // One FP32 ulp either side of the tie decides it.
      BOOST_TEST(unsigned{f->encode(std::nextafter(mid, 0.0f))} == i, "below the tie after code " << i);
      BOOST_TEST(unsigned{f->encode(std::nextafter(mid, 1e30f))} == i + 1, "above the tie after code " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(RandomFloatsRoundToTheNearestValue) {
  std::mt19937 rng(32);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_int_distribution<std::uint32_t> exponent(127 - 20, 127 + 18);
  std::uniform_int_distribution<std::uint32_t> mantissa(0, 0x7fffff);
  for (int i = 0; i < 100000; ++i) {
    const float x = FromBits(any_bits(rng));
    const float near = FromBits((any_bits(rng) & 0x80000000u) | (exponent(rng) << 23) | mantissa(rng));
    for (const Format* f : {&kE4M3, &kE5M2}) {
      CheckEncode(*f, x);
      CheckEncode(*f, near);
    }
  }
}

BOOST_AUTO_TEST_CASE(SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // E4M3FN: no infinity; overflow and infinity saturate (torch 2.15), NaN keeps its sign.
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(448.0f)} == 0x7eu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(464.0f)} == 0x7eu);  // tie: 448 is even
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(std::nextafter(464.0f, inf))} == 0x7eu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(1e30f)} == 0x7eu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(inf)} == 0x7eu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(-inf)} == 0xfeu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(nan)} == 0x7fu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(-nan)} == 0xffu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(-0.0f)} == 0x80u);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(std::ldexp(1.0f, -9))} == 0x01u);   // smallest subnormal
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(std::ldexp(1.0f, -10))} == 0x00u);  // tie: zero is even
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(std::ldexp(1.5f, -10))} == 0x01u);
  BOOST_TEST(unsigned{detail::FloatToFloat8E4M3FNBits(std::numeric_limits<float>::denorm_min())} == 0x00u);
  BOOST_TEST(detail::Float8E4M3FNBitsToFloat(0x7e) == 448.0f);
  BOOST_TEST(std::isnan(detail::Float8E4M3FNBitsToFloat(0x7f)));
  BOOST_TEST(detail::Float8E4M3FNBitsToFloat(0x78) == 256.0f);  // exponent 15 holds finite values
  // E5M2: IEEE-like; the tie at 61440 rounds to the even 65536, which is infinity.
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(57344.0f)} == 0x7bu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(std::nextafter(61440.0f, 0.0f))} == 0x7bu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(61440.0f)} == 0x7cu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(inf)} == 0x7cu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(-inf)} == 0xfcu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(nan)} == 0x7fu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(-nan)} == 0xffu);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(std::ldexp(1.0f, -16))} == 0x01u);
  BOOST_TEST(unsigned{detail::FloatToFloat8E5M2Bits(std::ldexp(1.0f, -17))} == 0x00u);
  BOOST_TEST(std::isinf(detail::Float8E5M2BitsToFloat(0x7c)));
  BOOST_TEST(std::isnan(detail::Float8E5M2BitsToFloat(0x7d)));
  BOOST_TEST(std::isnan(detail::Float8E5M2BitsToFloat(0xfe)));
  BOOST_TEST(detail::Float8E5M2BitsToFloat(0x7b) == 57344.0f);
  // Finiteness on the stored bits.
  int e4m3_finite = 0;
  int e5m2_finite = 0;
  for (unsigned c = 0; c < 256; ++c) {
    e4m3_finite += detail::IsFiniteFloat8E4M3FNBits(static_cast<std::uint8_t>(c)) ? 1 : 0;
    e5m2_finite += detail::IsFiniteFloat8E5M2Bits(static_cast<std::uint8_t>(c)) ? 1 : 0;
    BOOST_TEST(detail::IsFiniteFloat8E4M3FNBits(static_cast<std::uint8_t>(c)) ==
               std::isfinite(detail::Float8E4M3FNBitsToFloat(static_cast<std::uint8_t>(c))));
    BOOST_TEST(detail::IsFiniteFloat8E5M2Bits(static_cast<std::uint8_t>(c)) ==
               std::isfinite(detail::Float8E5M2BitsToFloat(static_cast<std::uint8_t>(c))));
  }
  BOOST_TEST(e4m3_finite == 254);
  BOOST_TEST(e5m2_finite == 248);
}

BOOST_AUTO_TEST_CASE(StructsWrapTheBits) {
  BOOST_TEST(unsigned{Float8E4M3FN(1.0f).bits} == 0x38u);
  BOOST_TEST(static_cast<float>(Float8E4M3FN::FromBits(0x38)) == 1.0f);
  BOOST_TEST(unsigned{Float8E5M2(1.0f).bits} == 0x3cu);
  BOOST_TEST(static_cast<float>(Float8E5M2::FromBits(0x3c)) == 1.0f);
  BOOST_TEST(static_cast<float>(Float8E4M3FN(Float8E4M3FN::kMax)) == 448.0f);
  BOOST_TEST(static_cast<float>(Float8E5M2(Float8E5M2::kMax)) == 57344.0f);
  BOOST_TEST(unsigned{Float8E4M3FN().bits} == 0u);
  static_assert(sizeof(Float8E4M3FN) == 1 && sizeof(Float8E5M2) == 1);
}

// Every FP8 value is exactly a binary16 and a bfloat16 value, so widening through either loses
// nothing, and narrowing FP16 / BF16 to FP8 through float rounds once.
BOOST_AUTO_TEST_CASE(WideningToHalfAndBFloat16IsExact) {
  for (const Format* f : {&kE4M3, &kE5M2}) {
    for (unsigned c = 0; c < 256; ++c) {
      const float v = f->decode(static_cast<std::uint8_t>(c));
      if (std::isnan(v)) {
        BOOST_TEST(std::isnan(static_cast<float>(Float16(v))));
        BOOST_TEST(std::isnan(static_cast<float>(BFloat16(v))));
        continue;
      }
      BOOST_TEST(Bits(static_cast<float>(Float16(v))) == Bits(v), "code 0x" << std::hex << c);
      BOOST_TEST(Bits(static_cast<float>(BFloat16(v))) == Bits(v), "code 0x" << std::hex << c);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

#pragma once
// Shared by the FP8 block wire's bit checks (Float8WireMathTests.cpp on the host,
// Float8WireOnCudaTests.cpp on a GPU): values that reach every branch of the block math, and
// bit comparison that treats every NaN alike.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace mlfw_wire_test {

inline constexpr std::size_t kWireBlock = 256;  // kFloat8WireBlock, checked by the suites

inline float FromBits(std::uint32_t bits) {
  float value = 0.0f;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// @p count values (not a multiple of the block: the last block is short) of random signs: mostly
// normals over 25 decades, with zeros of both signs, subnormals, values near FLT_MAX, and whole
// blocks of zeros, of subnormals, of values around the smallest normal, with one +Inf, with
// one NaN, and with FLT_MAX; so every block scale branch (zero block, subnormal amax, the cap
// at 2^126 and 2^-126, the 448 test, non-finite) is taken.
inline std::vector<float> WireValues(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> decade(-12, 12);
  std::uniform_int_distribution<std::uint32_t> subnormal(1u, 0x007fffffu);
  std::uniform_int_distribution<std::uint32_t> mantissa(0u, 0x007fffffu);
  std::uniform_int_distribution<int> kind(0, 15);
  std::vector<float> values(count);
  for (float& v : values) {
    const int k = kind(rng);
    const float sign = (rng() & 1u) != 0u ? -1.0f : 1.0f;
    if (k == 0) {
      v = sign * 0.0f;
    } else if (k == 1) {
      v = sign * FromBits(subnormal(rng));
    } else if (k == 2) {
      v = sign * FromBits((0xfeu << 23) | mantissa(rng));  // [2^127, FLT_MAX]
    } else {
      v = normal(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
    }
  }
  const auto fill_block = [&](std::size_t block, auto&& value_of) {
    for (std::size_t i = block * kWireBlock; i < std::min(count, (block + 1) * kWireBlock); ++i)
      values[i] = value_of(i);
  };
  fill_block(2, [](std::size_t) { return 0.0f; });
  fill_block(3, [&](std::size_t) { return ((rng() & 1u) != 0u ? -1.0f : 1.0f) * FromBits(subnormal(rng)); });
  fill_block(4,
             [&](std::size_t) { return FromBits(0x00800000u | mantissa(rng)) * ((rng() & 1u) != 0u ? -1.0f : 1.0f); });
  values[(5 * kWireBlock) + 7] = std::numeric_limits<float>::infinity();
  values[(6 * kWireBlock) + 100] = -std::numeric_limits<float>::quiet_NaN();
  values[(7 * kWireBlock) + 3] = -std::numeric_limits<float>::max();
  return values;
}

// The bits of @p values, every NaN as the one quiet NaN: a NaN's payload is the hardware's (x86
// keeps an operand's through a multiply, NVIDIA GPUs write 0x7FFFFFFF), not the wire's contract.
inline std::vector<std::uint32_t> WireBits(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    bits[i] = std::isnan(values[i]) ? 0x7fc00000u : 0u;
    if (!std::isnan(values[i])) std::memcpy(&bits[i], &values[i], sizeof(float));
  }
  return bits;
}

}  // namespace mlfw_wire_test

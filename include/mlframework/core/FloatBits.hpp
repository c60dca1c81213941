#pragma once
/// @file FloatBits.hpp
/// @brief Bit-level float <-> binary16 / bfloat16 conversions, shared by host and device code.
///
/// Written with integer operations only so that the CPU backend, the CUDA
/// kernels and the tests all round the same way, bit for bit.

#include <cstdint>
#include <cstring>

#include <mlframework/core/HostDevice.hpp>

namespace mlframework::detail {

/// The bits of a float.
MLFW_HOST_DEVICE inline std::uint32_t FloatAsBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

/// The float with these bits.
MLFW_HOST_DEVICE inline float BitsAsFloat(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

/// True when @p value is neither infinite nor NaN (exponent not all ones).
MLFW_HOST_DEVICE inline bool IsFiniteFloat(float value) { return (FloatAsBits(value) & 0x7f800000u) != 0x7f800000u; }

/// Rounds a float to binary16, nearest-even; overflow to infinity; NaN quieted.
MLFW_HOST_DEVICE inline std::uint16_t FloatToHalfBits(float value) {
  const std::uint32_t x = FloatAsBits(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // infinity or NaN
    const std::uint32_t nan_payload = ax > 0x7f800000u ? (0x0200u | ((ax >> 13) & 0x03ffu)) : 0u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | nan_payload);
  }
  if (ax >= 0x477ff000u) {  // >= 65520 rounds past the largest half (65504)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (ax < 0x38800000u) {     // below 2^-14: half subnormal or zero
    if (ax <= 0x33000000u) {  // <= 2^-25: rounds to zero (2^-25 is a tie, even is zero)
      return sign;
    }
    const std::uint32_t exponent = ax >> 23;
    const std::uint32_t mantissa = (ax & 0x007fffffu) | 0x00800000u;
    const std::uint32_t shift = 126u - exponent;  // 14..24
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (result & 1u) != 0u)) {
      ++result;  // may carry into the smallest normal, which is the right encoding
    }
    return static_cast<std::uint16_t>(sign | result);
  }
  std::uint32_t result = (ax >> 13) - (112u << 10);  // rebias exponent 127 -> 15
  const std::uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u) != 0u)) {
    ++result;
  }
  return static_cast<std::uint16_t>(sign | result);
}

/// Widens binary16 bits to float exactly.
MLFW_HOST_DEVICE inline float HalfBitsToFloat(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x03ffu;
  if (exponent == 0x1fu) {
    return BitsAsFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0u) {
    if (mantissa == 0u) {
      return BitsAsFloat(sign);
    }
    exponent = 1u;  // subnormal: normalize
    while ((mantissa & 0x0400u) == 0u) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x03ffu;
  }
  return BitsAsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// Rounds a float to bfloat16, nearest-even; overflow to infinity; NaN quieted.
MLFW_HOST_DEVICE inline std::uint16_t FloatToBFloat16Bits(float value) {
  const std::uint32_t x = FloatAsBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

/// Widens bfloat16 bits to float exactly.
MLFW_HOST_DEVICE inline float BFloat16BitsToFloat(std::uint16_t bits) {
  return BitsAsFloat(static_cast<std::uint32_t>(bits) << 16);
}

/// True when binary16 bits @p half encode a finite value (exponent not all ones).
MLFW_HOST_DEVICE inline bool IsFiniteHalfBits(std::uint16_t half) { return (half & 0x7c00u) != 0x7c00u; }

/// True when bfloat16 bits @p bits encode a finite value (exponent not all ones).
MLFW_HOST_DEVICE inline bool IsFiniteBFloat16Bits(std::uint16_t bits) { return (bits & 0x7f80u) != 0x7f80u; }

}  // namespace mlframework::detail

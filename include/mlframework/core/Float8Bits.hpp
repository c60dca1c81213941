#pragma once
/// @file Float8Bits.hpp
/// @brief Bit-level float <-> FP8 (OCP E4M3FN / E5M2) conversions, shared by host and device code.
///
/// Integer operations only, like FloatBits.hpp, so the CPU backend, the CUDA kernels and the
/// tests encode every float to the same byte. The rules are those of PyTorch's
/// `.to(torch.float8_e4m3fn)` / `.to(torch.float8_e5m2)` (torch/headeronly/util/Float8_*.h,
/// torch 2.15; tests/data holds its output):
/// - round to nearest, ties to even, subnormals produced and read exactly;
/// - E4M3FN has no infinity: finite magnitudes from 464 on (464 is the tie between 448 and the
///   NaN slot, 480) and infinities saturate to +-448. PyTorch made this change in 2026
///   (pytorch#178817, "Properly saturate E4M3 on finite-overflow on CPU/C++ conversion code",
///   matching its CUDA casts); earlier 2.x releases gave NaN there. NaN gives NaN, S.1111.111;
/// - E5M2 overflows to infinity from 61440 (the tie between 57344 and 65536 rounds to the even
///   65536, infinity) on, as binary16 does; NaN gives S.11111.11;
/// - the sign is kept everywhere, NaN included.
///
/// Why not cuda_fp8.h's `__nv_cvt_float_to_fp8`: it writes every NaN as the positive NaN (torch
/// keeps the sign), so sharing this code keeps CPU, CUDA and torch bit-identical.

#include <cstdint>

#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework::detail {

/// Rounds the magnitude bits @p ax of a finite float to an FP8 magnitude with @p kMantissa
/// mantissa bits and exponent bias @p kBias, nearest-even, subnormals kept. The caller handles
/// overflow (ax at or past the format's overflow threshold) and NaN before.
template <unsigned kMantissa, unsigned kBias>
MLFW_HOST_DEVICE inline std::uint8_t RoundFloatToFloat8Magnitude(std::uint32_t ax) {
  constexpr std::uint32_t kMinNormal = (127u - kBias + 1u) << 23;          // 2^(1 - bias)
  constexpr std::uint32_t kHalfMinSub = (127u - kBias - kMantissa) << 23;  // half the smallest subnormal
  std::uint32_t result = 0;
  std::uint32_t rest = 0;
  std::uint32_t halfway = 0;
  if (ax < kMinNormal) {
    if (ax <= kHalfMinSub) {  // below or at half the smallest subnormal: zero (the tie goes to even, zero)
      return 0;
    }
    const std::uint32_t exponent = ax >> 23;
    const std::uint32_t mantissa = (ax & 0x007fffffu) | 0x00800000u;
    const std::uint32_t shift = 151u - kBias - kMantissa - exponent;  // value / smallest subnormal
    result = mantissa >> shift;
    rest = mantissa & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  } else {
    constexpr std::uint32_t kShift = 23u - kMantissa;
    result = (ax >> kShift) - ((127u - kBias) << kMantissa);  // rebias the exponent
    rest = ax & ((1u << kShift) - 1u);
    halfway = 1u << (kShift - 1u);
  }
  if (rest > halfway || (rest == halfway && (result & 1u) != 0u)) {
    ++result;  // may carry into the next exponent, which is the right encoding
  }
  return static_cast<std::uint8_t>(result);
}

/// Rounds a float to E4M3FN bits (see the file comment: overflow and infinity saturate to
/// +-448, NaN stays NaN).
MLFW_HOST_DEVICE inline std::uint8_t FloatToFloat8E4M3FNBits(float value) {
  const std::uint32_t x = FloatAsBits(value);
  const auto sign = static_cast<std::uint8_t>((x >> 24) & 0x80u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    return static_cast<std::uint8_t>(sign | 0x7fu);
  }
  if (ax >= 0x43e80000u) {  // 464 and up (464 rounds to 448 as the even tie), infinity
    return static_cast<std::uint8_t>(sign | 0x7eu);
  }
  return static_cast<std::uint8_t>(sign | RoundFloatToFloat8Magnitude<3, 7>(ax));
}

/// Rounds a float to E5M2 bits (see the file comment: overflow gives infinity).
MLFW_HOST_DEVICE inline std::uint8_t FloatToFloat8E5M2Bits(float value) {
  const std::uint32_t x = FloatAsBits(value);
  const auto sign = static_cast<std::uint8_t>((x >> 24) & 0x80u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    return static_cast<std::uint8_t>(sign | 0x7fu);
  }
  if (ax >= 0x47700000u) {  // 61440 and up (the tie rounds to the even 65536) and infinity
    return static_cast<std::uint8_t>(sign | 0x7cu);
  }
  return static_cast<std::uint8_t>(sign | RoundFloatToFloat8Magnitude<2, 15>(ax));
}

/// Rounds a float to E4M3FN bits, saturating (Float8Cast.hpp's scaled casts, Transformer
/// Engine's and CUDA's `__NV_SATFINITE`): the plain cast already saturates finite overflow and
/// infinities to +-448, so this is FloatToFloat8E4M3FNBits(); NaN stays NaN.
MLFW_HOST_DEVICE inline std::uint8_t FloatToFloat8E4M3FNSatBits(float value) { return FloatToFloat8E4M3FNBits(value); }

/// Rounds a float to E5M2 bits, saturating: what would round past 57344 (from 61440 on) and
/// infinities give +-57344 instead of infinity; NaN stays NaN (S.11111.11), otherwise the bits
/// of FloatToFloat8E5M2Bits().
MLFW_HOST_DEVICE inline std::uint8_t FloatToFloat8E5M2SatBits(float value) {
  const std::uint32_t x = FloatAsBits(value);
  const auto sign = static_cast<std::uint8_t>((x >> 24) & 0x80u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    return static_cast<std::uint8_t>(sign | 0x7fu);
  }
  if (ax >= 0x47700000u) {
    return static_cast<std::uint8_t>(sign | 0x7bu);
  }
  return static_cast<std::uint8_t>(sign | RoundFloatToFloat8Magnitude<2, 15>(ax));
}

/// The FP32 bits of the FP8 value @p bits with @p kMantissa mantissa bits and exponent bias
/// @p kBias, exact; constexpr, so the CPU backend builds its decode tables at compile time.
/// @p kIeee: the all-ones exponent holds infinities and NaNs (E5M2); otherwise only S.1111.111
/// is NaN (E4M3FN). NaNs come out quiet with their payload and sign, as torch's decoders write
/// them: E4M3FN's NaN as S.11111111.1110..., E5M2's as the quieted binary16 NaN.
template <unsigned kMantissa, unsigned kBias, bool kIeee>
MLFW_HOST_DEVICE constexpr std::uint32_t Float8ToFloatBits(std::uint8_t bits) {
  constexpr unsigned kExponentBits = 7u - kMantissa;
  constexpr std::uint32_t kExponentMax = (1u << kExponentBits) - 1u;
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x80u) << 24;
  const std::uint32_t exponent = (bits >> kMantissa) & kExponentMax;
  std::uint32_t mantissa = bits & ((1u << kMantissa) - 1u);
  if constexpr (kIeee) {
    if (exponent == kExponentMax) {
      return sign | 0x7f800000u | (mantissa != 0u ? 0x00400000u | (mantissa << (23u - kMantissa)) : 0u);
    }
  } else {
    if ((bits & 0x7fu) == 0x7fu) {
      return sign | 0x7ff00000u;
    }
  }
  if (exponent == 0u) {
    if (mantissa == 0u) {
      return sign;
    }
    // Subnormal: mantissa * 2^(1 - bias - kMantissa); normalise so the leading one becomes the
    // implicit bit.
    std::uint32_t float_exponent = 127u + 1u - kBias;
    while ((mantissa & (1u << kMantissa)) == 0u) {
      mantissa <<= 1;
      --float_exponent;
    }
    return sign | (float_exponent << 23) | ((mantissa & ((1u << kMantissa) - 1u)) << (23u - kMantissa));
  }
  return sign | ((exponent + 127u - kBias) << 23) | (mantissa << (23u - kMantissa));
}

/// Widens E4M3FN bits to float exactly (NaN: S.11111111.1110..., as torch writes it).
MLFW_HOST_DEVICE inline float Float8E4M3FNBitsToFloat(std::uint8_t bits) {
  return BitsAsFloat(Float8ToFloatBits<3, 7, false>(bits));
}

/// Widens E5M2 bits to float exactly: E5M2 is the upper byte of a binary16; a NaN keeps its
/// payload and comes out quiet, as torch's decoder writes it.
MLFW_HOST_DEVICE inline float Float8E5M2BitsToFloat(std::uint8_t bits) {
  return BitsAsFloat(Float8ToFloatBits<2, 15, true>(bits));
}

/// True when E4M3FN bits encode a finite value (everything but S.1111.111).
MLFW_HOST_DEVICE inline bool IsFiniteFloat8E4M3FNBits(std::uint8_t bits) { return (bits & 0x7fu) != 0x7fu; }

/// True when E5M2 bits encode a finite value (exponent not all ones).
MLFW_HOST_DEVICE inline bool IsFiniteFloat8E5M2Bits(std::uint8_t bits) { return (bits & 0x7cu) != 0x7cu; }

}  // namespace mlframework::detail

#pragma once
/// @file Float8.hpp
/// @brief The OCP FP8 formats E4M3FN and E5M2 as bit structs, with host/device conversions that
/// match PyTorch's float8_e4m3fn and float8_e5m2 bit for bit.

#include <cstdint>

#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework {

/// FP8 E4M3FN (4 exponent bits, bias 7, 3 mantissa bits; PyTorch's float8_e4m3fn) stored as
/// its 8 bits.
///
/// Conversion from float rounds to nearest, ties to even; no infinity exists, so magnitudes
/// from 464 on and infinities saturate to +-448, as torch's `.to(torch.float8_e4m3fn)` does
/// (torch 2.15; earlier 2.x releases gave NaN, see core/Float8Bits.hpp); NaN stays NaN
/// (S.1111.111). Subnormals (multiples of 2^-9) are produced and read exactly. Widening to
/// float is exact.
struct Float8E4M3FN {
  std::uint8_t bits = 0;  ///< The raw encoding.

  /// Largest finite value.
  static constexpr float kMax = 448.0f;

  /// Zero.
  constexpr Float8E4M3FN() = default;
  /// Rounds @p value to the nearest E4M3FN value (ties to even; out of range saturates).
  MLFW_HOST_DEVICE explicit Float8E4M3FN(float value) : bits(detail::FloatToFloat8E4M3FNBits(value)) {}
  /// Builds a value from its raw encoding.
  MLFW_HOST_DEVICE static constexpr Float8E4M3FN FromBits(std::uint8_t raw) {
    Float8E4M3FN f;
    f.bits = raw;
    return f;
  }
  /// Exact widening to float.
  MLFW_HOST_DEVICE explicit operator float() const { return detail::Float8E4M3FNBitsToFloat(bits); }
};

/// FP8 E5M2 (5 exponent bits, bias 15, 2 mantissa bits; PyTorch's float8_e5m2) stored as its
/// 8 bits: the upper byte of a binary16, with infinities and NaNs.
///
/// Conversion from float rounds to nearest, ties to even; magnitudes from 61440 on overflow to
/// infinity, as torch's `.to(torch.float8_e5m2)` does; NaN stays NaN (S.11111.11). Subnormals
/// (multiples of 2^-16) are produced and read exactly. Widening to float is exact.
struct Float8E5M2 {
  std::uint8_t bits = 0;  ///< The raw encoding.

  /// Largest finite value.
  static constexpr float kMax = 57344.0f;

  /// Zero.
  constexpr Float8E5M2() = default;
  /// Rounds @p value to the nearest E5M2 value (ties to even; overflow gives infinity).
  MLFW_HOST_DEVICE explicit Float8E5M2(float value) : bits(detail::FloatToFloat8E5M2Bits(value)) {}
  /// Builds a value from its raw encoding.
  MLFW_HOST_DEVICE static constexpr Float8E5M2 FromBits(std::uint8_t raw) {
    Float8E5M2 f;
    f.bits = raw;
    return f;
  }
  /// Exact widening to float.
  MLFW_HOST_DEVICE explicit operator float() const { return detail::Float8E5M2BitsToFloat(bits); }
};

}  // namespace mlframework

#pragma once
/// @file BFloat16.hpp
/// @brief bfloat16 as a bit struct, with exact host/device conversions.

#include <cstdint>

#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework {

/// bfloat16 (8 exponent bits, 7 mantissa bits) stored as its 16 bits.
///
/// Conversion from float rounds to nearest, ties to even; overflow goes to
/// infinity; NaN stays NaN (quieted). Widening to float is exact.
struct BFloat16 {
  std::uint16_t bits = 0;  ///< The raw bfloat16 encoding (upper half of a float).

  /// Zero.
  constexpr BFloat16() = default;
  /// Rounds @p value to the nearest bfloat16 (ties to even).
  MLFW_HOST_DEVICE explicit BFloat16(float value) : bits(detail::FloatToBFloat16Bits(value)) {}
  /// Builds a value from its raw encoding.
  MLFW_HOST_DEVICE static constexpr BFloat16 FromBits(std::uint16_t raw) {
    BFloat16 b;
    b.bits = raw;
    return b;
  }
  /// Exact widening to float.
  MLFW_HOST_DEVICE explicit operator float() const { return detail::BFloat16BitsToFloat(bits); }
};

}  // namespace mlframework

#pragma once
/// @file Float16.hpp
/// @brief IEEE 754 binary16 as a bit struct, with exact host/device conversions.

#include <cstdint>

#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework {

/// IEEE 754 half precision (binary16) value stored as its 16 bits.
///
/// Conversion from float rounds to nearest, ties to even; values at or above
/// 65520 in magnitude become infinity; NaN stays NaN (quieted); subnormals are
/// produced and read exactly. Widening to float is exact.
struct Float16 {
  std::uint16_t bits = 0;  ///< The raw binary16 encoding.

  /// Zero.
  constexpr Float16() = default;
  /// Rounds @p value to the nearest binary16 (ties to even).
  MLFW_HOST_DEVICE explicit Float16(float value) : bits(detail::FloatToHalfBits(value)) {}
  /// Builds a value from its raw encoding.
  MLFW_HOST_DEVICE static constexpr Float16 FromBits(std::uint16_t raw) {
    Float16 h;
    h.bits = raw;
    return h;
  }
  /// Exact widening to float.
  MLFW_HOST_DEVICE explicit operator float() const { return detail::HalfBitsToFloat(bits); }
};

}  // namespace mlframework

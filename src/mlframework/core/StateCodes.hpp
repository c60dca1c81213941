#pragma once
// Private: the element codes of the optimizer state and master formats (StateFormat, MasterFormat
// in core/OptimizerStep.hpp), shared by the CPU backend's fused steps and the CUDA kernels so that
// both decode and encode bit for bit alike. Integer and single IEEE operations only (no fused
// multiply-add, no reciprocal): every compiler and the GPU round them the same way.

#include <cstddef>
#include <cstdint>

#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/core/Philox.hpp>

namespace mlframework::detail {

/// The largest code magnitude of a block-scaled format: the scale is absmax / this.
MLFW_HOST_DEVICE inline float BlockCodeMax(StateFormat format) {
  return format == StateFormat::Int8Block ? 127.0f : format == StateFormat::UInt8Block ? 255.0f : 448.0f;
}

/// Rounds @p q, already within +-2^22, to the nearest integer, ties to even (the magic-number sum:
/// two IEEE additions, which no compiler may fold without fast-math).
MLFW_HOST_DEVICE inline float RoundHalfEven(float q) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (q + kMagic) - kMagic;
}

/// The linear code of @p value under @p scale (Int8Block: -127..127 as two's complement bytes,
/// UInt8Block: 0..255); a NaN quotient (zero or non-finite scale) gives code 0. @p keep_positive:
/// a positive value never gets code 0. Selects only, no branch (the CPU loops vectorise).
MLFW_HOST_DEVICE inline std::uint8_t LinearCode(float value, float scale, float code_max, bool keep_positive) {
  const float quotient = value / scale;
  const float low = code_max == 127.0f ? -127.0f : 0.0f;
  float q = quotient == quotient ? quotient : 0.0f;
  q = q < low ? low : q;
  q = q > code_max ? code_max : q;
  float r = RoundHalfEven(q);
  const bool bump = keep_positive & (value > 0.0f) & (r == 0.0f);
  r = bump ? 1.0f : r;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(r));
}

/// The factor that maps a Float8E4M3Block block of scale @p scale onto the codes: 1 / scale, or 0
/// when that overflows: a zero scale (an all-zero block) or a subnormal one below 2^-128 (every
/// value of the block under 448 x 2^-128), whose values then encode as zero (a kept-positive one
/// as the smallest code) instead of 0 x inf = NaN. A NaN scale stays NaN (a NaN block).
MLFW_HOST_DEVICE inline float Float8CodeFactor(float scale) {
  constexpr float kFloatMax = 3.40282347e38f;
  const float factor = 1.0f / scale;
  return factor > kFloatMax ? 0.0f : factor;
}

/// The FP8 E4M3FN code of @p value * Float8CodeFactor(@p scale) (saturating); @p keep_positive: a
/// positive value that would round to zero gets the smallest subnormal.
MLFW_HOST_DEVICE inline std::uint8_t Float8Code(float value, float scale, bool keep_positive) {
  const std::uint8_t code = FloatToFloat8E4M3FNBits(value * Float8CodeFactor(scale));
  return keep_positive && value > 0.0f && code == 0 ? std::uint8_t{1} : code;
}

/// Rounds @p value to BF16 (round to nearest even); @p keep_positive: never a positive value to 0.
MLFW_HOST_DEVICE inline std::uint16_t BFloat16StateCode(float value, bool keep_positive) {
  const std::uint16_t code = FloatToBFloat16Bits(value);
  return keep_positive && value > 0.0f && code == 0 ? std::uint16_t{1} : code;
}

/// Rounds @p value to FP16 (round to nearest even); @p keep_positive: never a positive value to 0.
MLFW_HOST_DEVICE inline std::uint16_t Float16StateCode(float value, bool keep_positive) {
  const std::uint16_t code = FloatToHalfBits(value);
  return keep_positive && value > 0.0f && code == 0 ? std::uint16_t{1} : code;
}

/// The value of code @p code of a block-scaled format under @p scale.
MLFW_HOST_DEVICE inline float DecodeBlockCode(StateFormat format, std::uint8_t code, float scale) {
  if (format == StateFormat::Int8Block) {
    return static_cast<float>(static_cast<std::int8_t>(code)) * scale;
  }
  if (format == StateFormat::UInt8Block) {
    return static_cast<float>(code) * scale;
  }
  return Float8E4M3FNBitsToFloat(code) * scale;
}

/// The FP32 master of a BF16 parameter @p param and its remainder @p remainder (BFloat16Remainder).
MLFW_HOST_DEVICE inline float MasterFromRemainder(std::uint16_t param, std::uint16_t remainder) {
  // The high half was rounded up when the remainder's top bit is set: undo it (mod 2^16).
  const std::uint32_t high = (remainder & 0x8000u) != 0 ? static_cast<std::uint16_t>(param - 1u) : param;
  return BitsAsFloat((high << 16) | remainder);
}

/// Splits the FP32 master @p master into its BF16 parameter (*param) and remainder (*remainder).
MLFW_HOST_DEVICE inline void SplitMaster(float master, std::uint16_t* param, std::uint16_t* remainder) {
  const std::uint32_t bits = FloatAsBits(master);
  const auto low = static_cast<std::uint16_t>(bits & 0xffffu);
  const auto high = static_cast<std::uint16_t>(bits >> 16);
  *remainder = low;
  *param = (low & 0x8000u) != 0 ? static_cast<std::uint16_t>(high + 1u) : high;
}

}  // namespace mlframework::detail

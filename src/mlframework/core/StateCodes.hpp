#pragma once
// Private: the element codes of the optimizer state and master formats (StateFormat, MasterFormat
// in core/OptimizerStep.hpp), shared by the CPU backend's fused steps and the CUDA kernels so that
// both decode and encode bit for bit alike. Integer and single IEEE operations only (no fused
// multiply-add, no approximate reciprocal; the products and quotients spelled with
// RoundedMath.hpp, so nvcc fuses none into a neighbouring addition): every compiler and the GPU
// round them the same way.

#include <cstddef>
#include <cstdint>

#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/core/Philox.hpp>

#include "mlframework/core/RoundedMath.hpp"

namespace mlframework::detail {

/// The bits every path stores for a NaN in a block-scaled state: the quiet NaN of each type,
/// positive, without payload. Arithmetic on a NaN does not give one set of bits: the CPU keeps the
/// sign and payload of one operand (which one depends on the operand order the compiler chose,
/// and x86 makes inf * 0 the negative NaN), the GPU gives 0x7fffffff. So a block's NaN scale and
/// NaN codes are selected, never computed, and the CPU, the CUDA kernels and the checkpoint
/// conversion write the same bytes.
/// The scale of a block holding a NaN (each of its elements decodes to NaN).
MLFW_HOST_DEVICE inline float BlockNaNScale() { return BitsAsFloat(0x7fc00000u); }
/// The FP16 code of a NaN in a Float16 block.
inline constexpr std::uint16_t kHalfNaNCode = 0x7e00u;
/// The E4M3FN code of a NaN in a Float8E4M3Block block.
inline constexpr std::uint8_t kFloat8NaNCode = 0x7fu;

/// @p code, or kFloat8NaNCode when it is an E4M3FN NaN (S.1111.111, either sign).
MLFW_HOST_DEVICE inline std::uint8_t CanonicalFloat8Code(std::uint8_t code) {
  return (code & 0x7fu) == 0x7fu ? kFloat8NaNCode : code;
}

/// @p code, or kHalfNaNCode when it is an FP16 NaN (any sign and payload).
MLFW_HOST_DEVICE inline std::uint16_t CanonicalHalfCode(std::uint16_t code) {
  return (code & 0x7fffu) > 0x7c00u ? kHalfNaNCode : code;
}

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

/// The linear code of @p value under @p scale by division (Int8Block: -127..127 as two's
/// complement bytes, UInt8Block: 0..255), for a block whose scale has no normal reciprocal
/// (LinearBlockCode()); a NaN quotient (zero or non-finite scale) gives code 0. @p keep_positive:
/// a positive value never gets code 0. Selects only, no branch (the CPU loops vectorise).
MLFW_HOST_DEVICE inline std::uint8_t LinearCode(float value, float scale, float code_max, bool keep_positive) {
  const float quotient = DivRn(value, scale);
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
  const float factor = scale == 0.0f ? 0.0f : DivRn(1.0f, scale);
  return factor > kFloatMax ? 0.0f : factor;
}

/// The FP8 E4M3FN code of @p value * @p factor, the block's Float8CodeFactor() (saturating; a NaN
/// product, from a NaN block or an infinity times the factor 0 of an infinite scale, as
/// kFloat8NaNCode); @p keep_positive: a positive value that would round to zero gets the smallest
/// subnormal.
MLFW_HOST_DEVICE inline std::uint8_t Float8CodeOfFactor(float value, float factor, bool keep_positive) {
  const std::uint8_t code = CanonicalFloat8Code(FloatToFloat8E4M3FNBits(MulRn(value, factor)));
  return keep_positive && value > 0.0f && code == 0 ? std::uint8_t{1} : code;
}

/// The FP8 E4M3FN code of @p value in a Float8E4M3Block block of scale @p scale.
MLFW_HOST_DEVICE inline std::uint8_t Float8Code(float value, float scale, bool keep_positive) {
  return Float8CodeOfFactor(value, Float8CodeFactor(scale), keep_positive);
}

/// Whether a linear block of scale @p scale encodes by its reciprocal (LinearBlockCode()): the
/// rounded reciprocal is a normal FP32 value. Every block whose largest magnitude is finite and at
/// least code_max * 2^-126 has such a scale.
MLFW_HOST_DEVICE inline bool LinearReciprocalEncodes(float scale) { return scale >= 0x1p-126f && scale <= 0x1p126f; }

/// The linear code of @p value in a block of scale @p scale (BlockScale() of the block's largest
/// magnitude absmax, so |value| <= absmax), @p reciprocal = DivRn(1, scale) (BlockCodeFactor()):
/// the product value * reciprocal rounded to the nearest integer, ties to even, as PyTorch's
/// quantize_per_tensor takes codes (`round(input * (1.0 / scale))`); LinearCode()'s division for a
/// scale outside [2^-126, 2^126] (zero, subnormal, infinite or NaN: its reciprocal inexact or out
/// of range). The product lies within 2^-15 of value / scale, so a code differs from LinearCode()'s
/// only where value / scale lies that near a half-integer (by one), and every code lies within
/// 1/2 + 2^-15 of value / scale. Every value of a block with a normal reciprocal is finite, and
/// no product exceeds code_max by enough to round past it (at most code_max * 2^-22 over: the
/// scale, its reciprocal and the product each rounded once), so only the lower bound needs a clamp
/// (a negative second moment goes to code 0). The CPU backend's vector loops take the same
/// products (OptimizerElements.hpp, EncodeLinearBlock()).
MLFW_HOST_DEVICE inline std::uint8_t LinearBlockCode(float value, float scale, float reciprocal, float code_max,
                                                     bool keep_positive) {
  if (!LinearReciprocalEncodes(scale)) {
    return LinearCode(value, scale, code_max, keep_positive);
  }
  const float low = code_max == 127.0f ? -127.0f : 0.0f;
  float q = MulRn(value, reciprocal);
  q = q < low ? low : q;
  const float r = RoundHalfEven(q);
  const bool bump = keep_positive & (value > 0.0f) & (r == 0.0f);
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(bump ? 1.0f : r));
}

/// Rounds @p value to BF16 (round to nearest even); @p keep_positive: never a positive value to 0.
MLFW_HOST_DEVICE inline std::uint16_t BFloat16StateCode(float value, bool keep_positive) {
  const std::uint16_t code = FloatToBFloat16Bits(value);
  return keep_positive && value > 0.0f && code == 0 ? std::uint16_t{1} : code;
}

/// The scale of a Float16 block whose largest magnitude is @p absmax: the power of two 2^k that
/// puts absmax / 2^k in FP16's top binade, [2^15, 65504] (one binade lower, [32752, 2^15), when
/// absmax's significand is at least 2 - 2^-11, which FP16 would round up to 2^16, past its largest
/// finite value), so value / scale and code * scale are exact and the block's values keep FP16's
/// 11 bits down to absmax * 2^-29 (subnormal codes: down to absmax * 2^-40). At least 2^-126, so
/// that 1 / scale is an FP32 value (an all-zero block, or one whose values all lie below 2^-111,
/// gets 2^-126); an infinite block 2^113 (its infinities encode as FP16 infinities); a NaN block
/// BlockNaNScale().
MLFW_HOST_DEVICE inline float Float16BlockScale(float absmax) {
  const std::uint32_t bits = FloatAsBits(absmax) & 0x7fffffffu;
  const std::uint32_t rounds_up = (bits & 0x7fffffu) >= 0x7ff000u ? 1u : 0u;
  const std::uint32_t biased = (bits >> 23) + rounds_up;  // the scale's biased exponent plus 15
  const std::uint32_t exponent = biased > 16u ? biased - 15u : 1u;
  return bits > 0x7f800000u ? BlockNaNScale() : BitsAsFloat(exponent << 23);
}

/// 1 / @p scale for a Float16BlockScale() (a power of two from 2^-126 to 2^113), exact, from its
/// exponent bits (integer operations: no division per element on the GPU); NaN for a NaN scale.
MLFW_HOST_DEVICE inline float Float16CodeFactor(float scale) {
  const std::uint32_t bits = FloatAsBits(scale);
  return bits > 0x7f800000u ? scale : BitsAsFloat((254u - (bits >> 23)) << 23);
}

/// The FP16 code of @p value in a Float16 block of scale @p scale (Float16BlockScale()): the FP16
/// rounding (nearest even) of value * Float16CodeFactor(scale), the product exact unless it lies
/// below FP32's normal range (far below FP16's smallest code); a NaN scale gives kHalfNaNCode.
/// @p keep_positive: a positive value never gets code 0.
MLFW_HOST_DEVICE inline std::uint16_t Float16BlockCode(float value, float scale, bool keep_positive) {
  const std::uint16_t code = CanonicalHalfCode(FloatToHalfBits(MulRn(value, Float16CodeFactor(scale))));
  return keep_positive && value > 0.0f && code == 0 ? std::uint16_t{1} : code;
}

/// The value of code @p code of a block-scaled format under @p scale.
MLFW_HOST_DEVICE inline float DecodeBlockCode(StateFormat format, std::uint8_t code, float scale) {
  if (format == StateFormat::Int8Block) {
    return MulRn(static_cast<float>(static_cast<std::int8_t>(code)), scale);
  }
  if (format == StateFormat::UInt8Block) {
    return MulRn(static_cast<float>(code), scale);
  }
  return MulRn(Float8E4M3FNBitsToFloat(code), scale);
}

/// The bits of |@p value|: their integer maximum over a block is the bits of the block's largest
/// magnitude, NaN when one value is NaN (every NaN's bits lie above infinity's, which lie above
/// every finite value's). Max is exact and order-free: any reduction order gives the same bits.
MLFW_HOST_DEVICE inline std::uint32_t MagnitudeBits(float value) { return FloatAsBits(value) & 0x7fffffffu; }

/// The FP32 scale of a block of @p format whose largest magnitude is @p absmax (BlockNaNScale()
/// when that is NaN).
MLFW_HOST_DEVICE inline float BlockScale(StateFormat format, float absmax) {
  if (format == StateFormat::Float16) {
    return Float16BlockScale(absmax);
  }
  return MagnitudeBits(absmax) > 0x7f800000u ? BlockNaNScale() : DivRn(absmax, BlockCodeMax(format));
}

/// The factor element codes of a block of the block-scaled @p format under @p scale are taken
/// with (EncodeBlockElement()): Float8CodeFactor() for Float8E4M3Block, the rounded reciprocal of
/// the scale for the linear formats (0 where LinearBlockCode() divides instead), none (0) for
/// Float16, whose factor is a power of two read off the scale's bits. Taken once per block: each
/// is an IEEE division, a long instruction sequence on the GPU.
MLFW_HOST_DEVICE inline float BlockCodeFactor(StateFormat format, float scale) {
  if (format == StateFormat::Float8E4M3Block) {
    return Float8CodeFactor(scale);
  }
  if (format == StateFormat::Float16) {
    return 0.0f;
  }
  return LinearReciprocalEncodes(scale) ? DivRn(1.0f, scale) : 0.0f;
}

/// Stores @p value as element @p i of a block-scaled state stored as @p format in @p data: its
/// block's scale @p scale (BlockScale() of the block's largest magnitude) and factor @p factor
/// (BlockCodeFactor()); @p keep_positive: the second moment, whose positive values never get a
/// zero code. Float16BlockCode(), Float8CodeOfFactor() or LinearBlockCode() of the value.
MLFW_HOST_DEVICE inline void EncodeBlockElement(StateFormat format, void* data, std::size_t i, float value, float scale,
                                                float factor, bool keep_positive) {
  switch (format) {
    case StateFormat::Float16:
      static_cast<std::uint16_t*>(data)[i] = Float16BlockCode(value, scale, keep_positive);
      return;
    case StateFormat::Float8E4M3Block:
      static_cast<std::uint8_t*>(data)[i] = Float8CodeOfFactor(value, factor, keep_positive);
      return;
    default:
      static_cast<std::uint8_t*>(data)[i] = LinearBlockCode(value, scale, factor, BlockCodeMax(format), keep_positive);
      return;
  }
}

/// Element @p i of a state stored as @p format in @p data (the codes, from the tensor's first
/// element), @p scale the scale of its block (block-scaled formats; unused by the others). The
/// GPU kernels find the scale by a shift: a 64-bit division per element is a long software
/// routine there.
MLFW_HOST_DEVICE inline float DecodeStateElementInBlock(StateFormat format, const void* data, float scale,
                                                        std::size_t i) {
  switch (format) {
    case StateFormat::Float32:
      return static_cast<const float*>(data)[i];
    case StateFormat::BFloat16:
      return BFloat16BitsToFloat(static_cast<const std::uint16_t*>(data)[i]);
    case StateFormat::Float16:
      return MulRn(HalfBitsToFloat(static_cast<const std::uint16_t*>(data)[i]), scale);
    default:
      return DecodeBlockCode(format, static_cast<const std::uint8_t*>(data)[i], scale);
  }
}

/// Element @p i of a state stored as @p format in @p data (the codes, from the tensor's first
/// element), @p scales its block scales (block-scaled formats) of blocks of @p block elements.
MLFW_HOST_DEVICE inline float DecodeStateElement(StateFormat format, const void* data, const float* scales,
                                                 std::size_t block, std::size_t i) {
  return DecodeStateElementInBlock(format, data, IsBlockScaled(format) ? scales[i / block] : 0.0f, i);
}

/// Stores @p value as element @p i of a state stored as @p format in @p data, @p scale the scale of
/// its block (block-scaled formats; BlockScale() of the block's largest magnitude); @p keep_positive
/// (the second moment): a positive value never gets a zero code. A block-scaled element takes
/// EncodeBlockElement() with its block's factor: where one call encodes a whole block, take the
/// factor once (BlockCodeFactor()) and call that instead.
MLFW_HOST_DEVICE inline void EncodeStateElement(StateFormat format, void* data, std::size_t i, float value, float scale,
                                                bool keep_positive) {
  switch (format) {
    case StateFormat::Float32:
      static_cast<float*>(data)[i] = value;
      return;
    case StateFormat::BFloat16:
      static_cast<std::uint16_t*>(data)[i] = BFloat16StateCode(value, keep_positive);
      return;
    default:
      EncodeBlockElement(format, data, i, value, scale, BlockCodeFactor(format, scale), keep_positive);
      return;
  }
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

/// The FP32 master of element @p i of @p parameter (FP32 masters, or BF16 parameters) stored as
/// @p masters; @p remainders: the 16-bit remainders of BFloat16Remainder (else unused).
MLFW_HOST_DEVICE inline float DecodeMasterElement(MasterFormat masters, const void* parameter,
                                                  const std::uint16_t* remainders, std::size_t i) {
  if (masters == MasterFormat::Float32) {
    return static_cast<const float*>(parameter)[i];
  }
  const std::uint16_t param = static_cast<const std::uint16_t*>(parameter)[i];
  if (masters == MasterFormat::BFloat16Remainder) {
    return MasterFromRemainder(param, remainders[i]);
  }
  return BFloat16BitsToFloat(param);
}

/// Stores the updated FP32 master @p w as element @p i (DecodeMasterElement()'s layout);
/// BFloat16StochasticRounding draws PhiloxElementBits(@p seed, @p step, @p tensor, @p element_offset + @p i)
/// (OptimizerStepLists::ElementOffsets).
MLFW_HOST_DEVICE inline void EncodeMasterElement(MasterFormat masters, void* parameter, std::uint16_t* remainders,
                                                 std::size_t i, float w, std::uint64_t seed, std::uint64_t step,
                                                 std::uint32_t tensor, std::uint64_t element_offset) {
  if (masters == MasterFormat::Float32) {
    static_cast<float*>(parameter)[i] = w;
    return;
  }
  auto* param = static_cast<std::uint16_t*>(parameter);
  if (masters == MasterFormat::BFloat16Remainder) {
    SplitMaster(w, param + i, remainders + i);
    return;
  }
  param[i] = StochasticRoundToBFloat16Bits(w, PhiloxElementBits(seed, step, tensor, element_offset + i));
}

}  // namespace mlframework::detail

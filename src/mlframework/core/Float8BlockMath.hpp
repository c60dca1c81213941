#pragma once
// Private: the per-block and per-element math of the FP8 block gradient wire
// (distributed/Float8BlockReduce.hpp), shared by the CPU codec and the CUDA kernels so that
// both write the same codes and scales and sum to the same bits. Integer operations and single
// IEEE multiplies only: the scales are powers of two, so a product is exact except for the
// E4M3FN rounding of the code, and no compiler or GPU can round it differently.

#include <cstdint>

#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework::detail {

/// 2^@p e for e in [-126, 127], exactly: a normal float, its exponent field alone.
MLFW_HOST_DEVICE inline float Float8BlockPowerOfTwo(int e) {
  return BitsAsFloat(static_cast<std::uint32_t>(e + 127) << 23);
}

/// True when a block whose largest magnitude bits are @p amax_bits holds an infinity or a NaN
/// (magnitude bits order as the magnitudes do, NaN and infinity above every number): the block
/// is sent with a NaN scale and zero codes.
MLFW_HOST_DEVICE inline bool Float8BlockIsNonFinite(std::uint32_t amax_bits) { return amax_bits >= 0x7f800000u; }

/// The inverse scale of a block holding an infinity or a NaN: the quiet NaN, so that every
/// element of the block decodes to NaN and the receiver's overflow check sees it.
MLFW_HOST_DEVICE inline float Float8BlockNaNScale() { return BitsAsFloat(0x7fc00000u); }

/// The exponent k of the block scale 2^k for the finite amax of bits @p amax_bits: the largest
/// with amax * 2^k <= 448, so amax lands in (224, 448]; capped so that 2^k and 2^-k are both
/// normal floats (tiny blocks then stay below 224). 0 for an all-zero block.
MLFW_HOST_DEVICE inline int Float8BlockScaleExponent(std::uint32_t amax_bits) {
  if (amax_bits == 0u) {
    return 0;
  }
  if (amax_bits < 0x00800000u) {
    return 126;  // a subnormal amax is below 2^-126: k would be at least 135, past the cap
  }
  // amax = 1.m * 2^(field - 127) = mantissa * 2^e with mantissa = 1.m / 2 in [0.5, 1).
  const int e = static_cast<int>(amax_bits >> 23) - 126;
  // mantissa * 512 <= 448, i.e. 1.m <= 1.75: amax * 2^(9 - e) fits, else one binade lower.
  const bool fits = (amax_bits & 0x007fffffu) <= 0x00600000u;
  const int k = fits ? 9 - e : 8 - e;
  return k < -126 ? -126 : (k > 126 ? 126 : k);
}

/// The E4M3FN code of @p value in a block scaled by @p scale (2^k): the product is exact, the
/// cast rounds nearest-even and saturates.
MLFW_HOST_DEVICE inline std::uint8_t EncodeFloat8BlockElement(float value, float scale) {
  return FloatToFloat8E4M3FNSatBits(value * scale);
}

/// The FP32 value of @p code in a block with inverse scale @p scale_inv (2^-k, or NaN for a
/// non-finite block): exact, code * 2^-k.
MLFW_HOST_DEVICE inline float DecodeFloat8BlockElement(std::uint8_t code, float scale_inv) {
  return Float8E4M3FNBitsToFloat(code) * scale_inv;
}

}  // namespace mlframework::detail

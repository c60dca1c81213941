// The FP8 block wire's CPU kernels. Scales are powers of two, so scaling and unscaling are exact
// and the only rounding of a sent value is its E4M3FN cast.
#include "mlframework/distributed/Float8BlockCodec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <mlframework/core/Threads.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>

namespace mlframework::distributed::detail {

namespace {

// Float8E4M3FNBitsToFloat() for the encoder's codes (never the NaN code S.1111.111), branch-free
// so that it vectorizes: a normal code's exponent is rebiased (7 -> 127) and its 3 mantissa bits
// moved up; a subnormal one is its step count times 2^-9. Exact.
inline float E4M3ToFloat(std::uint8_t code) {
  const std::uint32_t rest = code & 0x7fu;
  const std::uint32_t normal = (rest << 20) + (120u << 23);
  const float steps = static_cast<float>(static_cast<int>(rest)) * 0x1p-9f;  // used below 8 only
  const std::uint32_t below = 0u - static_cast<std::uint32_t>(rest < 8u);
  const std::uint32_t magnitude = (std::bit_cast<std::uint32_t>(steps) & below) | (normal & ~below);
  return std::bit_cast<float>(magnitude | (static_cast<std::uint32_t>(code & 0x80u) << 24));
}

// 2^e as a float for e in [-149, 127] (subnormal powers included), exactly.
float PowerOfTwo(int e) { return std::ldexp(1.0f, e); }

// The exponent k of the block scale 2^k: the largest with amax * 2^k <= 448, so amax lands in
// (224, 448]; capped so that 2^k and 2^-k are both floats (tiny blocks then stay below 224).
int ScaleExponent(float amax) {
  if (amax == 0.0f) return 0;
  int e = 0;
  const float mantissa = std::frexp(amax, &e);  // amax = mantissa * 2^e, mantissa in [0.5, 1)
  // amax * 2^(9 - e) = mantissa * 512 in [256, 512): one binade lower when past 448.
  const int k = mantissa * 512.0f <= 448.0f ? 9 - e : 8 - e;
  return std::clamp(k, -126, 126);
}

// FloatToFloat8E4M3FNBits() for a finite |value| <= 448 (a scaled block value), branch-free so
// that it vectorizes: normal results round the float's mantissa to 3 bits (nearest even) and
// rebias the exponent (127 -> 7); below E4M3's smallest normal 2^-6 the result is the subnormal
// step count round(|value| * 2^9), rounded to nearest even by the float addition of 2^23.
inline std::uint8_t ScaledToE4M3(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  const std::uint32_t rounded = magnitude + 0x7ffffu + ((magnitude >> 20) & 1u);
  const std::uint32_t normal = (rounded >> 20) - (120u << 3);
  const float steps = (std::bit_cast<float>(magnitude) * 512.0f) + 8388608.0f;  // 2^23: integer part rounds
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(steps) - 0x4b000000u;
  const std::uint32_t below = 0u - static_cast<std::uint32_t>(magnitude < 0x3c800000u);  // 2^-6: all ones
  const std::uint32_t code = (subnormal & below) | (normal & ~below);
  return static_cast<std::uint8_t>(code | ((bits >> 24) & 0x80u));
}

// Blocks per parallel region: below this the other threads are not worth waking.
constexpr std::ptrdiff_t kParallelBlocks = 64;

}  // namespace

std::size_t Float8BlockCount(std::size_t count) noexcept { return (count + kFloat8WireBlock - 1) / kFloat8WireBlock; }

void EncodeFloat8Blocks(const float* values, std::size_t count, std::uint8_t* codes, float* scale_inv) {
  const auto blocks = static_cast<std::ptrdiff_t>(Float8BlockCount(count));
#pragma omp parallel for schedule(static) num_threads(mlframework::NumThreads()) if (blocks >= kParallelBlocks)
  for (std::ptrdiff_t block = 0; block < blocks; ++block) {
    const std::size_t start = static_cast<std::size_t>(block) * kFloat8WireBlock;
    const std::size_t n = std::min(kFloat8WireBlock, count - start);
    const float* x = values + start;
    std::uint8_t* out = codes + start;
    // The magnitudes' bits order as the magnitudes do, so an integer max (which vectorizes)
    // gives the amax, and a non-finite value shows as bits at or past infinity's.
    std::uint32_t amax_bits = 0;
    for (std::size_t i = 0; i < n; ++i) {
      amax_bits = std::max(amax_bits, std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu);
    }
    if (amax_bits >= 0x7f800000u) {
      // NaN scale: every element of the block decodes to NaN, so the overflow check sees it.
      std::fill(out, out + n, std::uint8_t{0});
      scale_inv[block] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const int k = ScaleExponent(std::bit_cast<float>(amax_bits));
    const float scale = PowerOfTwo(k);
    for (std::size_t i = 0; i < n; ++i) out[i] = ScaledToE4M3(x[i] * scale);
    scale_inv[block] = PowerOfTwo(-k);
  }
}

void DecodeSumFloat8Blocks(const std::uint8_t* codes, const float* scale_inv, int parts, std::size_t count,
                           float* out) {
  const std::size_t part_blocks = Float8BlockCount(count);
  const auto blocks = static_cast<std::ptrdiff_t>(part_blocks);
#pragma omp parallel for schedule(static) num_threads(mlframework::NumThreads()) if (blocks >= kParallelBlocks)
  for (std::ptrdiff_t block = 0; block < blocks; ++block) {
    const std::size_t start = static_cast<std::size_t>(block) * kFloat8WireBlock;
    const std::size_t n = std::min(kFloat8WireBlock, count - start);
    float* acc = out + start;
    for (int p = 0; p < parts; ++p) {
      const std::uint8_t* c = codes + (static_cast<std::size_t>(p) * count) + start;
      const float s = scale_inv[(static_cast<std::size_t>(p) * part_blocks) + static_cast<std::size_t>(block)];
      if (p == 0) {
        for (std::size_t i = 0; i < n; ++i) acc[i] = E4M3ToFloat(c[i]) * s;
      } else {
        for (std::size_t i = 0; i < n; ++i) acc[i] += E4M3ToFloat(c[i]) * s;
      }
    }
  }
}

}  // namespace mlframework::distributed::detail

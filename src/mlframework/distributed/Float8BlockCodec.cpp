// The FP8 block wire's CPU kernels: block loops over the CPU backend's FP8 element kernels
// (backends/cpu/Float8Kernels.hpp: vector loops per instruction set, the bits of
// core/Float8Bits.hpp). Scales are powers of two, so scaling and unscaling are exact and the
// only rounding of a sent value is its E4M3FN cast.
#include "mlframework/distributed/Float8BlockCodec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Threads.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>

#include "mlframework/backends/cpu/Float8Kernels.hpp"

namespace mlframework::distributed::detail {

namespace {

// 2^e for e in [-126, 127], exactly: a normal float, its exponent field alone.
float PowerOfTwo(int e) { return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23); }

// The exponent k of the block scale 2^k for the finite amax of bits @p amax_bits: the largest
// with amax * 2^k <= 448, so amax lands in (224, 448]; capped so that 2^k and 2^-k are both
// normal floats (tiny blocks then stay below 224). Read off the bits (no libm call per block).
int ScaleExponent(std::uint32_t amax_bits) {
  if (amax_bits == 0) return 0;
  int e = 0;          // amax = mantissa * 2^e, mantissa in [0.5, 1)
  bool fits = false;  // mantissa * 512 <= 448, i.e. mantissa <= 0.875
  if (amax_bits >= 0x00800000u) {
    e = static_cast<int>(amax_bits >> 23) - 126;
    fits = (amax_bits & 0x007fffffu) <= 0x00600000u;  // 1.m <= 1.75
  } else {
    const float mantissa = std::frexp(std::bit_cast<float>(amax_bits), &e);  // a subnormal amax
    fits = mantissa * 512.0f <= 448.0f;
  }
  // amax * 2^(9 - e) = mantissa * 512 in [256, 512): one binade lower when past 448.
  const int k = fits ? 9 - e : 8 - e;
  return std::clamp(k, -126, 126);
}

// The encode reads its input once, block by block: the amax pass waits for memory and the cast
// that follows runs from L1, so the hardware prefetcher alone leaves memory idle during the
// cast. Asking for the block this far ahead keeps loads in flight (measured on the 2-core Xeon,
// one thread, 16M values from memory: about 25% less time at 4 to 8 blocks ahead).
constexpr std::size_t kPrefetchBlocks = 4;

// Prefetches the block of values [first, first + kFloat8WireBlock) that lies below @p count.
void PrefetchBlock(const float* values, std::size_t first, std::size_t count) {
  constexpr std::size_t kLineFloats = 64 / sizeof(float);
  const std::size_t end = std::min(count, first + kFloat8WireBlock);
  for (std::size_t i = first; i < end; i += kLineFloats) __builtin_prefetch(values + i);
}

// Blocks per parallel region: below this the other threads are not worth waking.
constexpr std::ptrdiff_t kParallelBlocks = 64;

// The decoding sum of @p parts parts of @p count values: part p's codes at
// `codes + p * code_stride`, its block scales at `scale_inv + p * scale_stride`.
void DecodeSumParts(const std::uint8_t* codes, std::size_t code_stride, const float* scale_inv,
                    std::size_t scale_stride, int parts, std::size_t count, float* out, float factor) {
  const backends::cpu::Float8KernelSet& kernels = backends::cpu::ActiveFloat8Kernels();
  const auto blocks = static_cast<std::ptrdiff_t>(Float8BlockCount(count));
#pragma omp parallel for schedule(static) num_threads(mlframework::NumThreads()) if (blocks >= kParallelBlocks)
  for (std::ptrdiff_t block = 0; block < blocks; ++block) {
    const std::size_t start = static_cast<std::size_t>(block) * kFloat8WireBlock;
    // code x 2^-k is exact; the parts are added in rank order, in one pass over the block.
    const backends::cpu::Float8KernelSet::Parts block_parts{.codes = codes + start,
                                                            .code_stride = code_stride,
                                                            .scale_inv = scale_inv + block,
                                                            .scale_stride = scale_stride,
                                                            .count = static_cast<std::size_t>(parts)};
    kernels.decode_sum_e4m3fn(block_parts, out + start, std::min(kFloat8WireBlock, count - start), factor);
  }
}

}  // namespace

std::size_t Float8BlockCount(std::size_t count) noexcept { return (count + kFloat8WireBlock - 1) / kFloat8WireBlock; }

void EncodeFloat8Blocks(const float* values, std::size_t count, std::uint8_t* codes, float* scale_inv) {
  const backends::cpu::Float8KernelSet& kernels = backends::cpu::ActiveFloat8Kernels();
  const auto blocks = static_cast<std::ptrdiff_t>(Float8BlockCount(count));
#pragma omp parallel for schedule(static) num_threads(mlframework::NumThreads()) if (blocks >= kParallelBlocks)
  for (std::ptrdiff_t block = 0; block < blocks; ++block) {
    const std::size_t start = static_cast<std::size_t>(block) * kFloat8WireBlock;
    const std::size_t n = std::min(kFloat8WireBlock, count - start);
    const float* x = values + start;
    std::uint8_t* out = codes + start;
    PrefetchBlock(values, start + (kPrefetchBlocks * kFloat8WireBlock), count);
    // Magnitude bits order as the magnitudes do, NaN and infinity above every number.
    const std::uint32_t amax_bits = kernels.amax_bits[static_cast<std::size_t>(DataType::Float32)](x, n);
    if (amax_bits >= 0x7f800000u) {
      // NaN scale: every element of the block decodes to NaN, so the overflow check sees it.
      std::fill(out, out + n, std::uint8_t{0});
      scale_inv[block] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const int k = ScaleExponent(amax_bits);
    kernels.cast_e4m3fn_in_range(x, out, n, PowerOfTwo(k));  // exact scaling, then E4M3FN's rounding
    scale_inv[block] = PowerOfTwo(-k);
  }
}

void DecodeSumFloat8Blocks(const std::uint8_t* codes, const float* scale_inv, int parts, std::size_t count,
                           float* out) {
  DecodeSumFloat8Blocks(codes, scale_inv, parts, count, out, 1.0f);
}

void DecodeSumFloat8Blocks(const std::uint8_t* codes, const float* scale_inv, int parts, std::size_t count, float* out,
                           float factor) {
  DecodeSumParts(codes, count, scale_inv, Float8BlockCount(count), parts, count, out, factor);
}

std::size_t Float8SegmentWords(std::size_t count) noexcept {
  return Float8BlockCount(count) + ((count + sizeof(float) - 1) / sizeof(float));
}

std::uint8_t* Float8SegmentCodes(float* segment, std::size_t count) noexcept {
  return static_cast<std::uint8_t*>(static_cast<void*>(segment + Float8BlockCount(count)));
}

void EncodeFloat8Segment(const float* values, std::size_t count, float* segment) {
  std::uint8_t* codes = Float8SegmentCodes(segment, count);
  EncodeFloat8Blocks(values, count, codes, segment);
  // The padding to a whole word travels too: zeros, not whatever the buffer held before.
  const std::size_t padded = (Float8SegmentWords(count) - Float8BlockCount(count)) * sizeof(float);
  std::fill(codes + count, codes + padded, std::uint8_t{0});
}

void DecodeSumFloat8Segments(const float* segments, int parts, std::size_t count, float* out, float factor) {
  const std::size_t words = Float8SegmentWords(count);
  const auto* codes = static_cast<const std::uint8_t*>(static_cast<const void*>(segments + Float8BlockCount(count)));
  DecodeSumParts(codes, words * sizeof(float), segments, words, parts, count, out, factor);
}

}  // namespace mlframework::distributed::detail

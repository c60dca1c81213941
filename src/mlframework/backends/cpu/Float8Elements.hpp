#pragma once
// Private: the FP8 element loops of Float8Kernels.hpp, included only by the per-instruction-set
// files (Float8KernelsAvx2.cpp, Float8KernelsAvx512.cpp), each compiled with its own flags.
//
// The loops run on GCC/Clang vector extensions of kWidth 32-bit lanes, so one source serves every
// width and the compiler picks the instructions of the file's flags (AVX-512: VPMOVDB narrows the
// lanes to bytes, masked blends select). No CPU has an FP32 -> FP8 convert these files may count
// on (AVX-512 on Zen 4 has none), so the encode is done on the FP32 bits:
// - normal results: `(bits + 0x7ffff + lsb) >> 20` (E4M3FN; 21 for E5M2) rounds the mantissa to
//   nearest even and a carry moves into the exponent, which is the right encoding; rebiasing
//   the exponent is one subtraction;
// - FP8 subnormals: `|y| + 2^14` (E4M3FN; 2^7 for E5M2) is a float whose last mantissa unit is
//   the smallest FP8 subnormal, so the FP32 addition (round to nearest even, the default mode)
//   rounds |y| to a multiple of it and the low bits are the FP8 magnitude, 8 (4) being the
//   smallest normal's encoding;
// - overflow, infinity and NaN by compares and blends.
// That is the integer rule of core/Float8Bits.hpp, bit for bit (tests/core/Float8CastTests.cpp
// compares all of them on every instruction set); the tails of fewer than kWidth elements call
// those scalar functions.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>

#include "mlframework/backends/cpu/Float8Kernels.hpp"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace mlframework::backends::cpu::float8 {

// Internal linkage: each per-instruction-set file gets its own copy of every function here,
// compiled with its flags. With external linkage the linker keeps one copy of each template
// instantiation shared by those files (AmaxBits was the same function in all of them), so a
// file could run another file's code: narrower, or wider than the CPU has.
namespace {

// Magnitudes order like unsigned integers in every format (Float8Kernels.hpp): a plain integer
// max reduction, which the compiler vectorises at the including file's width.
template <typename T, std::uint32_t kMagnitude>
std::uint32_t AmaxBits(const void* src, std::size_t count) {
  const auto* p = static_cast<const T*>(src);
  T m = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto a = static_cast<T>(p[i] & kMagnitude);
    m = a > m ? a : m;
  }
  return m;
}

/// The Float8KernelSet of the element loops @p Loops (static Cast<D> and Dequantize<D> for both
/// FP8 formats) and the integer amax.
template <class Loops>
Float8KernelSet SetOf() {
  Float8KernelSet set{};
  set.amax_bits[static_cast<std::size_t>(DataType::Float32)] = &AmaxBits<std::uint32_t, 0x7fffffffu>;
  set.amax_bits[static_cast<std::size_t>(DataType::Float16)] = &AmaxBits<std::uint16_t, 0x7fffu>;
  set.amax_bits[static_cast<std::size_t>(DataType::BFloat16)] = &AmaxBits<std::uint16_t, 0x7fffu>;
  set.amax_bits[static_cast<std::size_t>(DataType::Float8E4M3FN)] = &AmaxBits<std::uint8_t, 0x7fu>;
  set.amax_bits[static_cast<std::size_t>(DataType::Float8E5M2)] = &AmaxBits<std::uint8_t, 0x7fu>;
  set.cast_e4m3fn = &Loops::template Cast<DataType::Float8E4M3FN>;
  set.cast_e5m2 = &Loops::template Cast<DataType::Float8E5M2>;
  set.dequantize_e4m3fn = &Loops::template Dequantize<DataType::Float8E4M3FN>;
  set.dequantize_e5m2 = &Loops::template Dequantize<DataType::Float8E5M2>;
  set.cast_e4m3fn_in_range = &Loops::CastE4M3FNInRange;
  set.decode_sum_e4m3fn = &Loops::template DecodeSum<DataType::Float8E4M3FN>;
  return set;
}

/// The scalar encoders of core/Float8Bits.hpp (saturating) and decoders, by format.
template <DataType D>
std::uint8_t EncodeScalar(float y) {
  if constexpr (D == DataType::Float8E4M3FN) {
    return detail::FloatToFloat8E4M3FNSatBits(y);
  } else {
    return detail::FloatToFloat8E5M2SatBits(y);
  }
}

template <DataType D>
float DecodeScalar(std::uint8_t b) {
  if constexpr (D == DataType::Float8E4M3FN) {
    return detail::Float8E4M3FNBitsToFloat(b);
  } else {
    return detail::Float8E5M2BitsToFloat(b);
  }
}

/// Element @p i of the sum of Float8KernelSet::DecodeSumFn, before its factor.
template <DataType D>
float DecodeSumScalar(const Float8KernelSet::Parts& parts, std::size_t i) {
  float sum = DecodeScalar<D>(parts.codes[i]) * parts.scale_inv[0];
  for (std::size_t p = 1; p < parts.count; ++p) {
    sum += DecodeScalar<D>(parts.codes[(p * parts.code_stride) + i]) * parts.scale_inv[p * parts.scale_stride];
  }
  return sum;
}

/// Vectors of @p kWidth lanes. A typedef in a template of its own: GCC 12 drops a dependent
/// vector_size attribute on an alias-declaration, and takes a typedef of the current
/// instantiation for its scalar type when it checks the template's definition.
template <int kWidth>
struct Vectors {
  typedef std::uint32_t U __attribute__((vector_size(4 * kWidth)));  // NOLINT(modernize-use-using)
  typedef std::int32_t I __attribute__((vector_size(4 * kWidth)));   // NOLINT(modernize-use-using)
  typedef float F __attribute__((vector_size(4 * kWidth)));          // NOLINT(modernize-use-using)
  typedef std::uint8_t B __attribute__((vector_size(kWidth)));       // NOLINT(modernize-use-using)
};

/// The element loops on vectors of @p kWidth 32-bit lanes.
template <int kWidth>
struct Elements {
  using U = typename Vectors<kWidth>::U;
  using I = typename Vectors<kWidth>::I;
  using F = typename Vectors<kWidth>::F;
  using B = typename Vectors<kWidth>::B;

  static U Splat(std::uint32_t v) { return U{} + v; }

  // Lane-wise `mask ? a : b` (mask lanes all ones or all zeros).
  static U Select(I mask, U a, U b) { return mask ? a : b; }

  // Magnitude bits (below 2^31) as signed lanes: their compares are one signed compare, where
  // unsigned ones take a minimum and an equality on AVX2.
  static I Magnitude(U ax) { return reinterpret_cast<I>(ax); }

  // The lane-wise unsigned maximum (VPMAXUD; GCC 12 writes the vector ?: of a compare as a
  // minimum, an equality and a blend).
  static U Max(U a, U b) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      return reinterpret_cast<U>(_mm512_max_epu32(reinterpret_cast<__m512i>(a), reinterpret_cast<__m512i>(b)));
    }
#endif
#if defined(__AVX2__)
    if constexpr (kWidth == 8) {
      return reinterpret_cast<U>(_mm256_max_epu32(reinterpret_cast<__m256i>(a), reinterpret_cast<__m256i>(b)));
    }
#endif
    return a > b ? a : b;
  }

  static std::uint32_t MaxLane(U v) {
    std::uint32_t m = 0;
    for (int k = 0; k < kWidth; ++k) {
      m = m > v[k] ? m : v[k];
    }
    return m;
  }

  // The magnitude bits of `y` (FP32 bits @p u) rounded into E4M3FN or E5M2 with saturation, and
  // the sign moved to bit 7; see the file comment.
  // The E4M3FN magnitude of the finite magnitude bits @p ax below 464 (where Encode's
  // saturation starts): the normal and subnormal rules of the file comment.
  static U E4M3FNMagnitude(U ax) {
    const U normal = ((ax + 0x7ffffu + ((ax >> 20) & 1u)) >> 20) - (120u << 3);
    const F lifted = reinterpret_cast<F>(ax) + 16384.0f;
    const U subnormal = reinterpret_cast<U>(lifted) - 0x46800000u;
    return Select(Magnitude(ax) < 0x3c800000, subnormal, normal);  // below 2^-6
  }

  template <DataType D>
  static U Encode(U u) {
    const U sign = (u >> 24) & 0x80u;
    const U ax = u & 0x7fffffffu;
    U mag;
    if constexpr (D == DataType::Float8E4M3FN) {
      mag = E4M3FNMagnitude(ax);
      mag = Select(Magnitude(ax) >= 0x43e80000, Splat(0x7eu), mag);  // from 464 on: 448
    } else {
      const U normal = ((ax + 0xfffffu + ((ax >> 21) & 1u)) >> 21) - (112u << 2);
      const F lifted = reinterpret_cast<F>(ax) + 128.0f;
      const U subnormal = reinterpret_cast<U>(lifted) - 0x43000000u;
      mag = Select(Magnitude(ax) < 0x38800000, subnormal, normal);   // below 2^-14
      mag = Select(Magnitude(ax) >= 0x47700000, Splat(0x7bu), mag);  // from 61440 on: 57344
    }
    mag = Select(Magnitude(ax) > 0x7f800000, Splat(0x7fu), mag);  // NaN
    return mag | sign;
  }

  template <DataType D>
  static std::uint32_t Cast(const float* src, std::uint8_t* dst, std::size_t count, float scale) {
    U amax{};
    std::size_t i = 0;
    for (; i + kWidth <= count; i += kWidth) {
      F x;
      std::memcpy(&x, src + i, sizeof x);
      const U input = reinterpret_cast<U>(x) & 0x7fffffffu;
      amax = Max(input, amax);
      const F y = x * scale;
      NarrowBytes(Encode<D>(reinterpret_cast<U>(y)), dst + i);
    }
    std::uint32_t result = MaxLane(amax);
    for (; i < count; ++i) {
      const std::uint32_t input = detail::FloatAsBits(src[i]) & 0x7fffffffu;
      result = input > result ? input : result;
      dst[i] = EncodeScalar<D>(src[i] * scale);
    }
    return result;
  }

  // Cast<E4M3FN> for products known to be finite and at most 448 in magnitude
  // (Float8KernelSet::InRangeCastFn): the same bits, without the selects such products never
  // take and without the input's amax.
  static void CastE4M3FNInRange(const float* src, std::uint8_t* dst, std::size_t count, float scale) {
    std::size_t i = 0;
    for (; i + kWidth <= count; i += kWidth) {
      F x;
      std::memcpy(&x, src + i, sizeof x);
      const U y = reinterpret_cast<U>(x * scale);
      const U code = E4M3FNMagnitude(y & 0x7fffffffu) | ((y >> 24) & 0x80u);
      NarrowBytes(code, dst + i);
    }
    for (; i < count; ++i) {
      dst[i] = EncodeScalar<DataType::Float8E4M3FN>(src[i] * scale);
    }
  }

  // FP32 bits of the FP8 bytes @p b (widened to lanes), exact: core/Float8Bits.hpp's decoders.
  template <DataType D>
  static U Decode(U b) {
    const U sign = (b & 0x80u) << 24;
    const U m = b & 0x7fu;
    const F small = __builtin_convertvector(reinterpret_cast<I>(m), F);
    U mag;
    if constexpr (D == DataType::Float8E4M3FN) {
      const U normal = (m << 20) + (120u << 23);
      const U subnormal = reinterpret_cast<U>(small * 0x1p-9f);
      mag = Select(Magnitude(m) < 8, subnormal, normal);
      mag = Select(m == 0x7fu, Splat(0x7ff00000u), mag);
    } else {
      const U normal = (m << 21) + (112u << 23);
      const U subnormal = reinterpret_cast<U>(small * 0x1p-16f);
      const U low = m & 3u;
      const U special = 0x7f800000u | Select(low != 0u, 0x00400000u | (low << 21), Splat(0u));
      mag = Select(Magnitude(m) < 4, subnormal, normal);
      mag = Select(Magnitude(m) >= 0x7c, special, mag);
    }
    return mag | sign;
  }

  // The low byte of each lane of @p v into dst[0, kWidth), as __builtin_convertvector to bytes.
  // GCC 12 lowers that conversion on AVX2 into an extract, a shift and an OR per lane (two
  // thirds of the time of an AVX2 FP8 or 8-bit state encode went there); AVX-512's VPMOVDB is
  // one instruction, and on AVX2 a byte shuffle within each 128-bit half and a permute of the
  // two halves' words do it.
  static void NarrowBytes(U v, std::uint8_t* dst) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(reinterpret_cast<__m512i>(v)));
      return;
    }
#endif
#if defined(__AVX2__)
    if constexpr (kWidth == 8) {
      const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                                 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(reinterpret_cast<__m256i>(v), low_bytes),
                                                         _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
      return;
    }
#endif
    const B bytes = __builtin_convertvector(v, B);
    std::memcpy(dst, &bytes, sizeof bytes);
  }

  // kWidth bytes at @p src zero-extended to 32-bit lanes. GCC 12 lowers
  // __builtin_convertvector from bytes to 32-bit lanes into one insert per lane (about half the
  // time of a dequantization went there); the instruction sets' zero-extending load (VPMOVZXBD)
  // is one instruction.
  static U WidenBytes(const std::uint8_t* src) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      return reinterpret_cast<U>(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
    }
#endif
#if defined(__AVX2__)
    if constexpr (kWidth == 8) {
      return reinterpret_cast<U>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src))));
    }
#endif
    B bytes;
    std::memcpy(&bytes, src, sizeof bytes);
    return __builtin_convertvector(bytes, U);
  }

  template <DataType D>
  static void Dequantize(const std::uint8_t* src, float* dst, std::size_t count, float scale_inv) {
    std::size_t i = 0;
    for (; i + kWidth <= count; i += kWidth) {
      const F x = reinterpret_cast<F>(Decode<D>(WidenBytes(src + i)));
      const F y = x * scale_inv;
      std::memcpy(dst + i, &y, sizeof y);
    }
    for (; i < count; ++i) {
      dst[i] = DecodeScalar<D>(src[i]) * scale_inv;
    }
  }

  // Float8KernelSet::DecodeSumFn: the parts' products summed in a register, in part order.
  template <DataType D>
  static void DecodeSum(const Float8KernelSet::Parts& parts, float* dst, std::size_t count, float factor) {
    std::size_t i = 0;
    for (; i + kWidth <= count; i += kWidth) {
      F sum = reinterpret_cast<F>(Decode<D>(WidenBytes(parts.codes + i))) * parts.scale_inv[0];
      for (std::size_t p = 1; p < parts.count; ++p) {
        const F x = reinterpret_cast<F>(Decode<D>(WidenBytes(parts.codes + (p * parts.code_stride) + i)));
        sum += x * parts.scale_inv[p * parts.scale_stride];
      }
      sum *= factor;
      std::memcpy(dst + i, &sum, sizeof sum);
    }
    for (; i < count; ++i) {
      dst[i] = DecodeSumScalar<D>(parts, i) * factor;
    }
  }
};

}  // namespace

}  // namespace mlframework::backends::cpu::float8

#pragma once
// Private: the AVX-512 (F, BW, DQ, VL) instruction-set traits for SimdKernels.hpp.
// Included only by KernelsAvx512.cpp and KernelsAvx512Bf16.cpp, which are built
// with the matching flags; everything here has internal linkage in each of them.
//
// FP32 math runs on xsimd::batch<float, xsimd::avx512bw>. FP16 converts with
// VCVTPH2PS / VCVTPS2PH (round to nearest even), which give exactly the bits of
// core/FloatBits.hpp for every input, NaN and subnormals included (checked over
// all 2^32 inputs). BF16 rounds with integer SIMD (bits + 0x7fff + lsb, NaN
// quieted), or with VCVTNEPS2BF16 where the CPU has AVX512_BF16 and the vector
// holds no subnormal (the instruction flushes those to zero). Tails use masked
// loads and stores, so no scalar code from a shared header is compiled here.

#include <immintrin.h>

#include <cstdint>

#include "mlframework/backends/cpu/SimdKernels.hpp"

namespace mlframework::backends::cpu {

namespace {

using simd::Element;

// kNativeBf16: round FP32 to BF16 with VCVTNEPS2BF16 (AVX512_BF16) where that is exact.
template <bool kNativeBf16>
struct Avx512Isa {
  using Batch = xsimd::batch<float, xsimd::avx512bw>;
  static constexpr std::size_t kWidth = 16;
  using Flag = __m512i;

  static __mmask16 Lanes(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

  template <DataType D>
  static Batch Load(const Element<D>* p) {
    if constexpr (D == DataType::Float32) {
      return Batch(_mm512_loadu_ps(p));
    } else if constexpr (D == DataType::Float16) {
      return Batch(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
    } else {
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      // Explicit: braces could pick xsimd's element-list constructor.
      return Batch(_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));  // NOLINT(modernize-return-braced-init-list)
    }
  }

  template <DataType D>
  static Batch LoadPartial(const Element<D>* p, std::size_t n) {
    const __mmask16 m = Lanes(n);
    if constexpr (D == DataType::Float32) {
      return Batch(_mm512_maskz_loadu_ps(m, p));
    } else if constexpr (D == DataType::Float16) {
      return Batch(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)));
    } else {
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
      // Explicit: braces could pick xsimd's element-list constructor.
      return Batch(_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));  // NOLINT(modernize-return-braced-init-list)
    }
  }

  // FloatToBFloat16Bits for 16 lanes, left in the low half of each 32-bit lane.
  static __m512i RoundToBFloat16(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x0040)));
  }

  // The stored 16-bit words of 16 lanes.
  template <DataType D>
  static __m256i Narrow(__m512 v) {
    if constexpr (D == DataType::Float16) {
      return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      if constexpr (kNativeBf16) {
#if defined(__AVX512BF16__)
        // VCVTNEPS2BF16 rounds exactly like FloatToBFloat16Bits (nearest even, NaN quieted)
        // except that it flushes subnormal inputs to zero: a vector holding a subnormal
        // (class bit 0x20) takes the integer path, so the bits never differ.
        if (_mm512_fpclass_ps_mask(v, 0x20) == 0) {
          return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
        }
#endif
      }
      return _mm512_cvtepi32_epi16(RoundToBFloat16(v));
    }
  }

  template <DataType D>
  static constexpr int kExponent = D == DataType::Float32 ? 0x7f800000 : (D == DataType::Float16 ? 0x7c00 : 0x7f80);

  template <DataType D>
  static Flag NoFlag() {
    return _mm512_setzero_si512();
  }

  // flag = max(flag, bits & exponent) lane-wise, over 16-bit or 32-bit lanes.
  template <DataType D>
  static Flag Fold(Flag flag, __m512i bits) {
    if constexpr (D == DataType::Float32) {
      return _mm512_max_epu32(flag, _mm512_and_si512(bits, _mm512_set1_epi32(kExponent<D>)));
    } else {
      return _mm512_max_epu16(flag, _mm512_and_si512(bits, _mm512_set1_epi16(static_cast<short>(kExponent<D>))));
    }
  }

  template <DataType D>
  static bool AnyNonFinite(Flag flag) {
    if constexpr (D == DataType::Float32) {
      return _mm512_cmpeq_epi32_mask(flag, _mm512_set1_epi32(kExponent<D>)) != 0;
    } else {
      return _mm512_cmpeq_epi16_mask(flag, _mm512_set1_epi16(static_cast<short>(kExponent<D>))) != 0;
    }
  }

  template <DataType D>
  static void Store(Element<D>* p, Batch v, Flag& flag) {
    if constexpr (D == DataType::Float32) {
      _mm512_storeu_ps(p, v);
      flag = Fold<D>(flag, _mm512_castps_si512(v));
    } else {
      const __m256i words = Narrow<D>(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), words);
      flag = Fold<D>(flag, _mm512_zextsi256_si512(words));
    }
  }

  // Store for a destination aligned to one full vector, bypassing the caches.
  template <DataType D>
  static void StoreStream(Element<D>* p, Batch v, Flag& flag) {
    if constexpr (D == DataType::Float32) {
      _mm512_stream_ps(p, v);
      flag = Fold<D>(flag, _mm512_castps_si512(v));
    } else {
      const __m256i words = Narrow<D>(v);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), words);
      flag = Fold<D>(flag, _mm512_zextsi256_si512(words));
    }
  }

  static void Fence() { _mm_sfence(); }

  template <DataType D>
  static void StorePartial(Element<D>* p, std::size_t n, Batch v, Flag& flag) {
    const __mmask16 m = Lanes(n);
    if constexpr (D == DataType::Float32) {
      _mm512_mask_storeu_ps(p, m, v);
      flag = Fold<D>(flag, _mm512_maskz_mov_epi32(m, _mm512_castps_si512(v)));
    } else {
      const __m256i words = _mm256_maskz_mov_epi16(m, Narrow<D>(v));
      _mm256_mask_storeu_epi16(p, m, words);
      flag = Fold<D>(flag, _mm512_zextsi256_si512(words));
    }
  }

  // The read-only check looks at whole 64-byte registers of stored words.
  template <DataType D>
  static constexpr std::size_t kCheckElements = 64 / sizeof(Element<D>);

  template <DataType D>
  static void CheckBlock(const Element<D>* p, Flag& flag) {
    flag = Fold<D>(flag, _mm512_loadu_si512(p));
  }

  template <DataType D>
  static void CheckPartial(const Element<D>* p, std::size_t n, Flag& flag) {
    if constexpr (D == DataType::Float32) {
      flag = Fold<D>(flag, _mm512_maskz_loadu_epi32(Lanes(n), p));
    } else {
      const auto m = static_cast<__mmask32>((std::uint64_t{1} << n) - 1u);
      flag = Fold<D>(flag, _mm512_maskz_loadu_epi16(m, p));
    }
  }
};

}  // namespace

}  // namespace mlframework::backends::cpu

#pragma once
// Private: the AVX-512 (F, BW, DQ, VL) operations SimdKernels.hpp's loops run on, for the tags
// arch::Avx512, arch::Avx512Bf16 and arch::Avx512Fp16 (InstructionSets.hpp). Included only by
// KernelsAvx512*.cpp, which are built with the matching flags; everything here has internal
// linkage in each of them.
//
// FP32 math runs on xsimd::batch<float, xsimd::avx512bw>. FP16 converts with VCVTPH2PS /
// VCVTPS2PH (round to nearest even), which give exactly the bits of core/FloatBits.hpp for every
// input, NaN and subnormals included (checked over all 2^32 inputs). BF16 rounds with integer
// SIMD (bits + 0x7fff + lsb, NaN quieted), or with VCVTNEPS2BF16 where the tag has kNativeBf16
// and the vector holds no subnormal (the instruction flushes those to zero). Tails use masked
// loads and stores, so no scalar code from a shared header is compiled here.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "mlframework/backends/cpu/SimdKernels.hpp"

namespace mlframework::backends::cpu {

namespace {

using simd::Element;

// Arch: an AVX-512 tag (its kNativeBf16 and kNativeFp16). kPrefetchPages: software prefetch a
// page ahead (KernelTable::from_memory).
template <class Arch, bool kPrefetchPages>
struct Avx512Ops {
  static constexpr bool kPrefetch = kPrefetchPages;
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

  // FP32 elements widened exactly to FP64, for the sum of squares of calls from memory.
  using WideBatch = xsimd::batch<double, xsimd::avx512bw>;

  // kWidth FP32 elements at p as two halves of FP64 lanes, each converted straight from a 256-bit
  // load (VCVTPS2PD with a memory operand). The zero-masking forms here and in Widen, with every
  // lane selected: with GCC 12 the plain ones read an "undefined" register that -Wuninitialized
  // flags where they are inlined.
  static std::pair<WideBatch, WideBatch> LoadWide(const float* p) {
    return {WideBatch(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(p))),
            WideBatch(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(p + 8)))};
  }

  // The lanes of v as two halves of FP64 lanes (for partial vectors and block sums).
  static std::pair<WideBatch, WideBatch> Widen(const Batch& v) {
    const __m512d x = _mm512_castps_pd(v);
    const __m256 low = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, x, 0));
    const __m256 high = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, x, 1));
    return {WideBatch(_mm512_maskz_cvtps_pd(0xFF, low)), WideBatch(_mm512_maskz_cvtps_pd(0xFF, high))};
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
      if constexpr (Arch::kNativeBf16) {
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

  // The lane-wise maximum of two flags. The masked form with every lane selected is the same
  // instruction; on the unmasked one GCC 12 warns (-Wuninitialized) about its undefined
  // pass-through operand when both inputs are known zeros (GCC bug 105593, as in
  // SumSquaresBf16Words below).
  template <DataType D>
  static Flag Merge(Flag a, Flag b) {
    if constexpr (D == DataType::Float32) {
      return _mm512_mask_max_epu32(a, static_cast<__mmask16>(0xffff), a, b);
    } else {
      return _mm512_mask_max_epu16(a, static_cast<__mmask32>(0xffffffff), a, b);
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

  // kStream: p is aligned to one full vector and the store bypasses the caches.
  template <DataType D, bool kStream = false>
  static void Store(Element<D>* p, Batch v, Flag& flag) {
    if constexpr (D == DataType::Float32) {
      if constexpr (kStream) {
        _mm512_stream_ps(p, v);
      } else {
        _mm512_storeu_ps(p, v);
      }
      flag = Fold<D>(flag, _mm512_castps_si512(v));
    } else {
      const __m256i words = Narrow<D>(v);
      if constexpr (kStream) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(p), words);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), words);
      }
      flag = Fold<D>(flag, _mm512_zextsi256_si512(words));
    }
  }

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

  // The read-only check looks at whole 64-byte registers of stored words and keeps a mask of
  // the lanes found Inf or NaN (exponent field all ones), ORed over the registers, instead of
  // the lane-wise maximum the stores fold. From memory, on a Zen 4 host, a loop of compares
  // into mask registers ran 1.01-1.03x as fast as a plain FP32 sum over the same memory and the
  // maximum loop 0.97-0.99x; through the library the check went from 0.95-0.99x to 1.00-1.02x of
  // that loop.
  using CheckFlag = std::uint32_t;  // 16 lanes for FP32, 32 for 16-bit words

  template <DataType D>
  static constexpr std::size_t kCheckElements = 64 / sizeof(Element<D>);

  template <DataType D>
  static CheckFlag NoCheckFlag() {
    return 0;
  }

  template <DataType D>
  static void CheckBlock(const Element<D>* p, CheckFlag& flag) {
    flag |= NonFiniteLanes<D>(_mm512_loadu_si512(p));
  }

  template <DataType D>
  static void CheckPartial(const Element<D>* p, std::size_t n, CheckFlag& flag) {
    if constexpr (D == DataType::Float32) {
      flag |= NonFiniteLanes<D>(_mm512_maskz_loadu_epi32(Lanes(n), p));  // masked-off lanes read +0
    } else {
      const auto m = static_cast<__mmask32>((std::uint64_t{1} << n) - 1u);
      flag |= NonFiniteLanes<D>(_mm512_maskz_loadu_epi16(m, p));
    }
  }

  template <DataType D>
  static CheckFlag MergeChecks(CheckFlag a, CheckFlag b) {
    return a | b;
  }

  template <DataType D>
  static bool AnyNonFiniteChecked(CheckFlag flag) {
    return flag != 0;
  }

  // The lanes of `bits` whose exponent field is all ones.
  template <DataType D>
  static CheckFlag NonFiniteLanes(__m512i bits) {
    if constexpr (D == DataType::Float32) {
      const __m512i exponent = _mm512_set1_epi32(kExponent<D>);
      return _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent);
    } else {
      const __m512i exponent = _mm512_set1_epi16(static_cast<short>(kExponent<D>));
      return _mm512_cmpeq_epi16_mask(_mm512_and_si512(bits, exponent), exponent);
    }
  }

  // ---- in-place scaling of 16-bit words without the FP32 round trip ------------------------
  //
  // The generic loop (SimdKernels.hpp Unscale) widens 16 words to FP32, multiplies and rounds
  // back: about eight vector uops per 16 elements, so on data in the caches an in-place FP16
  // or BF16 scale runs at a third of the speed of an FP32 one over the same bytes. Loss
  // scales are powers of two, and for those the result can be written straight into the
  // 16-bit words, bit for bit what the FP32 path writes:
  //  - BF16 (and FP16 without AVX512_FP16): x * 2^k only adds k to the exponent field when x
  //    and the result are normal numbers, so a vector whose every lane is normal with a
  //    normal result (or zero) takes one 16-bit add; any other vector (subnormal, Inf, NaN,
  //    underflow, overflow) takes the FP32 path. Such a vector holds no Inf/NaN before or
  //    after, so only FP32-path vectors fold into the flag.
  //  - FP16 with AVX512_FP16: VMULPH rounds the exact product once. When the factor is
  //    itself an FP16 number, the FP32 product of two 11-bit significands is exact, so the
  //    FP32 path also rounds only once (to FP16): the same bits, for every input.

  static constexpr bool kWordKernels = true;
  static constexpr bool kBf16WordSums = true;

  // 32 words per register.
  static __mmask32 WordLanes(std::size_t n) {
    return n >= 32 ? static_cast<__mmask32>(~0u) : static_cast<__mmask32>((1u << n) - 1u);
  }

  // The FP32 path for 32 stored words: widen, multiply, round back (FloatBits.hpp rounding).
  template <DataType D>
  static __m512i MultiplyWordsViaFloat(__m512i words, __m512 f) {
    if constexpr (D == DataType::Float16) {
      const __m256i low = _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(words)), f),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i high = _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(words, 1)), f),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    } else {
      // Even elements sit in the low halves of the 32-bit lanes, odd ones in the high halves.
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
      const __m512i even_bits = RoundToBFloat16(_mm512_mul_ps(even, f));
      const __m512i odd_bits = RoundToBFloat16(_mm512_mul_ps(odd, f));
      return _mm512_or_si512(_mm512_slli_epi32(odd_bits, 16), even_bits);
    }
  }

  // Exponent-add path for factor = 2^k (normal, positive). Returns false, touching nothing,
  // when the factor is not such a power of two.
  template <DataType D>
  static bool ScaleWordsByPowerOfTwo(std::uint16_t* p, std::size_t count, float factor, bool& found) {
    const std::optional<simd::WordScale> scale = simd::PowerOfTwoWordScale<Avx512Ops, D>(factor);
    if (!scale) {
      return false;
    }
    const __m512i exponent_mask = _mm512_set1_epi16(static_cast<short>(scale->exponent_mask));
    const __m512i range_start = _mm512_set1_epi16(static_cast<short>(scale->range_start));
    const __m512i range_size = _mm512_set1_epi16(static_cast<short>(scale->range_size));
    const __m512i magnitude = _mm512_set1_epi16(0x7fff);
    const __m512i delta = _mm512_set1_epi16(static_cast<short>(scale->delta));
    const __m512 f = _mm512_set1_ps(factor);
    Flag flag = NoFlag<D>();

    const auto step = [&](__m512i words) {
      // Nonzero lanes whose exponent is out of range need the FP32 path. When there are none,
      // the lanes to add k to are exactly the nonzero ones (an in-range exponent is never 0).
      const __mmask32 nonzero = _mm512_test_epi16_mask(words, magnitude);
      const __m512i exponent = _mm512_and_si512(words, exponent_mask);
      const __mmask32 out_of_range =
          _mm512_mask_cmpge_epu16_mask(nonzero, _mm512_sub_epi16(exponent, range_start), range_size);
      if (out_of_range == 0) {
        return _mm512_mask_add_epi16(words, nonzero, words, delta);  // zeros stay zeros
      }
      const __m512i out = MultiplyWordsViaFloat<D>(words, f);
      flag = Fold<D>(flag, out);
      return out;
    };
    RunWords(p, count, step);
    found = AnyNonFinite<D>(flag);
    return true;
  }

  // Applies step (32 words in, 32 words out) over p[0, count): aligned full registers in
  // the middle, masked registers at the ends (masked-off lanes load as +0).
  template <typename Step>
  static void RunWords(std::uint16_t* p, std::size_t count, Step&& step) {
    // Words before p + i reaches a 64-byte boundary (one masked register), so the loop
    // below uses aligned full-register loads and stores.
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(p) % 64;
    std::size_t i = std::min(count, misalignment == 0 ? std::size_t{0} : (64 - misalignment) / sizeof(std::uint16_t));
    const auto partial = [&](std::size_t at, std::size_t n) {
      const __mmask32 m = WordLanes(n);
      _mm512_mask_storeu_epi16(p + at, m, step(_mm512_maskz_loadu_epi16(m, p + at)));
    };
    if (i > 0) {
      partial(0, i);
    }
    for (; i + 64 <= count; i += 64) {
      simd::PrefetchLines<Avx512Ops, 2>(p + i);
      const __m512i a = step(_mm512_load_si512(p + i));
      const __m512i b = step(_mm512_load_si512(p + i + 32));
      _mm512_store_si512(p + i, a);
      _mm512_store_si512(p + i + 32, b);
    }
    for (; i + 32 <= count; i += 32) {
      _mm512_store_si512(p + i, step(_mm512_load_si512(p + i)));
    }
    if (i < count) {
      partial(i, count - i);
    }
  }

  // FP32 sum of squares of BF16 words, 32 per register: a BF16 word is the high half of its
  // FP32 value, so the even elements widen with one shift and the odd ones with one mask
  // (two uops per 32 elements instead of two per 16 for the zero-extend + shift widening).
  static float SumSquaresBf16Words(const std::uint16_t* p, std::size_t count) {
    const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps();
    __m512 acc3 = _mm512_setzero_ps();
    const auto add = [&](__m512i words, __m512& even_acc, __m512& odd_acc) {
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(words, high_halves));
      even_acc = _mm512_fmadd_ps(even, even, even_acc);
      odd_acc = _mm512_fmadd_ps(odd, odd, odd_acc);
    };
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(p) % 64;
    std::size_t i = std::min(count, misalignment == 0 ? std::size_t{0} : (64 - misalignment) / sizeof(std::uint16_t));
    if (i > 0) {
      add(_mm512_maskz_loadu_epi16(WordLanes(i), p), acc0, acc1);
    }
    for (; i + 64 <= count; i += 64) {
      simd::PrefetchLines<Avx512Ops, 2>(p + i);
      add(_mm512_load_si512(p + i), acc0, acc1);
      add(_mm512_load_si512(p + i + 32), acc2, acc3);
    }
    for (; i + 32 <= count; i += 32) {
      add(_mm512_load_si512(p + i), acc0, acc1);
    }
    if (i < count) {
      add(_mm512_maskz_loadu_epi16(WordLanes(count - i), p + i), acc2, acc3);
    }
    // xsimd::hadd, not _mm512_reduce_add_ps, whose GCC 12 header trips -Wuninitialized (bug 105593).
    return xsimd::hadd(Batch(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3))));
  }

#if defined(__AVX512FP16__)
  // VMULPH path for FP16: any finite factor that is itself an FP16 number.
  static bool ScaleHalfWordsNative(std::uint16_t* p, std::size_t count, float factor, bool& found) {
    const auto h = static_cast<_Float16>(factor);
    if (static_cast<float>(h) != factor || factor - factor != 0.0f) {
      return false;  // not an FP16 number (products would round twice), or not finite
    }
    const __m512h f = _mm512_set1_ph(h);
    Flag flag = NoFlag<DataType::Float16>();
    RunWords(p, count, [&](__m512i words) {
      const __m512i out = _mm512_castph_si512(_mm512_mul_ph(_mm512_castsi512_ph(words), f));
      flag = Fold<DataType::Float16>(flag, out);
      return out;
    });
    found = AnyNonFinite<DataType::Float16>(flag);
    return true;
  }
#endif

  /// In-place x = round(x * factor) on 16-bit words when a word path is exact for this
  /// factor; returns false (nothing written) when the caller must use the FP32 path.
  template <DataType D>
  static bool ScaleWords(std::uint16_t* p, std::size_t count, float factor, bool& found) {
#if defined(__AVX512FP16__)
    if constexpr (Arch::kNativeFp16 && D == DataType::Float16) {
      return ScaleHalfWordsNative(p, count, factor, found);
    }
#endif
    return ScaleWordsByPowerOfTwo<D>(p, count, factor, found);
  }
};

}  // namespace

}  // namespace mlframework::backends::cpu

// AVX2 element kernels (AVX2 + FMA + F16C), compiled with those flags only for
// this file; KernelDispatch.cpp selects them only when the CPU has them.
//
// FP32 math runs on xsimd::batch<float, xsimd::fma3<xsimd::avx2>>. FP16
// converts with F16C (VCVTPH2PS / VCVTPS2PH, round to nearest even), bit-exact
// with core/FloatBits.hpp; BF16 rounds with integer SIMD (bits + 0x7fff + lsb,
// NaN quieted). AVX2 has no masked 16-bit loads or stores, so a tail of fewer
// than eight elements goes through a small zero-filled buffer and memcpy.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"
#include "mlframework/backends/cpu/SimdKernels.hpp"

namespace mlframework::backends::cpu {

namespace {

using simd::Element;

// The operations of arch::Avx2 for SimdKernels.hpp. kPrefetchPages: software prefetch a page
// ahead (KernelTable::from_memory).
template <class Arch, bool kPrefetchPages>
struct Avx2Ops {
  static constexpr bool kPrefetch = kPrefetchPages;
  using Batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
  static constexpr std::size_t kWidth = 8;
  using Flag = __m256i;
  static constexpr bool kWordKernels = true;    // ScaleWords() below
  static constexpr bool kBf16WordSums = false;  // the FP32 path's BF16 sum of squares runs at memory speed

  template <DataType D>
  static Batch Load(const Element<D>* p) {
    if constexpr (D == DataType::Float32) {
      return Batch(_mm256_loadu_ps(p));
    } else if constexpr (D == DataType::Float16) {
      return Batch(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    } else {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      // Explicit: braces could pick xsimd's element-list constructor.
      return Batch(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));  // NOLINT(modernize-return-braced-init-list)
    }
  }

  template <DataType D>
  static Batch LoadPartial(const Element<D>* p, std::size_t n) {
    alignas(32) Element<D> buffer[kWidth] = {};
    std::memcpy(buffer, p, n * sizeof(Element<D>));
    return Load<D>(buffer);
  }

  // FP32 elements widened exactly to FP64, for the sum of squares of calls from memory.
  using WideBatch = xsimd::batch<double, xsimd::fma3<xsimd::avx2>>;

  // kWidth FP32 elements at p as two halves of FP64 lanes.
  static std::pair<WideBatch, WideBatch> LoadWide(const float* p) {
    return {WideBatch(_mm256_cvtps_pd(_mm_loadu_ps(p))), WideBatch(_mm256_cvtps_pd(_mm_loadu_ps(p + 4)))};
  }

  // The lanes of v as two halves of FP64 lanes (for the partial head and tail).
  static std::pair<WideBatch, WideBatch> Widen(const Batch& v) {
    const __m256 x = v;
    return {WideBatch(_mm256_cvtps_pd(_mm256_castps256_ps128(x))),
            WideBatch(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)))};
  }

  // FloatToBFloat16Bits for 8 lanes, packed to 8 words.
  static __m128i RoundToBFloat16(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i words = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x0040)), nan);
    // Every lane holds a value below 2^16, so the saturating pack is exact.
    return _mm_packus_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
  }

  template <DataType D>
  static __m128i Narrow(__m256 v) {
    if constexpr (D == DataType::Float16) {
      return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      return RoundToBFloat16(v);
    }
  }

  template <DataType D>
  static constexpr int kExponent = D == DataType::Float32 ? 0x7f800000 : (D == DataType::Float16 ? 0x7c00 : 0x7f80);

  template <DataType D>
  static Flag NoFlag() {
    return _mm256_setzero_si256();
  }

  // flag = max(flag, bits & exponent) lane-wise, over 16-bit or 32-bit lanes.
  template <DataType D>
  static Flag Fold(Flag flag, __m256i bits) {
    if constexpr (D == DataType::Float32) {
      return _mm256_max_epu32(flag, _mm256_and_si256(bits, _mm256_set1_epi32(kExponent<D>)));
    } else {
      return _mm256_max_epu16(flag, _mm256_and_si256(bits, _mm256_set1_epi16(static_cast<short>(kExponent<D>))));
    }
  }

  // The lane-wise maximum of two flags.
  template <DataType D>
  static Flag Merge(Flag a, Flag b) {
    if constexpr (D == DataType::Float32) {
      return _mm256_max_epu32(a, b);
    } else {
      return _mm256_max_epu16(a, b);
    }
  }

  template <DataType D>
  static bool AnyNonFinite(Flag flag) {
    __m256i hit;
    if constexpr (D == DataType::Float32) {
      hit = _mm256_cmpeq_epi32(flag, _mm256_set1_epi32(kExponent<D>));
    } else {
      hit = _mm256_cmpeq_epi16(flag, _mm256_set1_epi16(static_cast<short>(kExponent<D>)));
    }
    return _mm256_testz_si256(hit, hit) == 0;
  }

  // kStream: p is aligned to one full vector and the store bypasses the caches.
  template <DataType D, bool kStream = false>
  static void Store(Element<D>* p, Batch v, Flag& flag) {
    if constexpr (D == DataType::Float32) {
      if constexpr (kStream) {
        _mm256_stream_ps(p, v);
      } else {
        _mm256_storeu_ps(p, v);
      }
      flag = Fold<D>(flag, _mm256_castps_si256(v));
    } else {
      const __m128i words = Narrow<D>(v);
      if constexpr (kStream) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(p), words);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), words);
      }
      flag = Fold<D>(flag, _mm256_zextsi128_si256(words));
    }
  }

  template <DataType D>
  static void StorePartial(Element<D>* p, std::size_t n, Batch v, Flag& flag) {
    alignas(32) Element<D> buffer[kWidth] = {};
    Flag ignored = NoFlag<D>();
    Store<D>(buffer, v, ignored);
    // Only the n written lanes count for the flag.
    std::memset(buffer + n, 0, (kWidth - n) * sizeof(Element<D>));
    std::memcpy(p, buffer, n * sizeof(Element<D>));
    CheckPartialBuffer<D>(buffer, flag);
  }

  /// In-place x = round(x * factor) on 16-bit words for a factor 2^k (normal, positive), 16
  /// words a register: Avx512Ops::ScaleWordsByPowerOfTwo() with byte blends and an unsigned
  /// maximum for the 16-bit masks and compares AVX2 lacks. Words whose exponent stays normal get
  /// k added to it; a register holding any other nonzero word (subnormal, Inf, NaN, or leaving
  /// the normal range) takes the FP32 path. Returns false, writing nothing, for any other factor.
  template <DataType D>
  static bool ScaleWords(std::uint16_t* p, std::size_t count, float factor, bool& found) {
    const std::optional<simd::WordScale> scale = simd::PowerOfTwoWordScale<Avx2Ops, D>(factor);
    if (!scale) {
      return false;
    }
    const __m256i exponent_mask = _mm256_set1_epi16(static_cast<short>(scale->exponent_mask));
    const __m256i range_start = _mm256_set1_epi16(static_cast<short>(scale->range_start));
    const __m256i range_size = _mm256_set1_epi16(static_cast<short>(scale->range_size));
    const __m256i magnitude = _mm256_set1_epi16(0x7fff);
    const __m256i delta = _mm256_set1_epi16(static_cast<short>(scale->delta));
    const __m256 f = _mm256_set1_ps(factor);
    Flag flag = NoFlag<D>();
    const auto step = [&](__m256i words) {
      const __m256i zero = _mm256_cmpeq_epi16(_mm256_and_si256(words, magnitude), _mm256_setzero_si256());
      // exponent - range_start >= range_size as unsigned 16-bit values: the maximum is the left side.
      const __m256i offset = _mm256_sub_epi16(_mm256_and_si256(words, exponent_mask), range_start);
      const __m256i beyond = _mm256_cmpeq_epi16(_mm256_max_epu16(offset, range_size), offset);
      const __m256i out_of_range = _mm256_andnot_si256(zero, beyond);
      if (_mm256_testz_si256(out_of_range, out_of_range) != 0) {
        return _mm256_add_epi16(words, _mm256_andnot_si256(zero, delta));  // zeros stay zeros
      }
      const __m256i out = MultiplyWordsViaFloat<D>(words, f);
      flag = Fold<D>(flag, out);
      return out;
    };
    RunWords(p, count, step);
    found = AnyNonFinite<D>(flag);
    return true;
  }

  // The read-only check folds into the same flag as the stores (AVX2 has no mask registers).
  using CheckFlag = Flag;

  template <DataType D>
  static constexpr std::size_t kCheckElements = 32 / sizeof(Element<D>);

  template <DataType D>
  static CheckFlag NoCheckFlag() {
    return NoFlag<D>();
  }

  template <DataType D>
  static CheckFlag MergeChecks(CheckFlag a, CheckFlag b) {
    return Merge<D>(a, b);
  }

  template <DataType D>
  static bool AnyNonFiniteChecked(CheckFlag flag) {
    return AnyNonFinite<D>(flag);
  }

  template <DataType D>
  static void CheckBlock(const Element<D>* p, Flag& flag) {
    flag = Fold<D>(flag, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  template <DataType D>
  static void CheckPartial(const Element<D>* p, std::size_t n, Flag& flag) {
    alignas(32) Element<D> buffer[kCheckElements<D>] = {};
    std::memcpy(buffer, p, n * sizeof(Element<D>));
    CheckBlock<D>(buffer, flag);
  }

 private:
  // The 16 words of @p words times @p f through FP32, rounded back as Store() rounds.
  template <DataType D>
  static __m256i MultiplyWordsViaFloat(__m256i words, __m256 f) {
    const auto widen = [](__m128i half) {
      if constexpr (D == DataType::Float16) {
        return _mm256_cvtph_ps(half);
      } else {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
      }
    };
    const __m128i low = Narrow<D>(_mm256_mul_ps(widen(_mm256_castsi256_si128(words)), f));
    const __m128i high = Narrow<D>(_mm256_mul_ps(widen(_mm256_extracti128_si256(words, 1)), f));
    return _mm256_set_m128i(high, low);
  }

  // Applies step (16 words in, 16 words out) over p[0, count): aligned registers in the middle,
  // and the words before the first 32-byte boundary and after the last one through a zero-filled
  // buffer (zeros give zeros on both of ScaleWords()' paths).
  template <typename Step>
  static void RunWords(std::uint16_t* p, std::size_t count, Step&& step) {
    const auto partial = [&](std::size_t at, std::size_t n) {
      alignas(32) std::uint16_t buffer[16] = {};
      std::memcpy(buffer, p + at, n * sizeof(std::uint16_t));
      _mm256_store_si256(reinterpret_cast<__m256i*>(buffer),
                         step(_mm256_load_si256(reinterpret_cast<const __m256i*>(buffer))));
      std::memcpy(p + at, buffer, n * sizeof(std::uint16_t));
    };
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(p) % 32;
    std::size_t i = std::min(count, misalignment == 0 ? std::size_t{0} : (32 - misalignment) / sizeof(std::uint16_t));
    if (i > 0) {
      partial(0, i);
    }
    for (; i + 32 <= count; i += 32) {
      simd::PrefetchLines<Avx2Ops, 1>(p + i);
      auto* at = reinterpret_cast<__m256i*>(p + i);
      const __m256i a = step(_mm256_load_si256(at));
      const __m256i b = step(_mm256_load_si256(at + 1));
      _mm256_store_si256(at, a);
      _mm256_store_si256(at + 1, b);
    }
    for (; i + 16 <= count; i += 16) {
      auto* at = reinterpret_cast<__m256i*>(p + i);
      _mm256_store_si256(at, step(_mm256_load_si256(at)));
    }
    if (i < count) {
      partial(i, count - i);
    }
  }

  template <DataType D>
  static void CheckPartialBuffer(const Element<D>* buffer, Flag& flag) {
    if constexpr (D == DataType::Float32) {
      CheckBlock<D>(buffer, flag);
    } else {
      flag = Fold<D>(flag, _mm256_zextsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(buffer))));
    }
  }
};

}  // namespace

template <>
const KernelTable& KernelsOf<arch::Avx2>() noexcept {
  static constexpr KernelTable kTable = simd::MakeTable<arch::Avx2, Avx2Ops, KernelTable>();
  return kTable;
}

}  // namespace mlframework::backends::cpu

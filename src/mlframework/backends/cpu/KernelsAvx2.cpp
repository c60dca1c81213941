// AVX2 element kernels (AVX2 + FMA + F16C), compiled with those flags only for
// this file; KernelDispatch.cpp selects them only when the CPU has them.
//
// FP32 math runs on xsimd::batch<float, xsimd::fma3<xsimd::avx2>>. FP16
// converts with F16C (VCVTPH2PS / VCVTPS2PH, round to nearest even), bit-exact
// with core/FloatBits.hpp; BF16 rounds with integer SIMD (bits + 0x7fff + lsb,
// NaN quieted). AVX2 has no masked 16-bit loads or stores, so a tail of fewer
// than eight elements goes through a small zero-filled buffer and memcpy.

#include <immintrin.h>

#include <cstring>
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
  static constexpr bool kWordKernels = false;  // no 16-bit masks: every 16-bit op takes the FP32 path

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

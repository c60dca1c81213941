#pragma once
// Private: Philox-4x32-10 (core/Philox.hpp) on the lanes of one AVX-512 or AVX2 register, one
// counter per lane, for the stochastic rounding of the fused optimizer steps. Include only from
// the OptimizerKernels*.cpp files (through OptimizerElements.hpp), each compiled with its flags.
//
// A round multiplies two words of each counter into 64-bit products: VPMULUDQ multiplies the even
// 32-bit lanes, so each product is taken twice (even lanes, odd lanes moved down) and the high and
// low halves are put back into their lanes. The words come out word-major (word k of every
// counter in one register); four unpacks interleave them into counter order, the order of the
// elements' random halves (core/Philox.hpp, PhiloxElementBits()). For that to need no shuffle
// across 128-bit lanes, lane 4L + k holds counter kQuads * k + L (kQuads = lanes / 4): after the
// unpacks, register k holds the four words of counters kQuads * k .. kQuads * k + kQuads - 1,
// which are the 16-bit halves of the elements 8 * kQuads * k on.

#include <cstddef>
#include <cstdint>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace mlframework::backends::cpu::optimizer {

namespace {

inline constexpr std::uint32_t kPhiloxMultiplier0 = 0xD2511F53u;
inline constexpr std::uint32_t kPhiloxMultiplier1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxWeyl0 = 0x9E3779B9u;
inline constexpr std::uint32_t kPhiloxWeyl1 = 0xBB67AE85u;

// The unpacks of 32-bit and 64-bit lanes within each 128-bit lane, at either register width.
#if defined(__AVX512F__)
inline void Unpack32(__m512i a, __m512i b, __m512i& lo, __m512i& hi) {
  lo = _mm512_unpacklo_epi32(a, b);
  hi = _mm512_unpackhi_epi32(a, b);
}
inline void Unpack64(__m512i a, __m512i b, __m512i& lo, __m512i& hi) {
  lo = _mm512_unpacklo_epi64(a, b);
  hi = _mm512_unpackhi_epi64(a, b);
}
#endif
#if defined(__AVX2__)
inline void Unpack32(__m256i a, __m256i b, __m256i& lo, __m256i& hi) {
  lo = _mm256_unpacklo_epi32(a, b);
  hi = _mm256_unpackhi_epi32(a, b);
}
inline void Unpack64(__m256i a, __m256i b, __m256i& lo, __m256i& hi) {
  lo = _mm256_unpacklo_epi64(a, b);
  hi = _mm256_unpackhi_epi64(a, b);
}

/// The word-major registers @p c0 .. @p c3 (word k of every counter in register k) in counter
/// order: out[k] holds words 0 to 3 of the counters in lane k of each 128-bit lane.
template <class V>
inline void ToCounterOrder(V c0, V c1, V c2, V c3, V out[4]) {
  V t0;
  V t1;
  V t2;
  V t3;
  Unpack32(c0, c1, t0, t2);
  Unpack32(c2, c3, t1, t3);
  Unpack64(t0, t1, out[0], out[1]);
  Unpack64(t2, t3, out[2], out[3]);
}
#endif

#if defined(__AVX512F__)
/// The round keys of Philox-4x32-10 under key (key0, key1), each broadcast into every lane: the
/// same for every call of a step, so they are computed once rather than in each round of each call.
struct PhiloxKeys16 {
  PhiloxKeys16(std::uint32_t key0, std::uint32_t key1) {
    for (int r = 0; r < 10; ++r) {
      k0[r] = _mm512_set1_epi32(static_cast<int>(key0 + static_cast<std::uint32_t>(r) * kPhiloxWeyl0));
      k1[r] = _mm512_set1_epi32(static_cast<int>(key1 + static_cast<std::uint32_t>(r) * kPhiloxWeyl1));
    }
  }
  __m512i k0[10];
  __m512i k1[10];
};

/// The words of Philox-4x32-10 of the 16 x kSets counters (@p first + j, @p tensor, @p step) for j
/// in [0, 16 x kSets) under @p keys, in counter order: out[4s + k] holds words 0 to 3 of counters
/// 16s + 4k .. 16s + 4k + 3, that is the 32 halves of elements 32k .. 32k + 31 of the 128 elements
/// counters 16s .. 16s + 15 cover (element 8j + h: half h of counter j). Two sets interleave
/// their rounds, whose dependency chains one set alone leaves the multipliers and shuffle port
/// waiting on.
template <std::size_t kSets>
inline void PhiloxWords16(std::uint64_t first, std::uint32_t tensor, std::uint32_t step, const PhiloxKeys16& keys,
                          __m512i out[4 * kSets]) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i c0[kSets];
  __m512i c1[kSets];
  __m512i c2[kSets];
  __m512i c3[kSets];
  for (std::size_t s = 0; s < kSets; ++s) {
    const std::uint64_t set_first = first + 16 * s;
    const __m512i base = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(set_first)));
    c0[s] = _mm512_add_epi32(base, order);
    // The counter's high word carries when its low word wrapped.
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0[s], base);
    c1[s] = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(set_first >> 32)));
    c1[s] = _mm512_mask_add_epi32(c1[s], carry, c1[s], _mm512_set1_epi32(1));
    c2[s] = _mm512_set1_epi32(static_cast<int>(tensor));
    c3[s] = _mm512_set1_epi32(static_cast<int>(step));
  }
  const __m512i m0 = _mm512_set1_epi64(kPhiloxMultiplier0);
  const __m512i m1 = _mm512_set1_epi64(kPhiloxMultiplier1);
  for (int r = 0; r < 10; ++r) {
    for (std::size_t s = 0; s < kSets; ++s) {
      const __m512i even0 = _mm512_mul_epu32(c0[s], m0);
      const __m512i odd0 = _mm512_mul_epu32(_mm512_shuffle_epi32(c0[s], _MM_PERM_CDAB), m0);
      const __m512i even1 = _mm512_mul_epu32(c2[s], m1);
      const __m512i odd1 = _mm512_mul_epu32(_mm512_shuffle_epi32(c2[s], _MM_PERM_CDAB), m1);
      // Even lanes: the even product's high (low) half; odd lanes: the odd product's.
      const __m512i hi0 = _mm512_mask_shuffle_epi32(odd0, 0x5555, even0, _MM_PERM_CDAB);
      const __m512i lo0 = _mm512_mask_shuffle_epi32(even0, 0xAAAA, odd0, _MM_PERM_CDAB);
      const __m512i hi1 = _mm512_mask_shuffle_epi32(odd1, 0x5555, even1, _MM_PERM_CDAB);
      const __m512i lo1 = _mm512_mask_shuffle_epi32(even1, 0xAAAA, odd1, _MM_PERM_CDAB);
      c0[s] = _mm512_ternarylogic_epi32(hi1, c1[s], keys.k0[r], 0x96);  // three-way XOR
      c2[s] = _mm512_ternarylogic_epi32(hi0, c3[s], keys.k1[r], 0x96);
      c1[s] = lo1;
      c3[s] = lo0;
    }
  }
  for (std::size_t s = 0; s < kSets; ++s) {
    ToCounterOrder(c0[s], c1[s], c2[s], c3[s], out + 4 * s);
  }
}
#endif

#if defined(__AVX2__)
/// PhiloxWords16() on 8 x kSets counters: out[4s + k] holds words 0 to 3 of counters 8s + 2k and
/// 8s + 2k + 1, the halves of elements 16k .. 16k + 15 of the 64 elements counters 8s .. 8s + 7
/// cover. Two sets interleave their rounds, as in PhiloxWords16().
template <std::size_t kSets>
inline void PhiloxWords8(std::uint64_t first, std::uint32_t tensor, std::uint32_t step, std::uint32_t key0,
                         std::uint32_t key1, __m256i out[4 * kSets]) {
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  __m256i c0[kSets];
  __m256i c1[kSets];
  __m256i c2[kSets];
  __m256i c3[kSets];
  for (std::size_t s = 0; s < kSets; ++s) {
    const std::uint64_t set_first = first + 8 * s;
    const __m256i base = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(set_first)));
    c0[s] = _mm256_add_epi32(base, order);
    // Unsigned c0 < base by the signed compare of both with the sign bit flipped: -1 where it wrapped.
    const __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(base, flip), _mm256_xor_si256(c0[s], flip));
    c1[s] = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(set_first >> 32))), wrapped);
    c2[s] = _mm256_set1_epi32(static_cast<int>(tensor));
    c3[s] = _mm256_set1_epi32(static_cast<int>(step));
  }
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxMultiplier0);
  const __m256i m1 = _mm256_set1_epi64x(kPhiloxMultiplier1);
  for (int r = 0; r < 10; ++r) {
    const __m256i k0 = _mm256_set1_epi32(static_cast<int>(key0 + static_cast<std::uint32_t>(r) * kPhiloxWeyl0));
    const __m256i k1 = _mm256_set1_epi32(static_cast<int>(key1 + static_cast<std::uint32_t>(r) * kPhiloxWeyl1));
    for (std::size_t s = 0; s < kSets; ++s) {
      const __m256i even0 = _mm256_mul_epu32(c0[s], m0);
      const __m256i odd0 = _mm256_mul_epu32(_mm256_srli_epi64(c0[s], 32), m0);
      const __m256i even1 = _mm256_mul_epu32(c2[s], m1);
      const __m256i odd1 = _mm256_mul_epu32(_mm256_srli_epi64(c2[s], 32), m1);
      const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(even0, 32), odd0, 0xAA);
      const __m256i lo0 = _mm256_blend_epi32(even0, _mm256_slli_epi64(odd0, 32), 0xAA);
      const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(even1, 32), odd1, 0xAA);
      const __m256i lo1 = _mm256_blend_epi32(even1, _mm256_slli_epi64(odd1, 32), 0xAA);
      c0[s] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[s]), k0);
      c2[s] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[s]), k1);
      c1[s] = lo1;
      c3[s] = lo0;
    }
  }
  for (std::size_t s = 0; s < kSets; ++s) {
    ToCounterOrder(c0[s], c1[s], c2[s], c3[s], out + 4 * s);
  }
}
#endif

}  // namespace

}  // namespace mlframework::backends::cpu::optimizer

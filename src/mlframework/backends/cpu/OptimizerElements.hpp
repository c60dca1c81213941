#pragma once
// Private: the element loops of the fused optimizer steps, generic over the value type: float
// (the portable table and every table's tail) or an xsimd batch of floats (the SIMD tables).
// Include only from the OptimizerKernels*.cpp files, which are compiled with -ffp-contract=off
// and -fno-math-errno (OptimizerKernels.hpp, "Numerics"): every fused multiply-add is an explicit
// MulAdd, none is left to the compiler.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/core/Philox.hpp>

#include "mlframework/backends/cpu/Float8Elements.hpp"
#include "mlframework/backends/cpu/OptimizerKernels.hpp"
#include "mlframework/backends/cpu/PhiloxLanes.hpp"
#include "mlframework/core/StateCodes.hpp"

namespace mlframework::backends::cpu::optimizer {

// Internal linkage: each per-instruction-set file gets its own copy of these functions, compiled
// with its flags. With external linkage the linker would keep one copy of an instantiation the
// files share (the scalar tails over float), which could be another file's wider code.
namespace {

// Elements of a piece updated before their FP16/BF16 copy is written: the block is still in the
// L1 cache when the narrowing kernel reads it back, so the copy costs no pass over memory.
inline constexpr std::size_t kNarrowBlock = 2048;

// Value type T (float or a batch): load and store FP32 elements.
template <class T>
T Load(const float* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *p;
  } else {
    return T::load_unaligned(p);
  }
}

template <class T>
void Store(float* p, const T& value) {
  if constexpr (std::is_same_v<T, float>) {
    *p = value;
  } else {
    value.store_unaligned(p);
  }
}

template <class T>
constexpr std::size_t Width() {
  if constexpr (std::is_same_v<T, float>) {
    return 1;
  } else {
    return T::size;
  }
}

// The lanes of T as the int template argument of float8::Elements (1 for float: no vector loop).
template <class T>
inline constexpr int kLanes = static_cast<int>(Width<T>());

// a * b + c: one fused multiply-add (rounded once) on the vector tables, where PyTorch's AVX2 and
// AVX-512 kernels fuse it (vec::fmadd, and their scalar tails compiled with FMA), or a product and
// a sum each rounded to FP32 on the portable table, as PyTorch's default (non-vector) kernels.
template <bool kFused, class T>
inline T MulAdd(const T& a, const T& b, const T& c) {
  if constexpr (!kFused) {
    return a * b + c;
  } else if constexpr (std::is_same_v<T, float>) {
    return std::fma(a, b, c);
#if defined(__AVX512F__)
  } else if constexpr (T::size == 16) {  // a batch of one __m512
    return T(_mm512_fmadd_ps(a, b, c));  // xsimd 8's AVX-512 fma is a*b + c, two roundings
#endif
  } else {
    return xsimd::fma(a, b, c);
  }
}

#if defined(__AVX512F__)
// PyTorch's CPU sqrt of FP32 tensors is MKL's vsSqrt, which is not correctly rounded: on an
// AVX-512 CPU it is VRSQRT14PS refined by one fused Newton step on the root (checked bit for bit
// against torch 2.15 on normal, subnormal and special inputs), under every ATen CPU capability.
// Inputs below 2^-100 are scaled by 2^64 first (the residual would be subnormal); zero, negative,
// infinite and NaN inputs take the IEEE square root.
//
// Only a positive input below 2^-100 needs the scaling, and a vector without one skips it (a
// branch, nearly always taken): the compare and two masked products on the root's dependency
// chain made the FP32 AdamW step about 10% slower (EPYC, one core). Zero, negative and NaN lanes
// take VFIXUPIMMPS's result whether scaled or not, so both ways give the same bits.
[[gnu::always_inline]] inline __m512 MklSqrt(__m512 x) {
  // The IEEE root of the special inputs by class (VFIXUPIMMPS, one instruction, no compare or
  // branch): a NaN itself (a signalling one quieted), +-0 itself, +infinity itself, -infinity and
  // negative values the default NaN; +1 and the positive values keep r. The same bits as VSQRTPS
  // on each of the 2^32 inputs (checked exhaustively).
  constexpr std::int32_t kSqrtClasses = 0x03530121;  // a nibble per class: positive ... QNaN
  constexpr std::int32_t kTinyBits = 0x0d800000;     // 2^-100
  const __m512i bits = _mm512_castps_si512(x);
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(bits, _mm512_set1_epi32(1)),
                                                 _mm512_set1_epi32(kTinyBits - 1));  // 0 < x < 2^-100
  // VRSQRT14PS and one fused Newton step on the root.
  const auto refine = [](__m512 s) {
    const __m512 y = _mm512_rsqrt14_ps(s);
    const __m512 root = _mm512_mul_ps(s, y);
    const __m512 half_y = _mm512_mul_ps(_mm512_set1_ps(0.5f), y);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(root, root, s), half_y, root);
  };
  __m512 r;
  if (tiny == 0) [[likely]] {
    r = refine(x);
  } else {
    const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p-100f), _CMP_LT_OQ);
    r = refine(_mm512_mask_mul_ps(x, small, x, _mm512_set1_ps(0x1p64f)));
    r = _mm512_mask_mul_ps(r, small, r, _mm512_set1_ps(0x1p-32f));
  }
  return _mm512_fixupimm_ps(r, x, _mm512_set1_epi32(kSqrtClasses), 0);
}
#endif

// The square root of Adam's denominator. kTorchRoot: as PyTorch takes it, MKL's on the AVX-512
// table (vector bodies and scalar tails alike), the IEEE one elsewhere. torch's CPU sqrt is
// MKL's on every x86 CPU, whose algorithm on other instruction sets is not reproduced here: on
// the AVX2 and portable tables an element whose root lies within 0.06 ulp of a rounding midpoint
// can round the other way than torch's (OptimizerKernels.hpp, "Numerics"). Otherwise the IEEE
// root on every table, as the CUDA kernels take it (TakesTorchRoot()).
template <bool kTorchRoot, class T>
[[gnu::always_inline]] inline T Root(const T& x) {
#if defined(__AVX512F__)
  if constexpr (kTorchRoot) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_cvtss_f32(MklSqrt(_mm512_set1_ps(x)));
    } else if constexpr (T::size == 16) {  // a batch of one __m512
      return T(MklSqrt(x));
    }
  }
#endif
  using std::sqrt;  // float; xsimd::sqrt for batches (found by argument-dependent lookup)
  return sqrt(x);
}

// Whether the Adam step of @p piece takes torch's square root (Root()): a step with FP32 moments
// and FP32 or remainder masters, whose bits are torch's. A step with a moment stored in a lower
// precision, or with BF16 masters rounded stochastically, has no torch counterpart; it takes the
// IEEE root on every instruction set, the CUDA kernels' arithmetic, so that its bits are the same
// on every CPU and GPU.
inline bool TakesTorchRoot(const OptimizerPiece& piece) {
  const StoredFormats* f = piece.formats;
  return f == nullptr || (f->first == StateFormat::Float32 && f->second == StateFormat::Float32 &&
                          f->masters != MasterFormat::BFloat16StochasticRounding);
}

// The Adam constants broadcast into T (each already rounded to FP32 once, AdamStepScalars).
template <class T>
struct AdamConstants {
  explicit AdamConstants(const AdamStepScalars& s)
      : first_weight(s.FirstMomentWeight),
        // lerp's large-weight form `end + (weight - 1) * (end - self)`; weight - 1 is exact in FP32.
        first_weight_minus_one(s.FirstMomentWeight - 1.0f),
        beta2(s.Beta2),
        second_weight(s.SecondMomentWeight),
        epsilon(s.Epsilon),
        l2(s.L2),
        decay(s.Decay),
        neg_step_size(-s.StepSize),
        bias_correction2_sqrt(s.BiasCorrection2Sqrt) {}
  T first_weight, first_weight_minus_one, beta2, second_weight, epsilon, l2, decay, neg_step_size,
      bias_correction2_sqrt;
};

// Which of torch's forms a step takes: its branches are fixed per step, so they are template
// arguments rather than per-element tests.
struct AdamForm {
  bool l2;            // grad.add(param, alpha=weight_decay): Adam with weight decay
  bool decay;         // param.mul_(1 - lr * weight_decay): AdamW with weight decay
  bool small_weight;  // lerp's weight < 0.5: self + weight * (end - self)
};

// One Adam update, PyTorch's single-tensor Adam op by op (torch/optim/adam.py, _single_tensor_adam,
// capturable=False): `grad.add(param, alpha=wd)` or `param.mul_(1 - lr*wd)`; `exp_avg.lerp_(grad,
// 1 - beta1)`; `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)`; `denom =
// (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`; `param.addcdiv_(exp_avg, denom,
// value=-step_size)`, each ATen kernel's arithmetic (addcdiv: `self + (value * t1) / t2`).
// Always inlined: it is the body of every Adam span, and where GCC's inliner ran out of budget
// (several spans in one step function) a call per vector cost the staged BF16 step 40%.
template <bool kFused, bool kL2, bool kDecay, bool kSmallWeight, bool kTorchRoot, class T>
[[gnu::always_inline]] inline void AdamElement(T& w, const T& g, T& m, T& v, const AdamConstants<T>& c) {
  T d = g;
  if constexpr (kL2) {
    d = MulAdd<kFused>(w, c.l2, g);
  }
  if constexpr (kDecay) {
    w = w * c.decay;
  }
  const T diff = d - m;
  if constexpr (kSmallWeight) {
    m = MulAdd<kFused>(c.first_weight, diff, m);
  } else {
    m = MulAdd<kFused>(c.first_weight_minus_one, diff, d);
  }
  v = MulAdd<kFused>(c.second_weight * d, d, v * c.beta2);
  const T denom = Root<kTorchRoot>(v) / c.bias_correction2_sqrt + c.epsilon;
  w = w + (c.neg_step_size * m) / denom;
}

// Calls fn(lo, hi) over [0, piece.count) in blocks, writing each block's FP16/BF16 copy after it.
template <class Fn>
inline void ForEachBlock(const OptimizerPiece& piece, Fn&& fn) {
  if (piece.low_precision == nullptr) {
    fn(std::size_t{0}, piece.count);
    return;
  }
  auto* low = static_cast<unsigned char*>(piece.low_precision);
  for (std::size_t lo = 0; lo < piece.count; lo += kNarrowBlock) {
    const std::size_t hi = lo + kNarrowBlock < piece.count ? lo + kNarrowBlock : piece.count;
    fn(lo, hi);
    // FP16 and BF16 elements are two bytes; the cast kernel with factor 1 rounds exactly as
    // CastInto() does.
    static_cast<void>(piece.narrow(piece.parameter + lo, low + 2 * lo, hi - lo, 1.0f));
  }
}

// The value type's table fuses multiply-adds exactly when it is a vector one (MulAdd).
template <class Batch>
inline constexpr bool kFusedTable = !std::is_same_v<Batch, float>;

// The largest magnitude of the values raised into it (vectors of a batch type Batch, and
// floats), as AbsMax() gives it: the integer maximum of the magnitudes' bits, kept lane-wise.
// Magnitudes' bits are below 2^31, so a signed maximum orders them: VPMAXSD on the AVX-512 and
// AVX2 tables (one instruction where a compare and a select take two), else a compare and a
// select, not xsimd::max (SimdKernels.hpp, RaiseAmax()).
template <class Batch>
struct LaneMax {
  using Bits = xsimd::batch<std::int32_t, typename Batch::arch_type>;
  Bits lanes = Bits(0);
  std::uint32_t scalar = 0;
  void Raise(const Batch& x) {
    const Bits bits = xsimd::bitwise_cast<Bits>(x) & Bits(0x7fffffff);
#if defined(__AVX512F__)
    if constexpr (Bits::size == 16) {
      lanes = Bits(_mm512_max_epi32(bits, lanes));
      return;
    }
#endif
#if defined(__AVX2__)
    if constexpr (Bits::size == 8) {
      lanes = Bits(_mm256_max_epi32(bits, lanes));
      return;
    }
#endif
    lanes = xsimd::select(bits > lanes, bits, lanes);
  }
  void Raise(float x) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(x) & 0x7fffffffu;
    scalar = bits > scalar ? bits : scalar;
  }
  float Value() const {
    alignas(64) std::int32_t each[Bits::size];
    lanes.store_aligned(each);
    std::uint32_t largest = scalar;
    for (std::size_t k = 0; k < Bits::size; ++k) {
      largest = static_cast<std::uint32_t>(each[k]) > largest ? static_cast<std::uint32_t>(each[k]) : largest;
    }
    return std::bit_cast<float>(largest);
  }
};

// Nothing: the LaneMax of a span that takes no maxima.
struct NoLaneMax {};

// Where the update loop reads a state's old values: the FP32 array it writes them back to (the
// state itself, or a staged tile decoded before the loop).
struct FloatsIn {
  template <class T>
  T Get(const float* values, std::size_t i) const {
    return Load<T>(values + i);
  }
};

// The value of the E4M3FN code @p code, Float8E4M3FNBitsToFloat()'s bits in selects and integer
// operations that vectorise: a normal code is its exponent rebiased and its mantissa moved up; a
// subnormal one, its 3-bit mantissa times 2^-9 (exact); S.1111.111 is NaN.
inline float Float8Value(std::uint8_t code) {
  const std::uint32_t magnitude = code & 0x7fu;
  const std::uint32_t normal = (magnitude << 20) + (120u << 23);
  const auto subnormal = std::bit_cast<std::uint32_t>(static_cast<float>(magnitude) * 0x1p-9f);
  const std::uint32_t is_normal = 0u - static_cast<std::uint32_t>(magnitude >= 8u);  // all ones or zero
  const std::uint32_t is_nan = 0u - static_cast<std::uint32_t>(magnitude == 0x7fu);
  std::uint32_t bits = (normal & is_normal) | (subnormal & ~is_normal);
  bits = (0x7ff00000u & is_nan) | (bits & ~is_nan);
  return std::bit_cast<float>(bits | (static_cast<std::uint32_t>(code & 0x80u) << 24));
}

// The value of one-byte code @p code of the block-scaled format kFormat before its scale: the
// integer (Int8Block sign-extended) or the E4M3FN value (Float8Value()), each exact in FP32.
template <StateFormat kFormat>
inline float CodeValue(std::uint8_t code) {
  if constexpr (kFormat == StateFormat::Int8Block) {
    return static_cast<float>(static_cast<std::int8_t>(code));
  } else if constexpr (kFormat == StateFormat::UInt8Block) {
    return static_cast<float>(code);
  } else {
    return Float8Value(code);
  }
}

// CodeValue() of the kWidth codes at @p in, on float8::Elements' vectors: one widening load and
// an exact conversion.
template <StateFormat kFormat, int kWidth>
inline typename float8::Elements<kWidth>::F CodeLanes(const std::uint8_t* in) {
  using Lanes = float8::Elements<kWidth>;
  using F = typename Lanes::F;
  using I = typename Lanes::I;
  if constexpr (kFormat == StateFormat::Int8Block) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {  // VPMOVSXBD: the load sign-extends, no shifts
      return reinterpret_cast<F>(
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)))));
    }
#endif
#if defined(__AVX2__)
    if constexpr (kWidth == 8) {
      return reinterpret_cast<F>(
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)))));
    }
#endif
  }
  const typename Lanes::U code = Lanes::WidenBytes(in);
  if constexpr (kFormat == StateFormat::Int8Block) {
    return __builtin_convertvector(reinterpret_cast<I>(code << 24) >> 24, F);  // sign-extended
  } else if constexpr (kFormat == StateFormat::UInt8Block) {
    return __builtin_convertvector(reinterpret_cast<I>(code), F);
  } else {
    return reinterpret_cast<F>(Lanes::template Decode<DataType::Float8E4M3FN>(code));
  }
}

// Reads a block's one-byte codes of the block-scaled format kFormat and decodes them in the loop,
// as DecodeCodes() does (an exact conversion, one FP32 product): the tile's FP32 copy of the
// state is then only written, for the encode, and the decode's pass over the tile is saved.
template <StateFormat kFormat>
struct BlockCodesIn {
  const std::uint8_t* codes;
  float scale;
  template <class T>
  T Get(const float* /*values*/, std::size_t i) const {
    if constexpr (std::is_same_v<T, float>) {
      return CodeValue<kFormat>(codes[i]) * scale;
    } else {
      using F = typename float8::Elements<static_cast<int>(T::size)>::F;
      const F y = CodeLanes<kFormat, static_cast<int>(T::size)>(codes + i) * (F{} + scale);
      return T::load_unaligned(reinterpret_cast<const float*>(&y));
    }
  }
};

// Reads BF16 codes and widens them in the loop (exact: the code is the FP32 value's top half),
// as DecodeState() does for a BFloat16 state.
struct BFloat16In {
  const std::uint16_t* codes;
  template <class T>
  T Get(const float* /*values*/, std::size_t i) const {
    if constexpr (std::is_same_v<T, float>) {
      return mlframework::detail::BFloat16BitsToFloat(codes[i]);
    } else {
#if defined(__AVX512F__)
      if constexpr (T::size == 16) {
        const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
        return T(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16)));
      }
#endif
#if defined(__AVX2__)
      if constexpr (T::size == 8) {
        const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
        return T(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16)));
      }
#endif
      alignas(64) float lanes[T::size];
      for (std::size_t k = 0; k < T::size; ++k) {
        lanes[k] = mlframework::detail::BFloat16BitsToFloat(codes[i + k]);
      }
      return T::load_aligned(lanes);
    }
  }
};

// Adam over n elements whose masters and states are FP32 arrays (in memory, or a staged tile);
// kMax (vector tables only): also the largest magnitudes of the new m and v (AbsMax()) into
// maxima[0] and maxima[1], folded into the update loop instead of a pass of their own. The old
// m and v come from @p first_in and @p second_in (FloatsIn: m and v themselves).
template <class Batch, bool kL2, bool kDecay, bool kSmallWeight, bool kTorchRoot, bool kMax = false,
          class FirstIn = FloatsIn, class SecondIn = FloatsIn>
inline void AdamSpan(float* w, const float* g, float* m, float* v, std::size_t n, const AdamConstants<Batch>& vc,
                     const AdamConstants<float>& sc, float* maxima = nullptr, const FirstIn& first_in = {},
                     const SecondIn& second_in = {}) {
  constexpr bool kFused = kFusedTable<Batch>;
  constexpr std::size_t kWidth = Width<Batch>();
  [[maybe_unused]] std::conditional_t<kMax, LaneMax<Batch>, NoLaneMax> m_max;
  [[maybe_unused]] std::conditional_t<kMax, LaneMax<Batch>, NoLaneMax> v_max;
  std::size_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    auto wi = Load<Batch>(w + i);
    auto mi = first_in.template Get<Batch>(m, i);
    auto vi = second_in.template Get<Batch>(v, i);
    AdamElement<kFused, kL2, kDecay, kSmallWeight, kTorchRoot>(wi, Load<Batch>(g + i), mi, vi, vc);
    Store(m + i, mi);
    Store(v + i, vi);
    Store(w + i, wi);
    if constexpr (kMax) {
      m_max.Raise(mi);
      v_max.Raise(vi);
    }
  }
  for (; i < n; ++i) {
    auto mi = first_in.template Get<float>(m, i);
    auto vi = second_in.template Get<float>(v, i);
    AdamElement<kFused, kL2, kDecay, kSmallWeight, kTorchRoot>(w[i], g[i], mi, vi, sc);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kMax) {
      m_max.Raise(mi);
      v_max.Raise(vi);
    }
  }
  if constexpr (kMax) {
    maxima[0] = m_max.Value();
    maxima[1] = v_max.Value();
  }
}

// ---- Masters and states not stored in FP32: each tile of StagedTileElements() elements is
// decoded into FP32 copies in the cache, updated by the FP32 loop, and encoded back, so memory is
// read and written once (StateCodes.hpp has the codes; these loops are the CUDA kernels' arithmetic).

// The FP32 values code * scale of @p n one-byte codes of the block-scaled format kFormat, on
// vectors of kWidth lanes (CodeLanes()) and CodeValue() for the tail.
template <StateFormat kFormat, int kWidth>
inline void DecodeCodes(const std::uint8_t* in, std::size_t n, float scale, float* out) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (kFormat == StateFormat::Float8E4M3Block && kWidth == 16) {
    // E4M3FN's bits moved into FP16's (sign to bit 15, exponent and mantissa to bits 13..7) are
    // the code's value times 2^-8, normal and subnormal codes alike, which VCVTPH2PS widens
    // exactly; the scale times 2^8 (exact: no block's scale reaches 2^120) restores it, so each
    // product is CodeValue() * scale rounded once. NaN codes (S.1111.111) take Float8Value()'s NaN
    // before the product. Six operations on 16-bit lanes where the FP32 decode took thirteen.
    const __m512 factor = _mm512_set1_ps(scale * 256.0f);
    for (; i + 16 <= n; i += 16) {
      const __m256i code = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
      const __m256i moved = _mm256_slli_epi16(code, 7);  // the sign lands on bit 14
      const __m256i half = _mm256_add_epi16(moved, _mm256_and_si256(moved, _mm256_set1_epi16(0x4000)));
      const __mmask16 nan =
          _mm256_cmpeq_epi16_mask(_mm256_and_si256(moved, _mm256_set1_epi16(0x3f80)), _mm256_set1_epi16(0x3f80));
      __m512 value = _mm512_cvtph_ps(half);
      // (sign & value) | 0x7ff00000: Float8Value()'s NaN, with the code's sign.
      value = _mm512_castsi512_ps(_mm512_mask_ternarylogic_epi32(_mm512_castps_si512(value), nan,
                                                                 _mm512_set1_epi32(static_cast<int>(0x80000000u)),
                                                                 _mm512_set1_epi32(0x7ff00000), 0xea));
      _mm512_storeu_ps(out + i, _mm512_mul_ps(value, factor));
    }
  }
#endif
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (kFormat == StateFormat::Float8E4M3Block && kWidth == 8) {  // as above, on eight lanes
    const __m256 factor = _mm256_set1_ps(scale * 256.0f);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
    const __m256 nan_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7ff00000));
    for (; i + 8 <= n; i += 8) {
      const __m128i code = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)));
      const __m128i moved = _mm_slli_epi16(code, 7);
      const __m128i half = _mm_add_epi16(moved, _mm_and_si128(moved, _mm_set1_epi16(0x4000)));
      const __m128i nan16 = _mm_cmpeq_epi16(_mm_and_si128(moved, _mm_set1_epi16(0x3f80)), _mm_set1_epi16(0x3f80));
      const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan16));
      __m256 value = _mm256_cvtph_ps(half);
      value = _mm256_blendv_ps(value, _mm256_or_ps(_mm256_and_ps(value, sign), nan_bits), nan);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(value, factor));
    }
  }
#endif
  if constexpr (kWidth > 1) {
    using F = typename float8::Elements<kWidth>::F;
    const F factor = F{} + scale;
    for (; i + kWidth <= n; i += kWidth) {
      const F y = CodeLanes<kFormat, kWidth>(in + i) * factor;
      std::memcpy(out + i, &y, sizeof y);
    }
  }
#pragma omp simd
  for (std::size_t k = i; k < n; ++k) {
    out[k] = CodeValue<kFormat>(in[k]) * scale;
  }
}

// The FP32 values of elements [lo, lo + n) of a state stored as @p format.
template <int kWidth>
inline void DecodeState(StateFormat format, const void* data, const float* scales, std::size_t block, std::size_t lo,
                        std::size_t n, float* out) {
  switch (format) {
    case StateFormat::Float32:
      break;
    case StateFormat::BFloat16: {
      const auto* in = static_cast<const std::uint16_t*>(data) + lo;
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = mlframework::detail::BFloat16BitsToFloat(in[i]);
      }
      break;
    }
    case StateFormat::Float16: {
      const auto* in = static_cast<const std::uint16_t*>(data) + lo;
      for (std::size_t b = 0; b < n; b += block) {
        const std::size_t end = b + block < n ? b + block : n;
        const float scale = scales[(lo + b) / block];
#pragma omp simd
        for (std::size_t i = b; i < end; ++i) {
          out[i] = mlframework::detail::HalfBitsToFloat(in[i]) * scale;
        }
      }
      break;
    }
    case StateFormat::Int8Block:
    case StateFormat::UInt8Block:
    case StateFormat::Float8E4M3Block: {
      const auto* in = static_cast<const std::uint8_t*>(data) + lo;
      for (std::size_t b = 0; b < n; b += block) {
        const std::size_t end = b + block < n ? b + block : n;
        const float scale = scales[(lo + b) / block];
        if (format == StateFormat::Int8Block) {
          DecodeCodes<StateFormat::Int8Block, kWidth>(in + b, end - b, scale, out + b);
        } else if (format == StateFormat::UInt8Block) {
          DecodeCodes<StateFormat::UInt8Block, kWidth>(in + b, end - b, scale, out + b);
        } else {
          DecodeCodes<StateFormat::Float8E4M3Block, kWidth>(in + b, end - b, scale, out + b);
        }
      }
      break;
    }
  }
}

// The largest magnitude of values[b, e), NaN when one is NaN: the integer maximum of the
// magnitudes' bits (every NaN's bits lie above infinity's, which lie above every finite value's).
inline float AbsMax(const float* values, std::size_t b, std::size_t e) {
  std::uint32_t largest = 0;
#pragma omp simd
  for (std::size_t i = b; i < e; ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(values[i]) & 0x7fffffffu;
    largest = bits > largest ? bits : largest;
  }
  return std::bit_cast<float>(largest);
}

// Stores the linear codes of the rounded integer values @p r (of the values @p x) into out[0,
// Batch::size); kSecond: a positive value whose code would be 0 gets code 1.
template <bool kSecond, class Batch>
inline void StoreLinearCodes(const Batch& x, Batch r, std::uint8_t* out) {
  if constexpr (kSecond) {
    r = xsimd::select((x > Batch(0.0f)) & (r == Batch(0.0f)), Batch(1.0f), r);
  }
  // The low byte of each integer lane (the code's two's complement for Int8Block).
  using Lanes = float8::Elements<static_cast<int>(Batch::size)>;
  Lanes::NarrowBytes(reinterpret_cast<typename Lanes::U>(xsimd::batch_cast<std::int32_t>(r).data), out);
}

// LinearBlockCode() of values[0, n) (one block) into out[0, n): on batches of the value type
// Batch, the products with the block's reciprocal rounded to integers (a scale without a normal
// reciprocal divides, as LinearCode()), and LinearBlockCode() itself for the tail. On the AVX-512
// table VCVTPS2DQ with embedded round-to-nearest-even gives the integer in one instruction where
// the generic loop takes the magic-number sum, and the keep-positive rule is an integer maximum
// with the value's bits clamped to 1. The products need no NaN select and only the lower clamp
// (LinearBlockCode()).
template <bool kSecond, class Batch>
inline void EncodeLinearBlock(const float* values, std::uint8_t* out, std::size_t n, float scale, float code_max) {
  const bool by_reciprocal = mlframework::detail::LinearReciprocalEncodes(scale);
  const float reciprocal = by_reciprocal ? 1.0f / scale : 0.0f;
  const float low = code_max == 127.0f ? -127.0f : 0.0f;
  std::size_t whole = 0;
  if constexpr (!std::is_same_v<Batch, float>) {
    whole = n - n % Batch::size;
    std::size_t i = 0;
#if defined(__AVX512F__)
    if constexpr (Batch::size == 16) {
      const __m512 factor = _mm512_set1_ps(reciprocal);
      const __m512 bound = _mm512_set1_ps(low);
      for (; by_reciprocal && i < whole; i += 16) {
        const __m512 x = _mm512_loadu_ps(values + i);
        const __m512 q = _mm512_max_ps(_mm512_mul_ps(x, factor), bound);
        __m512i code = _mm512_cvt_roundps_epi32(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if constexpr (kSecond) {
          // A positive value's code 0 to 1: its bits are at least 1, a negative value's (-0's
          // too) are negative as signed integers, far below every code.
          code = _mm512_max_epi32(code, _mm512_min_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(1)));
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(code));  // VPMOVDB
      }
    }
#endif
#if defined(__AVX2__)
    if constexpr (Batch::size == 8) {  // the loop above on eight lanes, rounding with VROUNDPS
      const __m256 factor = _mm256_set1_ps(reciprocal);
      const __m256 bound = _mm256_set1_ps(low);
      for (; by_reciprocal && i < whole; i += 8) {
        const __m256 x = _mm256_loadu_ps(values + i);
        const __m256 q = _mm256_max_ps(_mm256_mul_ps(x, factor), bound);
        __m256i code = _mm256_cvttps_epi32(_mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if constexpr (kSecond) {
          code = _mm256_max_epi32(code, _mm256_min_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(1)));
        }
        float8::Elements<8>::NarrowBytes(reinterpret_cast<float8::Elements<8>::U>(code), out + i);
      }
    }
#endif
    const Batch magic(12582912.0f);  // RoundHalfEven()'s 1.5 * 2^23
    const Batch bound(low);
    const Batch factor(reciprocal);
    for (; by_reciprocal && i < whole; i += Batch::size) {
      const Batch x = Batch::load_unaligned(values + i);
      // MAXPS for the bound: it differs from LinearBlockCode()'s select only in which of two
      // equal values (or of -0 and +0, which give the same code) it returns.
      const Batch q = xsimd::max(x * factor, bound);
      StoreLinearCodes<kSecond>(x, (q + magic) - magic, out + i);
    }
    const Batch high(code_max);
    const Batch divisor(scale);
    const Batch zero(0.0f);
    for (; i < whole; i += Batch::size) {
      const Batch x = Batch::load_unaligned(values + i);
      const Batch quotient = x / divisor;  // NaN to 0, as LinearCode()
      const Batch q = xsimd::min(xsimd::max(xsimd::select(quotient == quotient, quotient, zero), bound), high);
      StoreLinearCodes<kSecond>(x, (q + magic) - magic, out + i);
    }
  }
  for (std::size_t i = whole; i < n; ++i) {
    out[i] = mlframework::detail::LinearBlockCode(values[i], scale, reciprocal, code_max, kSecond);
  }
}

// Keeps the second moment's positive values positive: a code 0 of a positive value becomes the
// format's smallest positive code (1 in every format's bits).
template <class Code>
inline void KeepPositive(const float* values, Code* out, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = values[i] > 0.0f && out[i] == 0 ? Code{1} : out[i];
  }
}

// BFloat16StateCode() of values[0, n) into out[0, n): core/FloatBits.hpp's rounding in integer
// operations the loop vectorises, kSecond's keep-positive select in the same pass (the cast
// kernel and a KeepPositive() pass after it took twice the time).
// On AVX2 (and AVX-512 without AVX512_BF16) the loop is written out: GCC 12 vectorises the
// scalar rule, but narrows its 32-bit lanes to 16 bits lane by lane.
template <bool kSecond>
inline void EncodeBFloat16(const float* values, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX2__)
  // FloatToBFloat16Bits() on eight lanes: (x + 0x7fff + lsb) >> 16, or (x >> 16) | 0x40 for NaN.
  auto codes = [](const float* v) {
    const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(v));
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i high = _mm256_srli_epi32(x, 16);
    const __m256i rounding = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
    __m256i code = _mm256_blendv_epi8(_mm256_srli_epi32(_mm256_add_epi32(x, rounding), 16),
                                      _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
    if constexpr (kSecond) {
      // A positive value's code 0 to 1, as EncodeLinearBlock(): its bits are at least 1, a
      // negative value's (-0's too) are negative as signed integers, below every code.
      code = _mm256_max_epi32(code, _mm256_min_epi32(x, _mm256_set1_epi32(1)));
    }
    return code;
  };
  for (; i + 16 <= n; i += 16) {
    // The codes are below 2^16, so the unsigned saturating pack keeps them; the permute undoes
    // its interleaving of the 128-bit halves.
    const __m256i packed = _mm256_packus_epi32(codes(values + i), codes(values + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(packed, 0xd8));
  }
#endif
#pragma omp simd
  for (std::size_t k = i; k < n; ++k) {
    out[k] = mlframework::detail::BFloat16StateCode(values[k], kSecond);
  }
}

#if defined(__AVX512F__)
// EncodeBFloat16() with VCVTNE2PS2BF16 (AVX512_BF16: 32 values an instruction), for a CPU that
// has it (StoredFormats::native_bf16). The instruction rounds as FloatToBFloat16Bits() (nearest
// even, NaN quieted) except that it flushes subnormal inputs to zero: 32 values holding a
// subnormal take EncodeBFloat16()'s integer rounding instead, so the codes never differ. Without
// subnormals no positive value rounds to code 0, so kSecond's keep-positive rule has nothing to
// do there.
template <bool kSecond>
__attribute__((target("avx512bf16"))) void EncodeBFloat16Native(const float* values, std::uint16_t* out,
                                                                std::size_t n) {
  constexpr int kSubnormal = 0x20;  // VFPCLASSPS: denormal, either sign
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 low = _mm512_loadu_ps(values + i);
    const __m512 high = _mm512_loadu_ps(values + i + 16);
    if ((_mm512_fpclass_ps_mask(low, kSubnormal) | _mm512_fpclass_ps_mask(high, kSubnormal)) != 0) {
      EncodeBFloat16<kSecond>(values + i, out + i, 32);
      continue;
    }
    // The second operand's values fill the low half.
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low)));
  }
  EncodeBFloat16<kSecond>(values + i, out + i, n - i);
}
#endif

// The E4M3FN codes of values[i] * @p factor (saturating) into out[0, n): the FP8 kernels' encode
// on the FP32 bits (float8::Elements, core/Float8Bits.hpp's rounding) in the same loop as the
// product; kSecond: a positive value that would get code 0 gets the smallest subnormal.
// @p finite_block: the block's scale is finite, so every value is finite and each product lies
// below 448 * (1 + 2^-20) (the scale absmax / 448 and the factor 1 / scale each rounded once, or
// a factor 0), far from 464, where E4M3FN's saturation starts: the vectors then take the rounding
// alone, without the saturation, NaN and NaN-sign selects no such product takes (the same bits).
template <bool kSecond, int kWidth>
inline void EncodeFloat8(const float* values, std::uint8_t* out, std::size_t n, float factor, bool finite_block) {
  std::size_t i = 0;
  if constexpr (kWidth > 1) {
    using Lanes = float8::Elements<kWidth>;
    using F = typename Lanes::F;
    using U = typename Lanes::U;
    const F scale = F{} + factor;
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      // The loop below in intrinsics: masked blends and the keep-positive rule as an integer
      // maximum (a positive value's bits are at least 1, a negative one's, -0's included, below
      // 0 as signed integers, so max(code, min(bits, 1)) raises only a positive value's code 0 to
      // 1), 16 operations a vector where the generic vectors take 21.
      const __m512 f = _mm512_set1_ps(factor);
      for (; finite_block && i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(values + i);
        const __m512i y = _mm512_castps_si512(_mm512_mul_ps(x, f));
        const __m512i ax = _mm512_and_si512(y, _mm512_set1_epi32(0x7fffffff));
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(ax, 20), _mm512_set1_epi32(1));
        const __m512i normal = _mm512_sub_epi32(
            _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(ax, _mm512_set1_epi32(0x7ffff)), odd), 20),
            _mm512_set1_epi32(120 << 3));
        const __m512i subnormal =
            _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(ax), _mm512_set1_ps(16384.0f))),
                             _mm512_set1_epi32(0x46800000));
        const __mmask16 small = _mm512_cmplt_epu32_mask(ax, _mm512_set1_epi32(0x3c800000));  // below 2^-6
        __m512i code = _mm512_mask_blend_epi32(small, normal, subnormal);
        // code | ((y >> 24) & 0x80): the sign.
        code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(y, 24), _mm512_set1_epi32(0x80), 0xf8);
        if constexpr (kSecond) {
          code = _mm512_max_epi32(code, _mm512_min_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(1)));
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(code));
      }
    }
#endif
#if defined(__AVX2__)
    if constexpr (kWidth == 8) {  // the loop above on eight lanes, with blends for the masks
      const __m256 f = _mm256_set1_ps(factor);
      for (; finite_block && i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(values + i);
        const __m256i y = _mm256_castps_si256(_mm256_mul_ps(x, f));
        const __m256i ax = _mm256_and_si256(y, _mm256_set1_epi32(0x7fffffff));
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(ax, 20), _mm256_set1_epi32(1));
        const __m256i normal = _mm256_sub_epi32(
            _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(ax, _mm256_set1_epi32(0x7ffff)), odd), 20),
            _mm256_set1_epi32(120 << 3));
        const __m256i subnormal =
            _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(ax), _mm256_set1_ps(16384.0f))),
                             _mm256_set1_epi32(0x46800000));
        // ax below 2^-6; a signed compare, as ax has no sign bit.
        const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), ax);
        __m256i code = _mm256_blendv_epi8(normal, subnormal, small);
        code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(y, 24), _mm256_set1_epi32(0x80)));
        if constexpr (kSecond) {
          code = _mm256_max_epi32(code, _mm256_min_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(1)));
        }
        Lanes::NarrowBytes(reinterpret_cast<U>(code), out + i);
      }
    }
#endif
    for (; finite_block && i + kWidth <= n; i += kWidth) {
      F x;
      std::memcpy(&x, values + i, sizeof x);
      const U y = reinterpret_cast<U>(x * scale);
      U code = Lanes::E4M3FNMagnitude(y & 0x7fffffffu) | ((y >> 24) & 0x80u);
      if constexpr (kSecond) {
        code = Lanes::Select((x > 0.0f) & (code == 0u), Lanes::Splat(1u), code);
      }
      Lanes::NarrowBytes(code, out + i);
    }
    for (; i + kWidth <= n; i += kWidth) {
      F x;
      std::memcpy(&x, values + i, sizeof x);
      const F y = x * scale;
      U code = Lanes::template Encode<DataType::Float8E4M3FN>(reinterpret_cast<U>(y));
      // CanonicalFloat8Code(): the sign of a NaN product depends on the operand order.
      code = Lanes::Select((code & 0x7fu) == 0x7fu, Lanes::Splat(mlframework::detail::kFloat8NaNCode), code);
      if constexpr (kSecond) {
        code = Lanes::Select((x > 0.0f) & (code == 0u), Lanes::Splat(1u), code);
      }
      Lanes::NarrowBytes(code, out + i);
    }
  }
  for (; i < n; ++i) {
    const std::uint8_t code =
        mlframework::detail::CanonicalFloat8Code(mlframework::detail::FloatToFloat8E4M3FNSatBits(values[i] * factor));
    out[i] = kSecond && values[i] > 0.0f && code == 0 ? std::uint8_t{1} : code;
  }
}

// Encodes @p values (elements [lo, lo + n)) into a state stored as @p format, with new block
// scales; @p second: the second moment, whose positive values stay positive. The FP16 rounding is
// the CPU backend's cast kernel (StoredFormats), the BF16 one EncodeBFloat16() (or
// EncodeBFloat16Native()) and the E4M3FN one EncodeFloat8(), which round as the conversions of
// core/FloatBits.hpp and core/Float8Bits.hpp do. @p maxima: the
// block-scaled formats' largest magnitude of each block of @p values (AbsMax()), already taken
// by the update loop, or null to take them here.
template <class Batch>
inline void EncodeState(const StoredFormats& f, StateFormat format, void* data, float* scales, std::size_t lo,
                        std::size_t n, const float* values, bool second, const float* maxima) {
  const std::size_t block = f.block_size;
  switch (format) {
    case StateFormat::Float32:
      break;
    case StateFormat::BFloat16: {
      auto* out = static_cast<std::uint16_t*>(data) + lo;
#if defined(__AVX512F__)
      if (f.native_bf16) {
        if (second) {
          EncodeBFloat16Native<true>(values, out, n);
        } else {
          EncodeBFloat16Native<false>(values, out, n);
        }
        break;
      }
#endif
      if (second) {
        EncodeBFloat16<true>(values, out, n);
      } else {
        EncodeBFloat16<false>(values, out, n);
      }
      break;
    }
    case StateFormat::Float16: {
      // Float16BlockCode(): the cast kernel rounds each product value * (1 / scale) to FP16.
      auto* out = static_cast<std::uint16_t*>(data) + lo;
      for (std::size_t b = 0; b < n; b += block) {
        const std::size_t end = b + block < n ? b + block : n;
        const float absmax = maxima != nullptr ? maxima[b / block] : AbsMax(values, b, end);
        const float scale = mlframework::detail::Float16BlockScale(absmax);
        scales[(lo + b) / block] = scale;
        static_cast<void>(f.to_float16(values + b, out + b, end - b, mlframework::detail::Float16CodeFactor(scale)));
        if (std::isnan(scale)) {
          // A NaN block (and only it: a finite factor times a non-NaN value is no NaN) has NaN
          // codes alone, each with the sign and payload of one operand: Float16BlockCode() writes
          // kHalfNaNCode.
          std::fill(out + b, out + end, mlframework::detail::kHalfNaNCode);
        }
        if (second) {
          KeepPositive(values + b, out + b, end - b);
        }
      }
      break;
    }
    case StateFormat::Int8Block:
    case StateFormat::UInt8Block:
    case StateFormat::Float8E4M3Block: {
      auto* out = static_cast<std::uint8_t*>(data) + lo;
      const float code_max = mlframework::detail::BlockCodeMax(format);
      for (std::size_t b = 0; b < n; b += block) {
        const std::size_t end = b + block < n ? b + block : n;
        const float absmax = maxima != nullptr ? maxima[b / block] : AbsMax(values, b, end);
        const float scale = mlframework::detail::BlockScale(format, absmax);
        scales[(lo + b) / block] = scale;
        if (format == StateFormat::Float8E4M3Block) {
          const float factor = mlframework::detail::Float8CodeFactor(scale);
          const bool finite_block = std::isfinite(scale);
          if (second) {
            EncodeFloat8<true, kLanes<Batch>>(values + b, out + b, end - b, factor, finite_block);
          } else {
            EncodeFloat8<false, kLanes<Batch>>(values + b, out + b, end - b, factor, finite_block);
          }
        } else {
          if (second) {
            EncodeLinearBlock<true, Batch>(values + b, out + b, end - b, scale, code_max);
          } else {
            EncodeLinearBlock<false, Batch>(values + b, out + b, end - b, scale, code_max);
          }
        }
      }
      break;
    }
  }
}

// The FP32 masters of elements [lo, lo + n) of a BF16-master piece.
inline void DecodeMasters(const OptimizerPiece& piece, std::size_t lo, std::size_t n, float* out) {
  const auto* param = static_cast<const std::uint16_t*>(piece.parameter_data) + lo;
  if (piece.formats->masters == MasterFormat::BFloat16Remainder) {
    const std::uint16_t* remainder = piece.remainders + lo;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = mlframework::detail::MasterFromRemainder(param[i], remainder[i]);
    }
    return;
  }
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = mlframework::detail::BFloat16BitsToFloat(param[i]);
  }
}

// StochasticRoundToBFloat16Bits() of values[0, m) into out[0, m) with the 16-bit halves of the
// Philox counters (@p first_group + j, @p tensor, @p step) (PhiloxElementBits()), m the largest
// multiple of 8 x kWidth up to @p n, on the lanes of the AVX-512 or AVX2 table (PhiloxLanes.hpp);
// returns m (0 elsewhere).
template <int kWidth>
inline std::size_t RoundStochastically(const float* values, std::uint16_t* out, std::size_t n,
                                       std::uint64_t first_group, std::uint32_t tensor, std::uint32_t step,
                                       std::uint32_t seed0, std::uint32_t seed1) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (kWidth == 16) {
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
    const __m512i infinity = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    const PhiloxKeys16 keys(seed0, seed1);
    // The BF16 codes of the 16 values at @p v rounded with the 16 random halves @p halves, one
    // per 32-bit lane: infinities and NaNs take no random bits, and a NaN is quieted.
    auto round = [&](const float* v, __m256i halves) {
      const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(v));
      const __m512i ax = _mm512_and_si512(x, magnitude);
      const __mmask16 finite = _mm512_cmplt_epi32_mask(ax, infinity);
      const __mmask16 nan = _mm512_cmpgt_epi32_mask(ax, infinity);
      const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_maskz_cvtepu16_epi32(finite, halves)), 16);
      return _mm512_mask_or_epi32(r, nan, r, quiet);
    };
    // words[k] holds the halves of the 32 elements 32k on, in element order. The codes are
    // below 2^16, so the unsigned saturating pack keeps them; the permute undoes its interleaving
    // of the 128-bit lanes.
    auto round_words = [&](const __m512i* words, std::size_t count, std::size_t at) {
      for (std::size_t k = 0; k < count; ++k) {
        const std::size_t e = at + 32 * k;
        const __m512i packed = _mm512_packus_epi32(round(values + e, _mm512_castsi512_si256(words[k])),
                                                   round(values + e + 16, _mm512_extracti64x4_epi64(words[k], 1)));
        _mm512_storeu_si512(out + e, _mm512_permutexvar_epi64(order, packed));
      }
    };
    for (; i + 256 <= n; i += 256) {
      __m512i words[8];
      PhiloxWords16<2>(first_group + i / 8, tensor, step, keys, words);
      round_words(words, 8, i);
    }
    for (; i + 128 <= n; i += 128) {
      __m512i words[4];
      PhiloxWords16<1>(first_group + i / 8, tensor, step, keys, words);
      round_words(words, 4, i);
    }
  }
#endif
#if defined(__AVX2__)
  if constexpr (kWidth == 8) {
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    const __m256i infinity = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    // As the AVX-512 rounding: the random halves only where the value is finite.
    auto round = [&](const float* v, __m128i halves) {
      const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(v));
      const __m256i ax = _mm256_and_si256(x, magnitude);
      const __m256i finite = _mm256_cmpgt_epi32(infinity, ax);
      const __m256i nan = _mm256_cmpgt_epi32(ax, infinity);
      const __m256i r =
          _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_and_si256(finite, _mm256_cvtepu16_epi32(halves))), 16);
      return _mm256_or_si256(r, _mm256_and_si256(nan, quiet));
    };
    // words[k] holds the halves of the 16 elements 16k on. Both results are below 2^16: the
    // unsigned saturating pack keeps them; the permute undoes its interleaving of the 128-bit
    // halves.
    auto round_words = [&](const __m256i* words, std::size_t count, std::size_t at) {
      for (std::size_t k = 0; k < count; ++k) {
        const std::size_t e = at + 16 * k;
        const __m256i packed = _mm256_packus_epi32(round(values + e, _mm256_castsi256_si128(words[k])),
                                                   round(values + e + 8, _mm256_extracti128_si256(words[k], 1)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + e), _mm256_permute4x64_epi64(packed, 0xd8));
      }
    };
    for (; i + 128 <= n; i += 128) {
      __m256i words[8];
      PhiloxWords8<2>(first_group + i / 8, tensor, step, seed0, seed1, words);
      round_words(words, 8, i);
    }
    for (; i + 64 <= n; i += 64) {
      __m256i words[4];
      PhiloxWords8<1>(first_group + i / 8, tensor, step, seed0, seed1, words);
      round_words(words, 4, i);
    }
  }
#endif
  static_cast<void>(values);
  static_cast<void>(out);
  static_cast<void>(n);
  static_cast<void>(first_group);
  static_cast<void>(tensor);
  static_cast<void>(step);
  static_cast<void>(seed0);
  static_cast<void>(seed1);
  return i;
}

// Stores the updated FP32 masters @p values of elements [lo, lo + n) of a BF16-master piece.
template <int kWidth>
inline void EncodeMasters(const OptimizerPiece& piece, std::size_t lo, std::size_t n, const float* values) {
  auto* param = static_cast<std::uint16_t*>(piece.parameter_data) + lo;
  if (piece.formats->masters == MasterFormat::BFloat16Remainder) {
    std::uint16_t* remainder = piece.remainders + lo;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) {
      mlframework::detail::SplitMaster(values[i], param + i, remainder + i);
    }
    return;
  }
  // Stochastic rounding: one Philox block per eight counter indices (PhiloxElementBits()). The
  // elements before the first index that is a multiple of eight (the piece's offset need not be
  // one) and the tail take one call of Philox4x32() per block; the body 16 x kWidth elements per
  // vector call.
  const StoredFormats& f = *piece.formats;
  const std::uint64_t base = piece.offset + lo;  // the counter index of values[0]
  const auto step = static_cast<std::uint32_t>(f.step);
  const std::uint32_t tensor = piece.tensor;
  const auto round_one_by_one = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to;) {
      const std::uint64_t group = (base + k) / kPhiloxElementsPerBlock;
      const Philox4x32Block bits = PhiloxRoundingBlock(f.seed, step, tensor, group);
      for (; k < to && (base + k) / kPhiloxElementsPerBlock == group; ++k) {
        param[k] = StochasticRoundToBFloat16Bits(
            values[k], PhiloxBlockHalf(bits, static_cast<std::uint32_t>((base + k) % kPhiloxElementsPerBlock)));
      }
    }
  };
  const std::size_t head =
      std::min<std::size_t>(n, (kPhiloxElementsPerBlock - base % kPhiloxElementsPerBlock) % kPhiloxElementsPerBlock);
  round_one_by_one(0, head);
  const std::size_t body = RoundStochastically<kWidth>(
      values + head, param + head, n - head, (base + head) / kPhiloxElementsPerBlock, tensor, step,
      static_cast<std::uint32_t>(f.seed), static_cast<std::uint32_t>(f.seed >> 32));
  round_one_by_one(head + body, n);
}

// Asks for the @p bytes bytes at @p data in the cache (no effect on any value).
inline void Prefetch(const void* data, std::size_t bytes) {
  if (data == nullptr) {
    return;
  }
  const auto* p = static_cast<const char*>(data);
  for (std::size_t k = 0; k < bytes; k += 64) {
    __builtin_prefetch(p + k, 0, 2);
  }
}

// Asks for the bytes the tile of elements [lo, lo + n) of @p piece reads: each stage of a staged
// tile reads one array, so without the request the next array's stream waits on memory.
inline void PrefetchTile(const OptimizerPiece& piece, std::size_t lo, std::size_t n) {
  const StoredFormats& f = *piece.formats;
  auto bytes_of = [](StateFormat format) { return ElementSize(StateStorageDType(format)); };
  Prefetch(piece.gradient + lo, 4 * n);
  if (piece.parameter != nullptr) {
    Prefetch(piece.parameter + lo, 4 * n);
  } else {
    Prefetch(static_cast<const std::uint16_t*>(piece.parameter_data) + lo, 2 * n);
    if (piece.remainders != nullptr) {
      Prefetch(piece.remainders + lo, 2 * n);
    }
  }
  if (piece.first != nullptr) {
    Prefetch(piece.first + lo, 4 * n);
  } else if (piece.first_data != nullptr) {
    Prefetch(static_cast<const unsigned char*>(piece.first_data) + lo * bytes_of(f.first), n * bytes_of(f.first));
  }
  if (piece.second != nullptr) {
    Prefetch(piece.second + lo, 4 * n);
  } else if (piece.second_data != nullptr) {
    Prefetch(static_cast<const unsigned char*>(piece.second_data) + lo * bytes_of(f.second), n * bytes_of(f.second));
  }
}

// The smallest block of a block-scaled state (StateBlockSize: a power of two from 32 to 2048).
inline constexpr std::size_t kSmallestStateBlock = 32;

// The elements of the tiles of a staged step whose state blocks hold @p block elements.
inline std::size_t StagedTileElements(std::size_t block) {
  return block > kStagedTileElements ? block : kStagedTileElements;
}

// The tile buffers of a staged step: the masters and the two states in FP32, sized for the
// largest tile (StagedTileElements() of the largest block).
inline constexpr std::size_t kLargestStagedTile =
    kLargestStateBlock > kStagedTileElements ? kLargestStateBlock : kStagedTileElements;

struct StagedTile {
  alignas(64) float w[kLargestStagedTile];
  alignas(64) float first[kLargestStagedTile];
  alignas(64) float second[kLargestStagedTile];
  // Each block's largest magnitude of first and second, where the update loop takes them.
  float first_max[kLargestStagedTile / kSmallestStateBlock];
  float second_max[kLargestStagedTile / kSmallestStateBlock];
};

// The stored moments of one span that the update loop decodes itself: one block of the 8-bit
// Adam pair (Int8Block first and UInt8Block second codes, with their block scales), or a tile
// of the BF16 pair (BF16 codes; no scales).
struct StagedCodes {
  const void* first;
  float first_scale;
  const void* second;
  float second_scale;
};

// Runs update(w, g, first, second, n, maxima, codes) tile by tile over a piece with a master or
// state not in FP32: each tile decoded into FP32, updated, encoded back (and its FP16/BF16 copy
// written). With a block-scaled state on a vector table the update runs block by block and
// returns each block's largest magnitudes of first and second in maxima[0] and maxima[1] (else
// maxima is null), so that the encode need not read the block again for them. With the 8-bit
// Adam pair (Int8Block first and UInt8Block second moments) or the BF16 pair on a vector table,
// codes points to the block's (8-bit) or the tile's (BF16) codes and scales, and the update reads
// them instead of a decoded tile (else codes is null); maxima is non-null exactly for the 8-bit
// pair's blocks.
template <class Batch, class Update>
inline void ForEachStagedTile(const OptimizerPiece& piece, bool has_second, Update&& update) {
  const StoredFormats& f = *piece.formats;
  const bool first_maxima = piece.first == nullptr && piece.first_data != nullptr && IsBlockScaled(f.first);
  const bool second_maxima = has_second && piece.second == nullptr && IsBlockScaled(f.second);
  const bool maxima = !std::is_same_v<Batch, float> && (first_maxima || second_maxima);
  const bool linear_pair = maxima && first_maxima && second_maxima && f.first == StateFormat::Int8Block &&
                           f.second == StateFormat::UInt8Block;
  const bool bfloat16_pair = !std::is_same_v<Batch, float> && has_second && piece.first == nullptr &&
                             piece.first_data != nullptr && piece.second == nullptr &&
                             f.first == StateFormat::BFloat16 && f.second == StateFormat::BFloat16;
  const bool decoded_in_loop = linear_pair || bfloat16_pair;
  StagedTile tile;
  const std::size_t tile_elements = StagedTileElements(f.block_size);
  auto* low = static_cast<unsigned char*>(piece.low_precision);
  for (std::size_t lo = 0; lo < piece.count; lo += tile_elements) {
    const std::size_t n = piece.count - lo < tile_elements ? piece.count - lo : tile_elements;
    float* w = piece.parameter != nullptr ? piece.parameter + lo : tile.w;
    float* m = piece.first != nullptr ? piece.first + lo : tile.first;
    float* v = piece.second != nullptr ? piece.second + lo : tile.second;
    if (lo + n < piece.count) {  // the next tile's arrays, while this one computes
      PrefetchTile(piece, lo + n, piece.count - lo - n < tile_elements ? piece.count - lo - n : tile_elements);
    }
    if (piece.parameter == nullptr) {
      DecodeMasters(piece, lo, n, tile.w);
    }
    if (piece.first == nullptr && piece.first_data != nullptr && !decoded_in_loop) {
      DecodeState<kLanes<Batch>>(f.first, piece.first_data, piece.first_scales, f.block_size, lo, n, tile.first);
    }
    if (has_second && piece.second == nullptr && !decoded_in_loop) {
      DecodeState<kLanes<Batch>>(f.second, piece.second_data, piece.second_scales, f.block_size, lo, n, tile.second);
    }
    if (maxima) {
      for (std::size_t b = 0; b < n; b += f.block_size) {
        float pair[2] = {0.0f, 0.0f};  // the span writes both
        StagedCodes codes{};
        if (linear_pair) {
          const std::size_t block = (lo + b) / f.block_size;
          codes = {static_cast<const std::uint8_t*>(piece.first_data) + lo + b, piece.first_scales[block],
                   static_cast<const std::uint8_t*>(piece.second_data) + lo + b, piece.second_scales[block]};
        }
        update(w + b, piece.gradient + lo + b, m + b, v + b, std::min(f.block_size, n - b), pair,
               linear_pair ? &codes : nullptr);
        tile.first_max[b / f.block_size] = pair[0];
        tile.second_max[b / f.block_size] = pair[1];
      }
    } else if (bfloat16_pair) {
      const StagedCodes codes{static_cast<const std::uint16_t*>(piece.first_data) + lo, 0.0f,
                              static_cast<const std::uint16_t*>(piece.second_data) + lo, 0.0f};
      update(w, piece.gradient + lo, m, v, n, nullptr, &codes);
    } else {
      update(w, piece.gradient + lo, m, v, n, nullptr, nullptr);
    }
    if (piece.parameter == nullptr) {
      EncodeMasters<kLanes<Batch>>(piece, lo, n, tile.w);
    }
    if (piece.first == nullptr && piece.first_data != nullptr) {
      EncodeState<Batch>(f, f.first, piece.first_data, piece.first_scales, lo, n, tile.first, false,
                         first_maxima && maxima ? tile.first_max : nullptr);
    }
    if (has_second && piece.second == nullptr) {
      EncodeState<Batch>(f, f.second, piece.second_data, piece.second_scales, lo, n, tile.second, true,
                         second_maxima && maxima ? tile.second_max : nullptr);
    }
    if (low != nullptr) {
      static_cast<void>(piece.narrow(w, low + 2 * lo, n, 1.0f));
    }
  }
}

template <class Batch, bool kL2, bool kDecay, bool kSmallWeight>
void AdamRunFixed(const OptimizerPiece& piece, const AdamStepScalars& scalars) {
  const AdamConstants<Batch> vc(scalars);
  const AdamConstants<float> sc(scalars);
  const bool torch_root = TakesTorchRoot(piece);
  // The spans that read codes or take block maxima have a moment in a lower precision: IEEE root.
  auto span = [&](float* w, const float* g, float* m, float* v, std::size_t n, float* maxima,
                  const StagedCodes* codes) {
    if constexpr (!std::is_same_v<Batch, float>) {
      if (codes != nullptr && maxima != nullptr) {  // a block of the 8-bit pair
        AdamSpan<Batch, kL2, kDecay, kSmallWeight, false, true, BlockCodesIn<StateFormat::Int8Block>,
                 BlockCodesIn<StateFormat::UInt8Block>>(
            w, g, m, v, n, vc, sc, maxima, {static_cast<const std::uint8_t*>(codes->first), codes->first_scale},
            {static_cast<const std::uint8_t*>(codes->second), codes->second_scale});
        return;
      }
      if (codes != nullptr) {  // a tile of the BF16 pair
        AdamSpan<Batch, kL2, kDecay, kSmallWeight, false, false, BFloat16In, BFloat16In>(
            w, g, m, v, n, vc, sc, nullptr, {static_cast<const std::uint16_t*>(codes->first)},
            {static_cast<const std::uint16_t*>(codes->second)});
        return;
      }
      if (maxima != nullptr) {
        AdamSpan<Batch, kL2, kDecay, kSmallWeight, false, true>(w, g, m, v, n, vc, sc, maxima);
        return;
      }
    }
    if (torch_root) {
      AdamSpan<Batch, kL2, kDecay, kSmallWeight, true>(w, g, m, v, n, vc, sc);
    } else {
      AdamSpan<Batch, kL2, kDecay, kSmallWeight, false>(w, g, m, v, n, vc, sc);
    }
  };
  if (piece.formats != nullptr) {
    ForEachStagedTile<Batch>(piece, true, span);
    return;
  }
  ForEachBlock(piece, [&](std::size_t lo, std::size_t hi) {
    span(piece.parameter + lo, piece.gradient + lo, piece.first + lo, piece.second + lo, hi - lo, nullptr, nullptr);
  });
}

// Calls fn.template operator()<b>() with the run-time flag @p value as a compile-time one.
template <class Fn>
inline void WithFlag(bool value, Fn&& fn) {
  value ? fn.template operator()<true>() : fn.template operator()<false>();
}

template <class Batch>
void AdamRun(const OptimizerPiece& piece, const AdamStepScalars& scalars) {
  // torch skips the weight-decay op when weight_decay is 0; a zero L2 or a unit decay runs
  // nothing, so an Inf weight does not turn into NaN through 0 * Inf.
  WithFlag(scalars.L2 != 0.0f, [&]<bool kL2>() {
    WithFlag(scalars.Decay != 1.0f, [&]<bool kDecay>() {
      WithFlag(std::fabs(scalars.FirstMomentWeight) < 0.5f,
               [&]<bool kSmall>() { AdamRunFixed<Batch, kL2, kDecay, kSmall>(piece, scalars); });
    });
  });
}

// The SGD constants broadcast into T (each already rounded to FP32 once, SGDStepScalars).
template <class T>
struct SGDConstants {
  explicit SGDConstants(const SGDStepScalars& s)
      : neg_lr(-s.LearningRate), mu(s.Momentum), wd(s.WeightDecay), gradient_weight(s.GradientWeight) {}
  T neg_lr, mu, wd, gradient_weight;
};

// One SGD update, PyTorch's single-tensor SGD op by op (torch/optim/sgd.py, _single_tensor_sgd):
// `grad.add(param, alpha=wd)`; the buffer a clone of it on the first step, else
// `buf.mul_(momentum).add_(grad, alpha=1 - dampening)`; nesterov `grad.add(buf, alpha=momentum)`;
// `param.add_(grad, alpha=-lr)`. Branches fixed per piece: kWd (weight decay), kMomentum (a
// buffer is read or written), kFirst (the buffer starts as d), kNesterov.
template <bool kFused, bool kWd, bool kMomentum, bool kFirst, bool kNesterov, class T>
inline void SGDElement(T& w, const T& g, T& b, const SGDConstants<T>& c) {
  T d = g;
  if constexpr (kWd) {
    d = MulAdd<kFused>(w, c.wd, g);
  }
  if constexpr (kMomentum) {
    if constexpr (kFirst) {
      b = d;
    } else {
      b = MulAdd<kFused>(d, c.gradient_weight, b * c.mu);
    }
    if constexpr (kNesterov) {
      d = MulAdd<kFused>(b, c.mu, d);
    } else {
      d = b;
    }
  }
  w = MulAdd<kFused>(d, c.neg_lr, w);
}

// SGD over n elements; kMax (vector tables, with momentum): also the largest magnitude of the
// new buffer (AbsMax()) into maxima[0], as AdamSpan().
template <class Batch, bool kWd, bool kMomentum, bool kFirst, bool kNesterov, bool kMax = false>
inline void SGDSpan(float* w, const float* g, float* b, std::size_t n, const SGDConstants<Batch>& vc,
                    const SGDConstants<float>& sc, float* maxima = nullptr) {
  constexpr bool kFused = kFusedTable<Batch>;
  constexpr std::size_t kWidth = Width<Batch>();
  [[maybe_unused]] std::conditional_t<kMax, LaneMax<Batch>, NoLaneMax> b_max;
  std::size_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    auto wi = Load<Batch>(w + i);
    Batch bi = kMomentum && !kFirst ? Load<Batch>(b + i) : Batch(0.0f);
    SGDElement<kFused, kWd, kMomentum, kFirst, kNesterov>(wi, Load<Batch>(g + i), bi, vc);
    if constexpr (kMomentum) {
      Store(b + i, bi);
    }
    Store(w + i, wi);
    if constexpr (kMax) {
      b_max.Raise(bi);
    }
  }
  for (; i < n; ++i) {
    float bi = kMomentum && !kFirst ? b[i] : 0.0f;
    SGDElement<kFused, kWd, kMomentum, kFirst, kNesterov>(w[i], g[i], bi, sc);
    if constexpr (kMomentum) {
      b[i] = bi;
    }
    if constexpr (kMax) {
      b_max.Raise(bi);
    }
  }
  if constexpr (kMax) {
    maxima[0] = b_max.Value();
    maxima[1] = 0.0f;
  }
}

template <class Batch, bool kWd, bool kMomentum, bool kFirst, bool kNesterov>
void SGDRunFixed(const OptimizerPiece& piece, const SGDStepScalars& s) {
  const SGDConstants<Batch> vc(s);
  const SGDConstants<float> sc(s);
  auto span = [&](float* w, const float* g, float* b, float* /*second*/, std::size_t n, float* maxima,
                  const StagedCodes* /*codes*/) {
    if constexpr (!std::is_same_v<Batch, float> && kMomentum) {
      if (maxima != nullptr) {
        SGDSpan<Batch, kWd, kMomentum, kFirst, kNesterov, true>(w, g, b, n, vc, sc, maxima);
        return;
      }
    }
    SGDSpan<Batch, kWd, kMomentum, kFirst, kNesterov>(w, g, b, n, vc, sc);
  };
  if (piece.formats != nullptr) {
    ForEachStagedTile<Batch>(piece, false, span);
    return;
  }
  ForEachBlock(piece, [&](std::size_t lo, std::size_t hi) {
    span(piece.parameter + lo, piece.gradient + lo, piece.first != nullptr ? piece.first + lo : nullptr, nullptr,
         hi - lo, nullptr, nullptr);
  });
}

template <class Batch>
void SGDRun(const OptimizerPiece& piece, const SGDStepScalars& s) {
  WithFlag(s.WeightDecay != 0.0f, [&]<bool kWd>() {
    if (piece.first == nullptr && piece.first_data == nullptr) {
      SGDRunFixed<Batch, kWd, false, false, false>(piece, s);
      return;
    }
    WithFlag(s.FirstStep, [&]<bool kFirst>() {
      WithFlag(s.Nesterov, [&]<bool kNesterov>() { SGDRunFixed<Batch, kWd, true, kFirst, kNesterov>(piece, s); });
    });
  });
}

// The table of the value type Batch.
template <class Batch>
constexpr OptimizerKernelTable MakeOptimizerTable() {
  return OptimizerKernelTable{&AdamRun<Batch>, &SGDRun<Batch>};
}

}  // namespace

}  // namespace mlframework::backends::cpu::optimizer

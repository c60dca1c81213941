#pragma once
// Private: the element loops of the fused optimizer steps, generic over the value type: float
// (the portable table and every table's tail) or an xsimd batch of floats (the SIMD tables).
// Include only from the OptimizerKernels*.cpp files, which are compiled with -ffp-contract=off
// and -fno-math-errno (OptimizerKernels.hpp, "Numerics"): every fused multiply-add is an explicit
// MulAdd, none is left to the compiler.

#include <cmath>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/backends/cpu/OptimizerKernels.hpp"

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
inline __m512 MklSqrt(__m512 x) {
  const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p-100f), _CMP_LT_OQ);
  const __m512 scaled = _mm512_mask_mul_ps(x, small, x, _mm512_set1_ps(0x1p64f));
  const __m512 y = _mm512_rsqrt14_ps(scaled);
  const __m512 root = _mm512_mul_ps(scaled, y);
  const __m512 half_y = _mm512_mul_ps(_mm512_set1_ps(0.5f), y);
  const __m512 residual = _mm512_fnmadd_ps(root, root, scaled);
  __m512 r = _mm512_fmadd_ps(residual, half_y, root);
  r = _mm512_mask_mul_ps(r, small, r, _mm512_set1_ps(0x1p-32f));
  const __mmask16 special = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LE_OQ) |
                            _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ) |
                            _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_sqrt_ps(r, special, x);
}
#endif

// The square root of Adam's denominator as PyTorch takes it: MKL's on the AVX-512 table (vector
// bodies and scalar tails alike), the IEEE one elsewhere. torch's CPU sqrt is MKL's on every
// x86 CPU, whose algorithm on other instruction sets is not reproduced here: on the AVX2 and
// portable tables an element whose root lies within 0.06 ulp of a rounding midpoint can round
// the other way than torch's (OptimizerKernels.hpp, "Numerics").
template <class T>
inline T Root(const T& x) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_cvtss_f32(MklSqrt(_mm512_set1_ps(x)));
  } else if constexpr (T::size == 16) {  // a batch of one __m512
    return T(MklSqrt(x));
  }
#endif
  using std::sqrt;  // float; xsimd::sqrt for batches (found by argument-dependent lookup)
  return sqrt(x);
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
template <bool kFused, bool kL2, bool kDecay, bool kSmallWeight, class T>
inline void AdamElement(T& w, const T& g, T& m, T& v, const AdamConstants<T>& c) {
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
  const T denom = Root(v) / c.bias_correction2_sqrt + c.epsilon;
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

template <class Batch, bool kL2, bool kDecay, bool kSmallWeight>
void AdamRunFixed(const OptimizerPiece& piece, const AdamStepScalars& scalars) {
  constexpr bool kFused = kFusedTable<Batch>;
  const AdamConstants<Batch> vc(scalars);
  const AdamConstants<float> sc(scalars);
  constexpr std::size_t kWidth = Width<Batch>();
  float* const w = piece.parameter;
  const float* const g = piece.gradient;
  float* const m = piece.first;
  float* const v = piece.second;
  ForEachBlock(piece, [&](std::size_t lo, std::size_t hi) {
    std::size_t i = lo;
    for (; i + kWidth <= hi; i += kWidth) {
      auto wi = Load<Batch>(w + i);
      auto mi = Load<Batch>(m + i);
      auto vi = Load<Batch>(v + i);
      AdamElement<kFused, kL2, kDecay, kSmallWeight>(wi, Load<Batch>(g + i), mi, vi, vc);
      Store(m + i, mi);
      Store(v + i, vi);
      Store(w + i, wi);
    }
    for (; i < hi; ++i) {
      AdamElement<kFused, kL2, kDecay, kSmallWeight>(w[i], g[i], m[i], v[i], sc);
    }
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

template <class Batch, bool kWd, bool kMomentum, bool kFirst, bool kNesterov>
void SGDRunFixed(const OptimizerPiece& piece, const SGDStepScalars& s) {
  constexpr bool kFused = kFusedTable<Batch>;
  constexpr std::size_t kWidth = Width<Batch>();
  const SGDConstants<Batch> vc(s);
  const SGDConstants<float> sc(s);
  float* const w = piece.parameter;
  const float* const g = piece.gradient;
  float* const b = piece.first;
  ForEachBlock(piece, [&](std::size_t lo, std::size_t hi) {
    std::size_t i = lo;
    for (; i + kWidth <= hi; i += kWidth) {
      auto wi = Load<Batch>(w + i);
      Batch bi = kMomentum && !kFirst ? Load<Batch>(b + i) : Batch(0.0f);
      SGDElement<kFused, kWd, kMomentum, kFirst, kNesterov>(wi, Load<Batch>(g + i), bi, vc);
      if constexpr (kMomentum) {
        Store(b + i, bi);
      }
      Store(w + i, wi);
    }
    for (; i < hi; ++i) {
      float bi = kMomentum && !kFirst ? b[i] : 0.0f;
      SGDElement<kFused, kWd, kMomentum, kFirst, kNesterov>(w[i], g[i], bi, sc);
      if constexpr (kMomentum) {
        b[i] = bi;
      }
    }
  });
}

template <class Batch>
void SGDRun(const OptimizerPiece& piece, const SGDStepScalars& s) {
  WithFlag(s.WeightDecay != 0.0f, [&]<bool kWd>() {
    if (piece.first == nullptr) {
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

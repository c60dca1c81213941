#pragma once
// Private: the element loops of the fused optimizer steps, generic over the value type: float
// (the portable table and every table's tail) or an xsimd batch of floats (the SIMD tables).
// Include only from the OptimizerKernels*.cpp files, which are compiled with -ffp-contract=off
// and -fno-math-errno (OptimizerKernels.hpp, "Numerics").

#include <cmath>
#include <cstddef>
#include <type_traits>

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

// The Adam constants broadcast into T. `1 - beta` is rounded to FP32 once, as the reference's
// `(1.0f - beta1)` is.
template <class T>
struct AdamConstants {
  explicit AdamConstants(const AdamStepScalars& s)
      : beta1(s.Beta1),
        one_minus_beta1(1.0f - s.Beta1),
        beta2(s.Beta2),
        one_minus_beta2(1.0f - s.Beta2),
        epsilon(s.Epsilon),
        l2(s.L2),
        decay(s.Decay),
        step_size(s.StepSize),
        bias_correction2_sqrt(s.BiasCorrection2Sqrt) {}
  T beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon, l2, decay, step_size, bias_correction2_sqrt;
};

// One Adam update, the reference's operations in the reference's order (no contraction).
template <class T>
inline void AdamElement(T& w, const T& g, T& m, T& v, const AdamConstants<T>& c) {
  using std::sqrt;  // float; xsimd::sqrt for batches (found by argument-dependent lookup)
  const T d = g + c.l2 * w;
  const T decayed = w * c.decay;
  m = c.beta1 * m + c.one_minus_beta1 * d;
  v = c.beta2 * v + c.one_minus_beta2 * d * d;
  const T denom = sqrt(v) / c.bias_correction2_sqrt + c.epsilon;
  w = decayed - c.step_size * (m / denom);
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

template <class Batch>
void AdamRun(const OptimizerPiece& piece, const AdamStepScalars& scalars) {
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
      AdamElement(wi, Load<Batch>(g + i), mi, vi, vc);
      Store(m + i, mi);
      Store(v + i, vi);
      Store(w + i, wi);
    }
    for (; i < hi; ++i) {
      AdamElement(w[i], g[i], m[i], v[i], sc);
    }
  });
}

// SGD with the branches fixed per piece: kMomentum (a buffer is read or written), kFirst (the
// buffer starts as d), kNesterov.
template <class T, bool kMomentum, bool kFirst, bool kNesterov>
inline void SGDElement(T& w, const T& g, T& b, const T& lr, const T& mu, const T& wd) {
  const T d = g + wd * w;
  if constexpr (!kMomentum) {
    w = w - lr * d;
  } else {
    if constexpr (kFirst) {
      b = d;
    } else {
      b = mu * b + d;
    }
    if constexpr (kNesterov) {
      w = w - lr * (d + mu * b);
    } else {
      w = w - lr * b;
    }
  }
}

template <class Batch, bool kMomentum, bool kFirst, bool kNesterov>
void SGDRunFixed(const OptimizerPiece& piece, const SGDStepScalars& s) {
  constexpr std::size_t kWidth = Width<Batch>();
  const Batch vlr(s.LearningRate);
  const Batch vmu(s.Momentum);
  const Batch vwd(s.WeightDecay);
  float* const w = piece.parameter;
  const float* const g = piece.gradient;
  float* const b = piece.first;
  ForEachBlock(piece, [&](std::size_t lo, std::size_t hi) {
    std::size_t i = lo;
    for (; i + kWidth <= hi; i += kWidth) {
      auto wi = Load<Batch>(w + i);
      Batch bi = kMomentum && !kFirst ? Load<Batch>(b + i) : Batch(0.0f);
      SGDElement<Batch, kMomentum, kFirst, kNesterov>(wi, Load<Batch>(g + i), bi, vlr, vmu, vwd);
      if constexpr (kMomentum) {
        Store(b + i, bi);
      }
      Store(w + i, wi);
    }
    for (; i < hi; ++i) {
      float bi = kMomentum && !kFirst ? b[i] : 0.0f;
      SGDElement<float, kMomentum, kFirst, kNesterov>(w[i], g[i], bi, s.LearningRate, s.Momentum, s.WeightDecay);
      if constexpr (kMomentum) {
        b[i] = bi;
      }
    }
  });
}

template <class Batch>
void SGDRun(const OptimizerPiece& piece, const SGDStepScalars& s) {
  if (piece.first == nullptr) {
    SGDRunFixed<Batch, false, false, false>(piece, s);
  } else if (s.FirstStep) {
    s.Nesterov ? SGDRunFixed<Batch, true, true, true>(piece, s) : SGDRunFixed<Batch, true, true, false>(piece, s);
  } else {
    s.Nesterov ? SGDRunFixed<Batch, true, false, true>(piece, s) : SGDRunFixed<Batch, true, false, false>(piece, s);
  }
}

// The table of the value type Batch.
template <class Batch>
constexpr OptimizerKernelTable MakeOptimizerTable() {
  return OptimizerKernelTable{&AdamRun<Batch>, &SGDRun<Batch>};
}

}  // namespace

}  // namespace mlframework::backends::cpu::optimizer

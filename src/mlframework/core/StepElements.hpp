#pragma once
// Private: one element of the fused Adam/AdamW and SGD steps in FP32, shared by the CUDA kernels
// (OptimizerSteps.cu, LowBitSteps.cu) and the host tests that check them against the CPU
// backend. PyTorch's single-tensor ops in their order, with a fused multiply-add exactly where
// torch's vectorised CPU kernels fuse one and every other operation rounded on its own
// (RoundedMath.hpp): the bits of the CPU backend's AVX2 kernels (AdamStepScalars, SGDStepScalars).

#include <mlframework/core/HostDevice.hpp>
#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/core/RoundedMath.hpp"

namespace mlframework::detail {

/// The per-element constants of one Adam step, derived once from its scalars.
struct AdamElementConstants {
  float first_weight;            // lerp's weight, 1 - beta1
  float first_weight_minus_one;  // lerp's large-weight form: weight - 1 (exact)
  float beta2;
  float second_weight;
  float epsilon;
  float l2;
  float decay;
  float neg_step_size;
  float bias_correction2_sqrt;
  bool use_l2;        // grad.add(param, alpha=weight_decay): Adam with weight decay
  bool use_decay;     // param.mul_(1 - lr * weight_decay): AdamW with weight decay
  bool small_weight;  // lerp's weight < 0.5: self + weight * (end - self)
};

/// The constants of the step @p s. torch skips the weight-decay op when weight_decay is 0: a zero
/// L2 or a unit decay runs nothing, so an Inf weight does not turn into NaN through 0 * Inf.
MLFW_HOST_DEVICE inline AdamElementConstants AdamConstantsOf(const AdamStepScalars& s) {
  const float weight = s.FirstMomentWeight;
  return AdamElementConstants{weight,
                              SubRn(weight, 1.0f),
                              s.Beta2,
                              s.SecondMomentWeight,
                              s.Epsilon,
                              s.L2,
                              s.Decay,
                              -s.StepSize,
                              s.BiasCorrection2Sqrt,
                              s.L2 != 0.0f,
                              s.Decay != 1.0f,
                              (weight < 0.0f ? -weight : weight) < 0.5f};
}

/// One Adam update of the weight @p w, the moments @p m and @p v by the gradient @p g:
/// `d = L2 ? fma(w, L2, g) : g; w = Decay ? w*Decay : w; m = lerp(m, d, weight)`;
/// `v = fma(SecondMomentWeight*d, d, v*Beta2); w = w + (-StepSize*m) / (sqrt(v)/BiasCorrection2Sqrt + Epsilon)`.
MLFW_HOST_DEVICE inline void AdamUpdate(float& w, float g, float& m, float& v, const AdamElementConstants& c) {
  const float d = c.use_l2 ? FmaRn(w, c.l2, g) : g;
  if (c.use_decay) {
    w = MulRn(w, c.decay);
  }
  const float diff = SubRn(d, m);
  m = c.small_weight ? FmaRn(c.first_weight, diff, m) : FmaRn(c.first_weight_minus_one, diff, d);
  v = FmaRn(MulRn(c.second_weight, d), d, MulRn(v, c.beta2));
  const float denom = AddRn(DivRn(SqrtRn(v), c.bias_correction2_sqrt), c.epsilon);
  w = AddRn(w, DivRn(MulRn(c.neg_step_size, m), denom));
}

/// One SGD update of the weight @p w by the gradient @p g; @p b: the momentum buffer, or null
/// without momentum (SGDStepScalars::Momentum 0). `d = WeightDecay ? fma(w, WeightDecay, g) : g`;
/// with momentum `b = FirstStep ? d : fma(d, GradientWeight, b*Momentum); d = Nesterov ? fma(b,
/// Momentum, d) : b`; then `w = fma(d, -LearningRate, w)`.
MLFW_HOST_DEVICE inline void SGDUpdate(float& w, float g, float* b, const SGDStepScalars& s) {
  float d = s.WeightDecay != 0.0f ? FmaRn(w, s.WeightDecay, g) : g;
  if (b != nullptr) {
    *b = s.FirstStep ? d : FmaRn(d, s.GradientWeight, MulRn(*b, s.Momentum));
    d = s.Nesterov ? FmaRn(*b, s.Momentum, d) : *b;
  }
  w = FmaRn(d, -s.LearningRate, w);
}

}  // namespace mlframework::detail

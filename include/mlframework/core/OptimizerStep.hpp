#pragma once
/// @file OptimizerStep.hpp
/// @brief The tensor lists and per-step constants of one fused optimizer step (TensorBackend::AdamStep(),
/// TensorBackend::SGDStep(), optimizers/FusedSteps.hpp).

#include <span>

#include <mlframework/core/ITensor.hpp>

namespace mlframework {

/// What Adam's bias corrections are computed from at each step when the step count is kept in a
/// tensor (OptimizerStepLists::StepCount): the options' doubles, as torch holds them.
struct AdamBiasCorrection {
  double LearningRate = 1e-3;  ///< `lr`.
  double Beta1 = 0.9;          ///< `beta1`.
  double Beta2 = 0.999;        ///< `beta2`.
};

/// The constants of one Adam/AdamW step, computed once on the host (optimizers::AdamStepScalarsFor()).
///
/// Each field is a double of PyTorch's Python-side arithmetic rounded once to FP32, where torch's
/// kernels round it when it meets an FP32 tensor. Per element, the ops of torch's single-tensor
/// Adam (`foreach=False`) in its order, each rounded to FP32:
/// `d = L2 != 0 ? fma(w, L2, g) : g; w = Decay != 1 ? w*Decay : w;
/// m = FirstMomentWeight < 0.5 ? fma(FirstMomentWeight, d - m, m) : fma(FirstMomentWeight - 1, d - m, d);`
/// `v = fma(SecondMomentWeight*d, d, v*Beta2); w = w + (-StepSize*m) / (sqrt(v)/BiasCorrection2Sqrt + Epsilon)`,
/// where `fma(a, b, c)` is a fused multiply-add on the CPU backend's AVX2 and AVX-512 kernels and the
/// CUDA backend (PyTorch's vectorised CPU kernels), and `a*b + c` rounded twice on the portable
/// kernels (PyTorch's default CPU capability). `sqrt` is MKL's (torch's) on the AVX-512 kernels,
/// the IEEE root elsewhere (about 0.6% of MKL's roots round the other way).
struct AdamStepScalars {
  float StepSize = 0.0f;              ///< `lr / (1 - beta1^t)`, computed in double and rounded to FP32.
  float BiasCorrection2Sqrt = 1.0f;   ///< `(1 - beta2^t)^0.5`, computed in double and rounded to FP32.
  float FirstMomentWeight = 0.1f;     ///< `1 - beta1` (lerp's weight), computed in double and rounded to FP32.
  float Beta2 = 0.999f;               ///< Second-moment decay, rounded to FP32.
  float SecondMomentWeight = 0.001f;  ///< `1 - beta2`, computed in double and rounded to FP32.
  float Epsilon = 1e-8f;              ///< Denominator term, rounded to FP32.
  float L2 = 0.0f;                    ///< Weight decay added to the gradient (Adam); 0 for AdamW.
  float Decay = 1.0f;                 ///< `1 - lr*wd` computed in double, multiplies the weight (AdamW); 1 for Adam.
  /// With a step count kept in a tensor, StepSize and BiasCorrection2Sqrt are not used: the step
  /// computes them from these doubles and the count it reads, as AdamStepScalarsFor() does.
  AdamBiasCorrection BiasCorrection{};
};

/// The constants of one SGD step (optimizers::SGDStepScalarsFor()), each a double of PyTorch's
/// rounded once to FP32.
///
/// Per element, the ops of torch's single-tensor SGD (`foreach=False`), `fma` as for AdamStepScalars:
/// `d = WeightDecay != 0 ? fma(w, WeightDecay, g) : g`; with momentum
/// `b = FirstStep ? d : fma(d, GradientWeight, b*Momentum); d = Nesterov ? fma(b, Momentum, d) : b`;
/// then `w = fma(d, -LearningRate, w)`.
struct SGDStepScalars {
  float LearningRate = 0.01f;   ///< Step size.
  float Momentum = 0.0f;        ///< Momentum factor; 0: no buffer is read or written.
  float WeightDecay = 0.0f;     ///< L2 penalty added to the gradient.
  float GradientWeight = 1.0f;  ///< `1 - dampening`, computed in double: the weight of d in the buffer.
  bool Nesterov = false;        ///< Nesterov momentum.
  bool FirstStep = false;       ///< The momentum buffer starts as a copy of the first `d` (PyTorch).
};

/// The lists one fused optimizer step reads and writes, entry i of each belonging to parameter i.
///
/// Parameters, gradients and state are FP32 (the FP32 master weights of a mixed-precision model).
/// LowPrecisionCopies is empty, or holds one entry per parameter: null for none, else an FP16 or
/// BF16 tensor that receives the updated parameter rounded to its dtype in the same pass (the copy
/// the next all-gather sends, as Megatron's distributed optimizer writes it).
///
/// StepCount is null, or the step count kept in a tensor, as torch's `capturable` and `fused`
/// optimizers keep `state["step"]`: a one-element FP32 tensor beside the parameters (host memory
/// for host lists, the parameters' GPU for device lists) holding the steps taken so far. The step
/// reads it, runs as step `count + 1` (Adam's bias corrections, SGD's first step when the count
/// is 0) and writes `count + 1` only when it steps: a step skipped for a found-inf flag leaves it
/// as it was. A device backend reads and writes it on the device, so the host never needs to
/// know whether the device skipped (the step can be captured in a CUDA graph).
struct OptimizerStepLists {
  std::span<const TensorPtr> Parameters{};          ///< FP32, updated in place.
  std::span<const TensorPtr> Gradients{};           ///< FP32, read only.
  std::span<const TensorPtr> FirstState{};          ///< Adam's exp_avg, SGD's momentum buffer (empty without momentum).
  std::span<const TensorPtr> SecondState{};         ///< Adam's exp_avg_sq; empty for SGD.
  std::span<const TensorPtr> LowPrecisionCopies{};  ///< Empty, or per parameter null / FP16 / BF16.
  TensorPtr StepCount{};                            ///< Null, or the step count (see above).
};

}  // namespace mlframework

#pragma once
/// @file OptimizerStep.hpp
/// @brief The tensor lists and per-step constants of one fused optimizer step (TensorBackend::AdamStep(),
/// TensorBackend::SGDStep(), optimizers/FusedSteps.hpp).

#include <span>

#include <mlframework/core/ITensor.hpp>

namespace mlframework {

/// The constants of one Adam/AdamW step, computed once on the host (optimizers::AdamStepScalarsFor()).
///
/// Per element, in this order and each operation rounded to FP32 (no fused multiply-add):
/// `d = g + L2*w; w' = w*Decay; m = Beta1*m + (1-Beta1)*d; v = Beta2*v + ((1-Beta2)*d)*d;
/// w = w' - StepSize * (m / (sqrt(v) / BiasCorrection2Sqrt + Epsilon))`: PyTorch's single-tensor Adam.
struct AdamStepScalars {
  float StepSize = 0.0f;             ///< `lr / (1 - beta1^t)`, computed in double and rounded to FP32.
  float BiasCorrection2Sqrt = 1.0f;  ///< `sqrt(1 - beta2^t)`, computed in double and rounded to FP32.
  float Beta1 = 0.9f;                ///< First-moment decay.
  float Beta2 = 0.999f;              ///< Second-moment decay.
  float Epsilon = 1e-8f;             ///< Denominator term.
  float L2 = 0.0f;                   ///< Weight decay added to the gradient (Adam); 0 for AdamW.
  float Decay = 1.0f;                ///< `1 - lr*wd`, multiplies the weight (AdamW); 1 for Adam.
};

/// The constants of one SGD step (optimizers::SGDStepScalarsFor()).
///
/// Per element: `d = g + WeightDecay*w`; without momentum `w = w - LearningRate*d`; with momentum
/// `b = FirstStep ? d : Momentum*b + d; w = w - LearningRate*(Nesterov ? d + Momentum*b : b)`.
struct SGDStepScalars {
  float LearningRate = 0.01f;  ///< Step size.
  float Momentum = 0.0f;       ///< Momentum factor; 0: no buffer is read or written.
  float WeightDecay = 0.0f;    ///< L2 penalty added to the gradient.
  bool Nesterov = false;       ///< Nesterov momentum.
  bool FirstStep = false;      ///< The momentum buffer starts as a copy of the first `d` (PyTorch).
};

/// The lists one fused optimizer step reads and writes, entry i of each belonging to parameter i.
///
/// Parameters, gradients and state are FP32 (the FP32 master weights of a mixed-precision model).
/// LowPrecisionCopies is empty, or holds one entry per parameter: null for none, else an FP16 or
/// BF16 tensor that receives the updated parameter rounded to its dtype in the same pass (the copy
/// the next all-gather sends, as Megatron's distributed optimizer writes it).
struct OptimizerStepLists {
  std::span<const TensorPtr> Parameters{};          ///< FP32, updated in place.
  std::span<const TensorPtr> Gradients{};           ///< FP32, read only.
  std::span<const TensorPtr> FirstState{};          ///< Adam's exp_avg, SGD's momentum buffer (empty without momentum).
  std::span<const TensorPtr> SecondState{};         ///< Adam's exp_avg_sq; empty for SGD.
  std::span<const TensorPtr> LowPrecisionCopies{};  ///< Empty, or per parameter null / FP16 / BF16.
};

}  // namespace mlframework

#pragma once
// The scalar FP32 steps optimizers::Adam and optimizers::SGD ran before their fused kernels
// (PyTorch's single-tensor forms), kept as the reference the fused steps are checked against and
// as the "current implementation" row of bench_optimizers. Plain loops: compiled without
// -fno-math-errno they do not vectorise, as the library's loops did not.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mlfw_reference {

struct AdamConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled = false;  // AdamW
};

// One Adam/AdamW step (step >= 1) over one tensor's FP32 weights and moments.
inline void AdamStep(std::span<float> w, std::span<const float> g, std::span<float> m, std::span<float> v,
                     const AdamConfig& o, std::int64_t step) {
  // PyTorch computes the bias corrections as Python floats (double) and applies them as float.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(step));
  const auto step_size = static_cast<float>(static_cast<double>(o.lr) / bias_correction1);
  const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float beta1 = o.beta1;
  const float beta2 = o.beta2;
  const float eps = o.eps;
  const float l2 = o.decoupled ? 0.0f : o.weight_decay;
  const float decay = o.decoupled ? 1.0f - o.lr * o.weight_decay : 1.0f;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float d = g[i] + l2 * w[i];
    const float wi = w[i] * decay;
    const float mi = beta1 * m[i] + (1.0f - beta1) * d;
    const float vi = beta2 * v[i] + (1.0f - beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    w[i] = wi - step_size * (mi / denom);
  }
}

struct SGDConfig {
  float lr = 0.01f, momentum = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};

// One SGD step; @p first: the momentum buffer starts as d (PyTorch). @p b is unused without momentum.
inline void SGDStep(std::span<float> w, std::span<const float> g, std::span<float> b, const SGDConfig& o, bool first) {
  const float lr = o.lr;
  const float mu = o.momentum;
  const float wd = o.weight_decay;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (mu == 0.0f) {
      w[i] -= lr * (g[i] + wd * w[i]);
      continue;
    }
    const float d = g[i] + wd * w[i];
    const float next = first ? d : mu * b[i] + d;
    b[i] = next;
    w[i] -= lr * (o.nesterov ? d + mu * next : next);
  }
}

}  // namespace mlfw_reference

#pragma once
// Scalar FP32 steps of PyTorch's single-tensor Adam/AdamW and SGD (foreach=False), op by op as
// torch's CPU kernels compute them, kept as the reference the fused steps are checked against and
// as the "current implementation" row of bench_optimizers. @p fused: the multiply-adds torch's
// AVX2/AVX-512 kernels fuse are one rounding (std::fma), else two (torch's default capability).
// @p root: the square root of Adam's denominator (std::sqrt, or MKL's as torch takes it).
// Plain loops: compiled without -fno-math-errno they do not vectorise.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mlfw_reference {

// a * b + c, rounded once when @p fused (torch's vec::fmadd) and twice otherwise.
inline float MulAdd(float a, float b, float c, bool fused) {
  if (fused) {
    return std::fma(a, b, c);
  }
  const float product = a * b;
  return product + c;
}

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;  // Python floats
  bool decoupled = false;                                                        // AdamW
};

// One Adam/AdamW step (step >= 1) over one tensor's FP32 weights and moments.
using RootFn = float (*)(float);

inline float IeeeRoot(float x) { return std::sqrt(x); }

inline void AdamStep(std::span<float> w, std::span<const float> g, std::span<float> m, std::span<float> v,
                     const AdamConfig& o, std::int64_t step, bool fused, RootFn root = IeeeRoot) {
  // torch computes these as Python floats (double); each is rounded to FP32 when it meets a tensor.
  const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const auto neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  const auto bias_correction2_sqrt = static_cast<float>(std::pow(bias_correction2, 0.5));
  const auto weight1 = static_cast<float>(1.0 - o.beta1);  // lerp_'s weight
  const auto beta2 = static_cast<float>(o.beta2);
  const auto weight2 = static_cast<float>(1.0 - o.beta2);
  const auto eps = static_cast<float>(o.eps);
  const auto wd = static_cast<float>(o.weight_decay);
  const auto decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
  for (std::size_t i = 0; i < w.size(); ++i) {
    float wi = w[i];
    float d = g[i];
    if (o.weight_decay != 0.0 && !o.decoupled) {
      d = MulAdd(wi, wd, d, fused);  // grad.add(param, alpha=weight_decay)
    }
    if (o.weight_decay != 0.0 && o.decoupled) {
      wi = wi * decay;  // param.mul_(1 - lr * weight_decay)
    }
    // exp_avg.lerp_(grad, 1 - beta1): ATen's two forms, by the weight.
    const float diff = d - m[i];
    const float mi =
        std::fabs(weight1) < 0.5f ? MulAdd(weight1, diff, m[i], fused) : MulAdd(weight1 - 1.0f, diff, d, fused);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    const float scaled = v[i] * beta2;
    const float vi = MulAdd(weight2 * d, d, scaled, fused);
    m[i] = mi;
    v[i] = vi;
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps); param.addcdiv_(exp_avg, denom, value=-step_size)
    const float denom = root(vi) / bias_correction2_sqrt + eps;
    const float update = (neg_step_size * mi) / denom;
    w[i] = wi + update;
  }
}

struct SGDConfig {
  double lr = 0.01, momentum = 0.0, weight_decay = 0.0, dampening = 0.0;  // Python floats
  bool nesterov = false;
};

// One SGD step; @p first: the momentum buffer starts as d (PyTorch). @p b is unused without momentum.
inline void SGDStep(std::span<float> w, std::span<const float> g, std::span<float> b, const SGDConfig& o, bool first,
                    bool fused) {
  const auto neg_lr = static_cast<float>(-o.lr);
  const auto mu = static_cast<float>(o.momentum);
  const auto wd = static_cast<float>(o.weight_decay);
  const auto gradient_weight = static_cast<float>(1.0 - o.dampening);
  for (std::size_t i = 0; i < w.size(); ++i) {
    float d = g[i];
    if (o.weight_decay != 0.0) {
      d = MulAdd(w[i], wd, d, fused);  // grad.add(param, alpha=weight_decay)
    }
    if (o.momentum != 0.0) {
      // buf = grad.clone() on the first step, else buf.mul_(momentum).add_(grad, alpha=1 - dampening)
      const float scaled = b[i] * mu;
      const float next = first ? d : MulAdd(d, gradient_weight, scaled, fused);
      b[i] = next;
      d = o.nesterov ? MulAdd(next, mu, d, fused) : next;  // grad.add(buf, alpha=momentum)
    }
    w[i] = MulAdd(d, neg_lr, w[i], fused);  // param.add_(grad, alpha=-lr)
  }
}

}  // namespace mlfw_reference

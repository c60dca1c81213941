#pragma once
// What the CPU backend's fused optimizer kernels compute on this run's instruction set, for the
// scalar references (ReferenceSteps.hpp) to compute the same: whether multiply-adds are fused and
// which square root Adam's denominator takes.

#include <cmath>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <mlframework/mlframework.hpp>

#include "optimizers/ReferenceSteps.hpp"

namespace mlfw_test {

// The CPU backend's AVX2 and AVX-512 kernels fuse the multiply-adds PyTorch's vector kernels
// fuse; the portable kernels fuse none (PyTorch's default capability).
inline bool Fused() { return mlframework::backends::cpu::InstructionSet() != "portable"; }

#if defined(__x86_64__)
// MKL's FP32 square root on an AVX-512 CPU (torch's sqrt), which the AVX-512 kernels take:
// VRSQRT14 and one fused Newton step on the root, inputs below 2^-100 scaled by 2^64, zero,
// negative, infinite and NaN inputs the IEEE root.
__attribute__((target("avx512f"))) inline float MklRoot(float x) {
  if (!(x > 0.0f) || std::isinf(x)) {
    return std::sqrt(x);
  }
  const bool small = x < 0x1p-100f;
  const float scaled = small ? x * 0x1p64f : x;
  const float y = _mm_cvtss_f32(_mm_rsqrt14_ss(_mm_setzero_ps(), _mm_set_ss(scaled)));
  const float root = scaled * y;
  const float residual = std::fma(-root, root, scaled);
  const float r = std::fma(residual, 0.5f * y, root);
  return small ? r * 0x1p-32f : r;
}

#endif

// The root the CPU backend's Adam kernels take on this run's instruction set.
inline mlfw_reference::RootFn Root() {
#if defined(__x86_64__)
  if (mlframework::backends::cpu::InstructionSet().starts_with("avx512")) {
    return MklRoot;
  }
#endif
  return mlfw_reference::IeeeRoot;
}

}  // namespace mlfw_test

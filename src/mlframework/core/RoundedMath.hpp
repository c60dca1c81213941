#pragma once
// Private: FP32 operations each rounded once to nearest even, the same on the host and in CUDA
// device code. nvcc contracts a plain `a * b + c` into a fused multiply-add by default; its
// `__f*_rn` intrinsics are never contracted, so device code that must give the host's bits spells
// every operation with these. On the host they are the plain operators (and std::fma, std::sqrt):
// a host file that uses them is compiled without contraction (-ffp-contract=off) or for a target
// without FMA instructions.

#include <cmath>

#include <mlframework/core/HostDevice.hpp>

namespace mlframework::detail {

/// `a * b`, rounded once, never fused with a neighbouring addition.
MLFW_HOST_DEVICE inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// `a + b`, rounded once, never fused with a neighbouring product.
MLFW_HOST_DEVICE inline float AddRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// `a - b`, rounded once, never fused with a neighbouring product.
MLFW_HOST_DEVICE inline float SubRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

/// `a / b`, the IEEE (correctly rounded) division.
MLFW_HOST_DEVICE inline float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// The IEEE (correctly rounded) square root.
MLFW_HOST_DEVICE inline float SqrtRn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// `a * b + c` rounded once (a fused multiply-add).
MLFW_HOST_DEVICE inline float FmaRn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace mlframework::detail

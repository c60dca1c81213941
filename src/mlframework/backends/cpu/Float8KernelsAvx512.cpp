// The FP8 element loops (Float8Elements.hpp) on 16 lanes, compiled with the AVX-512 flags of
// KernelsAvx512.cpp only for this file; ActiveFloat8Kernels() selects them only when the CPU has
// AVX-512 (every AVX-512 table of KernelDispatch.cpp).

#include "mlframework/backends/cpu/Float8Elements.hpp"
#include "mlframework/backends/cpu/Float8Kernels.hpp"

namespace mlframework::backends::cpu {

template <>
const Float8KernelSet& Float8KernelsOf<arch::Avx512>() noexcept {
  static const Float8KernelSet kSet = float8::SetOf<float8::Elements<16>>();
  return kSet;
}

}  // namespace mlframework::backends::cpu
